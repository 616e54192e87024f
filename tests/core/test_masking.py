"""Semantics of the conditional truncation mask (framework-free)."""

import itertools

import pytest
import torch

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.masking import (
    compute_truncation_mask,
    conditional_truncation_mask,
    mask_metrics,
    response_tails,
    tail_repeats,
    truncation_mask_components,
)

M = 4
L_MAX = 12


def _row(tokens, width=16, pad=7):
    """Right-pad a token list to ``width`` with ``pad``."""
    return list(tokens) + [pad] * (width - len(tokens))


def _batch(rows, width=16, pad=7):
    responses = torch.tensor([_row(r, width, pad) for r in rows])
    lengths = torch.tensor([len(r) for r in rows])
    return responses, lengths


NON_REPEATING = list(range(1, L_MAX + 1))  # length L_MAX, no loop
REPEATING = [9, 9, 9, 9] + [1, 2, 3, 4] * 2  # last 4 == previous 4
SHORT = list(range(1, L_MAX))  # one token short of L_MAX


def _mask(rows, verdicts, rho=1.0, **kw):
    responses, lengths = _batch(rows)
    return conditional_truncation_mask(responses, lengths, L_MAX, verdicts, rho=rho, m=M, **kw).tolist()


def test_all_conditions_hold_masks():
    assert _mask([NON_REPEATING], ["correct"]) == [True]


@pytest.mark.parametrize(
    "rows, verdicts, rho",
    [
        ([SHORT], ["correct"], 1.0),  # 1. not truncated
        ([NON_REPEATING], ["wrong_answer"], 1.0),  # 2. incorrect verdict
        ([REPEATING], ["correct"], 1.0),  # 3. tail repeats
        ([NON_REPEATING], ["correct"], 0.0),  # 4. coin fails
    ],
    ids=["not_truncated", "incorrect", "repeating", "rho0"],
)
def test_each_condition_alone_prevents_masking(rows, verdicts, rho):
    assert _mask(rows, verdicts, rho=rho) == [False]


def test_longer_than_budget_counts_as_truncated():
    # e.g. multi-turn responses clipped after the budget: >= is the rule
    rows = [NON_REPEATING + [13, 14]]
    assert _mask(rows, ["correct"]) == [True]


@pytest.mark.parametrize("verdict", V.ALL)
def test_modes_per_verdict(verdict):
    non_inc = _mask([NON_REPEATING], [verdict], mode="non_incorrect")
    strict = _mask([NON_REPEATING], [verdict], mode="correct_only")
    assert non_inc == [verdict not in V.INCORRECT]
    assert strict == [verdict == "correct"]


def test_block_repeat_is_literal_block_equality():
    period3 = [5] + [1, 2, 3] * 3 + [1, 2]  # length 12, period 3 does not divide m=4
    responses, lengths = _batch([REPEATING, period3, NON_REPEATING])
    block = tail_repeats(responses, lengths, m=M, repeat_check="block").tolist()
    periodic = tail_repeats(responses, lengths, m=M, repeat_check="periodic").tolist()
    assert block == [True, False, False]
    assert periodic == [True, True, False]
    # consequence for the mask: block masks the period-3 loop, periodic does not
    assert _mask([period3], ["correct"], repeat_check="block") == [True]
    assert _mask([period3], ["correct"], repeat_check="periodic") == [False]


def test_periodic_catches_single_token_loops_and_period_m():
    rows = [[3] * L_MAX, [8, 8, 8, 8] + [1, 2, 3, 4, 1, 2, 3, 4]]
    responses, lengths = _batch(rows)
    assert tail_repeats(responses, lengths, m=M, repeat_check="periodic").tolist() == [True, True]


def test_periodic_needs_the_whole_window_periodic():
    # last 2m tokens = 1 2 3 1 2 3 1 9 : periodic only up to the last token -> not a loop
    row = [4, 4, 4, 4, 1, 2, 3, 1, 2, 3, 1, 9]
    responses, lengths = _batch([row])
    assert tail_repeats(responses, lengths, m=M, repeat_check="periodic").tolist() == [False]


@pytest.mark.parametrize("repeat_check", ["block", "periodic"])
def test_shorter_than_2m_never_repeats(repeat_check):
    rows = [[1] * (2 * M - 1), [1, 2] * 3 + [1]]
    responses, lengths = _batch(rows)
    assert tail_repeats(responses, lengths, m=M, repeat_check=repeat_check).tolist() == [False, False]
    # ...so a truncated response shorter than 2m is masked even if it is all one token
    out = conditional_truncation_mask(responses, lengths, 2 * M - 1, ["correct", "no_answer"], rho=1.0, m=M,
                                      repeat_check=repeat_check)
    assert out.tolist() == [True, True]


