"""The paper's table from per-problem results: every published row of docs/paper.md#main-results is reproduced from a
synthetic LCB v6 set (175 problems x n = 4, the §9 platform x difficulty counts), plus the table's edge cases."""

import pytest

from microcoder_ext.eval.breakdown import COLUMNS, ProblemResult, Table, breakdown, verdict_rates
from microcoder_ext.eval.paper import LCB_V6_PROBLEMS, PAPER_ROWS, SETTINGS, UnknownReference, reference
from microcoder_ext.eval.report import Run, format_table

N = 4


def correct_samples(value: float, samples: int) -> int:
    """The one count k of correct samples with k / samples = value % after rounding to 0.1 (the paper's .x5
    cells round either way, so within 0.05 inclusive)."""
    ks = [k for k in range(samples + 1) if abs(100 * k / samples - value) <= 0.05 + 1e-9]
    assert len(ks) == 1, (value, samples, ks)
    return ks[0]


def synthetic_run(row) -> list[ProblemResult]:
    """175 problems whose pass@1 per platform x difficulty cell is the published one."""
    out = []
    for plat in ("atcoder", "leetcode"):
        for diff in ("easy", "medium", "hard"):
            d = LCB_V6_PROBLEMS[plat][diff]
            left = correct_samples(row.cells[plat][diff], N * d)
            for i in range(d):
                c = min(N, left)
                left -= c
                out.append(ProblemResult(f"{plat}-{diff}-{i}", plat.upper() if i % 2 else plat, diff.title(), N, c,
                                         {"correct": c, "wrong_answer": N - c}))
    return out


def test_published_problem_counts_add_up():
    for col in COLUMNS:
        assert LCB_V6_PROBLEMS["atcoder"][col] + LCB_V6_PROBLEMS["leetcode"][col] == LCB_V6_PROBLEMS["all"][col]
    assert LCB_V6_PROBLEMS["all"]["all"] == 175
    assert len(PAPER_ROWS) == 19 and SETTINGS == ("1.7b-4k", "1.7b-8k", "4b-4k", "4b-8k", "8b-16k")


@pytest.mark.parametrize("row", PAPER_ROWS, ids=lambda r: f"{r.setting}-{r.method}")
def test_every_published_row_is_reproduced(row):
    results = synthetic_run(row)
    assert len(results) == 175
    table = breakdown(results, ks=(1,))
    assert table.rows == ("atcoder", "leetcode", "all")
    for plat in ("atcoder", "leetcode", "all"):
        for col in COLUMNS:
            cell = table.cells[plat][col]
            assert cell.problems == LCB_V6_PROBLEMS[plat][col]
            assert cell.samples == N * cell.problems
            # the derived cells (All column, All row) too: the paper's numbers are consistent with k/d
            assert abs(cell.pass_at[1] - row.cells[plat][col]) <= 0.05 + 1e-9, (plat, col, cell.pass_at[1])


def test_4b_4k_microcoder_row_exactly():
    row = reference("paper:4b-4k")[0]
    assert (row.method, row.model) == ("microcoder", "Qwen/Qwen3-4B-Instruct-2507")
    table = breakdown(synthetic_run(row), ks=(1, 4))
    # correct samples / samples, as the paper computes them
    assert table.value("atcoder", "all") == pytest.approx(100 * 178 / 448, rel=1e-12)
    assert table.value("leetcode", "all") == pytest.approx(100 * 86 / 252, rel=1e-12)
    assert table.value("all", "all") == pytest.approx(100 * 264 / 700, rel=1e-12)
    assert table.value("all", "hard") == pytest.approx(100 * 26 / 320, rel=1e-12)
    text = format_table([Run("synthetic", table)], (1,))
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[3:]}
    assert rows["AtCoder"] == ["100.0", "(26)", "49.0", "(26)", "9.6", "(60)", "39.7", "(112)"]
    # 3/80 = 3.75 exactly: printed 3.8 (round half to even), the paper printed 3.7 (docs/paper.md#evaluation-protocol)
    assert rows["LeetCode"] == ["88.2", "(17)", "22.1", "(26)", "3.8", "(20)", "34.1", "(63)"]
    assert rows["All"] == ["95.3", "(43)", "35.6", "(52)", "8.1", "(80)", "37.7", "(175)"]
    # pass@4 = share of problems with a correct sample (synthetic_run packs c = 4 per problem first)
    assert table.value("atcoder", "easy", 4) == 100.0
    assert table.value("leetcode", "hard", 4) == 100 * 1 / 20


def test_other_platforms_missing_cells_and_unknown_difficulty():
    results = [ProblemResult("a", "atcoder", "easy", 4, 4), ProblemResult("b", "codeforces", "hard", 4, 1),
               ProblemResult("c", "codeforces", None, 4, 2), ProblemResult("d", None, "medium", 2, 0)]
    t = breakdown(results, ks=(1, 4))
    assert t.rows == ("atcoder", "leetcode", "codeforces", "unknown", "all")
    assert t.cells["leetcode"] == {c: None for c in COLUMNS}
    assert t.cells["atcoder"]["medium"] is None
    # difficulty None: only in the All column
    assert t.cells["codeforces"]["hard"].problems == 1 and t.cells["codeforces"]["all"].problems == 2
    assert t.value("codeforces", "all") == 100 * (0.25 + 0.5) / 2
    # problem d has n = 2 < 4: pass@4 undefined in every cell that holds it
    assert t.value("unknown", "medium", 4) is None and t.value("all", "all", 4) is None
    assert t.value("all", "easy", 4) == 100.0
    text = format_table([Run("r", t)], (1, 4))
    assert "(no platform)" in text and "Codeforces" in text
    lc = [line for line in text.splitlines() if line.startswith("LeetCode")][0]
    assert lc.split()[1:] == ["-", "-", "-", "-"]
    assert Table.from_dict(t.to_dict()) == t


def test_verdict_rates_and_bad_results():
    res = [ProblemResult("a", "x", "easy", 4, 1, {"correct": 1, "wrong_answer": 2, "no_answer": 1})]
    rates = verdict_rates(res)
    assert rates["correct"] == {"count": 1, "rate": 0.25} and rates["wrong_answer"]["rate"] == 0.5
    assert rates["timeout"] == {"count": 0, "rate": 0.0}
    with pytest.raises(ValueError, match="0 <= c <= n"):
        breakdown([ProblemResult("a", "x", "easy", 4, 5)])
    with pytest.raises(ValueError, match="k values"):
        breakdown(res, ks=(0,))


def test_paper_references():
    assert [r.method for r in reference("paper:4b-8k:all")] == ["base", "grpo", "dapo", "microcoder"]
    assert [r.method for r in reference("paper:8b-16k:all")] == ["grpo", "dapo", "microcoder"]
    assert reference("paper:1.7b-8k:dapo")[0].cells == reference("paper:1.7b-4k:dapo")[0].cells
    for bad, why in [("paper:9b-4k", "unknown setting"), ("paper:8b-16k:base", "no 'base' row"),
                     ("paper", "expected paper:SETTING"), ("paper:4b-4k:ppo", "no 'ppo' row")]:
        with pytest.raises(UnknownReference, match=why):
            reference(bad)
