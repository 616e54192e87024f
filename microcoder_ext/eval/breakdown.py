"""Per-problem results -> the paper's table: platform x difficulty, pass@k in percent.

Rows: ``atcoder``, ``leetcode`` (always, in this order, as in the paper), then any other platform found (sorted),
then ``all`` = the union of every problem (the paper's "LCB" row). Columns: ``easy``, ``medium``, ``hard``, ``all``.
A problem without a platform counts as platform ``unknown``; one without a (known) difficulty counts only in the
``all`` column. A cell holds the number of problems ``d``, the number of samples and of correct samples, and
pass@k for every requested k, in **percent** (the mean over the cell's problems of the per-problem unbiased
estimator times 100; for pass@1 this is ``correct samples / samples`` when every problem has the same n). A cell
without problems is ``None`` (printed ``-``); a pass@k for which some problem of the cell has fewer than k samples
is ``None`` as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .passk import pass_at_k

PLATFORMS = ("atcoder", "leetcode")  # always shown first, as in the paper
DIFFICULTIES = ("easy", "medium", "hard")
COLUMNS = DIFFICULTIES + ("all",)
ALL = "all"
LABELS = {"atcoder": "AtCoder", "leetcode": "LeetCode", "codeforces": "Codeforces", "codechef": "CodeChef",
          "all": "All", "easy": "Easy", "medium": "Medium", "hard": "Hard", "unknown": "(no platform)"}


def label(key: str) -> str:
    """Display name of a row/column key."""
    return LABELS.get(key, key[:1].upper() + key[1:])


def norm_platform(value) -> str:
    s = str(value).strip().lower() if value is not None else ""
    return s or "unknown"


def norm_difficulty(value) -> str | None:
    s = str(value).strip().lower() if value is not None else ""
    return s if s in DIFFICULTIES else None


@dataclass
class ProblemResult:
    """One problem of a run: ``n`` samples scored, ``c`` of them correct; ``verdicts``: verdict -> count."""

    id: str
    platform: str | None
    difficulty: str | None
    n: int
    c: int
    verdicts: dict = field(default_factory=dict)
    date: str | None = None
    title: str = ""

    def to_dict(self, ks=()) -> dict:
        d = {"id": self.id, "title": self.title, "platform": self.platform, "difficulty": self.difficulty,
             "date": self.date, "n": self.n, "c": self.c, "verdicts": dict(self.verdicts)}
        if ks:
            d["pass_at"] = {str(k): (pass_at_k(self.n, self.c, k) if k <= self.n else None) for k in ks}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ProblemResult":
        return cls(id=str(d["id"]), platform=d.get("platform"), difficulty=d.get("difficulty"), n=int(d["n"]),
                   c=int(d["c"]), verdicts=dict(d.get("verdicts") or {}), date=d.get("date"),
                   title=d.get("title") or "")


@dataclass
class Cell:
    problems: int
    samples: int
    correct: int
    pass_at: dict  # k -> percent or None

    def to_dict(self) -> dict:
        return {"problems": self.problems, "samples": self.samples, "correct": self.correct,
                "pass_at": {str(k): v for k, v in self.pass_at.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Cell":
        return cls(int(d["problems"]), int(d.get("samples", 0)), int(d.get("correct", 0)),
                   {int(k): v for k, v in d["pass_at"].items()})


@dataclass
class Table:
    """``cells[row][col]`` -> :class:`Cell` or ``None``; ``rows`` in display order (``all`` last)."""

    ks: tuple
    rows: tuple
    cells: dict

    def value(self, row: str, col: str, k: int = 1) -> float | None:
        cell = self.cells.get(row, {}).get(col)
        return None if cell is None else cell.pass_at.get(k)

    def to_dict(self) -> dict:
        return {"unit": "percent (pass@k x 100); problems = number of problems in the cell",
                "k": list(self.ks), "rows": list(self.rows), "columns": list(COLUMNS),
                "cells": {r: {c: (None if v is None else v.to_dict()) for c, v in cols.items()}
                          for r, cols in self.cells.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Table":
        return cls(tuple(int(k) for k in d["k"]), tuple(d["rows"]),
                   {r: {c: (None if v is None else Cell.from_dict(v)) for c, v in cols.items()}
                    for r, cols in d["cells"].items()})


def _cell(results: list[ProblemResult], ks) -> Cell | None:
    if not results:
        return None
    pass_at = {}
    for k in ks:
        if any(r.n < k for r in results):
            pass_at[k] = None
        else:
            pass_at[k] = 100.0 * math.fsum(pass_at_k(r.n, r.c, k) for r in results) / len(results)
    return Cell(len(results), sum(r.n for r in results), sum(r.c for r in results), pass_at)


def breakdown(results, ks=(1,)) -> Table:
    """The paper's table of ``results`` (:class:`ProblemResult` s) for every k in ``ks``."""
    results = list(results)
    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"k values must be >= 1, got {ks}")
    for r in results:
        if not (r.n >= 1 and 0 <= r.c <= r.n):
            raise ValueError(f"problem {r.id}: need n >= 1 and 0 <= c <= n, got n={r.n}, c={r.c}")
    found = sorted({norm_platform(r.platform) for r in results} - set(PLATFORMS))
    rows = PLATFORMS + tuple(found) + (ALL,)
    cells: dict = {}
    for row in rows:
        in_row = results if row == ALL else [r for r in results if norm_platform(r.platform) == row]
        cells[row] = {}
        for col in COLUMNS:
            members = in_row if col == ALL else [r for r in in_row if norm_difficulty(r.difficulty) == col]
            cells[row][col] = _cell(members, ks)
    return Table(ks, rows, cells)


def verdict_rates(results) -> dict:
    """Verdict -> {"count", "rate"} over every sample of ``results`` (rate in [0, 1])."""
    from microcoder_ext.core import verdicts as V

    counts = {v: 0 for v in V.ALL}
    for r in results:
        for v, n in r.verdicts.items():
            counts[v] = counts.get(v, 0) + int(n)
    total = sum(counts.values())
    return {v: {"count": n, "rate": (n / total if total else 0.0)} for v, n in counts.items()}
