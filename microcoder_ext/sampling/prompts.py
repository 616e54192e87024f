"""Prompt files of ``microcoder temperature probe``: JSONL or verl parquet -> prompts -> token ids.

A prompt is a string or a chat message list (``[{"role": str, "content": str}, ...]``). :func:`load_prompts` reads
them from JSONL (``.jsonl``, ``.jsonl.gz``: one object per line with the prompt under ``key``) or parquet (verl's
RL dataset: a ``prompt`` column of message lists); :func:`encode_prompts` applies the tokenizer's chat template
(``add_generation_prompt=True``) or encodes the raw text. Bad input raises :class:`ProbeInputError` (one line).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from microcoder_ext.jsonl import iter_objects


class ProbeInputError(Exception):
    """Bad input (prompt file, model, sampler options): one line for the user."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (its type name when it has none)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def _check_messages(value: Any, where: str) -> list[dict]:
    if not value:
        raise ProbeInputError(f"{where}: empty message list")
    out = []
    for m in value:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ProbeInputError(f"{where}: a chat message must be {{\"role\": str, \"content\": str}}, got {m!r:.80}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _prompt_value(value: Any, where: str) -> str | list[dict]:
    if hasattr(value, "tolist"):  # numpy array from a parquet reader
        value = value.tolist()
    if isinstance(value, str):
        if not value.strip():
            raise ProbeInputError(f"{where}: empty prompt")
        return value
    if isinstance(value, (list, tuple)):
        return _check_messages(value, where)
    raise ProbeInputError(f"{where}: prompt must be a string or a chat message list, got {type(value).__name__}")


def load_prompts(path: str, key: str = "prompt", limit: int = 0) -> list[str | list[dict]]:
    """Prompts (strings or chat message lists) from JSONL(.gz) or parquet; raises :class:`ProbeInputError`."""
    if not os.path.exists(path):
        raise ProbeInputError(f"prompt file {path} does not exist")
    if os.path.isdir(path):
        raise ProbeInputError(f"prompt file {path} is a directory")
    prompts: list[str | list[dict]] = []
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            if key not in schema.names:
                raise ProbeInputError(f"{path}: no {key!r} column (columns: {', '.join(schema.names)})")
            values = pq.read_table(path, columns=[key]).column(key).to_pylist()
        except ProbeInputError:
            raise
        except ImportError:
            raise ProbeInputError("reading parquet needs pyarrow (pip install pyarrow)") from None
        except Exception as e:  # pyarrow's ArrowInvalid and OSError
            raise ProbeInputError(f"{path}: not a readable parquet file ({first_line(e)})") from None
        for i, v in enumerate(values[:limit] if limit else values):
            prompts.append(_prompt_value(v, f"{path}: row {i}"))
    else:
        for where, rec in iter_objects(path, ProbeInputError):
            if key not in rec:
                raise ProbeInputError(f"{where}: no {key!r} key (keys: {', '.join(map(str, rec))})")
            prompts.append(_prompt_value(rec[key], where))
            if limit and len(prompts) >= limit:
                break
    if not prompts:
        raise ProbeInputError(f"{path}: no prompts")
    return prompts


def encode_prompts(tokenizer: Any, prompts: Sequence[str | list[dict]], chat_template: bool | None) -> list[list[int]]:
    """Token ids of every prompt: the chat template (``add_generation_prompt=True``) when used, else raw text."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template and not has_template:
        raise ProbeInputError("--chat-template: the model's tokenizer has no chat template")
    use = has_template if chat_template is None else chat_template
    out = []
    for p in prompts:
        if use:
            messages = [{"role": "user", "content": p}] if isinstance(p, str) else p
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
            ids = tokenizer(text)["input_ids"]
        if not ids:
            raise ProbeInputError("a prompt encodes to no tokens")
        out.append(list(ids))
    return out
