"""Diversity metrics over token ids (framework-free): hand-made cases and a brute-force reference."""

import math

import numpy as np
import pytest
import torch

from microcoder_ext.core.diversity import (
    METRICS,
    brute_force_diversity,
    diversity_metrics,
    metric_key,
    ngram_keys,
)
from host_load import hang_guard

KEYS = ("microcoder/diversity/distinct4", "microcoder/diversity/group_pooled", "microcoder/diversity/pairwise")


def _pad(rows, width=None, pad=0):
    width = width or max((len(r) for r in rows), default=0)
    x = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        x[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return x, torch.tensor([len(r) for r in rows])


def _check_against_reference(rows, index, n):
    ref = brute_force_diversity(rows, index, n)
    res = diversity_metrics(rows, index, n=n)
    assert res.group_keys == ref["group_keys"]
    np.testing.assert_allclose(res.per_response, ref["per_response"], equal_nan=True, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.group_pooled, ref["group_pooled"], equal_nan=True, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.group_pairwise, ref["group_pairwise"], equal_nan=True, rtol=0, atol=1e-12)
    return res


def test_metric_names_use_n():
    assert metric_key("distinct") == KEYS[0]
    assert metric_key("distinct", n=3) == "microcoder/diversity/distinct3"
    assert [metric_key(m) for m in METRICS] == list(KEYS)
    with pytest.raises(ValueError, match="diversity metric"):
        metric_key("entropy")


def test_hand_computed_distinct_and_jaccard():
    # row 0: 4-grams 1234 2341 3412 4123 1234 -> 4 distinct of 5
    # rows 1/2: {1234, 2345} vs {2345, 3456}: |∩| = 1, |∪| = 3 -> distance 2/3
    rows = [[1, 2, 3, 4, 1, 2, 3, 4], [1, 2, 3, 4, 5], [2, 3, 4, 5, 6]]
    res = diversity_metrics(rows, ["a", "b", "b"])
    assert res.per_response.tolist() == [0.8, 1.0, 1.0]
    assert res.ngrams.tolist() == [5, 2, 2] and res.distinct.tolist() == [4, 2, 2]
    assert res.group_keys == ["a", "b"]
    assert res.group_pooled.tolist() == [0.8, 3 / 4]  # group b: 3 distinct of 4
    assert math.isnan(res.group_pairwise[0]) and res.group_pairwise[1] == pytest.approx(2 / 3)
    m = res.metrics()
    assert m[KEYS[0]] == pytest.approx((0.8 + 1 + 1) / 3)
    assert m[KEYS[1]] == pytest.approx((0.8 + 0.75) / 2)
    assert m[KEYS[2]] == pytest.approx(2 / 3)
    assert m["microcoder/diversity/short_responses"] == 0.0
    assert m["microcoder/diversity/pairwise_excluded_groups"] == 1.0  # group a has one response


def test_identical_responses():
    one = [5, 9, 5, 9, 5, 7, 1, 2, 3, 4, 5]
    res = diversity_metrics([one] * 4, [0] * 4)
    single = diversity_metrics([one], [0])
    assert res.group_pairwise.tolist() == [0.0]
    np.testing.assert_allclose(res.per_response, single.per_response[0])
    # pooled over the union: the same distinct n-grams, G times as many n-grams
    assert res.group_pooled[0] == pytest.approx(single.group_pooled[0] / 4)
    assert res.group_distinct.tolist() == single.group_distinct.tolist()


def test_disjoint_responses():
    rows = [list(range(0, 10)), list(range(100, 107)), [200, 201, 202, 203, 200, 201, 202, 203]]
    res = diversity_metrics(rows, ["p"] * 3)
    assert res.group_pairwise.tolist() == [1.0]
    assert res.group_pooled[0] == pytest.approx(res.distinct.sum() / res.ngrams.sum())
    assert res.group_pairs.tolist() == [3]


def test_short_and_empty_responses_are_excluded_and_counted():
    rows = [[], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4], [7, 8], [9, 9, 9, 9, 9]]
    res = diversity_metrics(rows, ["a", "a", "a", "a", "b", "c"])
    per = res.per_response
    assert np.isnan(per[[0, 1, 4]]).all() and per[[2, 3]].tolist() == [1.0, 1.0] and per[5] == 0.5
    assert res.short_responses == 3
    # group a: two eligible identical responses -> one pair, distance 0; pooled 1 distinct / 2 n-grams
    assert res.group_pairs.tolist() == [1, 0, 0]
    assert res.group_pairwise[0] == 0.0 and np.isnan(res.group_pairwise[1:]).all()
    assert res.group_pooled[0] == 0.5 and np.isnan(res.group_pooled[1]) and res.group_pooled[2] == 0.5
    m = res.metrics()
    assert m[KEYS[0]] == pytest.approx((1 + 1 + 0.5) / 3)
    assert m[KEYS[1]] == pytest.approx(0.5)
    assert m["microcoder/diversity/short_responses"] == 3.0
    assert m["microcoder/diversity/pairwise_excluded_groups"] == 2.0


