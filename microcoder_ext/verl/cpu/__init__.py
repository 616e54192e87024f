"""verl 0.9.1 on a machine without GPUs: the backend behind ``microcoder smoke verl`` (and CPU end-to-end tests).

Active only when asked for: ``VERL_PLATFORM=cpu`` in the environment of every verl process (``microcoder smoke``
sets it; verl's own variable for choosing a platform, so a GPU run never sees any of this). Then the microcoder-ext
``verl.plugins`` entry point calls :func:`activate` in each process that imports verl (driver, TaskRunner, actor and
rollout workers, agent-loop and reward workers), which plugs in:

Public extension points
  1. platform ``cpu``      ``verl.plugin.platform.PlatformRegistry.register`` (:mod:`.platform`): device "cpu",
                           Ray resource "GPU" (logical GPUs: ``+ray_kwargs.ray_init.num_gpus=N``), gloo
  2. rollout ``hf_cpu``    ``verl.workers.rollout.replica.RolloutReplicaRegistry.register`` (:mod:`.rollout`):
                           ``actor_rollout_ref.rollout.name=hf_cpu``
  3. FSDP engines          ``EngineRegistry.register(..., device="cpu")`` of verl's own ``FSDPEngineWithLMHead`` /
                           ``FSDPEngineWithValueHead`` (registered for cuda/npu only), when their module is imported

Private internals (no public hook; each checked by :mod:`.guard` before it is touched, and only patched here)
  4. ``verl.workers.rollout.base._ROLLOUT_REGISTRY``: one entry ``("hf_cpu", "async")`` for the hybrid worker's
     server-adapter lookup (``get_rollout_class``);
  5. ``verl.workers.engine_workers.initialize_global_process_group_ray`` (the module's global): called without a
     backend it builds ``"cpu:gloo,cpu:gloo"``, which torch rejects; wrapped to pass ``"cpu:gloo"``;
  6. ``verl.workers.engine.fsdp.transformer_impl.CPUOffloadPolicy`` (the module's global): the reference model gets
     ``CPUOffloadPolicy(pin_memory=True)`` and pinning needs an accelerator; replaced by an unpinned subclass;
  7. ``verl.utils.model.load_valuehead_model``: a critic is loaded with flash-attention 2; replaced by a loader that
     uses sdpa (only used with a critic, e.g. ``adv_estimator=gae``).

Patches 5-7 are applied right after their module is imported (:mod:`microcoder_ext.verl.lazy`), so processes that
never load a worker stay light. If a check fails in a worker, the patched name is replaced by one that raises the
guard's error, so the run stops there with the message rather than with a confusing one later.

What the CPU backend cannot show: GPU kernels, memory use, NCCL, vLLM's numerics and scheduling, FSDP1.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

ENV = "VERL_PLATFORM"
PLATFORM = "cpu"
ROLLOUT = "hf_cpu"
ADAPTER = "microcoder_ext.verl.cpu.rollout.HFServerAdapter"

_ACTIVE = False


def requested(environ=None) -> bool:
    """Whether this process asked for the CPU backend (``VERL_PLATFORM=cpu``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV, "").strip().lower() == PLATFORM


def active() -> bool:
    return _ACTIVE


def activate() -> None:
    """Plug the CPU backend into verl (idempotent; see the module doc). Raises on an unsupported verl."""
    global _ACTIVE
    if _ACTIVE:
        return
    from microcoder_ext.compat import require as require_version
    from microcoder_ext.verl.cpu import guard
    from microcoder_ext.verl.lazy import register_when_imported

    require_version("verl")
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from microcoder_ext.verl.cpu.platform import NAME, PlatformCPU

    existing = PlatformRegistry.get(NAME)
    if existing is not None and existing is not PlatformCPU:
        raise guard.VerlInternalsChanged(
            f"verl already registers a platform {NAME!r} ({existing.__module__}.{existing.__qualname__}); "
            "microcoder-ext's CPU backend would replace it. Port microcoder_ext/verl/cpu to this verl release")
    PlatformRegistry.register(platform=NAME)(PlatformCPU)  # 1
    RolloutReplicaRegistry.register(ROLLOUT, _load_replica)  # 2
    guard.require(guard.ROLLOUT_REGISTRY)
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = ADAPTER  # 4
    register_when_imported("verl.workers.engine.fsdp.transformer_impl", _patch_engines,  # 3, 6
                           key="microcoder_ext.verl.cpu:engines", what="the CPU FSDP engines")
    register_when_imported("verl.workers.engine_workers", _patch_process_group,  # 5
                           key="microcoder_ext.verl.cpu:process_group", what="the CPU process group (gloo)")
    register_when_imported("verl.utils.model", _patch_valuehead_loader,  # 7
                           key="microcoder_ext.verl.cpu:valuehead", what="the CPU critic loader (sdpa)")
    _ACTIVE = True
    logger.info("microcoder-ext: verl CPU backend active (VERL_PLATFORM=cpu, rollout %s)", ROLLOUT)


