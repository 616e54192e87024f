"""The data a smoke run trains on: the first rows of the launch's own files, else the bundled problems.

A file is used when it can be read locally (a path to a verl parquet / OpenRLHF JSONL, JSON or parquet file);
remote paths (``hdfs://``, hub dataset names) and missing files fall back to the bundled problems
(:mod:`microcoder_ext.bundled`), written in the framework's own encoding (``Problem.to_verl_row`` /
``Problem.to_openrlhf_row``). Rows are copied unchanged: the reward reads them as it would in the real run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from microcoder_ext.bundled import answer, load_problems, messages, split_problems  # noqa: F401  (re-exported)
from microcoder_ext.smoke.runner import SmokeUsageError


@dataclass
class SmokeData:
    """One data file of a smoke run."""

    path: str  #: the file the framework reads
    rows: int
    source: str  #: where the rows came from, for the substitution table
    bundled: bool


def bundled_problems(split: str = "train") -> list:
    """The bundled problems of ``split`` (``train``: 60, ``heldout``: 20)."""
    train, held = split_problems(load_problems())
    return train if split == "train" else held


def local_file(path: str | os.PathLike | None) -> Path | None:
    """``path`` as a readable local file, or None (remote URL, directory, missing)."""
    if path is None:
        return None
    text = str(path)
    if "://" in text and not text.startswith("file://"):
        return None
    p = Path(os.path.expanduser(text.removeprefix("file://")))
    return p if p.is_file() and os.access(p, os.R_OK) else None


def _first_rows(path: Path, k: int) -> list[dict]:
    """The first ``k`` rows of a parquet, JSONL or JSON-list file, as dicts."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        rows: list[dict] = []
        for batch in pf.iter_batches(batch_size=max(k, 1)):
            rows.extend(batch.to_pylist())
            if len(rows) >= k:
                break
        return rows[:k]
    if name.endswith((".jsonl", ".jsonl.gz")):
        from microcoder_ext.jsonl import iter_objects

        rows = []
        for _, obj in iter_objects(path, SmokeUsageError):
            rows.append(obj)
            if len(rows) >= k:
                break
        return rows
    if name.endswith(".json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [data])
        return [r for r in data if isinstance(r, dict)][:k]
    raise ValueError(f"{path}: unsupported data file (parquet, jsonl or json)")


def _write_parquet(rows: Sequence[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows)), path)


def _write_jsonl(rows: Sequence[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")


def _rows_of(sources: Sequence[str] | str | None, k: int) -> tuple[list[dict], str | None]:
    """Up to ``k`` rows from the first readable files of ``sources``; (rows, description) or ([], None)."""
    if sources is None:
        return [], None
    files = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    rows: list[dict] = []
    used = []
    for f in files:
        p = local_file(f)
        if p is None:
            continue
        got = _first_rows(p, k - len(rows))
        if got:
            used.append(str(p))
            rows.extend(got)
        if len(rows) >= k:
            break
    return (rows, f"first {len(rows)} rows of {', '.join(used)}") if rows else ([], None)


def _why(files) -> str:
    return f"{files} not readable locally" if files else "no data file given"


def _repeated(rows: list, source: str, k: int) -> tuple[list, str]:
    """``rows`` repeated up to ``k`` when there are fewer (a batch of ``k`` prompts must fill), and their source."""
    if 0 < len(rows) < k:
        return [rows[i % len(rows)] for i in range(k)], f"{source}, repeated to {k} rows"
    return rows, source


def verl_data(files: Sequence[str] | str | None, out: Path, k: int, split: str = "train",
              cycle: bool = False) -> SmokeData:
    """A verl RL parquet of ``k`` rows: from the launch's ``data.train_files`` / ``val_files``, else bundled; with
    ``cycle``, fewer rows than ``k`` are repeated up to ``k`` (a batch of ``k`` prompts must fill)."""
    rows, source = _rows_of(files, k)
    bundled = not rows
    if bundled:
        problems = bundled_problems("train" if split == "train" else "heldout")[:k]
        rows = [p.to_verl_row(i, split) for i, p in enumerate(problems)]
        source = f"{len(rows)} bundled problems ({split}; {_why(files)})"
    if cycle:
        rows, source = _repeated(rows, source, k)
    _write_parquet(rows, out)
    return SmokeData(str(out), len(rows), source, bundled)


def openrlhf_data(files: Sequence[str] | str | None, out: Path, k: int, split: str = "train",
                  cycle: bool = False) -> SmokeData:
    """An OpenRLHF JSONL of ``k`` rows: from the launch's ``--data.prompt_dataset`` / ``--eval.dataset`` (a local
    file), else the bundled problems (keys ``prompt`` / ``label``); ``cycle`` as :func:`verl_data`'s."""
    rows, source = _rows_of(files, k)
    bundled = not rows
    if bundled:
        problems = bundled_problems("train" if split == "train" else "heldout")[:k]
        rows = [p.to_openrlhf_row() for p in problems]
        source = f"{len(rows)} bundled problems ({split}; {_why(files)})"
    if cycle:
        rows, source = _repeated(rows, source, k)
    _write_jsonl(rows, out)
    return SmokeData(str(out), len(rows), source, bundled)


def problems_data(files: Sequence[str] | str | None, out_dir: Path, k: int) -> SmokeData:
    """``microcoder train``'s input: the first ``k`` rows of a local file in its own format (verl parquet,
    OpenRLHF JSONL, problem records), else ``k`` bundled problem records (JSONL)."""
    rows, source = _rows_of(files, k)
    if rows:
        first = local_file(files if isinstance(files, (str, os.PathLike)) else next(
            f for f in files if local_file(f) is not None))
        if first is not None and first.name.lower().endswith(".parquet"):
            out = out_dir / "train.parquet"
            _write_parquet(rows, out)
            return SmokeData(str(out), len(rows), source, False)
        out = out_dir / "train.jsonl"
        _write_jsonl(rows, out)
        return SmokeData(str(out), len(rows), source, False)
    from microcoder_ext.data.writers import problem_record

    rows = [problem_record(p) for p in bundled_problems("train")[:k]]
    out = out_dir / "train.jsonl"
    _write_jsonl(rows, out)
    return SmokeData(str(out), len(rows), f"{len(rows)} bundled problems ({_why(files)})", True)
