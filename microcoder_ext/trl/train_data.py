"""``microcoder train --dataset``: local parquet / JSONL (or the directory ``microcoder data prepare`` writes) or a
Hugging Face dataset -> TRL rows ``{"prompt", "tests", "extra_info"}`` (the columns
:class:`~microcoder_ext.trl.reward.CodeReward` reads).

Row shapes (:func:`to_trl_row`): verl (``prompt`` chat messages, ``reward_model.ground_truth``, ``extra_info``),
OpenRLHF (``prompt``, ``label``, ``meta_*``), our problem records (``Problem.to_dict()``: ``statement``, ``tests``,
...), or any row with ``prompt`` and ``tests``. A dataset that cannot be read raises :class:`DatasetError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from microcoder_ext.jsonl import iter_objects
from microcoder_ext.trl.train_settings import UsageError


class DatasetError(UsageError):
    """A ``--dataset`` that cannot be read or has a row of unknown shape (exit status 2)."""


def _read_jsonl(path: Path) -> list[dict]:
    return [row for _, row in iter_objects(path, DatasetError)]


def _local_file(path: Path) -> Path:
    if path.is_dir():
        for name in ("train.parquet", "train.jsonl", "problems.train.jsonl"):
            if (path / name).is_file():
                return path / name
        raise DatasetError(f"--dataset {path}: a directory without train.parquet, train.jsonl or problems.train.jsonl "
                           "(the files `microcoder data prepare` writes)")
    return path


def read_rows(spec: str, *, config: str | None = None, split: str = "train") -> tuple[list[dict], str]:
    """Rows of a local parquet/JSONL (or a prepare directory) or of a Hugging Face dataset; and where they came from."""
    path = Path(spec)
    if path.exists():
        path = _local_file(path)
        name = path.name.lower()
        try:
            if name.endswith(".parquet"):
                import pyarrow.parquet as pq

                return pq.read_table(path).to_pylist(), str(path)
            if name.endswith((".jsonl", ".jsonl.gz", ".json")):
                return _read_jsonl(path), str(path)
        except DatasetError:
            raise
        except Exception as e:  # noqa: BLE001 - unreadable file
            raise DatasetError(f"--dataset {path}: cannot read it ({type(e).__name__}: {e})") from None
        raise DatasetError(f"--dataset {path}: not a .parquet, .jsonl, .jsonl.gz or .json file")
    if spec.startswith((".", "/", "~")) or spec.endswith((".parquet", ".jsonl", ".gz", ".json")):
        raise DatasetError(f"--dataset {spec}: no such file or directory")
    try:
        import datasets

        ds = datasets.load_dataset(spec, config, split=split)
    except Exception as e:  # noqa: BLE001 - offline, unknown name, gated, bad split
        raise DatasetError(f"--dataset {spec}: not a local file, and loading it as a Hugging Face dataset failed "
                           f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return [dict(r) for r in ds], f"hf:{spec}" + (f":{config}" if config else "") + f"[{split}]"


def _tests_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = value.decode()
    if isinstance(value, str):
        return value if value.strip() else None
    return json.dumps(value)


def to_trl_row(row: dict, index: int) -> dict:
    """One dataset row -> ``{"prompt", "tests", "extra_info"}`` (the columns :class:`CodeReward` reads)."""
    prompt, tests, info = row.get("prompt"), None, None
    rm = row.get("reward_model")
    if isinstance(rm, dict) and rm.get("ground_truth") is not None:  # verl
        tests, info = rm["ground_truth"], row.get("extra_info")
    elif row.get("label") is not None and prompt is not None:  # OpenRLHF
        tests = row["label"]
        info = {k[len("meta_"):]: v for k, v in row.items() if k.startswith("meta_")} or None
    elif row.get("tests") is not None and prompt is None and row.get("statement") is not None:  # Problem.to_dict()
        from microcoder_ext.data.problem import Problem

        t = row["tests"]
        t = json.loads(t) if isinstance(t, str) else t
        known = {k: row[k] for k in ("id", "source", "statement", "title", "starter_code", "difficulty", "platform",
                                     "date", "solutions", "extra") if k in row and row[k] is not None}
        p = Problem(**{"id": str(row.get("id", index)), "source": str(row.get("source", "local")), **known, "tests": t})
        prompt, tests, info = [{"role": "user", "content": p.prompt_text()}], t, p.metadata()
    elif row.get("tests") is not None:
        tests, info = row["tests"], row.get("extra_info")
    if prompt is None or tests is None:
        cols = ", ".join(sorted(row))
        raise DatasetError(f"row {index}: unknown row shape (columns: {cols}); expected verl (prompt, "
                           "reward_model.ground_truth), OpenRLHF (prompt, label), a problem record (statement, tests) "
                           "or prompt + tests")
    if isinstance(prompt, str):
        prompt_value: Any = prompt
    elif isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) and "content" in m for m in prompt):
        prompt_value = [{"role": str(m.get("role", "user")), "content": str(m["content"])} for m in prompt]
    else:
        raise DatasetError(f"row {index}: prompt must be a string or a list of chat messages, got "
                           f"{type(prompt).__name__}")
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except ValueError:
            info = None
    return {"prompt": prompt_value, "tests": _tests_text(tests),
            "extra_info": json.dumps(info, default=str) if isinstance(info, dict) else "{}"}


def load_train_dataset(spec: str, tokenizer=None, *, config: str | None = None, split: str = "train",
                       max_samples: int | None = None, max_prompt_length: int | None = None):
    """The TRL dataset (columns prompt, tests, extra_info) of ``--dataset spec`` and a one-line description: the
    first ``max_samples`` rows, without those whose prompt is longer than ``max_prompt_length`` tokens (with a
    ``tokenizer``); chat prompts become plain text when the tokenizer has no chat template."""
    rows, origin = read_rows(spec, config=config, split=split)
    if max_samples:
        rows = rows[: max_samples]
    if not rows:
        raise DatasetError(f"--dataset {origin}: no rows")
    out = [to_trl_row(r, i) for i, r in enumerate(rows)]
    chat = tokenizer is None or getattr(tokenizer, "chat_template", None)
    if not chat:  # conversational prompts need a chat template: plain text instead
        for r in out:
            if isinstance(r["prompt"], list):
                r["prompt"] = "\n\n".join(m["content"] for m in r["prompt"])
    dropped = 0
    if max_prompt_length and tokenizer is not None:
        keep = []
        for r in out:
            text = r["prompt"] if isinstance(r["prompt"], str) else tokenizer.apply_chat_template(
                r["prompt"], tokenize=False, add_generation_prompt=True)
            if len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= max_prompt_length:
                keep.append(r)
        dropped, out = len(out) - len(keep), keep
        if not out:
            raise DatasetError(f"--dataset {origin}: every prompt is longer than --max_prompt_length "
                               f"{max_prompt_length}")
    from datasets import Dataset

    desc = f"{len(out)} rows from {origin}" + (f" ({dropped} dropped: prompt > --max_prompt_length)" if dropped else "")
    if not chat:
        desc += "; the tokenizer has no chat template: chat prompts joined as plain text"
    return Dataset.from_list(out), desc
