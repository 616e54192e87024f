"""The ``cpu`` platform for verl's platform registry (``verl.plugin.platform.PlatformRegistry``).

Selected by ``VERL_PLATFORM=cpu`` and registered only then (:func:`microcoder_ext.verl.cpu.activate`). Devices are
Ray *logical* GPUs (``ray_kwargs.ray_init.num_gpus=N``): the Ray resource name stays ``"GPU"`` so verl's resource
pools, placement groups and resource checks work unchanged; tensors live on ``"cpu"``; collectives use gloo. Never
auto-detected (:meth:`PlatformCPU.is_platform_available` is False): a GPU machine keeps its own platform.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from verl.plugin.platform import PlatformBase

NAME = "cpu"


def _noop(*args, **kwargs):
    return None


def _zero(*args, **kwargs):
    return 0


class CpuDeviceModule:
    """What verl calls as ``get_torch_device().<fn>``: ``torch.cpu`` plus no-op memory and RNG helpers."""

    empty_cache = ipc_collect = reset_peak_memory_stats = set_per_process_memory_fraction = staticmethod(_noop)
    memory_allocated = memory_reserved = max_memory_allocated = max_memory_reserved = staticmethod(_zero)

    @staticmethod
    def get_rng_state(*args, **kwargs):
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *args, **kwargs):
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed):
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_device_name(*args, **kwargs):
        return "cpu"

    @staticmethod
    def set_device(*args, **kwargs):
        return None

    @staticmethod
    def mem_get_info(*args, **kwargs):
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    def __getattr__(self, name):  # synchronize, current_stream, stream, Stream, Event, device_count, is_available
        return getattr(torch.cpu, name)


class PlatformCPU(PlatformBase):
    """verl's platform interface on the CPU (see the module doc)."""

    device_name = NAME
    vendor_name = NAME
    device_module = CpuDeviceModule()

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return False  # opt in with VERL_PLATFORM=cpu only

    def current_device(self):
        return NAME  # used as a torch.device / .to() target

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"  # Ray logical GPUs on a CPU machine

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None
