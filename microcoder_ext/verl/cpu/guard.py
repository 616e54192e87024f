"""Version guard of the verl CPU backend: every verl internal :mod:`microcoder_ext.verl.cpu` relies on.

Public extension points (registries) come first; the private internals are what no registry reaches. Each is a
:class:`microcoder_ext.internals.Check`; :func:`check_cpu_backend` raises :class:`VerlInternalsChanged` listing every
one that does not hold in the installed verl (``microcoder smoke verl`` runs it before launching, and each patch
re-checks its own internal in the process that applies it).
"""

from __future__ import annotations

from microcoder_ext import internals as I
from microcoder_ext.compat import UnsupportedVersionError

TESTED = "0.9.1"


class VerlInternalsChanged(UnsupportedVersionError):
    """The installed verl differs from the one the CPU backend was written against."""


#: public registries and interfaces the backend plugs into
PUBLIC = [
    I.exists("verl.plugin.platform:PlatformRegistry.register"),
    I.exists("verl.plugin.platform.platform_manager:get_platform"),
    I.exists("verl.workers.rollout.replica:RolloutReplicaRegistry.register"),
    I.params_include("verl.workers.engine.base:EngineRegistry.register", ["model_type", "backend", "device"]),
    I.exists("verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithLMHead"),
    I.exists("verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithValueHead"),
    I.params_include("verl.workers.rollout.base:BaseRollout.update_weights", ["weights", "wire_format"]),
    I.exists("verl.workers.rollout.replica:RolloutReplica.launch_servers"),
    I.Check("verl.workers.rollout.replica.TokenOutput fields token_ids, log_probs, stop_reason, extra_fields",
            lambda: _pydantic_fields("verl.workers.rollout.replica:TokenOutput",
                                     ["token_ids", "log_probs", "stop_reason", "extra_fields"])),
]


def _pydantic_fields(path: str, names: list[str]) -> str | None:
    have = set(getattr(I.resolve(path), "model_fields", {}) or {})
    missing = [n for n in names if n not in have]
    return f"missing fields {missing}" if missing else None


def _rollout_registry() -> str | None:
    from verl.workers.rollout import base

    reg = getattr(base, "_ROLLOUT_REGISTRY", None)
    if not isinstance(reg, dict) or ("vllm", "async") not in reg:
        return f"_ROLLOUT_REGISTRY is {type(reg).__name__}, without ('vllm', 'async')"
    return None


#: private internals, each with the reason the backend touches it
ROLLOUT_REGISTRY = I.Check(
    "verl.workers.rollout.base._ROLLOUT_REGISTRY (the hybrid worker's server-adapter lookup, get_rollout_class): "
    "a dict keyed by (name, mode)", _rollout_registry)
PROCESS_GROUP = I.source_has(
    "verl.utils.distributed:initialize_global_process_group_ray",
    'backend = backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"',
    'builds "cpu:gloo,<device>:<backend>" (torch rejects "cpu:gloo,cpu:gloo": the CPU backend passes "cpu:gloo")')
PROCESS_GROUP_CALLER = I.source_has(
    "verl.workers.engine_workers:TrainingWorker.__init__", "initialize_global_process_group_ray(timeout_second=None)",
    "calls initialize_global_process_group_ray without a backend (module global of engine_workers)")
REF_OFFLOAD = I.source_has(
    "verl.workers.engine.fsdp.transformer_impl:FSDPEngine._build_fsdp_module", "CPUOffloadPolicy(pin_memory=True)",
    "gives a forward-only (reference) model CPUOffloadPolicy(pin_memory=True) (pinning needs an accelerator)")
VALUEHEAD_LOADER = I.source_has(
    "verl.utils.model:load_valuehead_model", 'attn_implementation="flash_attention_2"',
    "loads a critic with attn_implementation=flash_attention_2 (the CPU backend loads it with sdpa)")
VALUEHEAD_SIGNATURE = I.signature("verl.utils.model:load_valuehead_model",
                                  ["local_path", "torch_dtype", "model_config", "trust_remote_code"])

PRIVATE = [ROLLOUT_REGISTRY, PROCESS_GROUP, PROCESS_GROUP_CALLER, REF_OFFLOAD, VALUEHEAD_LOADER, VALUEHEAD_SIGNATURE]


def problems() -> list[str]:
    """One line per relied-on internal that does not hold (imports verl's worker modules: seconds)."""
    return I.problems(PUBLIC + PRIVATE)


def check_cpu_backend() -> str:
    """The installed verl version; raises :class:`VerlInternalsChanged` naming every changed internal."""
    return I.require_internals("verl", TESTED, "verl CPU backend (microcoder_ext/verl/cpu)", problems(),
                               VerlInternalsChanged)


def require(check: I.Check) -> None:
    """Raise :class:`VerlInternalsChanged` if one internal does not hold (each patch calls it before patching)."""
    found = I.problems([check])
    if found:
        I.require_internals("verl", TESTED, "verl CPU backend (microcoder_ext/verl/cpu)", found, VerlInternalsChanged)
