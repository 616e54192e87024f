"""The four ``torch.cuda`` functions OpenRLHF 0.11.2 calls itself, made CPU-safe for a CPU-only torch build.

DeepSpeed runs on its CPU accelerator (``DS_ACCELERATOR=cpu``: gloo, FusedAdam's CPU kernel), but OpenRLHF calls
``torch.cuda`` directly on the PPO path, and on a CPU build these raise "Torch not compiled with CUDA enabled":

* ``set_device(local_rank)``       ``DeepspeedStrategy.setup_distributed``                      -> no-op
* ``current_device()``             as the device of metric tensors and experiences
                                   (``ActorPPOTrainer.ppo_train``, ``DeepspeedStrategy.all_reduce``, ...), and inside
                                   ``torch.device(f"cuda:{...}")`` (``NaiveReplayBuffer.__init__``: built, never used
                                   by the PPO path)                                            -> :data:`CPU`
* ``synchronize()``                ``torch_dist_barrier_and_cuda_sync`` (every barrier)        -> no-op
* ``current_stream()``             the ``stream`` argument of the weight broadcast             -> None

(``torch.cuda.empty_cache()`` is already a no-op without CUDA.) Each call site is a check of
:mod:`microcoder_ext.openrlhf.guard` (``CPU_BACKEND_CHECKS``). Nothing else of torch is touched.
"""

from __future__ import annotations

#: the functions replaced, in the order of the module doc
NAMES = ("set_device", "current_device", "synchronize", "current_stream")
_MARK = "_microcoder_cpu_shims"


class _CpuDevice(str):
    """``"cpu"`` wherever it is used as a device; ``"0"`` inside an f-string (``f"cuda:{...}"`` -> ``cuda:0``)."""

    def __format__(self, spec: str) -> str:
        return "0"


CPU = _CpuDevice("cpu")


def applied() -> bool:
    import torch

    return bool(getattr(torch.cuda, _MARK, False))


def apply() -> None:
    """Replace the four functions (idempotent). Raises ``RuntimeError`` when CUDA is available: a GPU machine
    must never run with these."""
    import torch

    if applied():
        return
    if torch.cuda.is_available():
        raise RuntimeError("microcoder-ext's OpenRLHF CPU backend refuses to replace torch.cuda functions: CUDA is "
                           "available here (run OpenRLHF as is)")
    missing = [n for n in NAMES if not callable(getattr(torch.cuda, n, None))]
    if missing:
        raise RuntimeError(f"torch {torch.__version__} has no torch.cuda.{', '.join(missing)}: the OpenRLHF CPU "
                           "backend (microcoder_ext/openrlhf/cpu/torch_cuda.py) needs porting")

    def set_device(device) -> None:
        return None

    def current_device() -> str:
        return CPU

    def synchronize(device=None) -> None:
        return None

    def current_stream(device=None) -> None:
        return None

    for fn in (set_device, current_device, synchronize, current_stream):
        fn.__qualname__ = f"torch.cuda.{fn.__name__} (microcoder-ext CPU shim)"
        setattr(torch.cuda, fn.__name__, fn)
    setattr(torch.cuda, _MARK, True)
