"""vLLM's side of the OpenRLHF CPU backend: what :mod:`.vllm_plugin` installs in each process vLLM runs.

OpenRLHF's ``RolloutRayActor`` builds a real ``vllm.AsyncLLMEngine`` (vLLM v1's ``AsyncLLM``), which runs its
engine core and the model worker (with OpenRLHF's ``WorkerWrap`` mixed in) in processes it starts itself, where no
Ray hook runs. vLLM loads its ``vllm.general_plugins`` in each of them (``vllm/engine/arg_utils.py:856`` when the
rollout actor builds its ``AsyncEngineArgs``, ``vllm/v1/worker/worker_base.py:271`` before the worker loads the
model); :func:`install` is that plugin's work:

* the weight sync (:mod:`.weight_sync`): ``WorkerWrap`` on the CPU worker, and vLLM's CPU GEMM packing keeping
  ``layer.weight`` (:func:`microcoder_ext.smoke.vllm_cpu.keep_linear_weights`);
* the engine's config (:func:`route_executor`): a tensor-parallel engine gets vLLM's multiprocessing executor instead
  of the Ray executor OpenRLHF gives it, which vLLM's CPU platform cannot run; ``MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES``
  sizes each shard's KV cache;
* the engine's start: ``CPUModelRunner.load_model`` is followed, when ``MICROCODER_OPENRLHF_CPU_ENGINE_START`` is
  ``perturbed``, by :func:`perturb` (every weight moved by seeded noise, then re-packed: the engine starts from
  weights that differ from the trainer's, so only a weight sync that really arrives makes them equal), and by an
  ``engine_loaded`` evidence event;
* evidence of every request (:func:`microcoder_ext.smoke.vllm_cpu.record_requests`) in the rollout actor's process,
  with the engine's name, the weight version it serves (the syncs it completed: ``collective_rpc("update_weight",
  ..., empty_cache=True)`` calls that returned) and, to follow a sample to its reward, ``prompt`` (hash of the prompt
  token ids) and ``query`` (:func:`microcoder_ext.openrlhf.reward.query_digest` of ``decode(prompt + response)`` with
  special tokens, the text OpenRLHF scores).
"""

from __future__ import annotations

import hashlib
import os

START_ENV = "MICROCODER_OPENRLHF_CPU_ENGINE_START"
#: bytes of KV cache per engine shard (``microcoder smoke --topology``: many engines on one machine), instead of
#: vLLM's ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) or its share of RAM
KV_CACHE_ENV = "MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES"
STARTS = ("checkpoint", "perturbed")
#: noise of :func:`perturb`, relative to each tensor's mean absolute value
PERTURB_SCALE = 0.02
_MARK = "_microcoder_cpu"


def engine_start() -> str:
    """``checkpoint`` (default: the weights vLLM loaded) or ``perturbed``; raises ``ValueError`` on another value."""
    value = os.environ.get(START_ENV, "checkpoint").strip() or "checkpoint"
    if value not in STARTS:
        raise ValueError(f"{START_ENV}={value!r}: expected one of {', '.join(STARTS)}")
    return value


def install() -> None:
    """Everything of the module doc, in this process (idempotent). Raises
    :class:`microcoder_ext.smoke.vllm_cpu.VllmInternalsChanged` /
    :class:`microcoder_ext.openrlhf.guard.OpenRLHFInternalsError` naming every internal that changed."""
    from microcoder_ext.openrlhf import guard
    from microcoder_ext.openrlhf.cpu import weight_sync
    from microcoder_ext.smoke import vllm_cpu

    engine_start()
    kv_cache_bytes()
    vllm_cpu.check()
    guard.check_vllm_routing()
    vllm_cpu.keep_linear_weights()
    weight_sync.route_worker()
    route_executor()
    route_model_runner()
    route_requests()


def perturb(model, seed: int) -> int:
    """Add seeded Gaussian noise (:data:`PERTURB_SCALE` x each tensor's mean absolute value, or x 1 for an all-zero
    one) to every floating-point parameter of ``model`` in place; returns how many tensors it changed."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    changed = 0
    with torch.no_grad():
        for _, param in model.named_parameters():  # a tied weight once
            if param.numel() == 0 or not param.is_floating_point():
                continue
            scale = PERTURB_SCALE * (float(param.float().abs().mean()) or 1.0)
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32) * scale
            param.copy_((param.float() + noise).to(param.dtype))
            changed += 1
    return changed


#: the worker extension OpenRLHF mixes into every vLLM worker it builds (``create_vllm_engines``)
OPENRLHF_WORKER_EXTENSION = "openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap"


def executor_for_cpu(parallel_config) -> str | None:
    """The executor a CPU engine of OpenRLHF's runs instead of the one it was given (None: keep it).

    OpenRLHF 0.11 builds an engine of ``--vllm.tensor_parallel_size`` N > 1 with ``distributed_executor_backend=
    "ray"`` (``openrlhf/trainer/ray/vllm_engine.py``: ``"uni" if tensor_parallel_size == 1 else "ray"``), whose
    Ray workers vLLM's CPU platform cannot place (``vllm/v1/executor/ray_utils.py``: no Ray device key, "does not
    support ray"). vLLM's multiprocessing executor runs the same N shards (TP ranks over gloo and shared memory) as
    processes of OpenRLHF's rollout actor, as vLLM's CPU platform itself turns ``uni`` into ``mp``. Only an engine
    with OpenRLHF's worker extension, one data-parallel rank and one pipeline stage (OpenRLHF sets neither) moves."""
    if (parallel_config.distributed_executor_backend == "ray"
            and parallel_config.worker_extension_cls == OPENRLHF_WORKER_EXTENSION
            and parallel_config.data_parallel_size == 1 and parallel_config.pipeline_parallel_size == 1):
        return "mp"
    return None