@pytest.mark.parametrize("repeat_check", ["block", "periodic"])
def test_padding_is_ignored(repeat_check):
    rows = [NON_REPEATING, REPEATING, SHORT, [1, 2, 3]]
    verdicts = ["correct", "no_answer", "correct", "correct"]
    results = []
    for pad in (0, 7, 1, 4):
        responses, lengths = _batch(rows, width=20, pad=pad)
        results.append(
            conditional_truncation_mask(responses, lengths, L_MAX, verdicts, rho=1.0, m=M,
                                        repeat_check=repeat_check).tolist()
        )
    assert all(r == [True, False, False, False] for r in results)
    # padding that continues a loop must not create a "repeat" either
    row = [1, 2, 3, 4] * 2 + [5, 6, 7, 8]  # tail not repeating...
    responses = torch.tensor([row + [5, 6, 7, 8] * 2])  # ...but padding would repeat it
    assert not tail_repeats(responses, torch.tensor([12]), m=M, repeat_check=repeat_check).item()


def test_rho_one_masks_every_eligible_and_rho_zero_none():
    rows = [NON_REPEATING, REPEATING, SHORT, NON_REPEATING, NON_REPEATING]
    verdicts = ["correct", "correct", "correct", "timeout", "sandbox_error"]
    assert _mask(rows, verdicts, rho=1.0) == [True, False, False, False, True]
    assert _mask(rows, verdicts, rho=0.0) == [False] * 5


def test_rho_statistics_and_seeded_reproducibility():
    n = 20000
    responses = torch.arange(L_MAX).repeat(n, 1) + 1
    lengths = torch.full((n,), L_MAX)
    verdicts = ["correct"] * n

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return conditional_truncation_mask(responses, lengths, L_MAX, verdicts, rho=0.2, m=M, generator=g)

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a, b)  # same seed, same coins
    assert not torch.equal(a, c)
    # binomial(20000, 0.2): sd = 0.0028; 5 sd band
    for mask in (a, c):
        assert abs(mask.float().mean().item() - 0.2) < 0.015


def test_coins_are_independent_of_which_rows_are_eligible():
    # one coin per row whatever the data: making row 0 ineligible must not shift the coins of the others
    n = 64
    responses = torch.arange(L_MAX).repeat(n, 1) + 1
    lengths = torch.full((n,), L_MAX)
    base = conditional_truncation_mask(responses, lengths, L_MAX, ["correct"] * n, rho=0.5, m=M,
                                       generator=torch.Generator().manual_seed(3))
    other = conditional_truncation_mask(responses, lengths, L_MAX, ["wrong_answer"] + ["correct"] * (n - 1),
                                        rho=0.5, m=M, generator=torch.Generator().manual_seed(3))
    assert not other[0] and torch.equal(base[1:], other[1:])


def test_components_and_metrics():
    rows = [NON_REPEATING, REPEATING, SHORT, NON_REPEATING]
    verdicts = ["correct", "correct", "correct", "runtime_error"]
    responses, lengths = _batch(rows)
    r = truncation_mask_components(responses, lengths, L_MAX, verdicts, rho=1.0, m=M)
    assert r.truncated.tolist() == [True, True, False, True]
    assert r.repeating.tolist() == [False, True, False, False]
    assert r.eligible.tolist() == [True, False, False, False]
    assert mask_metrics(r) == {
        "microcoder/truncated_frac": 0.75,
        "microcoder/eligible_frac": 0.25,
        "microcoder/repeat_frac": 0.25,
        "microcoder/masked_frac": 0.25,
        "microcoder/truncated_no_answer_frac": 0.0,
        "microcoder/masked_no_answer_frac": 0.0,
    }


def test_masked_no_answer_is_the_blind_spot_metric():
    """A response that never closes its code block and runs to the budget (``no_answer``) is masked under
    ``non_incorrect`` (spared a penalty), never under ``correct_only``: the metric counts exactly those."""
    rows = [NON_REPEATING, NON_REPEATING, NON_REPEATING, SHORT]
    verdicts = ["no_answer", "correct", "wrong_answer", "no_answer"]
    responses, lengths = _batch(rows)
    r = truncation_mask_components(responses, lengths, L_MAX, verdicts, rho=1.0, m=M)
    got = mask_metrics(r)
    assert got["microcoder/masked_frac"] == 0.5  # the no_answer and the correct one, both truncated
    assert got["microcoder/truncated_no_answer_frac"] == 0.25  # the short no_answer is not truncated
    assert got["microcoder/masked_no_answer_frac"] == 0.25
    r = truncation_mask_components(responses, lengths, L_MAX, verdicts, rho=1.0, m=M, mode="correct_only")
    got = mask_metrics(r)
    assert got["microcoder/masked_frac"] == 0.25 and got["microcoder/masked_no_answer_frac"] == 0.0
    assert got["microcoder/truncated_no_answer_frac"] == 0.25


