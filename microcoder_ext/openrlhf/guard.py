"""The one version guard of the OpenRLHF adapter: every OpenRLHF internal the adapter relies on, checked at once.

OpenRLHF has no plugin API, so the launcher and the trainer subclass depend on internals of 0.11.0-0.11.2, the same
in the three releases (each one named in :data:`CHECKS`). :func:`check_openrlhf` verifies the
installed version (:func:`microcoder_ext.compat.require`) and then each internal in :data:`CHECKS`; it raises
:class:`OpenRLHFInternalsError` listing **every** internal that changed, by name, with what was expected and what
was found. The launcher calls it before patching anything and the trainer calls it again inside its Ray actor
(the worker may run another installation than the driver).

``MICROCODER_ALLOW_UNSUPPORTED=1`` lets another *version* through (with a warning), never a changed internal.
"""

from __future__ import annotations

from microcoder_ext.compat import TESTED, UnsupportedVersionError
from microcoder_ext.internals import (
    Check,
    exists as _exists,
    fields as _fields,
    name,
    params_include as _params_include,
    problems as _problems,
    require_internals,
    resolve as _obj,
    signature as _signature,
    source_has as _source_has,
)


#: OpenRLHF release -> the DeepSpeed release it pins, which the CPU backend runs on (compat/constraints-openrlhf-*.txt)
DEEPSPEED_TESTED = {"0.11.0": "0.19.5", "0.11.1": "0.19.5", "0.11.2": "0.19.6"}


class OpenRLHFInternalsError(UnsupportedVersionError):
    """An OpenRLHF internal the adapter relies on is missing or has changed."""


def _ray_actor_class(path: str, base: str | None = None) -> Check:
    def run():
        handle = _obj(path)
        cls = getattr(getattr(getattr(handle, "__ray_metadata__", None), "modified_class", None),
                      "__ray_actor_class__", None)
        if cls is None:
            return f"{type(handle).__name__}, not a Ray actor class with __ray_metadata__.modified_class"
        if base is not None and not issubclass(cls, _obj(base)):
            return f"{cls.__qualname__} no longer subclasses {base}"
        return None

    what = f"{name(path)} is a @ray.remote class" + (f" of {base.split(':')[-1]}" if base else "")
    return Check(what, run)


_TRAINER = "openrlhf.trainer.ppo_trainer"
_MAKER = "openrlhf.trainer.ppo_utils.experience_maker:RemoteExperienceMaker"

#: what reading a launch's arguments relies on: train_ppo_ray's argparse lives under its ``__main__`` (run with runpy),
#: hands the parsed namespace to ``hierarchize`` (wrapped to catch it) and then calls ``train()``, whose first
#: ``ray.is_initialized()`` (wrapped to stop there) comes before Ray or any actor starts (the launcher's dry run,
#: ``microcoder smoke openrlhf``'s parse, checked by :func:`check_launch_parsing` before either wraps them)
LAUNCH_PARSING: tuple[Check, ...] = (
    _exists("openrlhf.utils.config:hierarchize"),
    _source_has("openrlhf.utils.config:hierarchize", "SimpleNamespace", "builds nested SimpleNamespace args"),
    _source_has("openrlhf.cli.train_ppo_ray:train", "if not ray.is_initialized():",
                "starts Ray only if it is not initialised (and keeps the cluster the CPU runner started)"),
)

