"""The paper's published LiveCodeBench v6 results (main table, docs/paper.md#main-results), as data.

Every number is pass@1 in percent on LCB v6 (175 problems, 2025-02-01..2025-05-01, n = 4 samples per problem,
docs/paper.md#evaluation-protocol). A setting is ``<model size>-<test max length>``; each holds the rows published for it:

  1.7b-4k   Qwen3-1.7B, trained with 4K, tested with 4K     base, grpo, dapo, microcoder
  1.7b-8k   Qwen3-1.7B, trained with 4K, tested with 8K     base, grpo, dapo (the paper: "same as test 4K"), microcoder
  4b-4k     Qwen3-4B-Instruct-2507, train 4K / test 4K      base, grpo, dapo, microcoder
  4b-8k     Qwen3-4B-Instruct-2507, train 4K / test 8K      base, grpo, dapo, microcoder
  8b-16k    "DS 8B" (inferred DeepSeek-R1-0528-Qwen3-8B), train 16K / test 16K   grpo, dapo, microcoder

``base`` is the untrained model (the paper's "not trained" rows; Qwen3-1.7B is the same at 4K and 8K).
``reference("paper:4b-4k")`` gives the MicroCoder-GRPO row, ``paper:4b-4k:dapo`` another method,
``paper:4b-4k:all`` every row of the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from .breakdown import COLUMNS, Cell, Table

#: problems per cell of LCB v6 (docs/paper.md#evaluation-protocol; samples = 4 x problems)
LCB_V6_PROBLEMS = {"atcoder": {"easy": 26, "medium": 26, "hard": 60, "all": 112},
                   "leetcode": {"easy": 17, "medium": 26, "hard": 20, "all": 63},
                   "all": {"easy": 43, "medium": 52, "hard": 80, "all": 175}}
LCB_V6_SAMPLES_PER_PROBLEM = 4
METHODS = ("base", "grpo", "dapo", "microcoder")
METHOD_LABELS = {"base": "not trained", "grpo": "GRPO", "dapo": "DAPO", "microcoder": "MicroCoder-GRPO"}


@dataclass(frozen=True)
class PaperRow:
    setting: str
    model: str
    method: str  # one of METHODS
    train_length: str | None  # max response length in training (None: not trained)
    test_length: str
    cells: dict  # row ("atcoder" | "leetcode" | "all") -> column (easy|medium|hard|all) -> pass@1 %
    note: str = ""

    @property
    def label(self) -> str:
        return f"paper {self.setting} {METHOD_LABELS[self.method]}"

    def table(self) -> Table:
        """As a :class:`~.breakdown.Table` (pass@1 only; problem counts of LCB v6)."""
        cells = {}
        for row, cols in self.cells.items():
            cells[row] = {}
            for col in COLUMNS:
                d = LCB_V6_PROBLEMS[row][col]
                value = cols[col]
                correct = round(value / 100 * d * LCB_V6_SAMPLES_PER_PROBLEM)
                cells[row][col] = Cell(d, d * LCB_V6_SAMPLES_PER_PROBLEM, correct, {1: value})
        return Table((1,), ("atcoder", "leetcode", "all"), cells)

    def to_dict(self) -> dict:
        return {"setting": self.setting, "model": self.model, "method": self.method, "label": self.label,
                "train_length": self.train_length, "test_length": self.test_length, "note": self.note,
                "cells": self.cells}


def _row(setting, model, method, train, test, at_all, lc_all, lcb_all, easy, medium, hard, note="") -> PaperRow:
    """Arguments in the order of the paper's table: At/Lc/LCB All, then Easy, Medium, Hard as (At, Lc, LCB)."""
    cols = {"easy": easy, "medium": medium, "hard": hard}
    cells = {plat: {c: float(v[i]) for c, v in cols.items()} for i, plat in enumerate(("atcoder", "leetcode", "all"))}
    cells["atcoder"]["all"], cells["leetcode"]["all"], cells["all"]["all"] = float(at_all), float(lc_all), float(lcb_all)
    return PaperRow(setting, model, method, train, test, cells, note)


Q17, Q4, DS8 = "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B-Instruct-2507", "DS 8B (inferred: deepseek-ai/DeepSeek-R1-0528-Qwen3-8B)"
_base17 = ((19.2, 10.7, 16.1, (69.2, 33.8, 55.2), (10.6, 3.8, 7.2), (1.3, 0, 0.9)), "the paper: 4K = 8K")
_grpo17 = (21.9, 14.7, 19.3, (70.2, 47.1, 61.0), (20.2, 4.8, 12.5), (1.7, 0, 1.3))
_dapo17 = (23.0, 15.9, 20.4, (76.9, 55.9, 68.6), (15.4, 1.9, 8.7), (2.9, 0, 2.2))
_same = "the paper: same as test 4K"

