"""``python -m microcoder_ext.openrlhf.cpu.run [--gpus N] [--cpus N] ENTRY FLAGS...``: OpenRLHF 0.11.2 on the CPU.

``ENTRY`` is ``train_ppo_ray`` (OpenRLHF's own ``openrlhf.cli.train_ppo_ray``, run as ``__main__`` with ``runpy``)
or ``launcher`` (``python -m microcoder_ext.openrlhf.train``: the same, with the ``--mc.*`` preset); ``FLAGS`` go to
it unchanged. Before that this process

1. asks for the CPU backend (``MICROCODER_OPENRLHF_CPU=1``, ``DS_ACCELERATOR=cpu``, ``TORCH_EXTENSIONS_DIR`` =
   the venv's prebuilt DeepSpeed ops when present, vLLM's ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) and
   ``VLLM_CPU_OMP_THREADS_BIND=nobind`` unless set),
2. installs it here (:func:`microcoder_ext.openrlhf.cpu.setup`), which first runs the guard
   (:func:`microcoder_ext.openrlhf.guard.check_cpu_backend`, vLLM's CPU build included) and patches nothing unless
   it passes (exit 1 naming every changed internal),
3. starts a Ray cluster of its own (``address="local"``) with ``N`` logical GPUs (OpenRLHF schedules its actors on
   ``{"GPU": 1, "CPU": 1}`` bundles; nothing reads a device behind them), the environment ``train()`` would pass
   plus the above, and ``worker_process_setup_hook`` = :func:`microcoder_ext.openrlhf.cpu.setup`.

``train()`` keeps an initialised Ray (``openrlhf/cli/train_ppo_ray.py``: "initialize ray if not initialized").
Used by ``microcoder smoke openrlhf`` (:mod:`microcoder_ext.openrlhf.smoke`); exit status: the entry point's.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
import traceback
import warnings

ENTRIES = ("train_ppo_ray", "launcher")
#: passed to every Ray worker (train()'s own three, the CPU backend's, and what the smoke run sets)
PASS_ENV = ("TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "DS_ACCELERATOR",
            "MICROCODER_OPENRLHF_CPU", "MICROCODER_OPENRLHF_CPU_SEED", "MICROCODER_OPENRLHF_CPU_CHECKED",
            "TORCH_EXTENSIONS_DIR",
            "MICROCODER_SMOKE_EVIDENCE", "MICROCODER_CACHE", "MICROCODER_OPENRLHF_CPU_ENGINE_START",
            "MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES",
            "MICROCODER_OPENRLHF_CPU_SYNC_TIMEOUT", "MICROCODER_OPENRLHF_CPU_FAIL_SYNC", "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_CPU_OMP_THREADS_BIND", "VLLM_LOGGING_LEVEL", "VLLM_ENABLE_V1_MULTIPROCESSING",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PATH", "PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
            "HF_DATASETS_OFFLINE", "WANDB_MODE", "MICROCODER_REWARD_TIMEOUT", "MICROCODER_REWARD_WORKERS",
            "PYTHONUNBUFFERED")


def prepare_environment() -> None:
    """Step 1's environment (this process; Ray workers inherit it)."""
    from microcoder_ext.openrlhf.cpu import ENV, ops_dir

    os.environ[ENV] = "1"
    os.environ["DS_ACCELERATOR"] = "cpu"
    ops = ops_dir()
    if "TORCH_EXTENSIONS_DIR" not in os.environ and ops.is_dir():
        os.environ["TORCH_EXTENSIONS_DIR"] = str(ops)
    bindir = os.path.dirname(sys.executable)  # ninja, if DeepSpeed has to build its ops after all
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join(filter(None, [bindir, os.environ.get("PATH")]))
    defaults = {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
                # vLLM's CPU backend: KV cache in GiB (its default takes a share of RAM), no core pinning (the
                # machine is shared by the trainer, the engine and the reward)
                "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    for key, value in defaults.items():  # what train() would pass when it starts Ray itself
        os.environ.setdefault(key, value)


def start_ray(gpus: int, cpus: int) -> None:
    import ray

    from microcoder_ext.openrlhf.cpu import SETUP_HOOK

    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    ray.init(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=False,
             object_store_memory=512 * 1024 * 1024,
             runtime_env={"env_vars": env, "worker_process_setup_hook": SETUP_HOOK})


def run_entry(entry: str, flags: list[str]) -> int:
    if entry == "train_ppo_ray":
        saved = sys.argv
        sys.argv = ["train_ppo_ray", *flags]
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
                runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = saved
        return 0
    from microcoder_ext.openrlhf.launcher import main

    return main(flags)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m microcoder_ext.openrlhf.cpu.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=1, help="Ray logical GPUs (default %(default)s)")
    ap.add_argument("--cpus", type=int, default=8, help="Ray logical CPUs (default %(default)s)")
    ap.add_argument("entry", choices=ENTRIES)
    ap.add_argument("flags", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)

    prepare_environment()
    from microcoder_ext.compat import UnsupportedVersionError
    from microcoder_ext.openrlhf import cpu

    try:
        cpu.setup()  # the guard first, then the patches
    except (cpu.CpuBackendRefused, UnsupportedVersionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from microcoder_ext.compat import installed_version

    version = installed_version("openrlhf")
    print(f"[microcoder cpu] OpenRLHF {version} on the CPU backend: {a.gpus} logical GPU(s), DS_ACCELERATOR=cpu, "
          f"TORCH_EXTENSIONS_DIR={os.environ.get('TORCH_EXTENSIONS_DIR', '(torch default)')}", flush=True)
    import ray

    t0 = time.monotonic()
    start_ray(a.gpus, a.cpus)
    try:
        code = run_entry(a.entry, list(a.flags))
    except Exception:  # the framework's own error, in full, for the log (the smoke report quotes it)
        traceback.print_exc()
        code = 1
    finally:
        ray.shutdown()
    print(f"[microcoder cpu] {a.entry} returned after {time.monotonic() - t0:.1f} s, exit {code}", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
