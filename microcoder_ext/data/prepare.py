"""The pipeline of ``microcoder data prepare``: every SOURCE's rows -> problems -> the filters -> the kept problems,
with per-source counts and a :class:`~microcoder_ext.data.rows.Drop` for everything left out.

Order per row: conversion (:func:`~microcoder_ext.data.sources.iter_source`: a malformed row is a drop), the
``--test-options`` merge (then re-validated), the ``--val-from`` id check, then the filters in the order
:func:`build_filters` returns them (metadata, minimum difficulty, decontamination, exact and near deduplication).
Splitting and writing are :mod:`microcoder_ext.data.writers`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .lcb import RELEASE_WINDOWS
from .problem import Problem
from .rows import Drop, SourceError
from .sources import RowError, SchemaReport, iter_source, read_problems, validate

#: ground-truth options ``--test-options`` may set (see ``microcoder_ext/reward/ground_truth.py``)
TEST_OPTIONS = ("checker", "float_tol", "time_limit", "case_sensitive", "line_sensitive", "unordered",
                "memory_limit_mb")
DECONTAMINATION_CHECKS = ("id", "title", "ngram")


def build_filters(*, difficulty: Sequence[str] | None = None, platform: Sequence[str] | None = None,
                  date_from: str | None = None, date_before: str | None = None, release: str | None = None,
                  min_difficulty: float | None = None, decontaminate: Sequence[str] = (),
                  decontam_by: Sequence[str] = DECONTAMINATION_CHECKS, decontam_ngram: int = 13,
                  decontam_threshold: float = 0.5, dedup: bool = True, near_dup_threshold: float = 0.8,
                  log: Callable[[str], None] = lambda msg: None) -> list:
    """The filters of ``data prepare``'s options, in the order they run. ``release`` gives the date window
    (:data:`~microcoder_ext.data.lcb.RELEASE_WINDOWS`); explicit dates override its ends. Raises
    :class:`~microcoder_ext.data.filters.FilterError` (bad option, no evaluation problem) or
    :class:`~microcoder_ext.data.rows.SourceError` (unreadable evaluation set)."""
    from .filters import Decontaminator, ExactDedup, FilterError, MetaFilter, MinDifficulty, NearDedup

    if release:
        start, end = RELEASE_WINDOWS[release]
        date_from, date_before = date_from or start, date_before or end
    filters: list = [MetaFilter(set(difficulty) if difficulty else None, set(platform) if platform else None,
                                date_from, date_before)]
    if min_difficulty is not None:
        filters.append(MinDifficulty(min_difficulty))
    if decontaminate:
        bad = set(decontam_by) - set(DECONTAMINATION_CHECKS)
        if bad:
            raise FilterError(f"--decontam-by: unknown check {sorted(bad)}")
        eval_drops: list[Drop] = []
        evals: list[Problem] = []
        for f in decontaminate:
            evals += read_problems(f, drops=eval_drops)
        if not evals:
            raise FilterError(f"--decontaminate: no evaluation problems could be read from {list(decontaminate)}")
        log(f"decontaminating against {len(evals)} evaluation problems ({len(eval_drops)} eval rows unreadable)")
        filters.append(Decontaminator(evals, ngram=decontam_ngram, threshold=decontam_threshold,
                                      by=tuple(decontam_by)))
    if dedup:
        filters.append(ExactDedup())
        if near_dup_threshold < 1:
            filters.append(NearDedup(near_dup_threshold))
    return filters


def load_test_options(path: str) -> dict[str, dict]:
    """``--test-options``: id -> options (only :data:`TEST_OPTIONS` keys with a value). Raises
    :class:`~microcoder_ext.data.rows.SourceError` for an unreadable or malformed file."""
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict) or row.get("id") in (None, ""):
                    raise ValueError(f"line {n}: an object with an `id` expected")
                opts = {k: row[k] for k in TEST_OPTIONS if row.get(k) is not None}
                if opts:
                    out[str(row["id"])] = opts
    except (OSError, ValueError) as e:
        raise SourceError(f"--test-options {path}: {e}") from None
    return out


def apply_test_options(p: Problem, options: dict[str, dict]) -> None:
    """Merge the options of ``p`` (by problem id, else by the source row id after the last ``/``) into its tests."""
    opts = options.get(p.id) or options.get(p.id.rsplit("/", 1)[-1])
    if opts:
        p.tests = {**p.tests, **opts}


@dataclass
class SourceStats:
    """One SOURCE: its row shape (``auto`` until a row is recognised), rows read, problems kept, drop reasons."""

    shape: str
    rows: int = 0
    kept: int = 0
    reasons: Counter = field(default_factory=Counter)
    weak: Counter = field(default_factory=Counter)  #: kept problems with weak tests, by finding (test_strength)

    def to_dict(self) -> dict:
        return {"shape": self.shape, "rows": self.rows, "kept": self.kept, "reasons": dict(self.reasons),
                "weak_tests": dict(self.weak)}


@dataclass
class Prepared:
    """What :func:`prepare` kept and left out, per SOURCE in the order given."""

    sources: dict[str, SourceStats] = field(default_factory=dict)
    kept: list[Problem] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    schema: dict[str, SchemaReport] = field(default_factory=dict)  # SOURCE -> fields found (defensive loaders)

    def report(self) -> dict:
        """The ``--report`` document: per-source counts, schemas, every drop."""
        return {"sources": {o: s.to_dict() for o, s in self.sources.items()},
                "schema": {k: v.to_dict() for k, v in self.schema.items()},
                "kept": len(self.kept), "drops": [d.to_dict() for d in self.drops]}


def prepare(specs: Sequence[str], shape: str = "auto", *, filters: Sequence = (), split: str = "train",
            limit: int | None = None, test_options: dict[str, dict] | None = None, val_ids: set[str] = frozenset(),
            progress: Callable[[str], Any] | None = None, min_tests: int = 0,
            drop_weak_tests: bool = False) -> Prepared:
    """Read every SOURCE (a repeated one once) through ``filters``. ``progress(spec)`` returns a bar with
    ``update(n)`` and ``close()`` for that SOURCE's rows. Raises :class:`~microcoder_ext.data.rows.SourceError`
    for a SOURCE that cannot be read and :class:`~microcoder_ext.data.filters.FilterError` from a filter.

    Weak tests (:mod:`~microcoder_ext.data.test_strength`: only the statement's examples, or fewer than
    ``min_tests``): a kept problem is flagged (``extra["weak_tests"]``, counted in its source's ``weak``), or
    dropped with ``drop_weak_tests``."""
    from .filters import run_filters
    from .test_strength import EXAMPLES_ONLY, weakness

    out = Prepared()
    for spec in specs:
        if spec in out.sources:
            continue
        report = SchemaReport()
        st = out.sources[spec] = SourceStats(shape)
        items = iter_source(spec, shape, split=split, limit=limit, report=report)
        bar = progress(spec) if progress is not None else None

        def drop(d: Drop) -> None:
            st.reasons[d.reason] += 1
            out.drops.append(d)

        def problems():
            for item in items:
                st.rows += 1
                if bar is not None:
                    bar.update(1)
                if isinstance(item, Drop):
                    drop(item)
                    continue
                st.shape = item.source if st.shape == "auto" else st.shape
                if test_options:
                    apply_test_options(item, test_options)
                    try:
                        validate(item)
                    except RowError as e:
                        drop(Drop("test-options", spec, item.id, e.reason, e.detail))
                        continue
                if item.id in val_ids:
                    drop(Drop("filter", spec, item.id, "in validation set", f"id {item.id} is in --val-from"))
                    continue
                yield item

        try:
            for p, rejected in run_filters(problems(), list(filters)):
                if rejected is None:
                    weak = weakness(p, min_tests)
                    if weak and drop_weak_tests:
                        drop(Drop("filter", spec, p.id, f"weak tests: {weak}",
                                  "its tests cannot tell a solution from one that hard-codes the statement's examples"
                                  if weak == EXAMPLES_ONLY else f"{weak} (--min-tests)"))
                        continue
                    if weak:
                        st.weak[weak] += 1
                        p.extra["weak_tests"] = weak
                    out.kept.append(p)
                    st.kept += 1
                else:
                    st.reasons[rejected.reason] += 1
                    d = Drop("filter", spec, p.id, rejected.reason, rejected.detail)
                    if rejected.matched:
                        d.detail += f" [matched {rejected.matched}]"
                    out.drops.append(d)
        finally:
            if bar is not None:
                bar.close()
        if report.rows:
            out.schema[spec] = report
    return out