PAPER_ROWS: tuple[PaperRow, ...] = (
    _row("1.7b-4k", Q17, "base", None, "4K", *_base17[0], note=_base17[1]),
    _row("1.7b-4k", Q17, "grpo", "4K", "4K", *_grpo17),
    _row("1.7b-4k", Q17, "dapo", "4K", "4K", *_dapo17),
    _row("1.7b-4k", Q17, "microcoder", "4K", "4K", 26.6, 17.5, 23.3, (83.7, 57.4, 73.3), (24.0, 4.8, 14.4),
         (2.9, 0, 2.2)),
    _row("1.7b-8k", Q17, "base", None, "8K", *_base17[0], note=_base17[1]),
    _row("1.7b-8k", Q17, "grpo", "4K", "8K", *_grpo17, note=_same),
    _row("1.7b-8k", Q17, "dapo", "4K", "8K", *_dapo17, note=_same),
    _row("1.7b-8k", Q17, "microcoder", "4K", "8K", 27.5, 17.9, 24.0, (82.7, 52.9, 70.9), (26.9, 8.7, 17.8),
         (3.7, 0, 2.8)),
    _row("4b-4k", Q4, "base", None, "4K", 37.3, 28.6, 34.1, (95.2, 73.5, 86.6), (44.2, 19.2, 31.7), (9.2, 2.5, 7.5)),
    _row("4b-4k", Q4, "grpo", "4K", "4K", 39.7, 28.2, 35.6, (98.1, 72.1, 87.8), (46.2, 21.2, 33.7), (11.7, 0, 8.7)),
    _row("4b-4k", Q4, "dapo", "4K", "4K", 39.3, 29.8, 35.9, (97.1, 75.0, 88.4), (49.0, 22.1, 35.6), (10.0, 1.3, 7.8)),
    _row("4b-4k", Q4, "microcoder", "4K", "4K", 39.7, 34.1, 37.7, (100.0, 88.2, 95.3), (49.0, 22.1, 35.6),
         (9.6, 3.7, 8.1)),
    _row("4b-8k", Q4, "base", None, "8K", 37.9, 29.0, 34.7, (95.2, 76.5, 87.8), (45.2, 18.3, 31.7), (10.0, 2.5, 8.1)),
    _row("4b-8k", Q4, "grpo", "4K", "8K", 40.6, 28.6, 36.3, (100.0, 72.1, 89.0), (45.2, 22.1, 33.7), (12.9, 0, 9.7)),
    _row("4b-8k", Q4, "dapo", "4K", "8K", 39.3, 31.0, 36.3, (100.0, 76.5, 90.7), (43.3, 23.1, 33.2), (11.3, 2.5, 9.1)),
    _row("4b-8k", Q4, "microcoder", "4K", "8K", 41.3, 34.1, 38.7, (100.0, 83.8, 93.6), (48.1, 24.0, 36.1),
         (12.9, 5.0, 10.9)),
    _row("8b-16k", DS8, "grpo", "16K", "16K", 35.5, 35.3, 35.4, (100.0, 89.7, 95.9), (39.4, 26.0, 32.7),
         (5.8, 1.3, 4.7)),
    _row("8b-16k", DS8, "dapo", "16K", "16K", 37.9, 34.9, 36.9, (100.0, 88.2, 95.3), (44.2, 25.0, 34.6),
         (8.3, 2.5, 6.9)),
    _row("8b-16k", DS8, "microcoder", "16K", "16K", 38.6, 40.5, 39.3, (100.0, 89.7, 95.9), (43.3, 32.7, 38.0),
         (10.0, 8.7, 9.7)),
)

SETTINGS: tuple[str, ...] = tuple(dict.fromkeys(r.setting for r in PAPER_ROWS))


class UnknownReference(ValueError):
    pass


def reference(spec: str) -> list[PaperRow]:
    """Rows for ``paper:SETTING[:METHOD]`` (METHOD: one of :data:`METHODS`, or ``all``; default microcoder)."""
    parts = spec.split(":")
    if parts[0] != "paper" or len(parts) not in (2, 3):
        raise UnknownReference(f"{spec!r}: expected paper:SETTING[:METHOD]")
    setting = parts[1].lower()
    method = parts[2].lower() if len(parts) == 3 else "microcoder"
    if setting not in SETTINGS:
        raise UnknownReference(f"{spec!r}: unknown setting {setting!r} (one of {', '.join(SETTINGS)})")
    rows = [r for r in PAPER_ROWS if r.setting == setting and (method == "all" or r.method == method)]
    if not rows:
        have = [r.method for r in PAPER_ROWS if r.setting == setting]
        raise UnknownReference(f"{spec!r}: no {method!r} row in {setting} (methods: {', '.join(have)}, all)")
    return rows