#: every OpenRLHF internal the adapter uses, with where it is used
CHECKS: tuple[Check, ...] = LAUNCH_PARSING + (
    # launcher (microcoder_ext.openrlhf.launcher): argparse lives under __main__ of train_ppo_ray, run via runpy
    _exists("openrlhf.utils:get_strategy"),
    # trainer subclass: unwrap OpenRLHF's Ray actor class, override train_step and the checkpoint hooks
    _ray_actor_class(f"{_TRAINER}:PPOTrainer", f"{_TRAINER}:BasePPOTrainer"),
    _signature(f"{_TRAINER}:BasePPOTrainer.train_step", ["self", "rollout_samples", "global_step"]),
    _signature(f"{_TRAINER}:BasePPOTrainer.save_logs_and_checkpoints",
               ["self", "global_step", "logs_dict", "client_states"]),
    _signature(f"{_TRAINER}:BasePPOTrainer.init_checkpoint_states", ["self"]),
    _source_has(f"{_TRAINER}:PPOTrainer.__ray_metadata__.modified_class.__ray_actor_class__.fit",
                "generate_samples(**self.generate_kwargs)", "samples every step with self.generate_kwargs"),
    _source_has(f"{_TRAINER}:BasePPOTrainer.__init__", "self.experience_maker = RemoteExperienceMaker(",
                "builds self.experience_maker"),
    # mask: wrap the experience maker's instance method
    _signature(f"{_MAKER}.compute_advantages_and_returns", ["self", "experiences"]),
    _source_has(f"{_MAKER}.make_experience_batch", "self.compute_advantages_and_returns(",
                "calls self.compute_advantages_and_returns"),
    _fields("openrlhf.trainer.ppo_utils.experience:Experience",
            ("sequences", "action_mask", "advantages", "returns", "rewards", "scores", "truncated", "index", "info")),
    # temperature: SamplingParams from generate_kwargs["temperature"]; the actor divides logits by .temperature
    _source_has("openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator._dispatch_prompts_to_vllm",
                'temperature=generate_kwargs.get("temperature"', "samples at generate_kwargs['temperature']"),
    _source_has("openrlhf.models.actor:Actor.__init__", "self.temperature = temperature",
                "keeps the log-prob temperature in .temperature"),
    _source_has("openrlhf.models.actor:Actor.forward", "self.temperature", "divides the logits by .temperature"),
    _ray_actor_class("openrlhf.trainer.ray.ppo_actor:PolicyModelActor"),
    _source_has("openrlhf.trainer.ray.ppo_actor:PolicyModelActor.__ray_metadata__.modified_class.__ray_actor_class__"
                ".init_model_from_pretrained", "self.actor, self.actor_optim", "keeps the policy Actor in .actor"),
    _ray_actor_class("openrlhf.trainer.ray.launcher:ReferenceModelActor"),
    _source_has("openrlhf.trainer.ray.launcher:ReferenceModelActor.__ray_metadata__.modified_class"
                ".__ray_actor_class__.init_model_from_pretrained", "self.model = ",
                "keeps the reference Actor in .model"),
    _signature("openrlhf.trainer.ray.launcher:RayActorGroup.async_run_method",
               ["self", "method_name", "args", "kwargs"]),
)


_RAY_ACTOR = "__ray_metadata__.modified_class.__ray_actor_class__"
_ROLLOUT = f"openrlhf.trainer.ray.vllm_engine:RolloutRayActor.{_RAY_ACTOR}"
_WRAP = "openrlhf.trainer.ray.vllm_worker_wrap:WorkerWrap"
_ACTOR_TRAINER = "openrlhf.trainer.ray.ppo_actor:ActorPPOTrainer"
_ASYNC_LLM = "vllm.v1.engine.async_llm:AsyncLLM"


def _is(path: str, other: str) -> Check:
    def run():
        return None if _obj(path) is _obj(other) else f"{_obj(path)!r}, not {name(other)}"

    return Check(f"{name(path)} is {name(other)}", run)


#: what the CPU backend's routing of vLLM inside vLLM's own processes relies on (:mod:`microcoder_ext.openrlhf.cpu.
#: engine`, :mod:`microcoder_ext.openrlhf.cpu.weight_sync`; checked there by :func:`check_vllm_routing`)
VLLM_ROUTING_CHECKS: tuple[Check, ...] = (
    # the worker extension OpenRLHF mixes into vLLM's worker, whose update_weight the CPU backend replaces
    _signature(f"{_WRAP}.init_process_group", ["self", "master_address", "master_port", "rank_offset", "world_size",
                                               "group_name", "backend", "use_ray"]),
    _source_has(f"{_WRAP}.init_process_group",
                ["from openrlhf.utils.distributed_util import stateless_init_process_group",
                 "self._model_update_group = stateless_init_process_group("],
                "imports stateless_init_process_group when called and keeps the group in _model_update_group"),
    _signature(f"{_WRAP}.update_weight", ["self", "name", "dtype", "shape", "empty_cache"]),
    _source_has(f"{_WRAP}.update_weight",
                ["assert dtype == self.model_config.dtype", 'torch.empty(shape, dtype=dtype, device="cuda")',
                 "self._model_update_group.broadcast(weight, src=0, stream=torch.cuda.current_stream())",
                 "self.model_runner.model.load_weights(weights=[(name, weight)])"],
                "receives each tensor on cuda with a CUDA stream and loads it with model.load_weights (the CPU "
                "backend: the worker's device, no stream, then vLLM's re-pack at the last tensor)"),
    # vLLM: its CPU worker, the model runner whose load is followed by the engine's start, the sync group's store
    _source_has("vllm.v1.worker.worker_base:WorkerWrapperBase.init_worker",
                ["load_general_plugins()", "worker_extension_cls"],
                "loads the general plugins before it mixes in the worker extension"),
    _exists("vllm.v1.worker.cpu_model_runner:CPUModelRunner.load_model"),
    # a tensor-parallel engine's executor (engine.route_executor): chosen after the CPU platform's config check
    _params_include("vllm.platforms.cpu:CpuPlatform.check_and_update_config", ["vllm_config"]),
    _source_has("vllm.config.vllm:VllmConfig.__post_init__", ["current_platform.check_and_update_config(self)"],
                "lets the platform update the parallel config before the engine picks its executor"),
    _fields("vllm.config.parallel:ParallelConfig", ("distributed_executor_backend", "worker_extension_cls",
                                                    "data_parallel_size", "pipeline_parallel_size")),
    _params_include("vllm.distributed.utils:StatelessProcessGroup.create", ["host", "port", "rank", "world_size"]),
    _fields("vllm.distributed.utils:StatelessProcessGroup", ("rank", "world_size", "store")),
    # the rollout actor's engine (request evidence and the weight version it serves)
    _is("vllm:AsyncLLMEngine", _ASYNC_LLM),
    _params_include(f"{_ASYNC_LLM}.collective_rpc", ["method", "timeout", "args", "kwargs"]),
    _exists(f"{_ASYNC_LLM}.get_tokenizer"),
)

