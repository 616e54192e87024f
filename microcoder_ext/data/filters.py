"""Filters of ``microcoder data prepare``: metadata (difficulty, date window, platform, minimum difficulty score),
exact and near duplicates, and decontamination against evaluation sets. Each filter is ``keep(problem) -> None``
or raises :class:`Rejected` with a short ``reason`` (summary table) and a ``detail`` (report).

* **Exact duplicates**: SHA-1 of the normalised statement (:func:`normalise`: lower case, HTML tags and LaTeX
  ``$`` dropped, every run of non-alphanumerics one space). The first occurrence is kept.
* **Near duplicates**: word 5-gram shingles; MinHash (128 permutations, 32-bit hashes) with LSH banding chosen
  so that a pair at the threshold becomes a candidate with probability >= 0.99; every candidate pair is then
  checked with the exact Jaccard similarity of the shingle sets, so nothing under the threshold is removed
  (default 0.8). Greedy: a problem is compared with the problems kept so far. Linear in the rows.
* **Decontamination** (:class:`Decontaminator`): a training problem is removed when it has the id of an
  evaluation item, the same normalised title (at least :data:`MIN_TITLE_CHARS` characters), or when at least
  ``threshold`` (default 0.5) of some evaluation statement's word 13-grams (the n-gram length of common
  decontamination, GPT-3 / Llama) occur in the training statement. A fraction, not "any shared 13-gram":
  competitive programming statements share boiler-plate 13-grams ("the first line contains a single integer
  t the number of test cases"). Statements shorter than n words are one n-gram.
* **Minimum difficulty**: ``problem.extra["difficulty_scores"]["score"]`` when present, else
  ``microcoder_ext.data.difficulty.score_problem(problem, judge=None)["score"]`` (imported lazily).
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from .lcb import in_window, iso_day
from .problem import DIFFICULTIES, Problem

MIN_TITLE_CHARS = 4
_TAGS = re.compile(r"<[^>]{0,200}>")
_NON_WORD = re.compile(r"[^0-9a-z]+")


class Rejected(Exception):
    def __init__(self, reason: str, detail: str = "", matched: str | None = None):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail, self.matched = reason, detail, matched


class FilterError(RuntimeError):
    """A filter that cannot run (bad option, missing difficulty scorer): CLI exit 2."""


def normalise(text: str) -> str:
    text = _TAGS.sub(" ", (text or "").lower()).replace("$", " ")
    return _NON_WORD.sub(" ", text).strip()


def words(text: str) -> list[str]:
    return normalise(text).split()


def statement_hash(p: Problem) -> str:
    return hashlib.sha1(normalise(p.statement).encode()).hexdigest()


def shingles(ws: list[str], n: int) -> set[int]:
    """Hashes (CRC-32, deterministic across runs) of the word n-grams; fewer than n words: one shingle."""
    if len(ws) < n:
        return {zlib.crc32(" ".join(ws).encode())} if ws else set()
    return {zlib.crc32(" ".join(ws[i:i + n]).encode()) for i in range(len(ws) - n + 1)}


def slug(text: str) -> str:
    return _NON_WORD.sub("-", (text or "").lower()).strip("-")


# --- metadata filters ------------------------------------------------------------------------------------------
@dataclass
class MetaFilter:
    difficulties: set[str] | None = None  # keep these (easy/medium/hard)
    platforms: set[str] | None = None
    date_from: str | None = None  # inclusive ISO day
    date_before: str | None = None  # exclusive ISO day

    def __post_init__(self):
        if self.difficulties:
            bad = set(self.difficulties) - set(DIFFICULTIES)
            if bad:
                raise FilterError(f"unknown difficulty {sorted(bad)}; one of {', '.join(DIFFICULTIES)}")
        for k in ("date_from", "date_before"):
            v = getattr(self, k)
            if v is not None:
                try:
                    setattr(self, k, iso_day(v))
                except ValueError as e:
                    raise FilterError(f"--{k.replace('_', '-')}: {e}") from None
        if self.platforms:
            self.platforms = {s.lower() for s in self.platforms}

    def __call__(self, p: Problem) -> None:
        if self.difficulties and p.difficulty not in self.difficulties:
            raise Rejected("difficulty", f"{p.difficulty or 'unknown'} not in {sorted(self.difficulties)}")
        if self.platforms and (p.platform or "") not in self.platforms:
            raise Rejected("platform", f"{p.platform or 'unknown'} not in {sorted(self.platforms)}")
        if (self.date_from or self.date_before) and not in_window(p.date, self.date_from, self.date_before):
            raise Rejected("date" if p.date else "date unknown",
                           f"{p.date or 'no date'} outside [{self.date_from or '...'}, {self.date_before or '...'})")


class MinDifficulty:
    """Keep problems whose difficulty score (in [0, 1]) is at least ``minimum``."""

    def __init__(self, minimum: float, judge=None):
        if not 0 <= minimum <= 1:
            raise FilterError("--min-difficulty must be in [0, 1]")
        self.minimum, self.judge, self._score = minimum, judge, None

    def score(self, p: Problem) -> float | None:
        """The stored or computed score; None when nothing could be measured (no solution, no size bound in the
        statement, no judge)."""
        stored = p.extra.get("difficulty_scores")
        if isinstance(stored, dict) and isinstance(stored.get("score"), (int, float)):
            return float(stored["score"])
        if self._score is None:
            try:
                from microcoder_ext.data.difficulty import score_problem
            except ImportError as e:
                raise FilterError(f"--min-difficulty needs difficulty scores: the rows have no "
                                  f"extra['difficulty_scores'] and microcoder_ext.data.difficulty is unavailable "
                                  f"({e}); run `microcoder data difficulty` first") from None
            self._score = score_problem
        scores = self._score(p, judge=self.judge)
        p.extra["difficulty_scores"] = scores
        return None if scores.get("score") is None else float(scores["score"])

    def __call__(self, p: Problem) -> None:
        s = self.score(p)
        if s is None:
            raise Rejected("unscored difficulty", "no difficulty dimension could be measured (no reference solution, "
                           "no size bound in the statement, no judge)")
        if s < self.minimum:
            raise Rejected("min difficulty", f"score {s:.3f} < {self.minimum}")


# --- duplicates ------------------------------------------------------------------------------------------------
class ExactDedup:
    def __init__(self):
        self.seen: dict[str, str] = {}

    def __call__(self, p: Problem) -> None:
        h = statement_hash(p)
        if h in self.seen:
            raise Rejected("exact duplicate", f"same normalised statement as {self.seen[h]}", self.seen[h])
        self.seen[h] = p.id


_PRIME = np.uint64((1 << 61) - 1)


def lsh_bands(num_perm: int, threshold: float, recall: float = 0.99) -> tuple[int, int]:
    """(bands, rows): the most rows per band (fewest false candidates) whose candidate probability at the
    threshold, ``1 - (1 - t**r)**b``, is at least ``recall``."""
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        if num_perm % r:
            continue
        b = num_perm // r
        if 1 - (1 - threshold ** r) ** b >= recall:
            best = (b, r)
    return best


class NearDedup:
    """MinHash/LSH candidates, exact Jaccard check (see the module docstring)."""

    def __init__(self, threshold: float = 0.8, *, ngram: int = 5, num_perm: int = 128, seed: int = 1):
        if not 0 < threshold <= 1:
            raise FilterError("--near-dup-threshold must be in (0, 1]")
        self.threshold, self.ngram = threshold, ngram
        rng = np.random.RandomState(seed)
        self.a = rng.randint(1, 1 << 32, size=num_perm, dtype=np.uint64)
        self.b = rng.randint(0, 1 << 32, size=num_perm, dtype=np.uint64)
        self.bands, self.rows = lsh_bands(num_perm, threshold)
        self.buckets: list[dict] = [defaultdict(list) for _ in range(self.bands)]
        self.kept: list[tuple[str, set[int]]] = []

    def signature(self, sh: set[int]) -> np.ndarray:
        x = np.fromiter(sh, dtype=np.uint64, count=len(sh))[:, None]
        return ((x * self.a + self.b) % _PRIME).min(axis=0)  # x, a < 2**32: no uint64 overflow

    def __call__(self, p: Problem) -> None:
        sh = shingles(words(p.statement), self.ngram)
        if not sh:
            return
        sig = self.signature(sh)
        keys = [sig[i * self.rows:(i + 1) * self.rows].tobytes() for i in range(self.bands)]
        seen = set()
        for band, key in zip(self.buckets, keys):
            for j in band.get(key, ()):
                if j in seen:
                    continue
                seen.add(j)
                other_id, other = self.kept[j]
                jac = len(sh & other) / len(sh | other)
                if jac >= self.threshold:
                    raise Rejected("near duplicate", f"Jaccard {jac:.3f} >= {self.threshold} with {other_id} "
                                   f"(word {self.ngram}-grams)", other_id)
        idx = len(self.kept)
        self.kept.append((p.id, sh))
        for band, key in zip(self.buckets, keys):
            band[key].append(idx)


# --- decontamination -------------------------------------------------------------------------------------------
@dataclass
class Decontaminator:
    """Index of evaluation problems; ``__call__`` rejects a training problem that matches one (id, title or
    statement n-gram overlap). ``by`` selects the checks."""
    eval_problems: list[Problem]
    ngram: int = 13
    threshold: float = 0.5
    by: tuple[str, ...] = ("id", "title", "ngram")
    _ids: dict = field(default_factory=dict, init=False)
    _titles: dict = field(default_factory=dict, init=False)
    _grams: dict = field(default_factory=lambda: defaultdict(list), init=False)
    _sizes: list = field(default_factory=list, init=False)

    def __post_init__(self):
        if not 0 < self.threshold <= 1:
            raise FilterError("--decontam-threshold must be in (0, 1]")
        for i, e in enumerate(self.eval_problems):
            for key in self._id_keys(e):
                self._ids.setdefault(key, i)
            t = slug(e.title)
            if len(t) >= MIN_TITLE_CHARS:
                self._titles.setdefault(t, i)
            g = shingles(words(e.statement), self.ngram)
            self._sizes.append(len(g))
            for h in g:
                self._grams[h].append(i)

    @staticmethod
    def _id_keys(p: Problem) -> set[str]:
        keys = {p.id}
        qid = p.extra.get("question_id")
        if qid:
            keys.add(f"{p.platform or ''}:{qid}")
        return {k for k in keys if k and not k.endswith(":")}

    def __call__(self, p: Problem) -> None:
        def hit(kind: str, i: int, detail: str):
            e = self.eval_problems[i]
            raise Rejected("contaminated", f"{kind}: {detail}; eval item {e.id} ({e.title!r})", e.id)

        if "id" in self.by:
            for key in self._id_keys(p):
                if key in self._ids:
                    hit("id", self._ids[key], key)
        if "title" in self.by:
            t = slug(p.title)
            if len(t) >= MIN_TITLE_CHARS and t in self._titles:
                hit("title", self._titles[t], repr(p.title))
        if "ngram" in self.by:
            counts: Counter = Counter()
            for h in shingles(words(p.statement), self.ngram):
                for i in self._grams.get(h, ()):
                    counts[i] += 1
            best = max(((c / self._sizes[i], i) for i, c in counts.items() if self._sizes[i]), default=None)
            if best and best[0] >= self.threshold:
                hit("ngram", best[1], f"{best[0]:.0%} of the eval statement's word {self.ngram}-grams "
                    f"(threshold {self.threshold:.0%})")


def run_filters(problems: Iterable[Problem], filters: list) -> Iterable[tuple[Problem, Rejected | None]]:
    """``(problem, None)`` for kept problems, ``(problem, Rejected)`` for the first filter that rejects it."""
    for p in problems:
        try:
            for f in filters:
                f(p)
        except Rejected as r:
            yield p, r
            continue
        yield p, None
