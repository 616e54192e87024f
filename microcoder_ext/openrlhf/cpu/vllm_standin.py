"""The ``vllm`` stand-in of the OpenRLHF CPU backend: the vLLM names OpenRLHF 0.11.2 imports and calls, by exact
module name, with generation by :class:`microcoder_ext.smoke.engine.CpuEngine`.

OpenRLHF's own rollout actor (``openrlhf/trainer/ray/vllm_engine.py: RolloutRayActor``) is unchanged; it builds
``vllm.AsyncEngineArgs(**kwargs)`` + ``vllm.AsyncLLMEngine.from_engine_args(...)`` and then calls only what
:class:`AsyncLLMEngine` defines: ``generate(TokensPrompt, SamplingParams, request_id)`` (an async iterator of
:class:`RequestOutput`), ``collective_rpc("init_process_group" | "update_weight", args=...)``,
``output_processor.get_num_unfinished_requests()``, ``is_sleeping``, ``sleep``, ``wake_up``, ``reset_prefix_cache``,
``pause_generation``, ``resume_generation``. OpenRLHF reads back ``outputs[0].token_ids``, ``.finish_reason``
(``"length"`` = truncated) and ``.logprobs`` (``openrlhf/utils/agent.py``). Each of these uses is a check of
:mod:`microcoder_ext.openrlhf.guard` (``CPU_BACKEND_CHECKS``).

Modules (nothing else is registered; :func:`install` refuses when a real vLLM can be imported):

=============================================  ===================================================================
``vllm``                                       ``__version__``, :class:`SamplingParams`, :class:`AsyncEngineArgs`,
                                               :class:`AsyncLLMEngine`, :class:`RequestOutput`,
                                               :class:`CompletionOutput`
``vllm.inputs``                                :class:`TokensPrompt`
``vllm.utils``                                 :func:`random_uuid`
``vllm.distributed.utils``                     :class:`StatelessProcessGroup` (a ``torch.distributed.TCPStore``)
``vllm.distributed.device_communicators.pynccl``  :class:`PyNcclCommunicator` (a gloo group of its own)
=============================================  ===================================================================

Engine semantics: those of ``CpuEngine`` (vLLM's sampling parameters, processed log-probs, the stop token kept in
``token_ids``). The engine loads the model in the dtype OpenRLHF asks vLLM for (``bfloat16``, the trainer's
``--ds.param_dtype``), so a weight sync is a byte copy. Sampling seeds derive from the engine's seed (OpenRLHF's
``--train.seed + i``), a content hash of the weights it holds, the prompt and the request's rank among requests for
that prompt: the same weights sample the same responses, whatever the request order, also after a resume.

Weight sync: the engine side of ``openrlhf/trainer/ray/vllm_worker_wrap.py: WorkerWrap`` (``init_process_group``
through OpenRLHF's own ``stateless_init_process_group``; ``update_weight`` receives one broadcast tensor). Tensors of
one sync are loaded together when the trainer marks the last one (``empty_cache=True``).

Evidence (:mod:`microcoder_ext.smoke.evidence`): ``engine_loaded``; ``generate`` per request (also ``prompt`` and
``query``: hashes of the prompt ids and of the text OpenRLHF's reward receives, ``decode(prompt + response)`` with
special tokens, :func:`microcoder_ext.openrlhf.reward.query_digest`: the reward's ``reward_func`` event has the
same); ``weights_loaded`` per sync (``version`` = syncs so far; also ``first``: the broadcast sequence
number of its first tensor, ``held``: per-tensor checksums of what the engine holds after loading, ``names``);
``weight_broadcast`` per tensor the trainer sends (sender side of :class:`PyNcclCommunicator`: ``seq``,
``checksum``), so "the engine serves the trainer's weights" compares both ends byte for byte.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from microcoder_ext.openrlhf.cpu import modules
from microcoder_ext.openrlhf.reward import query_digest
from microcoder_ext.smoke import evidence

ROOT = "vllm"
#: the version ``openrlhf[vllm]==0.11.2`` pins; the local label marks the stand-in (RolloutRayActor asserts > 0.8.5,
#: create_vllm_engines asserts > 0.10.0 for ``logprobs_mode``)
__version__ = "0.29.0+microcoder.cpu"


def _sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def tensor_checksum(tensor) -> str:
    """Content checksum of one tensor (dtype, shape, bytes), the same on both ends of a weight sync."""
    from microcoder_ext.smoke.engine import weights_checksum

    return weights_checksum([("tensor", tensor)])


# ------------------------------------------------------------------------------------------------ request types


class SamplingParams:
    """``vllm.SamplingParams``: keyword fields with vLLM's names and defaults (unknown keywords: ``TypeError``).

    :class:`AsyncLLMEngine` implements ``temperature``, ``top_p``, ``top_k``, ``min_tokens``, ``max_tokens``,
    ``repetition_penalty``, ``ignore_eos``, ``seed``, ``logprobs`` (the sampled token's) and
    ``skip_special_tokens`` (of ``text``); it refuses a request that needs another field set."""

    DEFAULTS: dict[str, Any] = {
        "n": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "seed": None, "stop": None,
        "stop_token_ids": None, "ignore_eos": False, "max_tokens": 16, "min_tokens": 0, "logprobs": None,
        "prompt_logprobs": None, "skip_special_tokens": True, "repetition_penalty": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "include_stop_str_in_output": False, "spaces_between_special_tokens": True,
        "detokenize": True,
    }
    #: fields the engine cannot honour unless they keep their default
    UNSUPPORTED = ("n", "min_p", "stop", "stop_token_ids", "prompt_logprobs", "presence_penalty",
                   "frequency_penalty")

    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - set(self.DEFAULTS))
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword argument(s) {unknown} (microcoder-ext CPU "
                            "stand-in: port microcoder_ext/openrlhf/cpu/vllm_standin.py)")
        self.__dict__.update(self.DEFAULTS)
        self.__dict__.update(kwargs)

    def clone(self) -> "SamplingParams":
        return SamplingParams(**self.__dict__)

    def __eq__(self, other) -> bool:
        return isinstance(other, SamplingParams) and other.__dict__ == self.__dict__

    def __repr__(self) -> str:
        return "SamplingParams(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


class TokensPrompt(dict):
    """``vllm.inputs.TokensPrompt`` is a ``TypedDict``: calling it builds a dict (``prompt_token_ids``, ...)."""


def random_uuid() -> str:
    return uuid.uuid4().hex


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list
    cumulative_logprob: float | None
    logprobs: list | None  #: one ``{token_id: Logprob}`` per generated token, or None
    finish_reason: str | None = None  #: "stop" (a stop token) or "length" (max_tokens)
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list
    prompt_logprobs: list | None
    outputs: list = field(default_factory=list)
    finished: bool = True


class AsyncEngineArgs:
    """``vllm.AsyncEngineArgs``: the keywords ``create_vllm_engines`` passes (unknown keywords: ``TypeError``)."""

    USED = ("model", "seed", "dtype", "max_model_len", "tensor_parallel_size", "logprobs_mode", "max_logprobs",
            "limit_mm_per_prompt", "enable_sleep_mode")
    #: GPU memory / kernel / scheduling knobs with nothing to do on one CPU engine
    IGNORED = ("enforce_eager", "worker_extension_cls", "distributed_executor_backend", "enable_prefix_caching",
               "trust_remote_code", "gpu_memory_utilization")

    def __init__(self, *args, **kwargs):
        if args:
            raise TypeError(f"AsyncEngineArgs: positional arguments {args!r} are not supported by the CPU stand-in")
        unknown = sorted(set(kwargs) - set(self.USED) - set(self.IGNORED))
        if unknown:
            raise TypeError(f"AsyncEngineArgs got unexpected keyword argument(s) {unknown} (microcoder-ext CPU "
                            "stand-in: port microcoder_ext/openrlhf/cpu/vllm_standin.py)")
        if "model" not in kwargs:
            raise TypeError("AsyncEngineArgs needs model=")
        self.kwargs = kwargs

    def __getattr__(self, name):
        try:
            return self.__dict__["kwargs"][name]
        except KeyError:
            raise AttributeError(name) from None


class _OutputProcessor:
    def __init__(self):
        self.unfinished = 0

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished


# ------------------------------------------------------------------------------------------------ the engine


class AsyncLLMEngine:
    """One :class:`~microcoder_ext.smoke.engine.CpuEngine` behind vLLM's async engine API (see the module doc)."""

    def __init__(self, engine_args: AsyncEngineArgs):
        import torch
        from transformers import AutoTokenizer

        from microcoder_ext.smoke.engine import CpuEngine

        kw = engine_args.kwargs
        if int(kw.get("tensor_parallel_size") or 1) != 1:
            raise NotImplementedError("the CPU vLLM stand-in runs one engine per process: use "
                                      "--vllm.tensor_parallel_size 1 (and more --vllm.num_engines)")
        if kw.get("logprobs_mode") not in (None, "processed_logprobs"):
            raise NotImplementedError(f"logprobs_mode={kw['logprobs_mode']!r}: the CPU engine returns processed "
                                      "log-probs only")
        if kw.get("limit_mm_per_prompt"):
            raise NotImplementedError("multimodal prompts are not supported by the CPU vLLM stand-in")
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
                 "auto": torch.bfloat16}[str(kw.get("dtype", "auto"))]
        self.seed = int(kw.get("seed", 0) or 0)
        self.name = f"vllm_cpu_seed{self.seed}"
        self.max_model_len = int(kw["max_model_len"]) if kw.get("max_model_len") else None
        self.engine = CpuEngine(str(kw["model"]), dtype=dtype, seed=self.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(str(kw["model"]))
        self.output_processor = _OutputProcessor()
        self.syncs = 0  #: weight syncs received
        self.received = 0  #: tensors received (the broadcast sequence number of the next one)
        self._group = None
        self._pending: list = []
        self._reseed()
        evidence.record("engine_loaded", engine=self.name, checksum=self.engine.checksum(), dtype=str(dtype))

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs, **kwargs) -> "AsyncLLMEngine":
        return cls(engine_args)

    def _reseed(self) -> None:
        """Key the engine's per-request seeds on the content of its weights (see the module doc)."""
        self.engine.load_weights([], version=int(self.engine.checksum(), 16))

    # ------------------------------------------------------------------ generation

    def _settings(self, prompt_len: int, p: SamplingParams):
        from microcoder_ext.smoke.engine import SamplingSettings

        def get(name):
            return getattr(p, name, SamplingParams.DEFAULTS[name])

        changed = [k for k in SamplingParams.UNSUPPORTED if get(k) != SamplingParams.DEFAULTS[k]]
        if changed:
            raise NotImplementedError(f"the CPU vLLM stand-in does not implement SamplingParams "
                                      f"{', '.join(f'{k}={get(k)!r}' for k in changed)}")
        room = None if self.max_model_len is None else self.max_model_len - prompt_len
        if room is not None and room < 1:
            raise ValueError(f"prompt of {prompt_len} tokens leaves no room within max_model_len "
                             f"{self.max_model_len}")
        max_tokens = get("max_tokens") if get("max_tokens") is not None else room
        if max_tokens is None:
            raise ValueError("SamplingParams.max_tokens is None and the engine has no max_model_len")
        if room is not None:
            max_tokens = min(int(max_tokens), room)
        top_k, seed = get("top_k"), get("seed")
        return SamplingSettings(max_tokens=int(max_tokens), temperature=float(get("temperature")),
                                top_p=float(get("top_p")), top_k=int(top_k if top_k is not None else -1),
                                repetition_penalty=float(get("repetition_penalty")),
                                min_tokens=int(get("min_tokens") or 0), ignore_eos=bool(get("ignore_eos")),
                                logprobs=get("logprobs") is not None, seed=None if seed is None else int(seed))

    def _generate(self, prompt_ids: list, p: SamplingParams) -> CompletionOutput:
        settings = self._settings(len(prompt_ids), p)
        out = self.engine.generate(prompt_ids, settings)
        logprobs = None
        if out.logprobs is not None:
            logprobs = [{t: Logprob(lp, rank=1)} for t, lp in zip(out.token_ids, out.logprobs)]
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=bool(getattr(p, "skip_special_tokens", True)))
        if evidence.enabled():
            query = self.tokenizer.decode(prompt_ids + out.token_ids, skip_special_tokens=False)
            evidence.record("generate", engine=self.name, version=self.syncs, step=None, temperature=out.temperature,
                            tokens=len(out.token_ids), finish=out.finish_reason, max_tokens=settings.max_tokens,
                            prompt=_sha(repr(prompt_ids)), query=query_digest(query),
                            logprobs=out.logprobs is not None)
        return CompletionOutput(index=0, text=text, token_ids=list(out.token_ids),
                                cumulative_logprob=sum(out.logprobs) if out.logprobs is not None else None,
                                logprobs=logprobs, finish_reason=out.finish_reason)

    async def generate(self, prompt, sampling_params: SamplingParams, request_id: str | None = None, **kwargs):
        if not isinstance(prompt, dict) or "prompt_token_ids" not in prompt:
            raise TypeError("the CPU vLLM stand-in takes TokensPrompt(prompt_token_ids=[...]) prompts")
        if prompt.get("multi_modal_data"):
            raise NotImplementedError("multimodal prompts are not supported by the CPU vLLM stand-in")
        ids = [int(t) for t in prompt["prompt_token_ids"]]
        self.output_processor.unfinished += 1
        try:
            completion = await asyncio.to_thread(self._generate, ids, sampling_params)
        finally:
            self.output_processor.unfinished -= 1
        yield RequestOutput(request_id=request_id or random_uuid(), prompt=None, prompt_token_ids=ids,
                            prompt_logprobs=None, outputs=[completion], finished=True)

    # ------------------------------------------------------------------ weight sync (engine side of WorkerWrap)

    def _init_process_group(self, master_address, master_port, rank_offset, world_size, group_name,
                            backend="nccl", use_ray=False):
        if use_ray:
            raise NotImplementedError("--vllm.sync_with_ray is not supported by the CPU backend (drop it)")
        from openrlhf.utils.distributed_util import stateless_init_process_group

        # one worker per engine: its rank is rank_offset (WorkerWrap: torch.distributed.get_rank() + rank_offset)
        self._group = stateless_init_process_group(master_address, master_port, rank_offset, world_size, "cpu")

    def _update_weight(self, name, dtype, shape, empty_cache=False):
        import torch

        if self._group is None:
            raise RuntimeError("update_weight before init_process_group")
        if dtype != self.engine.dtype:  # WorkerWrap asserts the same
            raise ValueError(f"mismatch dtype: src {dtype}, dst {self.engine.dtype}")
        weight = torch.empty(tuple(shape), dtype=dtype)
        self._group.broadcast(weight, src=0, stream=None)
        self._pending.append((name, weight))
        self.received += 1
        if empty_cache:  # OpenRLHF marks the last tensor of a sync (ActorPPOTrainer.broadcast_to_vllm)
            self._finish_sync()

    def _finish_sync(self) -> None:
        pending, self._pending = self._pending, []
        names = [n for n, _ in pending]
        before = self.engine.checksum(names)
        self.engine.load_weights(pending)
        self._reseed()
        self.syncs += 1
        after = self.engine.checksum(names)
        if evidence.enabled():
            held = dict(self.engine.named_weights(names))
            evidence.record("weights_loaded", engine=self.name, version=self.syncs, checksum=after,
                            tensors=len(names), changed=after != before, first=self.received - len(names),
                            held=[tensor_checksum(held[n]) for n in names], names=names)

    def _update_weight_cuda_ipc(self, *args, **kwargs):
        raise NotImplementedError("CUDA IPC weight sync (--vllm.sync_backend nccl with --train.colocate_all) needs "
                                  "GPUs: use --vllm.sync_backend gloo on the CPU")

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        fn = {"init_process_group": self._init_process_group, "update_weight": self._update_weight,
              "update_weight_cuda_ipc": self._update_weight_cuda_ipc}.get(method)
        if fn is None:
            raise NotImplementedError(f"collective_rpc({method!r}) is not implemented by the CPU vLLM stand-in")
        return [await asyncio.to_thread(fn, *args, **(kwargs or {}))]  # one worker (tensor_parallel_size 1)

    # ------------------------------------------------------------------ lifecycle (nothing to free on the CPU)

    async def is_sleeping(self) -> bool:
        return False

    async def sleep(self, level: int = 1) -> None:
        pass

    async def wake_up(self, tags=None) -> None:
        pass

    async def reset_prefix_cache(self, *args, **kwargs) -> bool:
        return True

    async def pause_generation(self, *args, **kwargs) -> None:
        pass

    async def resume_generation(self) -> None:
        pass


