"""Responses to evaluate: sampled with vLLM, or read from a pre-generated JSONL.

Pre-generated (``--responses FILE.jsonl``), one JSON object per line, either form (mixable; lines of the same id
add up, in file order):

  {"id": "<problem id>", "responses": ["<text>", ...]}
  {"id": "<problem id>", "response": "<text>"}

vLLM (``--model PATH``): ``vllm.LLM(model=..., tensor_parallel_size, dtype, seed, max_model_len,
gpu_memory_utilization, trust_remote_code)``; each problem's chat prompt goes through the model's chat template
(``llm.get_tokenizer().apply_chat_template(messages, add_generation_prompt=True, tokenize=False)``), is tokenised
without adding special tokens again, and is sent as ``{"prompt_token_ids": ids}`` to
``llm.generate(prompts, SamplingParams(n, temperature, top_p, max_tokens, seed), use_tqdm=True)``; the n texts of
``RequestOutput.outputs[i].text`` are the responses (``finish_reason == "length"``: cut at max_tokens, counted).
Needs the real vLLM package and CUDA (:func:`microcoder_ext.sampling.samplers.vllm_usable`); without them
:class:`GenerationUnavailable` is raised before anything loads (``microcoder eval`` exits 2).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from microcoder_ext.jsonl import iter_objects


class ResponsesError(Exception):
    """Unreadable or malformed responses file (exit status 2)."""


class GenerationUnavailable(Exception):
    """vLLM (or CUDA) is not usable here (exit status 2)."""


def read_responses(path: str) -> dict[str, list[str]]:
    """``id -> [response, ...]`` from a responses JSONL (see the module doc); raises :class:`ResponsesError`
    naming the file and line of the first problem."""
    if not os.path.isfile(path):
        raise ResponsesError(f"responses file {path} does not exist" if not os.path.exists(path)
                             else f"responses file {path} is not a file")
    out: dict[str, list[str]] = {}
    for where, rec in iter_objects(path, ResponsesError):
        if "id" not in rec:
            raise ResponsesError(f"{where}: expected an object with an \"id\" key")
        if ("responses" in rec) == ("response" in rec):
            raise ResponsesError(f"{where}: expected exactly one of \"responses\" (a list) or \"response\"")
        resp = rec["responses"] if "responses" in rec else [rec["response"]]
        if not isinstance(resp, list) or not all(isinstance(r, str) for r in resp):
            raise ResponsesError(f"{where}: responses must be strings")
        out.setdefault(str(rec["id"]), []).extend(resp)
    if not out:
        raise ResponsesError(f"{path}: no responses")
    return out


def write_responses(path: str, responses: dict[str, list[str]], extra: dict[str, dict] | None = None) -> None:
    """Write ``id -> responses`` in the pre-generated format (one line per problem)."""
    with open(path, "w", encoding="utf-8") as f:
        for pid, resp in responses.items():
            f.write(json.dumps({"id": pid, "responses": resp, **((extra or {}).get(pid) or {})}) + "\n")


@dataclass
class GenerationSettings:
    model: str
    n: int = 4
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 4096
    seed: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    dtype: str = "auto"
    trust_remote_code: bool = False
    stats: dict = field(default_factory=dict)


def check_vllm() -> str:
    """vLLM's version, or :class:`GenerationUnavailable` saying why it cannot be used here."""
    from microcoder_ext.sampling.samplers import vllm_usable

    ok, why = vllm_usable()
    if not ok:
        raise GenerationUnavailable(f"--model needs vLLM with CUDA: {why}; generate elsewhere and pass the "
                                    "responses with --responses FILE.jsonl")
    return why


def chat_token_ids(tokenizer: Any, messages: list[dict]) -> list[int]:
    """The prompt as the model sees it in chat: its chat template with the generation prompt, tokenised."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"])


def generate_vllm(prompts: Sequence[tuple[str, list[dict]]], s: GenerationSettings, *, llm=None,
                  sampling_params=None) -> dict[str, list[str]]:
    """``id -> n responses`` for ``prompts`` = [(id, chat messages)]; ``s.stats`` gets token counts and the
    number of responses cut at ``max_tokens``. ``llm`` / ``sampling_params``: injected stand-ins (tests)."""
    if llm is None:
        check_vllm()
        import vllm

        llm = vllm.LLM(model=s.model, tensor_parallel_size=s.tensor_parallel_size, dtype=s.dtype, seed=s.seed,
                       max_model_len=s.max_model_len, gpu_memory_utilization=s.gpu_memory_utilization,
                       trust_remote_code=s.trust_remote_code)
        sampling_params = vllm.SamplingParams
    tok = llm.get_tokenizer()
    inputs = [{"prompt_token_ids": chat_token_ids(tok, msgs)} for _, msgs in prompts]
    params = sampling_params(n=s.n, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed)
    outputs = llm.generate(inputs, params, use_tqdm=True)
    if len(outputs) != len(prompts):
        raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
    out, cut, tokens = {}, 0, 0
    for (pid, _), req in zip(prompts, outputs):
        out[pid] = [c.text for c in req.outputs]
        cut += sum(1 for c in req.outputs if getattr(c, "finish_reason", None) == "length")
        tokens += sum(len(getattr(c, "token_ids", ()) or ()) for c in req.outputs)
    total = sum(len(v) for v in out.values())
    s.stats = {"responses": total, "truncated": cut, "truncated_rate": cut / total if total else 0.0,
               "mean_tokens": tokens / total if total else 0.0}
    return out