def kv_cache_bytes() -> int | None:
    """:data:`KV_CACHE_ENV` (None when unset); raises ``ValueError`` on a value that is not a positive integer."""
    value = os.environ.get(KV_CACHE_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{KV_CACHE_ENV}={value!r}: expected a positive number of bytes")
    return int(value)


def route_executor() -> None:
    """Wrap vLLM's ``CpuPlatform.check_and_update_config`` (``VllmConfig.__post_init__`` calls it before the
    executor is chosen) to apply :func:`executor_for_cpu` first, and :data:`KV_CACHE_ENV` after it. Idempotent."""
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.__dict__["check_and_update_config"].__func__
    if getattr(original, _MARK, False):
        return

    def check_and_update_config(cls, vllm_config) -> None:
        moved = executor_for_cpu(vllm_config.parallel_config)
        if moved is not None:
            vllm_config.parallel_config.distributed_executor_backend = moved
        result = original(cls, vllm_config)
        kv = kv_cache_bytes()
        if kv is not None:
            vllm_config.cache_config.kv_cache_memory_bytes = kv
        return result

    setattr(check_and_update_config, _MARK, True)
    check_and_update_config.__wrapped__ = original
    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


def route_model_runner() -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    original = CPUModelRunner.load_model
    if getattr(original, _MARK, False):
        return

    def load_model(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        after_load(self)
        return result

    setattr(load_model, _MARK, True)
    load_model.__wrapped__ = original
    CPUModelRunner.load_model = load_model


def after_load(runner) -> None:
    """The engine's start on a model runner whose model has just loaded (see the module doc)."""
    from microcoder_ext.openrlhf.cpu.weight_sync import engine_name
    from microcoder_ext import evidence
    from microcoder_ext.smoke import vllm_cpu

    start = engine_start()
    if start == "perturbed":
        perturb(runner.model, runner.model_config.seed)
        vllm_cpu.repack(runner.model, runner.model_config, runner.device)
    if evidence.enabled():
        held = vllm_cpu.engine_weights(runner.model, runner.model_config.dtype)
        evidence.record("engine_loaded", engine=engine_name(runner.model_config), start=start, **held)
        runner._microcoder_checksum = held["checksum"]


def route_requests() -> None:
    """Request evidence in this process (see the module doc); only once evidence is enabled."""
    from microcoder_ext import evidence
    from microcoder_ext.smoke import vllm_cpu

    if not evidence.enabled():
        return
    from vllm.v1.engine.async_llm import AsyncLLM

    vllm_cpu.record_requests()
    if _sample_fields not in vllm_cpu.REQUEST_EXTRAS:
        vllm_cpu.REQUEST_EXTRAS.append(_sample_fields)
    if getattr(AsyncLLM.generate, _MARK, False):
        return
    recorded_generate, original_rpc = AsyncLLM.generate, AsyncLLM.collective_rpc

    def generate(self, prompt, sampling_params, request_id, *args, **kwargs):
        from microcoder_ext.openrlhf.cpu.weight_sync import engine_name

        token = vllm_cpu.REQUEST_FIELDS.set({"engine": engine_name(self.model_config),
                                             "version": getattr(self, "_microcoder_version", 0)})
        try:
            return recorded_generate(self, prompt, sampling_params, request_id, *args, **kwargs)
        finally:
            vllm_cpu.REQUEST_FIELDS.reset(token)

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        out = await original_rpc(self, method, timeout=timeout, args=args, kwargs=kwargs)
        if method == "update_weight" and len(args) >= 4 and args[3]:  # OpenRLHF's last tensor of a sync
            self._microcoder_version = getattr(self, "_microcoder_version", 0) + 1
        return out

    for fn, was in ((generate, recorded_generate), (collective_rpc, original_rpc)):
        setattr(fn, _MARK, True)
        fn.__wrapped__ = was
    AsyncLLM.generate = generate
    AsyncLLM.collective_rpc = collective_rpc


def _sample_fields(llm, prompt, last) -> dict:
    from microcoder_ext.openrlhf.reward import query_digest

    ids = [int(t) for t in (prompt.get("prompt_token_ids") or [])] if isinstance(prompt, dict) else []
    out = {"prompt": hashlib.sha256(repr(ids).encode()).hexdigest()[:16], "query": None}
    if last is not None and last.outputs:
        text = llm.get_tokenizer().decode(ids + list(last.outputs[0].token_ids), skip_special_tokens=False)
        out["query"] = query_digest(text)
    return out
