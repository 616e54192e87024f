"""Write prepared problems: verl parquet (``Problem.to_verl_row``), OpenRLHF JSONL (``Problem.to_openrlhf_row``) and
our own ``problems`` JSONL (``Problem.to_dict()`` with ``tests`` as JSON text, so that Arrow never re-types test
values when the file is read back through ``datasets``), with a deterministic shuffle and an optional validation
split.

Files in OUTDIR: ``train.parquet`` / ``val.parquet`` (verl: ``data.train_files`` / ``data.val_files``),
``train.jsonl`` / ``val.jsonl`` (OpenRLHF: ``--data.prompt_data``, ``--data.eval_dataset``),
``problems.train.jsonl`` / ``problems.val.jsonl`` (``problems``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .problem import Problem

FORMATS = ("verl", "openrlhf", "problems")


def shuffle_split(problems: list[Problem], *, seed: int = 0, val_size: int = 0,
                  val: list[Problem] | None = None) -> tuple[list[Problem], list[Problem]]:
    """Shuffle with ``random.Random(seed)`` (stable across runs and platforms) and hold out the first
    ``val_size`` as the validation split; ``val`` (from ``--val-from``) is used as given instead."""
    order = list(problems)
    random.Random(seed).shuffle(order)
    if val is not None:
        return order, list(val)
    if val_size < 0:
        raise ValueError("--val-size must be >= 0")
    val_size = min(val_size, len(order))
    return order[val_size:], order[:val_size]


def write_verl_parquet(problems: list[Problem], path: str | Path, split: str = "train") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [p.to_verl_row(i, split) for i, p in enumerate(problems)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _dump(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def write_openrlhf_jsonl(problems: list[Problem], path: str | Path) -> Path:
    return _dump(Path(path), (p.to_openrlhf_row() for p in problems))


def problem_record(p: Problem) -> dict:
    d = p.to_dict()
    d["tests"] = json.dumps(d["tests"])
    return d


def write_problems_jsonl(problems: list[Problem], path: str | Path) -> Path:
    return _dump(Path(path), (problem_record(p) for p in problems))


def write_outputs(outdir: str | Path, train: list[Problem], val: list[Problem],
                  formats: tuple[str, ...] = ("verl", "openrlhf")) -> dict[str, list[str]]:
    """Write every requested format for both splits (val only when non-empty); returns format -> paths."""
    bad = set(formats) - set(FORMATS)
    if bad:
        raise ValueError(f"unknown format {sorted(bad)}; one of {', '.join(FORMATS)}")
    out = Path(outdir)
    written: dict[str, list[str]] = {}
    for split, ps in (("train", train), ("val", val)):
        if not ps and split == "val":
            continue
        for fmt in formats:
            if fmt == "verl":
                path = write_verl_parquet(ps, out / f"{split}.parquet", split)
            elif fmt == "openrlhf":
                path = write_openrlhf_jsonl(ps, out / f"{split}.jsonl")
            else:
                path = write_problems_jsonl(ps, out / f"problems.{split}.jsonl")
            written.setdefault(fmt, []).append(str(path))
    return written
