"""OpenRLHF 0.11.2 on a machine without GPUs: the backend behind ``microcoder smoke openrlhf`` (and the CPU
end-to-end tests). OpenRLHF itself is not patched: its own ``train_ppo_ray`` (or our launcher around it) runs
with real Ray actors, DeepSpeed on its CPU accelerator and OpenRLHF's own ``RolloutRayActor``.

Active only when asked for. Importing ``microcoder_ext`` or ``openrlhf`` never installs any of it; only
:func:`setup` does, and only in a process whose environment has ``MICROCODER_OPENRLHF_CPU=1``. The smoke runner
starts ``python -m microcoder_ext.openrlhf.cpu.run`` (:mod:`.run`), which sets it, calls :func:`setup` in the
driver and starts Ray itself with ``runtime_env={"worker_process_setup_hook": "microcoder_ext.openrlhf.cpu.setup",
"env_vars": {...}}`` so that every Ray worker runs :func:`setup` before it imports OpenRLHF. :func:`setup`
refuses (:class:`CpuBackendRefused`) when CUDA is available or a real ``vllm`` / ``flash_attn`` can be imported.

What it installs:

1. ``DS_ACCELERATOR=cpu``  DeepSpeed's own accelerator selection: ZeRO on gloo, FusedAdam's CPU kernel (JIT-built
                           once; cached in ``$venv/torch_extensions``, :func:`ops_dir`)
2. ``torch.cuda`` shims   four functions OpenRLHF calls directly (:mod:`.torch_cuda`)
3. ``vllm``               exact-name stand-in on :class:`microcoder_ext.smoke.engine.CpuEngine`, plus
                          ``vllm.distributed`` over gloo for OpenRLHF's weight broadcast (:mod:`.vllm_standin`)
4. ``flash_attn``         exact-name import stand-ins (:mod:`.flash_attn_standin`)
5. a seeded start        ``torch`` / ``random`` / ``numpy`` seeded with ``MICROCODER_OPENRLHF_CPU_SEED`` (default 0)
                          in every process: OpenRLHF seeds its DeepSpeed ranks (``--train.seed``) but not the trainer
                          actor, whose prompt order (an unseeded ``RandomSampler``) would differ from run to run; with
                          the deterministic engine a smoke run then repeats exactly

Every OpenRLHF / DeepSpeed internal these rely on is a check in :data:`microcoder_ext.openrlhf.guard.CPU_BACKEND_CHECKS`
(:func:`microcoder_ext.openrlhf.guard.check_cpu_backend`, run by the smoke runner and by :mod:`.run`).

What the CPU backend cannot show: GPU kernels (flash-attention, packing, fused ops), memory at full size, NCCL /
CUDA IPC, vLLM's numerics and scheduling, tensor-parallel engines.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "MICROCODER_OPENRLHF_CPU"
SEED_ENV = "MICROCODER_OPENRLHF_CPU_SEED"
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


def refusals() -> list[str]:
    """Why the CPU backend must not be installed here (empty: it may)."""
    import torch

    from microcoder_ext.openrlhf.cpu import modules

    out = []
    if not requested():
        out.append(f"{ENV}=1 is not set (the CPU backend is installed only by `microcoder smoke openrlhf` / "
                   "python -m microcoder_ext.openrlhf.cpu.run)")
    if torch.cuda.is_available():
        out.append("CUDA is available: run OpenRLHF as is")
    for root in ("vllm", "flash_attn"):
        if modules.importable(root):
            out.append(f"{root} can be imported here (an installed package, or another stub already in "
                       "sys.modules): the CPU stand-in never shadows it")
    accel = os.environ.get("DS_ACCELERATOR")
    if accel not in (None, "", "cpu"):
        out.append(f"DS_ACCELERATOR={accel} (the CPU backend runs DeepSpeed's cpu accelerator)")
    return out


def installed() -> bool:
    from microcoder_ext.openrlhf.cpu import modules, torch_cuda

    return torch_cuda.applied() and modules.is_standin(sys.modules.get("vllm"))


def setup() -> None:
    """Install the CPU backend in this process (idempotent); Ray's ``worker_process_setup_hook``.

    Raises :class:`CpuBackendRefused` listing every reason it must not (see :func:`refusals`)."""
    if installed():
        return
    problems = refusals()
    if problems:
        raise CpuBackendRefused("microcoder-ext's OpenRLHF CPU backend refuses to install:\n  - "
                                + "\n  - ".join(problems))
    os.environ["DS_ACCELERATOR"] = "cpu"
    from microcoder_ext.openrlhf.cpu import flash_attn_standin, torch_cuda, vllm_standin

    torch_cuda.apply()
    vllm_standin.install()
    flash_attn_standin.install()
    seed_process(int(os.environ.get(SEED_ENV, "0")))


def seed_process(seed: int) -> None:
    """Seed this process's torch, ``random`` and numpy generators (see the module doc, 5)."""
    import random

    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