def test_output_type_and_shape():
    responses, lengths = _batch([NON_REPEATING, SHORT])
    out = conditional_truncation_mask(responses, lengths, L_MAX, ["correct", "correct"], rho=1.0, m=M)
    assert out.dtype == torch.bool and out.shape == (2,)
    # plain python lengths are accepted too
    out2 = conditional_truncation_mask(responses, [L_MAX, L_MAX - 1], L_MAX, ["correct", "correct"], rho=1.0, m=M)
    assert torch.equal(out, out2)
    empty = conditional_truncation_mask(torch.zeros(0, 5, dtype=torch.long), [], 5, [], rho=1.0, m=M)
    assert empty.shape == (0,)


def test_paper_defaults():
    import inspect

    sig = inspect.signature(conditional_truncation_mask)
    assert sig.parameters["m"].default == 128
    assert sig.parameters["mode"].default == "non_incorrect"
    assert sig.parameters["repeat_check"].default == "block"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rho": 1.5}, "rho"),
        ({"rho": -0.1}, "rho"),
        ({"m": 0}, "m "),
        ({"mode": "strict"}, "mode"),
        ({"repeat_check": "ngram"}, "repeat_check"),
    ],
)
def test_invalid_arguments_raise(kwargs, match):
    responses, lengths = _batch([NON_REPEATING])
    args = {"rho": 0.2, "m": M} | kwargs
    with pytest.raises(ValueError, match=match):
        conditional_truncation_mask(responses, lengths, L_MAX, ["correct"], **args)


def test_unknown_verdict_and_shape_mismatch_raise():
    responses, lengths = _batch([NON_REPEATING, SHORT])
    with pytest.raises(V.UnknownVerdictError, match=r"verdicts\[1\].*'incorrect'"):
        conditional_truncation_mask(responses, lengths, L_MAX, ["correct", "incorrect"], rho=1.0, m=M)
    with pytest.raises(ValueError, match="batch mismatch"):
        conditional_truncation_mask(responses, lengths, L_MAX, ["correct"], rho=1.0, m=M)
    with pytest.raises(ValueError, match="response_lengths"):
        conditional_truncation_mask(responses, torch.tensor([L_MAX, 99]), L_MAX, ["correct"] * 2, rho=1.0, m=M)


