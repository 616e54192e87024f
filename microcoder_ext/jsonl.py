"""Reading JSONL files of objects with errors that name the file and line (framework-free).

Used by the CLIs that read user files (``microcoder temperature probe``, ``eval``, ``plot``, ``train``): each has
its own error class, so a bad line becomes that command's usage error instead of a traceback.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator


def iter_objects(path: str | os.PathLike, error: type[Exception]) -> Iterator[tuple[str, dict]]:
    """``(where, object)`` for each non-blank line of a JSONL file (gzip-compressed when the name ends in ``.gz``),
    where ``where`` is ``"<path>:<line>"``.

    Raises ``error("<path>:<line>: not JSON (...)")`` or ``error("<path>:<line>: expected a JSON object")`` for a
    bad line, and ``error("cannot read <path>: ...")`` when the file cannot be read or decoded (UTF-8).
    """
    path = os.fspath(path)
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise error(f"{where}: not JSON ({e.msg})") from None
                if not isinstance(rec, dict):
                    raise error(f"{where}: expected a JSON object, got {type(rec).__name__}")
                yield where, rec
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise error(f"cannot read {path}: {e}") from None
