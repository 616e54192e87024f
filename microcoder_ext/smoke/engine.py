"""A small CPU generation engine for ``microcoder smoke``: one Hugging Face causal LM, one request at a time.

It stands in for vLLM behind each framework's own contract (:mod:`microcoder_ext.verl.cpu.rollout` for verl's
token-in/token-out server, :mod:`microcoder_ext.openrlhf.cpu.vllm_standin` for the ``vllm`` API OpenRLHF calls),
and implements the sampling semantics those contracts assume, as vLLM does:

* ``temperature`` (``< 1e-5``: greedy), ``top_k`` (``<= 0``: off), ``top_p``, ``repetition_penalty`` (vLLM's: a
  logit of a token seen in the prompt or output is divided by it when positive, multiplied when negative),
  ``min_tokens``, ``ignore_eos``, ``max_tokens``;
* the returned token ids include the stop token it stopped at; ``finish_reason`` is ``"stop"`` (a stop id) or
  ``"length"`` (``max_tokens`` reached);
* log-probs are vLLM's ``processed_logprobs``: ``log_softmax`` of the logits after the penalty, temperature and
  top-k/top-p, for the sampled token (what verl's and OpenRLHF's rollout/actor comparisons assume).

Sampling is deterministic: each request draws from its own ``torch.Generator`` seeded by the request's ``seed``
(vLLM's per-request seed) or, without one, by ``(engine seed, stream, weight version, prompt, k)`` where ``k``
counts the requests with the same prompt since the last weight update and ``stream`` tells engines of one run apart
(the replica rank: two replicas never repeat each other's samples); so a run repeated with the same settings produces
the same samples whatever order concurrent requests arrive in.

Weights: :meth:`CpuEngine.load_weights` copies named tensors into the model (the frameworks' weight sync) and
:func:`weights_checksum` gives a content hash that the sending and the receiving side compute over the same names, so
"the engine serves the trainer's weights" is a byte-for-byte comparison.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch

GREEDY_BELOW = 1e-5


@dataclass
class SamplingSettings:
    """The sampling parameters of one request (vLLM names and defaults)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    ignore_eos: bool = False
    logprobs: bool = False
    seed: int | None = None

    def __post_init__(self):
        if int(self.max_tokens) < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0.0 < float(self.top_p) <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if float(self.temperature) < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if float(self.repetition_penalty) <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


@dataclass
class Completion:
    token_ids: list[int]
    finish_reason: str  #: "stop" or "length"
    logprobs: list[float] | None = None  #: processed log-prob of each sampled token
    temperature: float = 1.0
    seed: int = 0
    weight_version: int = 0


