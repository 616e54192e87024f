"""Filters of ``microcoder data prepare``: metadata, exact and near duplicates (MinHash/LSH + exact Jaccard),
decontamination (id, title, statement 13-gram overlap) and the minimum difficulty score."""

import importlib.util
import random
import time

import pytest

from microcoder_ext.data import filters as F
from microcoder_ext.data.problem import Problem

STDIN = {"inputs": ["1\n"], "outputs": ["1\n"]}


def prob(pid, statement="Print the number.", **kw):
    return Problem(id=pid, source="t", statement=statement, tests=STDIN, **kw)


def text(seed, n=120):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    return " ".join(rng.choice(vocab) for _ in range(n))


def kept_ids(problems, filters):
    return [p.id for p, r in F.run_filters(problems, filters) if r is None]


def rejections(problems, filters):
    return {p.id: r for p, r in F.run_filters(problems, filters) if r is not None}


def test_metadata_filters():
    ps = [prob("a", difficulty="easy", platform="leetcode", date="2025-01-31"),
          prob("b", difficulty="hard", platform="atcoder", date="2025-02-01"),
          prob("c", difficulty="medium", platform="codeforces", date="2025-04-30"),
          prob("d", difficulty=None, platform=None, date=None)]
    assert kept_ids(ps, [F.MetaFilter(difficulties={"medium", "hard"})]) == ["b", "c"]
    assert kept_ids(ps, [F.MetaFilter(platforms={"AtCoder", "leetcode"})]) == ["a", "b"]
    rej = rejections(ps, [F.MetaFilter(date_from="2025-02-01", date_before="2025-04-30T00:00")])
    assert set(rej) == {"a", "c", "d"} and rej["d"].reason == "date unknown" and rej["a"].reason == "date"
    with pytest.raises(F.FilterError, match="unknown difficulty"):
        F.MetaFilter(difficulties={"insane"})
    with pytest.raises(F.FilterError, match="date-from"):
        F.MetaFilter(date_from="yesterday")


def test_exact_duplicates_after_normalisation():
    ps = [prob("a", "Given <b>n</b>, print  $n^2$."), prob("b", "given N, PRINT n^2!"), prob("c", "Print n^3.")]
    rej = rejections(ps, [F.ExactDedup()])
    assert list(rej) == ["b"] and rej["b"].reason == "exact duplicate" and rej["b"].matched == "a"


def test_lsh_bands_reach_the_threshold():
    b, r = F.lsh_bands(128, 0.8)
    assert (b, r) == (32, 4) and 1 - (1 - 0.8 ** r) ** b >= 0.99


def test_near_duplicates():
    base = text(1).split()
    edited = base[:]
    edited[60] = "changed"  # one word: 5 of 116 shingles differ -> Jaccard ~0.92
    far = base[:]
    for i in range(0, 120, 8):  # every 8th word: Jaccard well under 0.8
        far[i] = f"x{i}"
    ps = [prob("orig", " ".join(base)), prob("edit", " ".join(edited)), prob("far", " ".join(far)),
          prob("other", text(2))]
    rej = rejections(ps, [F.NearDedup(0.8)])
    assert list(rej) == ["edit"] and rej["edit"].matched == "orig" and "Jaccard 0.9" in rej["edit"].detail
    a, b = F.shingles(base, 5), F.shingles(far, 5)
    j = len(a & b) / len(a | b)
    assert 0.1 < j < 0.8
    # the exact Jaccard decides: just under it "far" is a near duplicate, just over it is not
    assert kept_ids(ps, [F.NearDedup(j - 0.01)]) == ["orig", "other"]
    assert kept_ids(ps, [F.NearDedup(j + 0.01)]) == ["orig", "far", "other"]


def test_near_dedup_is_linear_enough():
    ps = [prob(str(i), text(1000 + i, 150)) for i in range(3000)]
    t0 = time.process_time()
    assert len(kept_ids(ps, [F.NearDedup(0.8)])) == 3000
    assert time.process_time() - t0 < 30  # CPU seconds (waiting for a CPU on a busy machine does not count)


BOILER = "the first line of the input contains a single integer t the number of test cases"


def test_decontamination_report():
    evals = [prob("lcb/3500", "Add k to every element of nums. " + text(5, 80), title="Add Pairs",
                  platform="leetcode", extra={"question_id": "3500"}),
             prob("lcb/abc400_a", text(6, 100) + " " + BOILER, title="Product", platform="atcoder")]
    dec = F.Decontaminator(evals)
    train = [prob("leetcode/add-pairs", "different words entirely " + text(7), title="Add Pairs"),
             prob("x/1", "prefix words here. " + evals[1].statement + " and a long suffix " + text(8, 40)),
             prob("lcb/abc400_a", "unrelated " + text(9)),
             prob("y/2", "An unrelated statement. " + BOILER + " " + text(10, 60), title="Prod"),
             prob("z/3", "Short.", title="A")]
    rej = rejections(train, [dec])
    assert set(rej) == {"leetcode/add-pairs", "x/1", "lcb/abc400_a"}
    assert all(r.reason == "contaminated" for r in rej.values())
    assert rej["leetcode/add-pairs"].detail.startswith("title:") and rej["leetcode/add-pairs"].matched == "lcb/3500"
    assert rej["x/1"].detail.startswith("ngram: 100%") and rej["x/1"].matched == "lcb/abc400_a"
    assert rej["lcb/abc400_a"].detail.startswith("id:")
    # only the n-gram check
    assert set(rejections(train, [F.Decontaminator(evals, by=("ngram",))])) == {"x/1"}
    with pytest.raises(F.FilterError):
        F.Decontaminator(evals, threshold=0)


def test_min_difficulty_uses_stored_scores():
    ps = [prob("a", extra={"difficulty_scores": {"score": 0.9}}),
          prob("b", extra={"difficulty_scores": {"score": 0.2}})]
    rej = rejections(ps, [F.MinDifficulty(0.5)])
    assert list(rej) == ["b"] and rej["b"].reason == "min difficulty"
    with pytest.raises(F.FilterError):
        F.MinDifficulty(1.5)


def test_min_difficulty_without_stored_scores():
    """No stored scores: the scorer of microcoder_ext.data.difficulty runs (no judge); a problem where nothing can be
    measured (no solution, no size bound, no judge) is dropped as unscored, not a crash."""
    p = prob("c", "Given n, print the sum of 1..n.", solutions=["n = int(input())\nprint(n * (n + 1) // 2)\n"])
    F.MinDifficulty(0.0)(p)
    assert 0 <= p.extra["difficulty_scores"]["score"] <= 1
    bare = prob("d", "Print hello.")
    rej = rejections([bare], [F.MinDifficulty(0.0)])
    assert rej["d"].reason == "unscored difficulty"