# ------------------------------------------------------------------------------------------------ vllm.distributed


class StatelessProcessGroup:
    """``vllm.distributed.utils.StatelessProcessGroup``: a ``TCPStore`` outside the default torch group."""

    def __init__(self, rank: int, world_size: int, store):
        self.rank, self.world_size, self.store = rank, world_size, store

    @staticmethod
    def create(host: str, port: int, rank: int, world_size: int, data_expiration_seconds: int = 3600,
               store_timeout: int = 300) -> "StatelessProcessGroup":
        import torch.distributed as dist

        store = dist.TCPStore(host_name=host, port=int(port), world_size=world_size, is_master=(rank == 0),
                              timeout=timedelta(seconds=store_timeout))
        return StatelessProcessGroup(rank, world_size, store)


class PyNcclCommunicator:
    """``vllm.distributed.device_communicators.pynccl.PyNcclCommunicator`` over a gloo group of its own
    (``device`` and ``stream`` have no meaning on the CPU). The sending rank records each tensor it broadcasts."""

    def __init__(self, group: StatelessProcessGroup, device=None):
        import torch.distributed as dist

        self.rank, self.world_size = group.rank, group.world_size
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore("microcoder_cpu_weights", group.store), group.rank,
                                        group.world_size, timedelta(minutes=10))
        self.sent = 0

    def broadcast(self, tensor, src: int, stream=None) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = int(src)
        self.pg.broadcast([tensor], opts).wait()
        if self.rank == src:
            if evidence.enabled():
                evidence.record("weight_broadcast", sender=f"rank{src}", seq=self.sent,
                                checksum=tensor_checksum(tensor), shape=list(tensor.shape), dtype=str(tensor.dtype))
            self.sent += 1


# ------------------------------------------------------------------------------------------------ registration

MODULES: dict[str, dict] = {
    "vllm": {"__version__": __version__, "SamplingParams": SamplingParams, "AsyncEngineArgs": AsyncEngineArgs,
             "AsyncLLMEngine": AsyncLLMEngine, "RequestOutput": RequestOutput, "CompletionOutput": CompletionOutput},
    "vllm.inputs": {"TokensPrompt": TokensPrompt},
    "vllm.utils": {"random_uuid": random_uuid},
    "vllm.distributed": {},
    "vllm.distributed.utils": {"StatelessProcessGroup": StatelessProcessGroup},
    "vllm.distributed.device_communicators": {},
    "vllm.distributed.device_communicators.pynccl": {"PyNcclCommunicator": PyNcclCommunicator},
}


def install() -> list[str]:
    """Register :data:`MODULES` (refuses if a real vLLM is importable)."""
    return modules.install(ROOT, MODULES, "microcoder-ext CPU stand-in for {name} "
                                          "(microcoder_ext/openrlhf/cpu/vllm_standin.py)")