#: what the CPU backend (:mod:`microcoder_ext.openrlhf.cpu`, ``microcoder smoke openrlhf``) relies on: how OpenRLHF
#: drives its vLLM engines and sends them the weights, the ``torch.cuda`` calls it makes CPU-safe, and DeepSpeed's
#: CPU accelerator (with :data:`VLLM_ROUTING_CHECKS`). Not part of :data:`CHECKS`: a GPU run never needs them.
CPU_BACKEND_CHECKS: tuple[Check, ...] = VLLM_ROUTING_CHECKS + (
    # Ray: train() keeps the cluster the CPU runner started (logical GPUs, the worker setup hook): LAUNCH_PARSING
    # the vLLM engines OpenRLHF builds and drives
    _source_has("openrlhf.trainer.ray.vllm_engine:create_vllm_engines",
                ['"seed": seed + i', '"dtype": "bfloat16"', '"enable_sleep_mode": vllm_enable_sleep',
                 '"gpu_memory_utilization": gpu_memory_utilization',
                 'actor_kwargs["logprobs_mode"] = logprobs_mode'],
                "passes each engine seed + i, bfloat16, sleep mode, the memory fraction and the log-prob mode"),
    _source_has("openrlhf.trainer.ray.vllm_engine:create_vllm_engines",
                ['distributed_executor_backend = "uni" if tensor_parallel_size == 1 else "ray"',
                 '"worker_extension_cls": "openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap"'],
                "gives a tensor-parallel engine vLLM's Ray executor and every engine OpenRLHF's WorkerWrap (the CPU "
                "backend runs its shards with vLLM's multiprocessing executor)"),
    _source_has(f"{_ROLLOUT}.__init__", ["vllm.AsyncEngineArgs(*args, **self.kwargs)",
                                         "vllm.AsyncLLMEngine.from_engine_args(engine_args)"],
                "builds its engine with AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**kwargs))"),
    _source_has(f"{_ROLLOUT}.generate", ["self.llm.generate(", "request_id=random_uuid()"],
                "generates with llm.generate(prompt, sampling_params, request_id=...)"),
    _source_has(f"{_ROLLOUT}.update_weight", ['"update_weight",\n            args=(name, dtype, shape, empty_cache)'],
                "forwards update_weight(name, dtype, shape, empty_cache) through collective_rpc"),
    # the trainer side of the weight sync
    _exists("openrlhf.trainer.ray.ppo_actor:stateless_init_process_group"),
    _source_has("openrlhf.utils.distributed_util:stateless_init_process_group",
                ["StatelessProcessGroup.create(host=master_address, port=master_port, rank=rank, "
                 "world_size=world_size)", "PyNcclCommunicator(pg, device=device)"],
                "builds the weight-sync group as vLLM's PyNcclCommunicator (sends nothing without NCCL)"),
    _source_has(f"{_ACTOR_TRAINER}._init_vllm_sync_group",
                ["self._model_update_group = stateless_init_process_group("],
                "builds DeepSpeed rank 0's weight-sync group with stateless_init_process_group"),
    _source_has(f"{_ACTOR_TRAINER}.broadcast_to_vllm",
                ["engine.update_weight.remote(name, dtype=param.dtype, shape=shape, empty_cache=count == num_params)",
                 "self._model_update_group.broadcast(param.data, src=0, stream=torch.cuda.current_stream())",
                 'p.requires_grad or not getattr(self.actor, "is_vlm", False)'],
                "sends each parameter with update_weight + broadcast from rank 0, marking the last with empty_cache"),
    _source_has(f"{_ACTOR_TRAINER}.__init__",
                'self.use_cuda_ipc = backend == "nccl" and self.args.train.colocate_all',
                "uses CUDA IPC for --vllm.sync_backend nccl with --train.colocate_all (the CPU run passes gloo)"),
    _source_has("openrlhf.utils.agent:SingleTurnAgentExecutor.execute",
                ["generation_output.token_ids", 'generation_output.finish_reason == "length"',
                 'hf_tokenizer.decode(output["observation_tokens"], skip_special_tokens=False)'],
                "reads token_ids and finish_reason, and scores decode(prompt + response) with special tokens"),
    # the torch.cuda calls microcoder_ext/openrlhf/cpu/torch_cuda.py makes CPU-safe
    _source_has("openrlhf.utils.deepspeed.deepspeed:DeepspeedStrategy.setup_distributed",
                "torch.cuda.set_device(local_rank)", "calls torch.cuda.set_device (CPU shim: no-op)"),
    _source_has("openrlhf.utils.distributed_util:torch_dist_barrier_and_cuda_sync", "torch.cuda.synchronize()",
                "calls torch.cuda.synchronize (CPU shim: no-op)"),
    _source_has(f"{_ACTOR_TRAINER}.ppo_train", "device = torch.cuda.current_device()",
                "moves experiences to torch.cuda.current_device() (CPU shim: 'cpu')"),
    _source_has("openrlhf.trainer.ppo_utils.replay_buffer:NaiveReplayBuffer.__init__",
                'torch.device(f"cuda:{torch.cuda.current_device()}")',
                'builds torch.device(f"cuda:{torch.cuda.current_device()}") (CPU shim formats as 0; unused by PPO)'),
    # DeepSpeed: its CPU accelerator and the two ops compat/venv.sh prebuilds
    _source_has("deepspeed.accelerator.real_accelerator:get_accelerator",
                ['os.environ["DS_ACCELERATOR"]', 'accelerator_name == "cpu"'],
                "selects the cpu accelerator from DS_ACCELERATOR"),
    _source_has("deepspeed.accelerator.cpu_accelerator:CPU_Accelerator.get_op_builder",
                ['"FusedAdamBuilder"', '"ShareMemCommBuilder"'],
                "builds FusedAdam and the shared-memory collectives as CPU ops (prebuilt in $venv/torch_extensions)"),
)


