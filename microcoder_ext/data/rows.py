"""Reading dataset rows, and the record of a row left out; shared by :mod:`microcoder_ext.data.sources` (every
``microcoder data prepare`` shape) and :mod:`microcoder_ext.data.lcb` (LiveCodeBench).

Loading (:func:`load_rows`): a local file (``.jsonl``/``.json``/``.parquet``, ``.gz`` too) or directory goes
through ``datasets.load_dataset("json"|"parquet", data_files=...)``; anything else is a hub id
(``owner/name`` or ``owner/name:config``) for ``datasets.load_dataset(name, config, split=...)``. When Arrow
cannot unify a JSON file's types across rows, the file is read line by line with :mod:`json` instead.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

_LOCAL_EXT = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass
class Drop:
    """A row left out: by a loader (malformed) or a filter. ``reason`` is a short category (summary table),
    ``detail`` says exactly what (report)."""
    source: str  # shape / stage, e.g. "leetcodedataset", "filter"
    origin: str  # the SOURCE argument (file or hub id)
    id: str
    reason: str
    detail: str = ""

    def to_dict(self) -> dict:
        return {"source": self.source, "origin": self.origin, "id": self.id, "reason": self.reason,
                "detail": self.detail}


class SourceError(RuntimeError):
    """A SOURCE that cannot be read at all (missing file, hub unreachable, unknown shape): CLI exit 2."""


# --- loading ---------------------------------------------------------------------------------------------------
def _plain_json_rows(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        if head == "[":
            yield from json.loads(head + f.read())
            return
        first = True
        for line in f:
            if first:
                line, first = head + line, False
            if line.strip():
                yield json.loads(line)


def _local_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and _kind(p))
        if not files:
            raise SourceError(f"{path}: no .jsonl/.json/.parquet files (optionally .gz) in this directory")
        return files
    if not _kind(path):
        raise SourceError(f"{path}: not a .jsonl, .json or .parquet file (optionally .gz)")
    return [path]


def _kind(p: Path) -> str | None:
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return _LOCAL_EXT.get(suffixes[-1]) if suffixes else None


def _to_py(v):
    """numpy arrays/scalars (parquet via datasets may give them) -> lists/Python values."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _to_py(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_to_py(x) for x in v]
    return v


def load_rows(spec: str, *, split: str = "train", hub_files: list[str] | None = None) -> Iterator[dict]:
    """Rows of a local file/directory or a hub dataset, through ``datasets`` (see the module docstring)."""
    path = Path(spec)
    if path.exists():
        for f in _local_files(path):
            kind = _kind(f)
            try:
                from datasets import load_dataset

                ds = load_dataset(kind, data_files=str(f), split="train")
            except Exception as e:  # noqa: BLE001 - Arrow could not unify the JSON's types: read it plainly
                if kind != "json":
                    raise SourceError(f"{f}: unreadable parquet ({type(e).__name__}: {e})") from None
                try:
                    yield from _plain_json_rows(f)
                except (OSError, ValueError) as e2:
                    raise SourceError(f"{f}: unreadable JSON ({type(e2).__name__}: {e2})") from None
                continue
            for row in ds:
                yield _to_py(row)
        return
    if not re.fullmatch(r"[\w.-]+/[\w.-]+(:[\w.-]+)?", spec):
        raise SourceError(f"{spec}: no such file, and not a hub id (owner/name[:config])")
    name, _, config = spec.partition(":")
    try:
        from datasets import load_dataset

        if hub_files:
            ds = load_dataset("json", data_files=[f"hf://datasets/{name}/{f}" for f in hub_files], split="train")
        else:
            ds = load_dataset(name, config or None, split=split)
    except Exception as e:  # noqa: BLE001 - offline, unknown id, gated...
        raise SourceError(f"{spec}: cannot load from the hub ({type(e).__name__}: {str(e)[:300]})") from None
    for row in ds:
        yield _to_py(row)
