"""CodeReward on real problems through the real sandboxed reward engine: a LeetCodeDataset row (call-based) and a
CodeContests stdin problem; correct, wrong, no code, bad tests; standard and conversational completions."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import RewardSetupError
from microcoder_ext.reward.leetcode import ground_truth_from_row
from microcoder_ext.trl.reward import REWARD_NAME, CodeReward, completion_text

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def two_sum():
    with gzip.open(DATA / "leetcode-v0.2.0-train.jsonl.gz", "rt") as f:
        row = json.loads(f.readline())
    assert row["task_id"] == "two-sum"
    return row, ground_truth_from_row(row)


@pytest.fixture(scope="module")
def digjump():
    """CodeContests problem 2 (CodeChef digjump, stdin/stdout, exact), its first 6 tests and our reference."""
    with gzip.open(DATA / "code_contests-20-stdin.jsonl.gz", "rt") as f:
        row = next(r for r in map(json.loads, f) if r["id"] == 2)
    ref = next(r for r in map(json.loads, (DATA / "code_contests_refs.jsonl").read_text().splitlines()) if r["id"] == 2)
    return ref["solution"], json.dumps({"tests": json.loads(row["test"])[:6]})


def test_leetcode_row_correct_wrong_no_code_bad_tests(two_sum):
    row, gt = two_sum
    good = fenced(row["completion"])
    wrong = fenced(row["completion"].replace("return [m[y], i]", "return [i, i]"))
    reward = CodeReward()
    completions = [good, wrong, "I don't know.", good, good]
    tests = [json.dumps(gt), gt, gt, "{not json", json.dumps({"inputs": [1]})]
    scores = reward(prompts=["q"] * 5, completions=completions, tests=tests)
    assert scores == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert reward.last_verdicts == [V.CORRECT, V.WRONG_ANSWER, V.NO_ANSWER, V.SANDBOX_ERROR, V.SANDBOX_ERROR]
    assert [r["verdict"] for r in reward.last_results] == reward.last_verdicts
    assert reward.last_results[0]["num_tests"] == len(gt["inputs"]) and reward.last_results[0]["pass_rate"] == 1.0
    assert "malformed ground truth" in reward.last_results[3]["detail"]


def test_stdin_problem_and_conversational_completions(digjump):
    solution, tests = digjump
    reward = CodeReward(tests_key="gt")
    convo = [[{"role": "assistant", "content": fenced(solution)}],
             [{"role": "assistant", "content": fenced("print(0)")}],
             [{"role": "assistant", "content": [{"type": "text", "text": fenced(solution)}]}],
             [{"role": "assistant", "content": "no code here"}]]
    logged = {}
    scores = reward(prompts=[[{"role": "user", "content": "solve"}]] * 4, completions=convo, gt=[tests] * 4,
                    log_extra=lambda column, values: logged.setdefault(column, values), trainer_state=None)
    assert scores == [1.0, 0.0, 1.0, 0.0]
    assert reward.last_verdicts == [V.CORRECT, V.WRONG_ANSWER, V.CORRECT, V.NO_ANSWER]
    assert logged == {"verdict": reward.last_verdicts}  # TRL's completions table gets a verdict column


def test_a_missing_tests_column_stops_the_run(two_sum):
    """Every completion of the run would score 0.0: a setting, not a bad sample, so it raises with the columns."""
    row, gt = two_sum
    reward = CodeReward(tests_key="tests")
    with pytest.raises(RewardSetupError, match=r"no column 'tests' with the tests \(columns passed: solution\)"):
        reward(prompts=["q"], completions=[fenced(row["completion"])], solution=[gt])
    assert reward(prompts=[], completions=[], tests=[]) == [] and reward.last_verdicts == []


def test_fn_name_from_extra_info_and_name(two_sum):
    row, gt = two_sum
    tests = {k: v for k, v in gt.items() if k != "fn_name"}
    reward = CodeReward()
    assert reward.__name__ == REWARD_NAME == "microcoder_code_reward"
    scores = reward(prompts=["q"], completions=[fenced(row["completion"])], tests=[tests],
                    extra_info=[json.dumps({"fn_name": gt["fn_name"]})])
    assert scores == [1.0]


def test_completion_text_forms():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "x"}]) == "x"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"},
                            {"role": "assistant", "content": "b"}]) == "b"
    assert completion_text([{"role": "user", "content": "u"}]) == ""
    assert completion_text(None) == ""


def test_a_sandbox_that_cannot_start_stops_the_run(two_sum, monkeypatch):
    """CodeReward scores on the process-wide engine: one that cannot start a sandbox stops training with the reason."""
    from microcoder_ext.reward import engine as engine_module, reset_engine

    class NoFork:
        def __init__(self, *a, **k):
            raise OSError(11, "Resource temporarily unavailable")

    row, gt = two_sum
    reset_engine()
    monkeypatch.setattr(engine_module, "WorkerProcess", NoFork)
    try:
        with pytest.raises(RewardSetupError, match="sandbox cannot run on this host: cannot start a sandbox worker"):
            CodeReward()(prompts=["q"], completions=[fenced(row["completion"])], tests=[gt])
    finally:
        reset_engine()
