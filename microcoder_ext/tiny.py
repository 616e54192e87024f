"""Tiny causal language models and tokenizers built offline (the CPU quickstart and ``microcoder smoke``).

Nothing here downloads anything. Three pieces:

* :func:`train_tokenizer`: a byte-level BPE tokenizer trained in-process on some texts; digits are single tokens,
  ChatML chat template (:data:`CHAT_TEMPLATE`), ``<|im_end|>`` is EOS, ``<pad>`` the pad token.
* :func:`tiny_config` / :func:`shrink_config`: a transformers config for a few-layer model, either of a named
  family (``qwen2``, ``qwen3``) or the *shape-preserving* shrink of a real model's ``config.json`` (same
  ``model_type`` and architecture class, fewer layers, a smaller hidden size, the same attention layout: GQA ratio,
  tied embeddings, per-layer types).
* :func:`warm_start`: a short supervised run (next-token loss on the answer tokens of ``(messages, answer)`` pairs),
  so that a random model starts emitting answers that end with EOS (a purely random model truncates everything,
  every GRPO group then has equal rewards and no gradient).

Sizes are in the unit transformers uses: ``hidden_size`` and ``intermediate_size`` are features, lengths tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]

#: model families a tiny model can be built for without any config.json (the paper's models are all of these)
FAMILIES = ("qwen2", "qwen3")


@dataclass(frozen=True)
class TinyShape:
    """The size of a tiny model (defaults: ~0.2 M parameters plus the embeddings)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 2048


def train_tokenizer(texts: Iterable[str], vocab_size: int = 400):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts`` (ChatML template, EOS ``<|im_end|>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["user\nassistant\n", *texts], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(family: str, tokenizer, shape: TinyShape = TinyShape(), *, tie_word_embeddings: bool = True):
    """A transformers config of ``family`` (:data:`FAMILIES`) sized by ``shape``, vocabulary = ``len(tokenizer)``."""
    from transformers import Qwen2Config, Qwen3Config

    classes = {"qwen2": Qwen2Config, "qwen3": Qwen3Config}
    if family not in classes:
        raise ValueError(f"unknown tiny model family {family!r}; one of {FAMILIES}")
    extra = {"head_dim": shape.hidden_size // shape.num_heads} if family == "qwen3" else {}
    return classes[family](
        vocab_size=len(tokenizer), hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads, max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **extra,
    )


#: config keys a shrunk model must not inherit (weights it does not have, kernels it cannot use)
_DROP_KEYS = ("quantization_config", "_name_or_path", "auto_map", "transformers_version", "torch_dtype", "dtype",
              "attn_implementation", "_attn_implementation", "use_sliding_window", "sliding_window",
              "max_window_layers")


def shrink_config(config, shape: TinyShape = TinyShape(), vocab_size: int | None = None) -> tuple[Any, list[str]]:
    """A copy of a real model's config with the size of ``shape``; returns ``(config, changes)``.

    Kept: ``model_type``, ``architectures``, the GQA ratio (``num_key_value_heads`` divides ``num_heads`` as in the
    original, capped by it), ``tie_word_embeddings``, activation, norm epsilon, rope base, EOS/pad/BOS ids and
    ``max_position_embeddings`` (capped at ``shape.max_position_embeddings``). Changed: layers, hidden size, heads,
    ``head_dim`` (set explicitly: ``hidden_size // num_heads``), FFN size; a per-layer ``layer_types`` list is cut to
    the new depth; sliding-window attention, quantization and remote code are dropped (rope settings stay). ``changes``
    lists each changed field as ``"name: old -> new"``.
    """
    import copy

    old = config.to_dict()
    new = copy.deepcopy(config)
    heads_old = int(old.get("num_attention_heads") or shape.num_heads)
    kv_old = int(old.get("num_key_value_heads") or heads_old)
    heads = shape.num_heads
    # keep the grouping: kv heads = heads / (original ratio), at least 1, dividing heads
    ratio = max(1, heads_old // max(kv_old, 1))
    kv = max(1, heads // ratio)
    while heads % kv:
        kv -= 1
    updates: dict[str, Any] = {
        "num_hidden_layers": shape.num_layers, "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size, "num_attention_heads": heads, "num_key_value_heads": kv,
        "head_dim": shape.hidden_size // heads,
        "max_position_embeddings": min(int(old.get("max_position_embeddings") or shape.max_position_embeddings),
                                       shape.max_position_embeddings),
    }
    if vocab_size is not None:
        updates["vocab_size"] = int(vocab_size)
    if isinstance(old.get("layer_types"), list):
        updates["layer_types"] = ["full_attention"] * shape.num_layers
    if "moe_intermediate_size" in old:  # MoE families: keep them small too
        updates["moe_intermediate_size"] = shape.intermediate_size
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if key in old and old[key]:
            updates[key] = min(int(old[key]), 4)
    for key in ("num_experts_per_tok",):
        if key in old and old[key]:
            updates[key] = min(int(old[key]), 2)
    changes = []
    for key, value in updates.items():
        if old.get(key) != value:
            changes.append(f"{key}: {old.get(key)} -> {value}")
        setattr(new, key, value)
    for key in _DROP_KEYS:
        if key in old and old[key] not in (None, False) and key not in ("transformers_version", "_name_or_path"):
            changes.append(f"{key}: dropped")
        if hasattr(new, key):
            try:
                delattr(new, key)
            except AttributeError:
                pass
    return new, changes


def build_model(config, seed: int = 0, init_std: float | None = None):
    """A randomly initialised ``AutoModelForCausalLM`` for ``config`` (float32), deterministic for a seed.

    ``init_std``: the initializer range (transformers' default 0.02 gives near-uniform next-token distributions;
    a larger one gives peaked ones, which makes temperature mismatches visible in log-prob comparisons).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    if init_std is not None:
        config.initializer_range = float(init_std)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    eos = config.eos_token_id
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=config.pad_token_id, bos_token_id=None)
    return model


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def warm_start(model, tokenizer, examples: Sequence[tuple[list[dict], str]], *, steps: int, batch_size: int = 16,
               lr: float = 3e-3, seed: int = 0,
               progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> list[float]:
    """Next-token training on ``chat(messages) + answer + EOS``, loss on the answer tokens only; returns the losses.

    ``examples``: ``(messages, answer)`` pairs; ``progress`` wraps the step range (e.g. a tqdm factory).
    """
    import torch

    encoded = []
    for msgs, answer in examples:
        prompt = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        a_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        encoded.append((p_ids + a_ids, len(p_ids)))
    if not encoded or steps <= 0:
        return []
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 20))
    model.train()
    losses: list[float] = []
    bar = progress(range(steps)) if progress is not None else range(steps)
    for _ in bar:
        batch = [encoded[rng.randrange(len(encoded))] for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        att = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (seq, plen) in enumerate(batch):
            ids[i, :len(seq)] = torch.tensor(seq)
            labels[i, plen:len(seq)] = torch.tensor(seq[plen:])
            att[i, :len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses
