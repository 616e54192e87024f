"""Lexical diversity of sampled responses over token ids (MicroCoder-GRPO temperature control,
docs/paper.md#diversity-metric).

The paper does not define its diversity metric; our reading of its figures is that a lexical distinct-n-gram ratio
fits them best, so **distinct-4 is the default metric** (label it as our choice). Three metrics,
all in ``[0, 1]``, higher = more diverse, computed on the token ids of the responses (never on text):

* **distinct-n** (per response): ``#distinct n-grams / #n-grams`` of one response, where an *n-gram* is a
  window of ``n`` consecutive valid tokens and ``#n-grams = len - n + 1`` for a response of ``len`` valid
  tokens. The step value (``microcoder/diversity/distinct{n}``) is the mean over the responses that have at
  least one n-gram.
* **group-pooled distinct-n** (per prompt): the ``G`` responses of one prompt pooled together:
  ``#distinct n-grams in the union of the G responses / total #n-grams of the G responses``. Identical
  responses give ``distinct(one) / G``; responses with no n-gram in common give
  ``sum(distinct_i) / sum(ngrams_i)``. The step value (``microcoder/diversity/group_pooled``) is the mean over
  groups that have at least one n-gram.
* **pairwise dissimilarity** (per prompt): the mean, over the unordered pairs ``(i, j)`` of the group's
  responses, of the n-gram **set** Jaccard distance ``1 - |S_i ∩ S_j| / |S_i ∪ S_j|`` (``S_i`` = set of
  distinct n-grams of response ``i``). Identical responses give 0, responses without a common n-gram give 1.
  The step value (``microcoder/diversity/pairwise``) is the mean over groups with at least two eligible
  responses. Exact (no sketch).

Conventions:

* **Valid tokens.** Inputs are either a padded ``(B, L)`` integer array/tensor with ``lengths`` (the first
  ``lengths[i]`` tokens of row ``i`` are valid) or a ``mask`` (``1`` = valid; e.g. verl's ``response_mask``),
  or a list of ``B`` 1-D token sequences (ragged, every token valid). Padding never forms n-grams. A mask with
  holes (multi-turn tool tokens masked out) splits a row into segments: an n-gram counts only if its ``n``
  tokens are valid **and** contiguous in the row, so no n-gram spans a hole.
* **Short responses.** A response with fewer than ``n`` valid tokens (including an empty one) has no n-gram:
  its distinct-n is ``NaN`` and it is excluded from the step mean, from its group's pairwise pairs and
  contributes nothing to its group's pooled counts; ``microcoder/diversity/short_responses`` counts them.
  A group with no n-gram has pooled ``NaN``; a group with fewer than two responses that have n-grams has
  pairwise ``NaN`` (counted in ``microcoder/diversity/pairwise_excluded_groups``). A step with nothing
  eligible reports ``NaN`` (the temperature controller ignores non-finite values).
* **Groups.** ``index`` gives each row's prompt/group id (verl's ``uid`` strings, ints, ...); rows of a group
  need not be contiguous. Per-group values are reported in first-appearance order of the ids.

Implementation (vectorised per response segment, no Python loop over tokens): every n-gram is hashed into a
64-bit multiplicative hash (``h = (...((t0*P ^ t1)*P ^ t2)...)*P`` mod 2**64, ``P`` odd); its low
``b = ceil(log2 G)`` bits (``G`` = largest group) are replaced by the response's position in its group, giving
one ``uint64`` key per n-gram. Each group's keys are sorted once (numpy) and adjacent-key tests give repeats
inside a response (per-response distinct), repeats across the group (pooled distinct) and the responses that
share each n-gram; pairwise intersections are ``M.T @ M`` of the 0/1 (shared n-gram x response) matrix, built
from distinct membership bitmasks. Groups are processed one at a time so their keys stay in cache.
**Hash collisions** are the only approximation: two different n-grams share the top ``64 - b`` bits with
probability ~``2**-(64-b)``; for a group of 16 responses x 16K tokens (``b = 4``) that is an expected ~3e-8
miscounted n-grams per group (each would change a value by about ``1 / #n-grams``). The tests compare against
a pure-Python set/tuple reference (:func:`brute_force_diversity`) on random data and find equality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

DEFAULT_N = 4
#: metric names accepted by :meth:`DiversityResult.value` and the temperature config's ``metric`` key
METRICS = ("distinct", "group_pooled", "pairwise")
PREFIX = "microcoder/diversity/"

_P = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier (2**64 / golden ratio)
_MAX_GROUP = 1 << 20  # responses per group; keeps >= 44 hash bits


def metric_key(metric: str, n: int = DEFAULT_N, prefix: str = PREFIX) -> str:
    """Logged name of a step metric: ``distinct`` -> ``microcoder/diversity/distinct{n}``."""
    if metric not in METRICS:
        raise ValueError(f"diversity metric must be one of {METRICS}, got {metric!r}")
    return prefix + (f"distinct{n}" if metric == "distinct" else metric)


@dataclass
class DiversityResult:
    """Per-response and per-group diversity of one step. Row arrays are in the caller's row order."""

    n: int
    ngrams: np.ndarray  #: (B,) int64, number of n-grams per response (0 when shorter than n)
    distinct: np.ndarray  #: (B,) int64, number of distinct n-grams per response
    group_keys: list  #: the group ids, first-appearance order
    group_of_row: np.ndarray  #: (B,) int64, index into ``group_keys``
    group_ngrams: np.ndarray  #: (num_groups,) int64, total n-grams of the group's responses
    group_distinct: np.ndarray  #: (num_groups,) int64, distinct n-grams in the union of the group's responses
    group_pairwise: np.ndarray  #: (num_groups,) float64, mean pairwise Jaccard distance (NaN: < 2 eligible)
    group_pairs: np.ndarray  #: (num_groups,) int64, number of pairs averaged

    @property
    def per_response(self) -> np.ndarray:
        """(B,) float64 distinct-n ratio, NaN for responses without an n-gram."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.ngrams > 0, self.distinct / np.maximum(self.ngrams, 1), np.nan)

    @property
    def group_pooled(self) -> np.ndarray:
        """(num_groups,) float64 group-pooled distinct-n, NaN for groups without an n-gram."""
        return np.where(self.group_ngrams > 0, self.group_distinct / np.maximum(self.group_ngrams, 1), np.nan)

    @property
    def short_responses(self) -> int:
        """Responses with fewer than ``n`` valid tokens (excluded from the means)."""
        return int((self.ngrams == 0).sum())

    def value(self, metric: str = "distinct") -> float:
        """Step-level value of one metric (see module doc); NaN when nothing is eligible."""
        if metric == "distinct":
            vals = self.per_response
        elif metric == "group_pooled":
            vals = self.group_pooled
        elif metric == "pairwise":
            vals = self.group_pairwise
        else:
            raise ValueError(f"diversity metric must be one of {METRICS}, got {metric!r}")
        vals = vals[np.isfinite(vals)]
        return float(vals.mean()) if vals.size else math.nan

    def metrics(self, prefix: str = PREFIX) -> dict[str, float]:
        """The step metrics: ``distinct{n}``, ``group_pooled``, ``pairwise`` and the exclusion counts."""
        out = {metric_key(m, self.n, prefix): self.value(m) for m in METRICS}
        out[prefix + "short_responses"] = float(self.short_responses)
        out[prefix + "pairwise_excluded_groups"] = float(np.isnan(self.group_pairwise).sum())
        return out


# ----------------------------------------------------------------------------------------------- inputs


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _group_codes(index: Any, batch: int) -> tuple[np.ndarray, list]:
    if index is None:
        raise ValueError("index (group id per response) is required")
    if hasattr(index, "detach"):
        index = index.detach().cpu().numpy()
    arr = np.asarray(index) if not isinstance(index, np.ndarray) else index
    if arr.ndim != 1 or arr.shape[0] != batch:
        raise ValueError(f"index must have one group id per response ({batch}), got shape {arr.shape}")
    if batch and arr.dtype.kind in "iub":
        keys, first, codes = np.unique(arr, return_index=True, return_inverse=True)
        rank = np.argsort(first, kind="stable")
        remap = np.empty_like(rank)
        remap[rank] = np.arange(rank.size)
        return remap[codes.reshape(-1)].astype(np.int64), keys[rank].tolist()
    mapping: dict = {}
    codes = np.fromiter((mapping.setdefault(k, len(mapping)) for k in arr.tolist()), dtype=np.int64, count=batch)
    return codes, list(mapping)


def _row_segments(responses: Any, lengths: Any, mask: Any) -> list[list[np.ndarray]]:
    """For each row, its contiguous runs of valid tokens (1-D integer views)."""
    if isinstance(responses, (list, tuple)) and (not responses or np.ndim(_to_numpy(responses[0])) == 1):
        if lengths is not None or mask is not None:
            raise ValueError("a list of 1-D token sequences is ragged already: pass neither lengths nor mask")
        rows = [_to_numpy(r).reshape(-1) for r in responses]
        for i, r in enumerate(rows):
            if r.size and r.dtype.kind not in "iu":
                raise ValueError(f"responses[{i}] must hold integer token ids, got dtype {r.dtype}")
        return [[r] for r in rows]
    x = _to_numpy(responses)
    if x.ndim != 2:
        raise ValueError(f"responses must be (batch, max_len) token ids or a list of 1-D sequences, got {x.shape}")
    if x.size and x.dtype.kind not in "iu":
        raise ValueError(f"responses must hold integer token ids, got dtype {x.dtype}")
    batch, width = x.shape
    if (lengths is None) == (mask is None):
        raise ValueError("padded responses need exactly one of lengths= or mask=")
    if lengths is not None:
        lens = _to_numpy(lengths).reshape(-1)
        if lens.shape[0] != batch:
            raise ValueError(f"lengths must have {batch} entries, got {lens.shape[0]}")
        if batch and (lens.min() < 0 or lens.max() > width):
            raise ValueError(f"lengths must lie in [0, {width}] (responses.shape[1])")
        return [[x[i, : int(n)]] for i, n in enumerate(lens.tolist())]
    m = _to_numpy(mask)
    if m.shape != x.shape:
        raise ValueError(f"mask shape {m.shape} != responses shape {x.shape}")
    m = m.astype(bool, copy=False)
    lens = m.sum(axis=1)
    if np.array_equal(m, np.arange(width)[None, :] < lens[:, None]):  # right padding: one segment per row
        return [[x[i, : int(n)]] for i, n in enumerate(lens.tolist())]
    out = []
    for i in range(batch):  # masks with holes: split rows at every 0 run (vectorised per row)
        edges = np.flatnonzero(np.diff(np.concatenate(([False], m[i], [False])).astype(np.int8)))
        out.append([x[i, s:e] for s, e in zip(edges[0::2].tolist(), edges[1::2].tolist())])
    return out


# ----------------------------------------------------------------------------------------------- core


def _combine(cols: Sequence[np.ndarray], out: np.ndarray, keep: np.uint64, label: int) -> None:
    """``out = ((...((c0*P ^ c1)*P ^ c2)...)*P & keep) | label`` over uint64 columns (mod 2**64)."""
    np.multiply(cols[0], _P, out=out)
    for c in cols[1:]:
        np.bitwise_xor(out, c, out=out)
        np.multiply(out, _P, out=out)
    np.bitwise_and(out, keep, out=out)
    np.bitwise_or(out, np.uint64(label), out=out)


def _hash_into(tokens: np.ndarray, n: int, out: np.ndarray, label: int, keep: np.uint64) -> None:
    """Write the keys of the ``len(tokens) - n + 1`` n-grams of ``tokens`` into ``out``."""
    t = tokens.view(np.uint64) if tokens.dtype == np.int64 else tokens.astype(np.uint64)
    w = out.shape[0]
    _combine([t[k : k + w] for k in range(n)], out, keep, label)


def _intersections(keys: np.ndarray, x: np.ndarray, cross: np.ndarray, rows: int, label_bits: int) -> np.ndarray:
    """``(rows, rows)`` float64 matrix of ``|S_a ∩ S_b|`` for one group from its sorted keys.

    ``x = keys[1:] ^ keys[:-1]``; ``cross`` are the ``j`` where keys ``j`` and ``j + 1`` hold the same n-gram in two
    rows. Every row of a run (one n-gram, >= 2 rows) is the lower or upper row of one of the run's transitions,
    and a new run starts where the hash changes. Intersections are ``M.T @ M`` of the 0/1 (run x row) matrix,
    computed from the distinct membership bitmasks (``rows <= 64``) or densely. Exact: counts < 2**24.
    """
    lo = keys.take(cross)
    xc = x.take(cross)
    lmask = np.uint64((1 << label_bits) - 1)
    h = lo >> np.uint64(label_bits)
    new_run = h[1:] != h[:-1]
    row_lo = lo & lmask
    row_hi = row_lo ^ (xc & lmask)
    if rows <= 64:
        one = np.uint64(1)
        bits = np.left_shift(one, row_lo)
        bits |= np.left_shift(one, row_hi)
        starts = np.concatenate(([0], np.flatnonzero(new_run) + 1))
        patterns, counts = np.unique(np.bitwise_or.reduceat(bits, starts), return_counts=True)
        m = ((patterns[:, None] >> np.arange(rows, dtype=np.uint64)) & one).astype(np.float32)
        return ((m.T * counts.astype(np.float32)) @ m).astype(np.float64)
    run = np.empty(cross.size, dtype=np.int64)
    run[0] = 0
    np.cumsum(new_run, out=run[1:])
    base = run * rows
    m = np.zeros((int(run[-1]) + 1) * rows, dtype=np.float32)
    m[base + row_lo.astype(np.int64)] = 1.0
    m[base + row_hi.astype(np.int64)] = 1.0
    m = m.reshape(-1, rows)
    return (m.T @ m).astype(np.float64)


def ngram_keys(grams: Any, label_bits: int = 0) -> np.ndarray:
    """Keys (label 0) of explicit n-grams, ``(M, n)`` token ids -> ``(M,)`` uint64 (tests and debugging).

    The same hash as :func:`diversity_metrics` with ``label_bits`` low bits cleared.
    """
    g = _to_numpy(grams).astype(np.int64).view(np.uint64)
    out = np.empty(g.shape[0], dtype=np.uint64)
    _combine([g[:, k] for k in range(g.shape[1])], out, np.uint64(~np.uint64((1 << label_bits) - 1)), 0)
    return out


def diversity_metrics(
    responses: Any,
    index: Any,
    *,
    lengths: Any = None,
    mask: Any = None,
    n: int = DEFAULT_N,
) -> DiversityResult:
    """Diversity of one step's responses, per response, per group and as step metrics.

    Args:
        responses: ``(B, L)`` integer token ids (torch tensor or numpy array) with ``lengths`` or ``mask``,
            or a list of ``B`` 1-D token sequences (ragged; then neither ``lengths`` nor ``mask``).
        index: ``B`` group ids (the prompt each response answers; verl ``uid``), any hashable values.
        lengths: ``(B,)`` number of valid (leading) tokens per row.
        mask: ``(B, L)`` 1 for valid tokens (e.g. ``response_mask``); holes split n-grams.
        n: n-gram order (default 4).

    Returns:
        :class:`DiversityResult`; ``.metrics()`` gives the logged step values, ``.value(metric)`` the
        scalar the temperature controller uses.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (n-gram order) must be an integer >= 1, got {n!r}")
    segments = _row_segments(responses, lengths, mask)
    batch = len(segments)
    codes, keys = _group_codes(index, batch)
    num_groups = len(keys)

    # rows in group-major order: position p holds original row order[p]
    order = np.argsort(codes, kind="stable")
    group_size = np.bincount(codes, minlength=num_groups)
    if group_size.max(initial=0) > _MAX_GROUP:
        raise ValueError(f"at most {_MAX_GROUP} responses per group, got {int(group_size.max())}")
    group_row_start = np.concatenate(([0], np.cumsum(group_size)))

    # Keys carry the row's position inside its group in the low bits: sorting a group's keys orders them by
    # n-gram hash, then row.
    label_bits = max(1, (int(group_size.max(initial=1)) - 1).bit_length())
    lmask = np.uint64((1 << label_bits) - 1)
    keep = np.uint64(~lmask)

    seg_windows = [[max(s.shape[0] - n + 1, 0) for s in segments[i]] for i in order.tolist()]
    ngrams_pos = np.array([sum(w) for w in seg_windows], dtype=np.int64)  # per group-major position p
    distinct_pos = ngrams_pos.copy()
    group_ngrams = np.add.reduceat(ngrams_pos, group_row_start[:-1]) if batch else np.zeros(0, np.int64)
    group_distinct = group_ngrams.copy()
    pairwise = np.full(num_groups, np.nan)
    pairs = np.zeros(num_groups, dtype=np.int64)
    buf = np.empty(int(group_ngrams.max(initial=0)), dtype=np.uint64)
    order_list = order.tolist()

    # One group at a time: its keys (<= G x L) stay in cache for every pass.
    for g in range(num_groups):
        r0, r1 = int(group_row_start[g]), int(group_row_start[g + 1])
        total = int(group_ngrams[g])
        keys_g = buf[:total]
        o = 0
        for p in range(r0, r1):
            for seg, w in zip(segments[order_list[p]], seg_windows[p]):
                if w:
                    _hash_into(seg, n, keys_g[o : o + w], p - r0, keep)
                    o += w
        if total > 1:
            keys_g.sort()
            # adjacent keys: x == 0 -> same n-gram, same row (a repeat); 0 < x <= lmask -> same n-gram, next row
            x = keys_g[1:] ^ keys_g[:-1]
            same = x <= lmask
            repeat = x == 0
            rep_rows = (keys_g[1:][repeat] & lmask).astype(np.int64)
            distinct_pos[r0:r1] -= np.bincount(rep_rows, minlength=r1 - r0)
            group_distinct[g] -= np.count_nonzero(same)
            cross = np.flatnonzero(same ^ repeat)
        else:
            cross = np.zeros(0, dtype=np.int64)

        eligible = np.flatnonzero(ngrams_pos[r0:r1] > 0)
        k = eligible.size
        if k < 2:
            continue
        size = distinct_pos[r0:r1][eligible].astype(np.float64)
        a, b = np.triu_indices(k, 1)
        if cross.size:
            inter = _intersections(keys_g, x, cross, r1 - r0, label_bits)[eligible[a], eligible[b]]
        else:
            inter = np.zeros(a.size)
        pairwise[g] = float(np.mean(1.0 - inter / (size[a] + size[b] - inter)))
        pairs[g] = a.size

    ngrams = np.empty(batch, dtype=np.int64)
    distinct = np.empty(batch, dtype=np.int64)
    ngrams[order] = ngrams_pos
    distinct[order] = distinct_pos

    return DiversityResult(
        n=n,
        ngrams=ngrams,
        distinct=distinct,
        group_keys=keys,
        group_of_row=codes,
        group_ngrams=group_ngrams,
        group_distinct=group_distinct.astype(np.int64),
        group_pairwise=pairwise,
        group_pairs=pairs,
    )


def brute_force_diversity(rows: Sequence[Sequence[int]], index: Sequence[Any], n: int = DEFAULT_N) -> dict:
    """Pure-Python reference (tuples and sets) over ragged rows: per-response, per-group pooled and pairwise.

    For tests only: O(tokens) Python work. Returns ``{"per_response": [...], "group_keys": [...],
    "group_pooled": [...], "group_pairwise": [...]}`` with NaN where undefined (same conventions).
    """
    grams = [[tuple(r[j : j + n]) for j in range(len(r) - n + 1)] for r in (list(map(int, r)) for r in rows)]
    per = [len(set(g)) / len(g) if g else math.nan for g in grams]
    groups: dict = {}
    for i, k in enumerate(index):
        groups.setdefault(k, []).append(i)
    pooled, pairwise = [], []
    for members in groups.values():
        allg = [x for i in members for x in grams[i]]
        pooled.append(len(set(allg)) / len(allg) if allg else math.nan)
        sets = [set(grams[i]) for i in members if grams[i]]
        d = [1 - len(a & b) / len(a | b) for x, a in enumerate(sets) for b in sets[x + 1 :]]
        pairwise.append(sum(d) / len(d) if d else math.nan)
    return {"per_response": per, "group_keys": list(groups), "group_pooled": pooled, "group_pairwise": pairwise}
