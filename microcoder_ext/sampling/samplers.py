"""Samplers of ``microcoder temperature probe``: ``sampler(prompt_ids, temperature, n)`` -> ``n`` responses per
prompt as token ids, sampled with the temperature alone (``top_p=1``, no top-k/min-p/repetition penalty, whatever
the model's ``generation_config.json`` suggests), as a training rollout with ``top_p=1`` does.

* :class:`VLLMSampler`: offline ``vllm.LLM(model).generate(prompt_token_ids, SamplingParams(n, temperature,
  top_p=1, max_tokens, seed))``; the responses are vLLM's ``RequestOutput.outputs[i].token_ids``;
* :class:`HFSampler`: ``transformers`` ``generate(do_sample=True, temperature=T, top_p=1, top_k=0,
  num_return_sequences=n)``, batched over prompts with left padding, each response cut at the first EOS/pad
  token. Works on CPU with a small model.

:func:`choose_backend` picks one (``auto``: vLLM when :func:`vllm_usable`, else HF). torch, transformers and vllm are
imported only when a sampler is loaded. Each sampler records per temperature the mean response length and the
share of responses cut at ``max_new_tokens`` (:class:`SamplerStats`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from microcoder_ext.sampling.prompts import ProbeInputError, first_line


def _stop_ids(tokenizer: Any, model_config: Any = None) -> set[int]:
    ids: set[int] = set()
    for src in (tokenizer, getattr(model_config, "generation_config", None), model_config):
        eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    return ids


def cut_at(tokens: Sequence[int], stop: set[int]) -> list[int]:
    """``tokens`` up to (not including) the first stop token."""
    out = []
    for t in tokens:
        t = int(t)
        if t in stop:
            break
        out.append(t)
    return out


@dataclass
class SamplerStats:
    """Per temperature: mean response length (tokens) and the share of responses cut at ``max_new_tokens``."""

    mean_length: dict[float, float] = field(default_factory=dict)
    truncated: dict[float, float] = field(default_factory=dict)

    def record(self, temperature: float, groups: Sequence[Sequence[Sequence[int]]], max_new_tokens: int,
               cut: Sequence[bool]) -> None:
        lengths = [len(r) for g in groups for r in g]
        self.mean_length[temperature] = sum(lengths) / len(lengths) if lengths else math.nan
        self.truncated[temperature] = sum(cut) / len(cut) if cut else math.nan


class HFSampler:
    """``sampler(prompt_ids, temperature, n)`` over a ``transformers`` causal LM (``generate``, batched)."""

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int, batch_size: int = 8, seed: int = 0,
                 progress: Callable[[int], None] | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.batch_size, self.seed = max_new_tokens, batch_size, seed
        self.progress = progress
        self.stop = _stop_ids(tokenizer, model.config) | _stop_ids(None, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = min(self.stop) if self.stop else 0
        self.pad_id = int(pad)
        self.stats = SamplerStats()

    @classmethod
    def load(cls, model: str, *, device: str, dtype: str, trust_remote_code: bool, **kw) -> "HFSampler":
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise ProbeInputError(f"the hf backend needs torch and transformers ({first_line(e)})") from None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ProbeInputError("--device cuda: CUDA is not available to torch")
        if dtype == "auto":
            dtype = "bfloat16" if device == "cuda" and torch.cuda.is_bf16_supported() else "float32"
            if device == "cuda" and dtype == "float32":
                dtype = "float16"
        try:
            tok = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
            m = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype),
                                                     trust_remote_code=trust_remote_code)
        except Exception as e:  # OSError (not found), ValueError (unknown architecture), ...
            raise ProbeInputError(f"cannot load model {model!r} with transformers: {first_line(e)}") from None
        m.to(device).eval()
        return cls(m, tok, **kw)

    @staticmethod
    def quiet() -> None:
        """No transformers progress bars (``--no-progress``)."""
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass

    def __call__(self, prompts: Sequence[Sequence[int]], temperature: float, n: int) -> list[list[list[int]]]:
        import torch
        from transformers import set_seed

        set_seed(self.seed)  # the same random stream at every temperature, whatever the candidate order
        device = next(self.model.parameters()).device
        groups: list[list[list[int]]] = []
        cut: list[bool] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = [list(p) for p in prompts[start:start + self.batch_size]]
            width = max(len(p) for p in batch)
            ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, p in enumerate(batch):  # left padding: generation continues right after every prompt
                ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
                mask[i, width - len(p):] = 1
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=ids.to(device), attention_mask=mask.to(device),
                    do_sample=True, temperature=float(temperature), top_p=1.0, top_k=0, min_p=None,
                    typical_p=1.0, repetition_penalty=1.0, num_return_sequences=n,
                    max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_id,
                    eos_token_id=sorted(self.stop) or None,
                )
            new = out[:, width:].tolist()
            for i in range(len(batch)):
                group = []
                for row in new[i * n:(i + 1) * n]:
                    r = cut_at(row, self.stop)  # generate pads only after a stop token
                    group.append(r)
                    cut.append(len(r) >= self.max_new_tokens)
                groups.append(group)
            if self.progress:
                self.progress(len(batch))
        self.stats.record(temperature, groups, self.max_new_tokens, cut)
        return groups


class VLLMSampler:
    """``sampler(prompt_ids, temperature, n)`` over an offline vLLM engine (``vllm.LLM``).

    ``llm`` has vLLM's ``generate(prompts, sampling_params, use_tqdm=...)`` returning one ``RequestOutput`` per
    prompt, in order, whose ``.outputs[i].token_ids`` are the ``n`` sampled responses; ``sampling_params`` is
    ``vllm.SamplingParams`` (a factory taking its keywords).
    """

    def __init__(self, llm: Any, sampling_params: Callable[..., Any], *, max_new_tokens: int, seed: int | None = 0,
                 stop: set[int] | None = None, progress: Callable[[int], None] | None = None):
        self.llm, self.sampling_params = llm, sampling_params
        self.max_new_tokens, self.seed, self.progress = max_new_tokens, seed, progress
        self.stop = set(stop or ())
        self.stats = SamplerStats()

    @classmethod
    def load(cls, model: str, *, dtype: str, trust_remote_code: bool, tensor_parallel_size: int,
             gpu_memory_utilization: float, seed: int, max_model_len: int | None = None, **kw) -> "VLLMSampler":
        import vllm

        try:
            llm = vllm.LLM(model=model, dtype=dtype, seed=seed, trust_remote_code=trust_remote_code,
                           tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
                           max_model_len=max_model_len)
        except (OSError, ValueError) as e:
            raise ProbeInputError(f"cannot load model {model!r} with vLLM: {first_line(e)}") from None
        stop = _stop_ids(llm.get_tokenizer())
        try:  # vLLM also stops at generation_config.json's eos ids (e.g. Qwen's <|im_end|> and <|endoftext|>)
            from transformers import GenerationConfig

            stop |= _stop_ids(GenerationConfig.from_pretrained(model, trust_remote_code=trust_remote_code))
        except Exception:  # no generation_config.json: the tokenizer's EOS only
            pass
        return cls(llm, vllm.SamplingParams, seed=seed, stop=stop, **kw)

    def __call__(self, prompts: Sequence[Sequence[int]], temperature: float, n: int) -> list[list[list[int]]]:
        params = [
            self.sampling_params(n=n, temperature=float(temperature), top_p=1.0, max_tokens=self.max_new_tokens,
                                 seed=None if self.seed is None else self.seed + i)
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        groups, cut = [], []
        for req in outputs:
            group = []
            for comp in req.outputs:
                ids = list(comp.token_ids)
                cut.append(len(ids) >= self.max_new_tokens and not (ids and ids[-1] in self.stop))
                if ids and ids[-1] in self.stop:  # vLLM keeps the EOS token; the hf sampler cuts it
                    ids = ids[:-1]
                group.append(ids)
            groups.append(group)
        if self.progress:
            self.progress(len(prompts))
        self.stats.record(temperature, groups, self.max_new_tokens, cut)
        return groups


def vllm_usable() -> tuple[bool, str]:
    """Whether the real vLLM can be used here: the package imports, has ``vllm.LLM``, and CUDA is available."""
    try:
        import vllm
    except Exception as e:  # ImportError, or a broken install
        return False, f"vllm is not importable ({first_line(e)})"
    if not hasattr(vllm, "LLM"):
        return False, "the importable vllm module has no vllm.LLM (a stand-in, not vLLM)"
    try:
        import torch

        if not torch.cuda.is_available():
            return False, "vllm is installed but CUDA is not available"
    except ImportError:
        return False, "torch is not importable"
    return True, f"vllm {getattr(vllm, '__version__', '?')}"


def choose_backend(backend: str, device: str) -> tuple[str, str]:
    """``(backend, why)`` for ``--backend``/``--device``; raises :class:`ProbeInputError` if vllm is asked for
    but unusable."""
    if backend == "hf":
        return "hf", "--backend hf"
    if backend == "vllm":
        if device == "cpu":
            raise ProbeInputError("--backend vllm runs on CUDA; drop --device cpu or use --backend hf")
        ok, why = vllm_usable()
        if not ok:
            raise ProbeInputError(f"--backend vllm: {why}")
        return "vllm", why
    if device == "cpu":
        return "hf", "auto: --device cpu"
    ok, why = vllm_usable()
    return ("vllm", f"auto: {why}") if ok else ("hf", f"auto: {why}")


def _model_missing(model: str) -> bool:
    """A local-looking path that does not exist. Hub names (``name`` or ``org/name``) are left to the loader."""
    looks_local = model.startswith((".", "/", "~")) or model.count("/") > 1 or os.sep in model.replace("/", "")
    return looks_local and not os.path.exists(os.path.expanduser(model))


def check_model_path(model: str) -> None:
    """Raise :class:`ProbeInputError` when ``model`` is a local path that does not exist, a file, or a directory
    without ``config.json``; hub names are left to the loader."""
    if _model_missing(model):
        raise ProbeInputError(f"model {model} does not exist (expected a model directory or a hub name)")
    if os.path.isfile(os.path.expanduser(model)):
        raise ProbeInputError(f"model {model} is a file; pass the model directory (with config.json)")
    if os.path.isdir(os.path.expanduser(model)) and not os.path.exists(
            os.path.join(os.path.expanduser(model), "config.json")):
        raise ProbeInputError(f"model directory {model} has no config.json")
