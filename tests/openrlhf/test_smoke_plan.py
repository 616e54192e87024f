"""microcoder_ext.openrlhf.smoke.plan: what a launch becomes on the CPU (no run here; the e2e tests run them).

Each launch is parsed by OpenRLHF's own argparse + validation (and the launcher's preset checks); the rewritten
launch must pass them again; every change is a printed substitution; bad launches are usage errors (exit 2) with
OpenRLHF's own message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from host_load import cpu_seconds, hang_guard

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401,E402  (a missing framework fails, never skips)

from microcoder_ext.openrlhf import smoke  # noqa: E402
from microcoder_ext.smoke.report import format_substitutions  # noqa: E402
from microcoder_ext.smoke.runner import SmokeOptions, SmokeUsageError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REWARD = str(ROOT / "microcoder_ext" / "openrlhf" / "openrlhf_reward.py")
#: the GPU layout of openrlhf_recipes/train.sh (MODEL=qwen3_1.7b, ALGO=grpo_baseline; 2 nodes)
RECIPE = ["--mc.preset", "grpo_baseline", "--actor.model_name_or_path", "Qwen/Qwen3-1.7B",
          "--data.prompt_dataset", "hf-org/train", "--data.input_key", "question", "--data.label_key", "tests",
          "--data.max_len", "6144", "--rollout.max_new_tokens", "4096", "--data.max_samples", "38400",
          "--rollout.batch_size", "64", "--rollout.n_samples_per_prompt", "8", "--train.batch_size", "256",
          "--actor.num_nodes", "2", "--actor.num_gpus_per_node", "8", "--ref.num_nodes", "2",
          "--ref.num_gpus_per_node", "8", "--vllm.num_engines", "16", "--vllm.tensor_parallel_size", "1",
          "--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep", "--ds.zero_stage", "3",
          "--actor.gradient_checkpointing_enable", "--ds.packing_samples", "--train.dynamic_batch_enable",
          "--train.max_tokens_per_gpu", "12288", "--ckpt.save_steps", "50", "--ckpt.path", "/ckpt/x",
          "--logger.wandb.key", "secret", "--eval.dataset", "hf-org/val", "--eval.steps", "20"]


def value(flags: list[str], option: str) -> list[str] | None:
    """The values of the last ``option`` in ``flags`` (None: absent)."""
    out = None
    for i, token in enumerate(flags):
        if token == option:
            j = i + 1
            while j < len(flags) and not flags[j].startswith("--"):
                j += 1
            out = flags[i + 1:j]
    return out


@pytest.fixture(scope="module")
def recipe_plan(tmp_path_factory):
    return smoke.plan(RECIPE, SmokeOptions(steps=3, prompts=4, max_samples=8), tmp_path_factory.mktemp("plan"))


def test_the_recipe_layout_becomes_a_cpu_launch(recipe_plan):
    p = recipe_plan
    f = p.flags
    assert p.entry == "launcher" and p.command[1:4] == ["-m", "microcoder_ext.openrlhf.cpu.run", "--gpus"]
    for gone in ("--ds.packing_samples", "--train.dynamic_batch_enable", "--logger.wandb.key"):
        assert value(f, gone) is None, gone
    expected = {
        "--ds.attn_implementation": ["sdpa"], "--vllm.sync_backend": ["gloo"], "--actor.num_nodes": ["1"],
        "--actor.num_gpus_per_node": ["1"], "--ref.num_gpus_per_node": ["1"], "--vllm.num_engines": ["1"],
        "--rollout.batch_size": ["4"], "--rollout.n_samples_per_prompt": ["8"],
        # 64 x 8 / 256 = 2 updates per step on GPUs -> 2 updates of 16 samples, one micro-batch each
        "--train.batch_size": ["16"], "--train.micro_batch_size": ["16"],
        "--rollout.max_new_tokens": ["32"], "--data.max_len": [str(1024 + 32)], "--data.max_samples": ["12"],
        "--ckpt.save_steps": ["3"], "--eval.steps": ["3"], "--data.input_key": ["prompt"],
        "--data.label_key": ["label"], "--ckpt.path": [str(p.work / "ckpt")],
        "--logger.tensorboard_dir": [str(p.work / "tensorboard")], "--ckpt.output_dir": [str(p.work / "final")],
    }
    for option, want in expected.items():
        assert value(f, option) == want, (option, value(f, option))
    assert value(f, "--train.colocate_all") == [] and value(f, "--ds.zero_stage") == ["3"]  # kept: they run on CPU
    # vLLM's CPU build: no sleep mode, the memory fraction is a share of RAM, eager mode, its CPU environment
    assert value(f, "--vllm.enable_sleep") is None and value(f, "--vllm.gpu_memory_utilization") == ["0.1"]
    assert value(f, "--vllm.enforce_eager") == [] and value(f, "--ds.enable_sleep") == []
    assert p.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and p.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert p.gpus == 1 and p.samples_per_step == 32 and p.logprob_temperature == 1.2
    assert p.data["train"]["bundled"] and Path(p.model["path"]).is_dir() and p.model["family"] == "qwen3"
    table = format_substitutions(p.substitutions)
    for what in ("model", "--ds.packing_samples", "--train.dynamic_batch_enable", "attention", "weight-sync backend",
                 "actor GPUs", "reference GPUs", "vLLM engines", "training steps", "wandb", "checkpoint interval",
                 "--vllm.enable_sleep", "vLLM memory fraction", "vLLM eager mode", "vLLM", "weight sync group",
                 "vLLM env"):
        assert f"  {what} " in table, what


def test_the_rewritten_launch_passes_openrlhfs_own_validation(recipe_plan):
    entry, args, _ = smoke.parse_launch(recipe_plan.flags)
    assert entry == "launcher"
    assert args.ds.packing_samples is False and args.ds.attn_implementation == "sdpa"
    assert args.data.prompt_dataset == str(recipe_plan.work / "data" / "train.jsonl")
    assert args.algo.kl.init_coef == 0.001 and args.algo.kl.use_loss  # the preset's, untouched


def test_plain_train_ppo_ray_and_a_compressed_schedule(tmp_path):
    plain = smoke.plan(["--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "4",
                        "--algo.kl.init_coef", "0", "--reward.remote_url", REWARD, "--vllm.num_engines", "2",
                        "--rollout.temperature", "0.8"], SmokeOptions(steps=2, warm_start=150), tmp_path / "a")
    assert plain.entry == "train_ppo_ray" and plain.logprob_temperature == 0.8
    assert value(plain.flags, "--vllm.num_engines") == ["1"] and plain.gpus == 2  # actor + one engine
    assert value(plain.flags, "--ref.num_gpus_per_node") is None  # no reference model without KL
    staged = smoke.plan(["--mc.preset", "microcoder", "--rollout.n_samples_per_prompt", "4", "--vllm.num_engines",
                         "1", "--mc.temperature.mode", "staged", "--mc.temperature.stages", "[[0, 0.6], [140, 1.2]]"],
                        SmokeOptions(steps=3), tmp_path / "b")
    assert json.loads(value(staged.flags, "--mc.temperature.stages")[0]) == [[0, 0.6], [1, 1.2]]
    assert value(staged.flags, "--mc.temperature.min_stage_steps") == ["1"] and staged.logprob_temperature is None


def test_compress_stages_counts_from_step_0():
    assert smoke.compress_stages([[0, 0.6], [140, 1.2]], 3) == [[0, 0.6], [1, 1.2]]
    assert smoke.compress_stages([[0, 0.6], [100, 1.0], [200, 1.2]], 3) == [[0, 0.6], [1, 1.0], [2, 1.2]]
    assert smoke.compress_stages([[0, 0.6], [100, 1.0], [200, 1.2]], 2) == [[0, 0.6], [1, 1.0]]
    assert smoke.compress_stages([[0, 1.2]], 3) == [[0, 1.2]]


@pytest.mark.parametrize("launch, message", [
    (["--rollout.n_samples_per_prompt", "1", "--algo.advantage.estimator", "group_norm", "--reward.remote_url", REWARD,
      "--vllm.num_engines", "1"], "OpenRLHF rejected the arguments: group_norm requires n_samples_per_prompt > 1"),
    (["--no.such.flag", "1", "--vllm.num_engines", "1"], "unrecognized arguments: --no.such.flag 1"),
    (["--reward.remote_url", "http://rm:5000/get_reward", "--rollout.n_samples_per_prompt", "2",
      "--vllm.num_engines", "1"], "not a readable local reward_func file"),
    (["--rollout.n_samples_per_prompt", "2", "--vllm.num_engines", "1"],  # gae, no reward model: OpenRLHF crashes
     "OpenRLHF failed while checking the arguments: AttributeError"),
    (["--rollout.n_samples_per_prompt", "2", "--algo.advantage.estimator", "group_norm", "--vllm.num_engines", "1"],
     "the launch has no rule-based reward"),
    (["--mc.preset", "microcoder", "--mc.dry_run", "--vllm.num_engines", "1"], "drop --mc.dry_run"),
    (["--mc.preset", "microcoder", "--rollout.temperature", "0.6", "--vllm.num_engines", "1"],
     "contradicts --mc.preset microcoder"),
    # OpenRLHF generates only with vLLM engines (without one: IndexError at the first step)
    (["--mc.preset", "microcoder", "--rollout.n_samples_per_prompt", "4"], "--vllm.num_engines is missing"),
    (["--rollout.n_samples_per_prompt", "2", "--algo.advantage.estimator", "group_norm", "--reward.remote_url",
      REWARD], "--vllm.num_engines is missing"),
])
def test_bad_launches_are_usage_errors(tmp_path, launch, message):
    with pytest.raises(SmokeUsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        smoke.plan(launch, SmokeOptions(), tmp_path)


def test_the_cli_exits_2_on_a_bad_launch(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(tmp_path), "openrlhf",
                           "--no.such.flag", "1", "--vllm.num_engines", "1"], capture_output=True, text=True,
                          timeout=hang_guard(300))
    assert proc.returncode == 2, proc.stderr
    assert "unrecognized arguments: --no.such.flag 1" in proc.stderr


def _replace(flags: list[str], **values: str) -> list[str]:
    """``flags`` with ``--a.b value`` set for each ``a__b=value`` (replacing the option's value)."""
    out = list(flags)
    for key, v in values.items():
        option = "--" + key.replace("__", ".")
        i = out.index(option)
        out[i + 1] = v
    return out


#: the 8B layout of openrlhf_recipes/train.sh (MODEL=ds_8b: vLLM TP 2) on 2 nodes of 8 GPUs
RECIPE_8B = _replace(RECIPE, vllm__num_engines="8", vllm__tensor_parallel_size="2")


def test_topology_keeps_the_declared_nodes_groups_engines_and_batches(tmp_path):
    p = smoke.plan(RECIPE_8B, SmokeOptions(steps=2, topology=True), tmp_path)
    f = p.flags
    expected = {"--actor.num_nodes": ["2"], "--actor.num_gpus_per_node": ["8"], "--ref.num_nodes": ["2"],
                "--ref.num_gpus_per_node": ["8"], "--vllm.num_engines": ["8"], "--vllm.tensor_parallel_size": ["2"],
                "--rollout.batch_size": ["64"], "--rollout.n_samples_per_prompt": ["8"], "--train.batch_size": ["256"],
                "--data.max_samples": ["128"]}
    for option, want in expected.items():
        assert value(f, option) == want, (option, value(f, option))
    assert value(f, "--train.micro_batch_size") is None  # OpenRLHF's own per-rank micro-batch, not one of ours
    # colocated: the actor's 16 bundles hold the reference and the 8 engines x 2 shards; each shard reports its sync
    assert p.gpus == 16 and p.shards == 16 and p.samples_per_step == 512
    assert p.data["train"]["rows"] == 128  # 16 bundled problems repeated to fill 2 steps of 64 prompts
    kv = int(p.env["MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES"])
    assert 16 << 20 <= kv < 1 << 30  # 64 sequences of 1056 tokens of the tiny model, not vLLM's GiB
    table = format_substitutions(p.substitutions)
    assert "  vLLM executor " in table and "  --vllm.tensor_parallel_size " not in table
    for gone in ("  actor GPUs ", "  nodes ", "  vLLM engines ", "  prompts per step ", "  train batch (samples) "):
        assert gone not in table, gone  # kept: nothing to print
    assert any("kept" in n for n in p.notes) and any("one Ray node" in n for n in p.notes)
    entry, args, _ = smoke.parse_launch(f)  # OpenRLHF's own validation of the rewritten launch
    assert args.vllm.tensor_parallel_size == 2 and args.actor.num_nodes == 2


def test_topology_past_16_ranks_runs_the_largest_size_that_keeps_the_groups(tmp_path):
    """4 nodes x 8 GPUs (32 ranks, 16 engines x TP 2) runs as 2 x 8: two nodes, TP 2 within a node, half the
    prompts per step and samples per update (the same share per rank), half the engines."""
    launch = _replace(RECIPE_8B, actor__num_nodes="4", ref__num_nodes="4", vllm__num_engines="16")
    p = smoke.plan(launch, SmokeOptions(steps=2, topology=True), tmp_path)
    expected = {"--actor.num_nodes": ["2"], "--actor.num_gpus_per_node": ["8"], "--ref.num_nodes": ["2"],
                "--ref.num_gpus_per_node": ["8"], "--vllm.num_engines": ["8"], "--vllm.tensor_parallel_size": ["2"],
                "--rollout.batch_size": ["32"], "--train.batch_size": ["128"]}
    for option, want in expected.items():
        assert value(p.flags, option) == want, (option, value(p.flags, option))
    assert p.gpus == 16 and p.shards == 16
    assert any("runs as actor 2 x 8 GPUs, 32 prompts per step, 128 samples per update, 8 vLLM engine(s) x TP 2" in n
               for n in p.notes), p.notes


def test_topology_runs_a_tp_1_engines_worker_in_its_engine_core(tmp_path):
    """At TP 1 each engine's worker runs in its engine-core process (vLLM's ``uni`` executor, kept by
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``): one process less per engine; at TP 2 the shards are processes (``mp``)."""
    one = smoke.plan(RECIPE, SmokeOptions(steps=2, topology=True), tmp_path / "one")
    assert one.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and one.shards == 16
    assert {s.what: s.smoke for s in one.substitutions}["vLLM executor"].startswith("uni, the worker in the engine")
    two = smoke.plan(RECIPE_8B, SmokeOptions(steps=2, topology=True), tmp_path / "two")
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in two.env or two.env["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0"
    default = smoke.plan(RECIPE, SmokeOptions(steps=2), tmp_path / "default")
    assert "vLLM executor" not in {s.what for s in default.substitutions}


@pytest.mark.parametrize("flag, why", [("--ds.tensor_parallel_size", "DeepSpeed AutoTP needs GPUs"),
                                       ("--ds.ring_attn_size", "ring attention needs flash-attention")])
def test_topology_refuses_what_it_cannot_keep(tmp_path, flag, why):
    with pytest.raises(SmokeUsageError, match=why):
        smoke.plan(RECIPE_8B + [flag, "2"], SmokeOptions(steps=2, topology=True), tmp_path)


def test_every_shard_must_report_each_sync():
    one = {"engine": "vllm42", "shards": 2}
    assert smoke.every_shard([{**one, "shard": 0}, {**one, "shard": 1}], 2)
    assert not smoke.every_shard([{**one, "shard": 0}], 2)  # a TP shard that never reported
    assert not smoke.every_shard([{**one, "shard": 0}, {**one, "shard": 0}], 2)
    two = [{"engine": f"vllm{i}", "shard": 0, "shards": 1} for i in (42, 43)]
    assert smoke.every_shard(two, 2) and not smoke.every_shard(two[:1], 2)


@pytest.mark.parametrize("launch, reason", [
    (["--mc.preset", "microcoder", "--mc.mask.rho", "2", "--rollout.n_samples_per_prompt", "4",
      "--vllm.num_engines", "1"], "--mc.mask.rho"),
    (["--mc.preset", "microcoder", "--rollout.n_samples_per_prompt", "4"], "--vllm.num_engines is missing"),
])
def test_the_cli_checks_the_launch_before_ray(tmp_path, launch, reason):
    """A bad ``--mc.*`` value or a launch without vLLM engines: exit 2 with the reason in seconds, before any model,
    Ray cluster or engine."""
    cpu0 = cpu_seconds()
    proc = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(tmp_path), "openrlhf",
                           *launch], capture_output=True, text=True, timeout=hang_guard(300))
    assert proc.returncode == 2, proc.stderr
    assert reason in proc.stderr and "running:" not in proc.stdout
    assert not (tmp_path / "train_ppo_ray.log").exists() and not (tmp_path / "data").exists()
    assert cpu_seconds() - cpu0 < 60  # CPU seconds, which a loaded machine does not add to