def weights_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 (first 16 hex digits) over the names (sorted) and the exact bytes of each tensor.

    Both sides of a weight sync call it on the same names with tensors of the same dtype, so equal checksums mean
    identical weights."""
    h = hashlib.sha256()
    for name, tensor in sorted(((n, t) for n, t in named_tensors), key=lambda item: item[0]):
        t = tensor.detach().to("cpu").contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def _seed_of(*parts: object) -> int:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclass
class _Counters:
    version: int = 0
    seen: dict = field(default_factory=dict)  # prompt hash -> requests since the last weight update


class CpuEngine:
    """One causal LM on the CPU (see the module doc). Thread-safe: requests run one at a time."""

    def __init__(self, model_path: str, *, dtype: str | torch.dtype = "float32", seed: int = 0, stream: int = 0,
                 stop_token_ids: Sequence[int] | None = None, threads: int | None = 1):
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        from microcoder_ext.core.truncation import stop_token_ids as _stop_ids

        if threads:
            torch.set_num_threads(int(threads))
        if isinstance(dtype, str):
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                     "auto": torch.float32}.get(dtype, torch.float32)
        self.dtype = dtype
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation="sdpa").eval()
        if stop_token_ids is None:
            tok_eos = None
            try:
                tok_eos = AutoTokenizer.from_pretrained(model_path).eos_token_id
            except (OSError, ValueError):
                pass
            gen_eos = None
            try:
                gen_eos = GenerationConfig.from_pretrained(model_path).eos_token_id
            except OSError:
                gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
            stop_token_ids = _stop_ids(tok_eos, gen_eos)
        self.stop_token_ids = tuple(int(t) for t in stop_token_ids)
        self.seed = int(seed)
        self.stream = int(stream)
        self._lock = threading.Lock()
        self._counters = _Counters()
        self.num_requests = 0

    # ------------------------------------------------------------------ weights

    @property
    def weight_version(self) -> int:
        return self._counters.version

    def named_weights(self, names: Iterable[str] | None = None) -> list[tuple[str, torch.Tensor]]:
        state = self.model.state_dict()
        keys = list(state) if names is None else [n for n in names if n in state]
        return [(k, state[k]) for k in keys]

    def checksum(self, names: Iterable[str] | None = None) -> str:
        return weights_checksum(self.named_weights(names))

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> list[str]:
        """Copy ``(name, tensor)`` pairs into the model (cast to its dtype); returns the names loaded.

        Raises ``KeyError`` naming a tensor the model does not have, ``ValueError`` on a shape mismatch."""
        state = self.model.state_dict()
        loaded = []
        with self._lock, torch.no_grad():
            for name, tensor in named_tensors:
                if name not in state:
                    raise KeyError(f"weight sync: the engine's model has no parameter {name!r}")
                target = state[name]
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(f"weight sync: {name} has shape {tuple(tensor.shape)}, the engine's "
                                     f"{tuple(target.shape)}")
                target.copy_(tensor.to(target.dtype))
                loaded.append(name)
            self._counters = _Counters(version=self._counters.version + 1 if version is None else int(version))
        return loaded

    # ------------------------------------------------------------------ generation

    def generate(self, prompt_ids: Sequence[int], params: SamplingSettings) -> Completion:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("empty prompt")
        with self._lock:
            if params.seed is not None:
                seed = int(params.seed)
            else:
                key = hashlib.sha256(repr(prompt).encode()).hexdigest()
                k = self._counters.seen.get(key, 0)
                self._counters.seen[key] = k + 1
                seed = _seed_of(self.seed, self.stream, self._counters.version, key, k)
            version = self._counters.version
            out = self._sample(prompt, params, seed)
            self.num_requests += 1
        out.seed, out.weight_version = seed, version
        return out

    @torch.no_grad()
    def _sample(self, prompt: list[int], p: SamplingSettings, seed: int) -> Completion:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed)
        greedy = float(p.temperature) < GREEDY_BELOW
        stop = torch.tensor(self.stop_token_ids, dtype=torch.long)
        seen = torch.zeros(self.model.config.vocab_size, dtype=torch.bool)
        seen[torch.tensor(prompt, dtype=torch.long).clamp(max=seen.numel() - 1)] = True
        tokens: list[int] = []
        logprobs: list[float] = []
        ids = torch.tensor([prompt], dtype=torch.long)
        past = None
        finish = "length"
        for i in range(int(p.max_tokens)):
            out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            if float(p.repetition_penalty) != 1.0:
                penalty = float(p.repetition_penalty)
                logits = torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
            if i < int(p.min_tokens) and not p.ignore_eos and stop.numel():
                logits[stop] = float("-inf")
            if greedy:
                processed = logits
                token = int(torch.argmax(processed))
            else:
                processed = logits / float(p.temperature)
                if int(p.top_k) > 0 and int(p.top_k) < processed.numel():
                    kth = torch.topk(processed, int(p.top_k)).values[-1]
                    processed = processed.masked_fill(processed < kth, float("-inf"))
                if float(p.top_p) < 1.0:
                    sorted_logits, order = torch.sort(processed, descending=True)
                    cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
                    drop = cum - torch.softmax(sorted_logits, dim=-1) > float(p.top_p)
                    processed = processed.clone()
                    processed[order[drop]] = float("-inf")
                token = int(torch.multinomial(torch.softmax(processed, dim=-1), 1, generator=gen))
            tokens.append(token)
            if p.logprobs:
                logprobs.append(float(torch.log_softmax(processed, dim=-1)[token]))
            seen[token] = True
            if not p.ignore_eos and token in self.stop_token_ids and i + 1 >= int(p.min_tokens):
                finish = "stop"
                break
            ids = torch.tensor([[token]], dtype=torch.long)
        return Completion(tokens, finish, logprobs if p.logprobs else None, float(p.temperature))
