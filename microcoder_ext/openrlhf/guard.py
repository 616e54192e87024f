"""The one version guard of the OpenRLHF adapter: every OpenRLHF internal the adapter relies on, checked at once.

OpenRLHF has no plugin API, so the launcher and the trainer subclass depend on internals of 0.11.2 (notes:
``shared/notes/openrlhf-0.11.2.md`` §5, §7). :func:`check_openrlhf` verifies the installed version
(:func:`microcoder_ext.compat.require`) and then each internal in :data:`CHECKS`; it raises
:class:`OpenRLHFInternalsError` listing **every** internal that changed, by name, with what was expected and what
was found. The launcher calls it before patching anything and the trainer calls it again inside its Ray actor
(the worker may run another installation than the driver).

``MICROCODER_ALLOW_UNSUPPORTED=1`` lets another *version* through (with a warning), never a changed internal.
"""

from __future__ import annotations

from microcoder_ext.compat import UnsupportedVersionError
from microcoder_ext.internals import (
    Check,
    exists as _exists,
    fields as _fields,
    name,
    problems as _problems,
    require_internals,
    resolve as _obj,
    signature as _signature,
    source_has as _source_has,
)


#: the DeepSpeed release the CPU backend runs on (compat/constraints-openrlhf-0.11.2.txt)
DEEPSPEED_TESTED = "0.19.6"


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

#: every OpenRLHF internal the adapter uses, with where it is used
CHECKS: tuple[Check, ...] = (
    # launcher (microcoder_ext.openrlhf.launcher): argparse lives under __main__ of train_ppo_ray, run via runpy
    _exists("openrlhf.utils.config:hierarchize"),
    _source_has("openrlhf.utils.config:hierarchize", "SimpleNamespace", "builds nested SimpleNamespace args"),
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

#: what the CPU backend (:mod:`microcoder_ext.openrlhf.cpu`, ``microcoder smoke openrlhf``) relies on: how OpenRLHF
#: drives the vLLM API its ``vllm`` stand-in implements, the weight-sync contract it mirrors, the ``torch.cuda``
#: calls it makes CPU-safe, and DeepSpeed's CPU accelerator. Not part of :data:`CHECKS`: a GPU run never needs them.
CPU_BACKEND_CHECKS: tuple[Check, ...] = (
    # Ray: train() keeps the cluster the CPU runner started (logical GPUs, the worker setup hook)
    _source_has("openrlhf.cli.train_ppo_ray:train", "if not ray.is_initialized():",
                "starts Ray only if it is not initialised"),
    # the vLLM engine OpenRLHF builds and drives (microcoder_ext/openrlhf/cpu/vllm_standin.py)
    _source_has("openrlhf.trainer.ray.vllm_engine:create_vllm_engines",
                ['"model": pretrain', '"seed": seed + i', '"max_model_len": max_model_len', '"dtype": "bfloat16"',
                 'actor_kwargs["logprobs_mode"] = logprobs_mode'],
                "passes the engine its model, seed, context, dtype and log-prob mode as AsyncEngineArgs keywords"),
    _source_has(f"{_ROLLOUT}.__init__", ["vllm.AsyncEngineArgs(*args, **self.kwargs)",
                                         "vllm.AsyncLLMEngine.from_engine_args(engine_args)"],
                "builds its engine with AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**kwargs))"),
    _source_has(f"{_ROLLOUT}._configure_vllm_env", ["version.parse(vllm.__version__)", '"0.8.5"'],
                "asserts vllm.__version__ > 0.8.5"),
    _source_has(f"{_ROLLOUT}.generate", ["self.llm.generate(", "request_id=random_uuid()",
                                         "async for request_output in generator"],
                "streams RequestOutputs from llm.generate(prompt, sampling_params, request_id=...)"),
    _source_has(f"{_ROLLOUT}.init_process_group", 'self.llm.collective_rpc(\n            "init_process_group"',
                "forwards init_process_group through collective_rpc"),
    _source_has(f"{_ROLLOUT}.update_weight", 'self.llm.collective_rpc(\n            "update_weight"',
                "forwards update_weight through collective_rpc"),
    _source_has(f"{_ROLLOUT}.get_num_unfinished_requests", "self.llm.output_processor.get_num_unfinished_requests()",
                "reads the engine's unfinished requests from output_processor"),
    _signature(f"{_WRAP}.init_process_group", ["self", "master_address", "master_port", "rank_offset", "world_size",
                                               "group_name", "backend", "use_ray"]),
    _signature(f"{_WRAP}.update_weight", ["self", "name", "dtype", "shape", "empty_cache"]),
    _source_has("openrlhf.utils.distributed_util:stateless_init_process_group",
                ["StatelessProcessGroup.create(host=master_address, port=master_port, rank=rank, "
                 "world_size=world_size)", "PyNcclCommunicator(pg, device=device)"],
                "builds the weight-sync group from vllm.distributed's StatelessProcessGroup and PyNcclCommunicator"),
    _source_has(f"{_ACTOR_TRAINER}.broadcast_to_vllm",
                ["engine.update_weight.remote(name, dtype=param.dtype, shape=shape, empty_cache=count == num_params)",
                 "self._model_update_group.broadcast(param.data, src=0, stream=torch.cuda.current_stream())"],
                "sends each parameter with update_weight + broadcast from rank 0, marking the last with empty_cache"),
    _source_has(f"{_ACTOR_TRAINER}.__init__",
                'self.use_cuda_ipc = backend == "nccl" and self.args.train.colocate_all',
                "uses CUDA IPC for --vllm.sync_backend nccl with --train.colocate_all (the CPU run passes gloo)"),
    _source_has("openrlhf.utils.agent:SingleTurnAgentExecutor.execute",
                ["generation_output.token_ids", 'generation_output.finish_reason == "length"',
                 "logprob_dict.get(token_id)", "token_logprob.logprob",
                 'hf_tokenizer.decode(output["observation_tokens"], skip_special_tokens=False)'],
                "reads token_ids, finish_reason and {token: Logprob} log-probs, and scores decode(prompt + response)"),
    _source_has("openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator._dispatch_prompts_to_vllm",
                ["SamplingParams(", "top_k=", "max_tokens=", "min_tokens=", "skip_special_tokens=", "logprobs="],
                "builds SamplingParams from keywords the stand-in implements"),
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
    return require_internals("openrlhf", "0.11.2", "OpenRLHF", problems(), OpenRLHFInternalsError)


def check_cpu_backend() -> str:
    """:func:`check_openrlhf` plus :data:`CPU_BACKEND_CHECKS` (and the tested DeepSpeed), all problems at once.

    Needs the CPU backend's ``vllm`` / ``flash_attn`` stand-ins (or the real packages) importable: the checked
    modules import them. Returns the installed OpenRLHF version."""
    from microcoder_ext.compat import installed_version

    found = problems(CHECKS + CPU_BACKEND_CHECKS)
    deepspeed = installed_version("deepspeed")
    if deepspeed != DEEPSPEED_TESTED:
        found.append(f"deepspeed {deepspeed} (the CPU backend is tested with deepspeed=={DEEPSPEED_TESTED}: its CPU "
                     "accelerator and op builders)")
    return require_internals("openrlhf", "0.11.2", "OpenRLHF", found, OpenRLHFInternalsError)
