"""``microcoder_ext.smoke.fixes``: the knob and a value that fix a launch that fails only at its declared size, read
from the framework's own error text (each text below is what the framework printed in a real launch; the launches
themselves run in ``tests/openrlhf/test_smoke_e2e.py`` and ``tests/verl/test_smoke_e2e.py``)."""

from __future__ import annotations

from microcoder_ext.smoke.fixes import CLASSES, advise, fix_lines

DEEPSPEED = ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
             "gradient_acc_step * world_size {} != {} * {} * {}")
COLOCATED = ("AssertionError: actor_num_nodes * actor_num_gpus_per_node must be equal to vllm_num_engines * "
             "vllm_tensor_parallel_size, got {} and {}")
ROLLOUT_TP = "AssertionError: rollout world_size: {} is not divisible by infer_world_size: {}"


def test_a_micro_batch_that_does_not_divide_a_ranks_share():
    (fix,) = advise("openrlhf", DEEPSPEED.format(8, 3, 1, 2))
    assert "each rank's share of --train.batch_size (8 / 2 ranks = 4 samples)" in fix
    assert fix.endswith("--train.micro_batch_size 2 or 4")
    (fix,) = advise("openrlhf", DEEPSPEED.format(256, 3, 10, 8))
    assert fix.endswith("--train.micro_batch_size 2 or 4")  # 32 per rank


def test_a_train_batch_that_does_not_split_over_the_ranks():
    (fix,) = advise("openrlhf", DEEPSPEED.format(100, 4, 3, 8))
    assert "use a multiple of 8 ranks x --train.micro_batch_size 4 = 32, e.g. --train.batch_size 96 or 128" in fix


def test_colocated_engines_that_do_not_cover_the_actor():
    (fix,) = advise("openrlhf", COLOCATED.format(8, 6))
    assert "set --vllm.num_engines to 8 / --vllm.tensor_parallel_size" in fix and "4 at TP 2" in fix
    (odd,) = advise("openrlhf", COLOCATED.format(3, 2))
    assert odd.endswith("--vllm.num_engines 3 --vllm.tensor_parallel_size 1")


def test_a_rollout_tp_that_does_not_divide_the_trainer_gpus():
    (fix,) = advise("verl", ROLLOUT_TP.format(6, 4))
    assert "tensor_model_parallel_size=3 or =6" in fix and "a multiple of 4" in fix
    (fix,) = advise("verl", ROLLOUT_TP.format(3, 2))
    assert "tensor_model_parallel_size=1 or =3" in fix


def test_each_class_answers_only_its_framework_and_text():
    assert advise("verl", DEEPSPEED.format(8, 3, 1, 2)) == []
    assert advise("openrlhf", ROLLOUT_TP.format(6, 4)) == []
    assert advise("openrlhf", "RuntimeError: something else") == [] and advise("verl", "") == []
    assert {c.framework for c in CLASSES} == {"verl", "openrlhf"} and len({c.name for c in CLASSES}) == len(CLASSES)


def test_fix_lines_reads_the_excerpt_first_then_the_whole_log():
    log = "lots of output\n" + COLOCATED.format(2, 1) + "\nmore"
    assert fix_lines("openrlhf", "excerpt without it", log).startswith("\nfix: --train.colocate_all")
    assert fix_lines("openrlhf", "nothing", "nothing either") == ""
