"""Prepared rows <-> the five-dimension difficulty scorer (:mod:`microcoder_ext.data.difficulty`), for
``microcoder data difficulty``: read the rows, turn each into the :class:`~microcoder_ext.data.problem.Problem` the
scorer needs, score, store the scores back where each kind keeps them, summarise.

=============  =====================================================  =========================================
kind           rows                                                    scores written to
=============  =====================================================  =========================================
``verl``       ``data prepare``'s verl parquet (or the same rows as    ``extra_info["difficulty_scores"]``
               JSONL): ``prompt``, ``extra_info``
``openrlhf``   ``data prepare``'s OpenRLHF JSONL: ``prompt``,          ``"meta_difficulty_scores"``
               ``label``, ``meta_*``
``problem``    JSONL of ``Problem.to_dict()``                          ``extra["difficulty_scores"]``
=============  =====================================================  =========================================

The statement is the last user message of ``prompt`` (verl/OpenRLHF) or ``statement`` (problem); the reference
solutions are ``extra_info["solutions"]`` / ``meta_solutions`` / ``solutions`` when the rows carry them (without
them only the statement-based algorithmic part and the judge's two dimensions can be scored). Files are
``.parquet``, ``.jsonl`` or ``.jsonl.gz`` (by suffix).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence

from microcoder_ext.data.problem import Problem

SCORES_KEY = "difficulty_scores"


class InputError(Exception):
    """Unreadable or unrecognised input: nothing is scored or written."""


# ----------------------------------------------------------------------------------------------- reading / writing
def read_rows(path: str) -> list[dict]:
    """Every row of a parquet or JSONL(.gz) file; raises :class:`InputError` when it cannot be read."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        opener = gzip.open if path.endswith(".gz") else open
        rows = []
        with opener(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise InputError(f"{path}:{i}: not a JSON object")
                    rows.append(row)
        return rows
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - any read error is an input error
        raise InputError(f"{path}: cannot read: {type(e).__name__}: {e}") from None


def write_rows(path: str, rows: list[dict]) -> None:
    """Write ``rows`` as parquet or JSONL(.gz), by the suffix of ``path`` (parent directories created)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
        return
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def row_kind(row: dict) -> str | None:
    """``verl``, ``openrlhf`` or ``problem`` (see the module docstring); ``None`` for anything else."""
    if isinstance(row.get("extra_info"), dict) and "prompt" in row:
        return "verl"
    if "prompt" in row and any(k.startswith("meta_") for k in row):
        return "openrlhf"
    if "statement" in row and "tests" in row and "id" in row:
        return "problem"
    return None


def _last_user(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") or "" for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return users[-1]
    raise InputError(f"prompt is neither text nor chat messages with a user turn: {str(prompt)[:120]}")


def _solutions(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    return [s for s in value or [] if isinstance(s, str)]


def to_problem(row: dict, kind: str) -> Problem:
    """The :class:`Problem` the scorer needs (statement, solutions; tests are not used) from one row."""
    if kind == "verl":
        info = row["extra_info"]
        return Problem(id=str(info.get("id", "")), source=str(info.get("source", "")),
                       statement=_last_user(row["prompt"]), tests={}, solutions=_solutions(info.get("solutions")))
    if kind == "openrlhf":
        return Problem(id=str(row.get("meta_id", "")), source=str(row.get("meta_source", "")),
                       statement=_last_user(row["prompt"]), tests={}, solutions=_solutions(row.get("meta_solutions")))
    fields = Problem.__dataclass_fields__
    return Problem(**{k: v for k, v in row.items() if k in fields})


def store(row: dict, kind: str, scores: dict) -> dict:
    """``row`` with ``scores`` at the documented place (a new dict; nested dicts copied)."""
    row = dict(row)
    if kind == "verl":
        row["extra_info"] = {**row["extra_info"], SCORES_KEY: scores}
    elif kind == "openrlhf":
        row[f"meta_{SCORES_KEY}"] = scores
    else:
        row["extra"] = {**(row.get("extra") or {}), SCORES_KEY: scores}
    return row


def stored_scores(row: dict) -> dict | None:
    """The scores a row carries, whatever its kind (``None`` if none)."""
    kind = row_kind(row)
    if kind == "verl":
        return row["extra_info"].get(SCORES_KEY)
    if kind == "openrlhf":
        return row.get(f"meta_{SCORES_KEY}")
    if kind == "problem":
        return (row.get("extra") or {}).get(SCORES_KEY)
    return None


def load_inputs(paths: Sequence[str], limit: int | None = None) -> tuple[list[dict], str, list[Problem]]:
    """The rows of every input (all of one kind; the first ``limit`` only), their kind and their problems. Raises
    :class:`InputError` for an unreadable file, a row of no known kind, mixed kinds or no rows."""
    rows, kinds = [], set()
    for path in paths:
        for i, row in enumerate(read_rows(path), 1):
            kind = row_kind(row)
            if kind is None:
                raise InputError(f"{path}: row {i} is neither a verl row (prompt + extra_info), an OpenRLHF row "
                                 f"(prompt + meta_*) nor a Problem dict (id, statement, tests); keys: "
                                 f"{sorted(row)[:12]}")
            kinds.add(kind)
            rows.append(row)
    if len(kinds) > 1:
        raise InputError(f"inputs mix row kinds {sorted(kinds)}: score them separately")
    if not rows:
        raise InputError("no rows in the input")
    if limit is not None:
        rows = rows[: max(limit, 0)]
    kind = kinds.pop()
    return rows, kind, [to_problem(r, kind) for r in rows]


# ----------------------------------------------------------------------------------------------- scoring
def score_rows(problems: list[Problem], judge: Any, weights: dict | None, concurrency: int = 1,
               on_done: Callable[[], None] | None = None,
               on_error: Callable[[Problem, Exception], None] | None = None) -> list[dict | None]:
    """:func:`~microcoder_ext.data.difficulty.score_problem` of every problem, in order (``concurrency`` judge
    requests at a time when there is a judge). A problem that cannot be scored gives ``None`` (and
    ``on_error(problem, exception)``); ``on_done()`` after each problem."""
    from microcoder_ext.data.difficulty import score_problem

    def one(p: Problem) -> dict | None:
        try:
            return score_problem(p, judge, weights=weights)
        except Exception as e:  # noqa: BLE001 - one bad row must not stop the batch
            if on_error is not None:
                on_error(p, e)
            return None

    out: list[dict | None] = []
    it: Iterable
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency)) if judge is not None and concurrency > 1 else None
    try:
        it = pool.map(one, problems) if pool else map(one, problems)
        for s in it:
            out.append(s)
            if on_done is not None:
                on_done()
    finally:
        if pool:
            pool.shutdown()
    return out


def summarise(scores: list[dict | None]) -> dict:
    """Counts (rows, scored, with solutions / constraints, judge failures), per-dimension means and a 10-bin score
    histogram of :func:`score_rows`' results."""
    from microcoder_ext.data.difficulty import DIMENSIONS

    ok = [s for s in scores if s]
    dims = {}
    for d in (*DIMENSIONS, "score"):
        vals = [s[d] for s in ok if s.get(d) is not None]
        dims[d] = {"rows": len(vals), "mean": round(sum(vals) / len(vals), 4) if vals else None}
    hist = [0] * 10
    for s in ok:
        if s.get("score") is not None:
            hist[min(int(s["score"] * 10), 9)] += 1
    judge_failed = sum(1 for s in ok if "judge" in s["raw"] and not s["raw"]["judge"].get("ok"))
    errors = Counter(str(s["raw"]["judge"].get("error"))[:120] for s in ok
                     if "judge" in s["raw"] and not s["raw"]["judge"].get("ok"))
    return {"rows": len(scores), "scored": len(ok), "unscored": len(scores) - len(ok),
            "with_solutions": sum(1 for s in ok if s["raw"]["code"]["solutions"] > 0),
            "with_constraints": sum(1 for s in ok if s["raw"]["constraints"]["n"] is not None),
            "no_score": sum(1 for s in ok if s.get("score") is None),
            "judge_failed": judge_failed, "judge_errors": dict(errors.most_common(5)),
            "dimensions": dims, "histogram": {f"{i / 10:.1f}-{(i + 1) / 10:.1f}": n for i, n in enumerate(hist)}}