def test_nothing_eligible_gives_nan():
    for rows in ([[1, 2], []], []):
        m = diversity_metrics(rows, list(range(len(rows)))).metrics()
        assert all(math.isnan(m[k]) for k in KEYS)


def test_padding_is_ignored_lengths_mask_and_ragged_agree():
    rows = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4], [], [4, 4, 4, 4, 4, 4, 4]]
    index = ["x", "y", "x", "y"]
    ragged = diversity_metrics(rows, index)
    for pad in (0, 4, -100):  # padding value equal to real tokens must not matter
        x, lens = _pad(rows, width=12, pad=pad)
        mask = (torch.arange(12)[None, :] < lens[:, None]).long()
        for res in (
            diversity_metrics(x, index, lengths=lens),
            diversity_metrics(x, index, mask=mask),
            diversity_metrics(x.numpy().astype(np.int32), np.array(index), lengths=lens.numpy()),
        ):
            for a, b in ((res.per_response, ragged.per_response), (res.group_pooled, ragged.group_pooled),
                         (res.group_pairwise, ragged.group_pairwise)):
                np.testing.assert_array_equal(a, b)


def test_mask_holes_split_ngrams():
    # tokens 9 at positions 4 (hole, e.g. a tool response) must neither count nor join 1 2 3 4 | 5 6 7 8
    x = torch.tensor([[1, 2, 3, 4, 9, 5, 6, 7, 8, 0], [1, 2, 3, 4, 5, 6, 7, 8, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    res = diversity_metrics(x, [0, 0], mask=mask)
    assert res.ngrams.tolist() == [2, 5]
    # hole row: {1234, 5678}; full row: {1234, 2345, 3456, 4567, 5678}: |∩| = 2, |∪| = 5
    assert res.group_pairwise[0] == pytest.approx(1 - 2 / 5)


def test_group_ids_any_type_non_contiguous_first_appearance_order():
    rows = [[1, 2, 3, 4, 5], [9, 9, 9, 9, 9], [1, 2, 3, 4, 5], [9, 9, 9, 9, 9]]
    for index in (["u2", "u1", "u2", "u1"], [7, 3, 7, 3], torch.tensor([7, 3, 7, 3]), np.array([2.5, 1.5, 2.5, 1.5])):
        res = diversity_metrics(rows, index)
        assert res.group_pairwise.tolist() == [0.0, 0.0]
        assert res.group_pooled.tolist() == [0.5, 0.25]
        assert res.group_of_row.tolist() == [0, 1, 0, 1]
        keys = res.group_keys
        assert [str(k) for k in keys] == [str(k) for k in (index.tolist() if hasattr(index, "tolist") else index)[:2]]


@pytest.mark.parametrize("seed", range(8))
def test_matches_brute_force_reference_on_random_data(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        batch = int(rng.integers(1, 24))
        vocab = int(rng.choice([2, 3, 40, 151_936]))
        n = int(rng.integers(1, 6))
        base = rng.integers(0, vocab, 48).tolist()
        rows = [
            base[int(rng.integers(0, 8)) : int(rng.integers(8, 48))] if rng.random() < 0.4
            else rng.integers(0, vocab, int(rng.integers(0, 40))).tolist()
            for _ in range(batch)
        ]
        index = [f"g{int(g)}" for g in rng.integers(0, 5, batch)]
        _check_against_reference(rows, index, n)


def test_large_groups_use_the_dense_path_and_match_reference():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 5, 60).tolist()
    rows = [
        base[int(rng.integers(0, 20)) :] if rng.random() < 0.5 else rng.integers(0, 5, 30).tolist() for _ in range(150)
    ]
    res = _check_against_reference(rows, [0] * 100 + [1] * 50, 3)  # 100 rows > 64-bit membership masks
    assert res.group_pairs.tolist()[0] == 100 * 99 // 2


def test_realistic_vocab_shared_templates_match_reference():
    rng = np.random.default_rng(3)
    rows, index = [], []
    for g in range(3):
        template = rng.integers(0, 151_936, 400)
        for _ in range(16):
            r = template.copy()
            flip = rng.random(r.size) < 0.05
            r[flip] = rng.integers(0, 151_936, int(flip.sum()))
            rows.append(r[: int(rng.integers(0, 400))].tolist())
            index.append(g)
    res = _check_against_reference(rows, index, 4)
    assert 0.0 < res.value("pairwise") < 1.0


def test_hash_separates_all_small_ngrams():
    # every 4-gram over a 12-token vocabulary and every 2-gram over 1000 tokens gets its own key (top 60 bits)
    for vocab, n in ((12, 4), (1000, 2)):
        grams = np.stack(np.meshgrid(*[np.arange(vocab)] * n, indexing="ij"), -1).reshape(-1, n)
        assert np.unique(ngram_keys(grams, label_bits=4)).size == grams.shape[0]
    # and they are the keys diversity_metrics uses: one sequence's sliding windows
    seq = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    windows = np.lib.stride_tricks.sliding_window_view(seq, 4)
    out = np.empty(windows.shape[0], dtype=np.uint64)
    from microcoder_ext.core.diversity import _hash_into

    _hash_into(seq, 4, out, 0, np.uint64(~np.uint64(15)))
    np.testing.assert_array_equal(out, ngram_keys(windows, label_bits=4))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"responses": torch.zeros(2, 4, dtype=torch.long), "index": [0, 0]}, "exactly one of lengths= or mask="),
        ({"responses": torch.zeros(2, 4, dtype=torch.long), "index": [0, 0], "lengths": [1, 5]},
         r"lengths must lie in \[0, 4\]"),
        ({"responses": torch.zeros(2, 4, dtype=torch.long), "index": [0], "lengths": [1, 1]},
         "one group id per response"),
        ({"responses": torch.zeros(2, 4, dtype=torch.long), "index": [0, 0], "mask": torch.ones(2, 3)}, "mask shape"),
        ({"responses": [[1, 2], [3]], "index": [0, 0], "lengths": [2, 1]}, "ragged already"),
        ({"responses": torch.zeros(2, 4), "index": [0, 0], "lengths": [1, 1]}, "integer token ids"),
        ({"responses": [[1, 2, 3]], "index": [0], "n": 0}, "n-gram order"),
    ],
)
def test_invalid_inputs_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        diversity_metrics(**kwargs)


def test_overhead_bench_runs_small():
    import json
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "diversity_overhead.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--batch", "32", "--max-len", "256", "--repeats", "1", "--json"],
        capture_output=True, text=True, check=True, timeout=hang_guard(120),
    )
    report = json.loads(out.stdout)
    assert set(report["results"]) == {"random", "templated"}
    for r in report["results"].values():
        assert r["diversity_ms"] > 0 and r["mask_ms"] > 0 and r["step_percent"] >= 0