def test_a_changed_internal_stops_the_parse_before_anything_is_wrapped(tmp_path, monkeypatch):
    """The parse of a plain train_ppo_ray launch wraps OpenRLHF's ``hierarchize`` and ``ray.is_initialized`` for its
    duration: an OpenRLHF whose ``hierarchize`` changed stops it first with the guard's error (exit 1 in the CLI),
    and neither is ever replaced."""
    import openrlhf.utils.config as openrlhf_config
    import ray

    from microcoder_ext.openrlhf.guard import OpenRLHFInternalsError

    def hierarchize(namespace):  # changed upstream: returns the flat namespace
        return namespace

    monkeypatch.setattr(openrlhf_config, "hierarchize", hierarchize)
    is_initialized, parsed = ray.is_initialized, []
    # the parse itself (train_ppo_ray run as __main__), which runs while the two are wrapped: never reached
    monkeypatch.setattr(smoke.runpy, "run_module", lambda *a, **k: parsed.append(openrlhf_config.hierarchize))
    with pytest.raises(OpenRLHFInternalsError, match="hierarchize builds nested SimpleNamespace args"):
        smoke.plan(["--rollout.n_samples_per_prompt", "2", "--algo.advantage.estimator", "group_norm",
                    "--reward.remote_url", REWARD, "--vllm.num_engines", "1"], SmokeOptions(), tmp_path)
    assert parsed == [] and openrlhf_config.hierarchize is hierarchize and ray.is_initialized is is_initialized
    assert not (tmp_path / "data").exists()


def test_a_launch_the_launcher_refuses_exits_2_with_its_message_before_the_model(tmp_path):
    """``--train.async_enable`` with ``--mc.preset microcoder`` (OpenRLHF would build its async trainer, not ours):
    the launcher's refusal on stderr, exit 2, no model built, no data written, nothing started."""
    import os

    work, cache = tmp_path / "work", tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(work), "openrlhf",
                           "--mc.preset", "microcoder", "--train.async_enable", "--rollout.n_samples_per_prompt", "4",
                           "--reward.remote_url", REWARD, "--vllm.num_engines", "1"], capture_output=True, text=True,
                          timeout=hang_guard(300), env={**os.environ, "MICROCODER_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "--train.async_enable is refused with --mc.preset microcoder" in proc.stderr
    assert "FAILED" not in proc.stderr and "running:" not in proc.stdout
    assert not cache.exists() and sorted(p.name for p in work.iterdir()) == []