def problems(checks: tuple[Check, ...] = CHECKS) -> list[str]:
    """One line per internal that does not hold (empty: all hold)."""
    return _problems(checks)


def check_openrlhf() -> str:
    """Raise unless the installed OpenRLHF is supported and every internal in :data:`CHECKS` holds.

    Returns the installed OpenRLHF version.
    """
    return require_internals("openrlhf", "OpenRLHF", problems(), OpenRLHFInternalsError)


def check_launch_parsing() -> str:
    """:data:`LAUNCH_PARSING`, all problems at once; returns the installed OpenRLHF version."""
    return require_internals("openrlhf", "OpenRLHF", problems(LAUNCH_PARSING), OpenRLHFInternalsError)


def check_vllm_routing() -> str:
    """:data:`VLLM_ROUTING_CHECKS` (run inside vLLM's processes by :mod:`microcoder_ext.openrlhf.cpu.engine`), all
    problems at once; returns the installed OpenRLHF version."""
    return require_internals("openrlhf", "OpenRLHF", problems(VLLM_ROUTING_CHECKS), OpenRLHFInternalsError)


def check_cpu_backend() -> str:
    """:func:`check_openrlhf` plus :data:`CPU_BACKEND_CHECKS`, the tested DeepSpeed and vLLM's CPU build
    (:func:`microcoder_ext.smoke.vllm_cpu.check`), all problems at once.

    Needs the CPU backend's ``flash_attn`` stand-in (or the real package) importable: the checked modules import
    it. Returns the installed OpenRLHF version."""
    from microcoder_ext.compat import installed_version
    from microcoder_ext.smoke import vllm_cpu

    found = problems(CHECKS + CPU_BACKEND_CHECKS)
    deepspeed = installed_version("deepspeed")
    tested = DEEPSPEED_TESTED.get(installed_version("openrlhf") or "", DEEPSPEED_TESTED[TESTED["openrlhf"][-1]])
    if deepspeed != tested:
        found.append(f"deepspeed {deepspeed} (the CPU backend is tested with deepspeed=={tested}, this OpenRLHF's "
                     "own pin: its CPU accelerator and op builders)")
    try:
        vllm_cpu.check()
    except vllm_cpu.VllmInternalsChanged as e:
        found.append(str(e).replace("\n", "\n    "))
    return require_internals("openrlhf", "OpenRLHF", found, OpenRLHFInternalsError)