def _load_replica():
    from microcoder_ext.verl.cpu.rollout import HFReplica

    return HFReplica


def _tripwire(module, name: str, error: Exception) -> None:
    """Replace ``module.name`` by a callable that raises ``error`` (a guard failure in a worker process)."""
    def refuse(*args, **kwargs):
        raise error

    logger.error("microcoder-ext: %s", error)
    setattr(module, name, refuse)


def _patch_engines(transformer_impl) -> None:
    from verl.workers.engine.base import EngineRegistry

    from microcoder_ext.verl.cpu import guard

    for cls, model_type in ((transformer_impl.FSDPEngineWithLMHead, "language_model"),
                            (transformer_impl.FSDPEngineWithValueHead, "value_model")):
        for backend in ("fsdp", "fsdp2"):
            try:
                EngineRegistry.register(model_type=model_type, backend=backend, device=PLATFORM)(cls)
            except AssertionError:  # already registered for "cpu" (a reload of this module)
                pass
    try:
        guard.require(guard.REF_OFFLOAD)
    except guard.VerlInternalsChanged as e:
        _tripwire(transformer_impl, "CPUOffloadPolicy", e)
        return
    base = transformer_impl.CPUOffloadPolicy
    if getattr(base, "_microcoder_unpinned", False):
        return

    class UnpinnedCPUOffloadPolicy(base):
        """``CPUOffloadPolicy`` that never pins memory (pinning needs an accelerator)."""

        _microcoder_unpinned = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _patch_process_group(engine_workers) -> None:
    from microcoder_ext.verl.cpu import guard

    original = engine_workers.initialize_global_process_group_ray
    if getattr(original, "_microcoder_cpu", False):
        return
    try:
        guard.require(guard.PROCESS_GROUP)
        guard.require(guard.PROCESS_GROUP_CALLER)
    except guard.VerlInternalsChanged as e:
        _tripwire(engine_workers, "initialize_global_process_group_ray", e)
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    initialize_global_process_group_ray._microcoder_cpu = True
    initialize_global_process_group_ray.__wrapped__ = original  # the guard checks verl's own function
    engine_workers.initialize_global_process_group_ray = initialize_global_process_group_ray


def _patch_valuehead_loader(model_utils) -> None:
    from microcoder_ext.verl.cpu import guard

    original = model_utils.load_valuehead_model
    if getattr(original, "_microcoder_cpu", False):
        return
    try:
        guard.require(guard.VALUEHEAD_LOADER)
        guard.require(guard.VALUEHEAD_SIGNATURE)
    except guard.VerlInternalsChanged as e:
        _tripwire(model_utils, "load_valuehead_model", e)
        return

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        try:
            return AutoModelForTokenClassification.from_pretrained(
                pretrained_model_name_or_path=local_path, torch_dtype=torch_dtype, config=model_config,
                attn_implementation="sdpa", trust_remote_code=trust_remote_code)
        except (ValueError, OSError):  # not a token-classification model: verl's value-head path
            return original(local_path, torch_dtype, model_config, trust_remote_code)

    load_valuehead_model._microcoder_cpu = True
    load_valuehead_model.__wrapped__ = original  # the guard checks verl's own function
    model_utils.load_valuehead_model = load_valuehead_model