def test_block_matches_a_naive_reference_on_random_data():
    g = torch.Generator().manual_seed(0)
    rows = []
    for length, period in itertools.product(range(0, 3 * M + 1), (1, 2, 3, 4, 5, None)):
        if period is None:
            rows.append(torch.randint(0, 3, (length,), generator=g).tolist())
        else:
            base = torch.randint(0, 3, (period,), generator=g).tolist()
            rows.append((base * (length // period + 1))[:length])
    width = 3 * M
    responses, lengths = _batch(rows, width=width)
    for check in ("block", "periodic"):
        got = tail_repeats(responses, lengths, m=M, repeat_check=check).tolist()
        for row, hit in zip(rows, got):
            if len(row) < 2 * M:
                expected = False
            elif check == "block":
                expected = row[-M:] == row[-2 * M:-M]
            else:
                w = row[-2 * M:]
                expected = any(all(w[j] == w[j + p] for j in range(2 * M - p)) for p in range(1, M + 1))
            assert hit == expected, (check, row)


# --- compute_truncation_mask: the one entry point of the verl, OpenRLHF and TRL adapters -------------------------

EOS = 0


def _hand_mask(rows, budgets, verdicts, coins, rho, stop_ids):
    """Every condition by hand, from whole unpadded rows (module doc of core.masking)."""
    out = []
    for row, budget, verdict, u in zip(rows, budgets, verdicts, coins):
        truncated = len(row) >= budget and len(row) > 0 and (stop_ids is None or row[-1] not in stop_ids)
        repeating = len(row) >= 2 * M and row[-M:] == row[-2 * M:-M]
        out.append(truncated and verdict not in V.INCORRECT and not repeating and float(u) < rho)
    return out


def _random_rows(n, seed):
    """Rows of 0..3M tokens over ids 0..2 (0 = EOS), half of them ending in a block loop."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = int(torch.randint(0, 3 * M + 1, (1,), generator=g))
        if i % 2 and length >= 2 * M:
            head = torch.randint(0, 3, (length - 2 * M,), generator=g).tolist()
            block = torch.randint(0, 3, (M,), generator=g).tolist()
            rows.append(head + block * 2)
        else:
            rows.append(torch.randint(0, 3, (length,), generator=g).tolist())
    return rows


@pytest.mark.parametrize("stop_ids", [None, (EOS,)], ids=["length-only", "eos"])
def test_entry_point_matches_the_hand_computed_mask_from_tails_and_from_padded_rows(stop_ids):
    rows = _random_rows(300, seed=5)
    verdicts = [V.ALL[i % len(V.ALL)] for i in range(len(rows))]
    budget = 2 * M + 1
    coins = torch.rand(len(rows), generator=torch.Generator().manual_seed(11))
    expected = _hand_mask(rows, [budget] * len(rows), verdicts, coins, 0.7, stop_ids)
    assert any(expected) and not all(expected)

    # the adapters' form: each row's last 2m tokens (verl and OpenRLHF: unpadded rows; TRL: a padded batch)
    from_rows = response_tails([torch.tensor(r, dtype=torch.long) for r in rows], 2 * M)
    padded, lengths = _batch(rows, width=3 * M, pad=EOS)
    from_padded = response_tails(padded, 2 * M, lengths=lengths)
    assert torch.equal(from_rows[0], from_padded[0]) and torch.equal(from_rows[1], from_padded[1])
    assert from_rows[0].shape == (len(rows), 2 * M) and from_rows[1].tolist() == [len(r) for r in rows]
    for tails, lens in (from_rows, from_padded, (padded, lengths)):  # the whole padded batch works too
        result, metrics = compute_truncation_mask(tails, lens, budget, verdicts, rho=0.7, m=M,
                                                  generator=torch.Generator().manual_seed(11),
                                                  stop_token_ids=stop_ids)
        assert result.masked.tolist() == expected
        assert metrics == mask_metrics(result)
        assert metrics["microcoder/masked_frac"] == pytest.approx(sum(expected) / len(rows))
    assert torch.equal(result.masked, conditional_truncation_mask(
        padded, lengths, budget, verdicts, rho=0.7, m=M, generator=torch.Generator().manual_seed(11),
        stop_token_ids=stop_ids))


def test_entry_point_metric_names_and_breakdown():
    tails, lengths = response_tails([torch.tensor(r) for r in (NON_REPEATING, REPEATING, SHORT, NON_REPEATING)],
                                    2 * M)
    result, metrics = compute_truncation_mask(tails, lengths, L_MAX, ["no_answer", "correct", "correct", "timeout"],
                                              rho=1.0, m=M)
    assert metrics == {
        "microcoder/truncated_frac": 0.75,
        "microcoder/eligible_frac": 0.25,
        "microcoder/repeat_frac": 0.25,
        "microcoder/masked_frac": 0.25,
        "microcoder/truncated_no_answer_frac": 0.25,
        "microcoder/masked_no_answer_frac": 0.25,
    }
    assert result.masked.tolist() == [True, False, False, False]


def test_entry_point_per_row_budgets_and_eos_at_the_budget():
    """Per-row budgets (an engine that shortens long prompts' budgets): a row is cut iff it reached its own budget
    without ending in a stop id; EOS exactly at the budget finished."""
    rows = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, EOS], [1, 2, 3, 4, 5, 6], [1, 2, 3]]
    tails, lengths = response_tails([torch.tensor(r) for r in rows], 2 * M)
    budgets = torch.tensor([6, 6, 7, 3])
    result, _ = compute_truncation_mask(tails, lengths, budgets, ["correct"] * 4, rho=1.0, m=M,
                                        stop_token_ids=[EOS])
    assert result.truncated.tolist() == [True, False, False, True]
    assert result.masked.tolist() == [True, False, False, True]


def test_entry_point_takes_the_engines_truncation_flags():
    """``truncated`` given (OpenRLHF's flag where no budget or stop ids are known): it is condition 1, budget unused."""
    tails, lengths = response_tails([torch.tensor(r) for r in (SHORT, NON_REPEATING, REPEATING)], 2 * M)
    flags = torch.tensor([True, False, True])
    result, metrics = compute_truncation_mask(tails, lengths, None, ["correct"] * 3, rho=1.0, m=M, truncated=flags)
    assert result.truncated.tolist() == [True, False, True]
    assert result.masked.tolist() == [True, False, False]  # the third repeats
    assert metrics["microcoder/truncated_frac"] == pytest.approx(2 / 3)


def test_entry_point_refuses_short_tails_and_mismatched_inputs():
    rows = [torch.tensor(NON_REPEATING)]
    narrow, lengths = response_tails(rows, 2 * M - 1)
    with pytest.raises(ValueError, match="2m"):
        compute_truncation_mask(narrow, lengths, L_MAX, ["correct"], rho=1.0, m=M)
    tails, lengths = response_tails(rows, 2 * M)
    with pytest.raises(ValueError, match="batch mismatch"):
        compute_truncation_mask(tails, lengths, L_MAX, ["correct", "correct"], rho=1.0, m=M)
    with pytest.raises(ValueError, match="max_response_length"):
        compute_truncation_mask(tails, lengths, None, ["correct"], rho=1.0, m=M)
    with pytest.raises(ValueError, match="rho"):
        compute_truncation_mask(tails, lengths, L_MAX, ["correct"], rho=2.0, m=M)
