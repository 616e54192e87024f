"""Accuracy on the 20 CodeContests stdin problems of bench/data (DeepMind CodeContests, CC-BY-4.0, via
bytedance/SandboxFusion, Apache-2.0; 35-331 tests each). Our reference solutions (bench/data/code_contests_refs.jsonl,
19 problems: 1179_E is interactive and left out) must pass every test through the real sandbox (stdin path), and
deterministic mutants of each must fail: first number off by one, two output lines swapped, last token missing,
an extra line, a no-break space between two tokens, an uncaught exception after the correct output, and
wrong only on the LAST test.

The tests are read from ``bench/data/code_contests-20-stdin.jsonl.gz`` (in the repository, with its licence);
a missing file fails the test."""

import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import evaluate_response

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("microcoder_bench_reward_data", ROOT / "bench" / "reward_data.py")
rd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rd)

MUTANTS = ("off_by_one", "swap_lines", "truncate", "extra_line", "nbsp", "crash_after", "last_test")
REF_IDS = [json.loads(line)["id"] for line in open(rd.CC_REFS)]


@pytest.fixture(scope="module")
def problems():
    assert rd.CODE_CONTESTS.exists(), (f"{rd.CODE_CONTESTS} not found: the CodeContests sample ships in bench/data "
                                       f"(or set MICROCODER_DATA_DIR); see bench/data/README.md")
    return {p["id"]: p for p in rd.code_contests()}


def test_references_cover_every_non_interactive_problem(problems):
    assert len(problems) == 19 and 11 not in problems  # id 11 (1179_E) is interactive: its tests need an interactor
    for p in problems.values():
        assert "CC-BY-4.0" in p["license"] and p["solution"].strip()


def _score(engine, code, gt):
    return evaluate_response(f"```python\n{code}\n```", gt, engine=engine, timeout=5)


@pytest.mark.parametrize("pid", REF_IDS)
def test_reference_passes_all_tests_and_mutants_fail(problems, engine, pid):
    p = problems[pid]
    gt = json.dumps(rd.cc_ground_truth(p))
    kinds = [k for k in MUTANTS if rd.stdin_applies(k, p)]
    assert {"truncate", "extra_line", "nbsp", "crash_after", "last_test"} <= set(kinds)
    programs = [p["solution"]] + [rd.stdin_program(p["solution"], k, p["tests"][-1][0],
                                                   several_answers=bool(p.get("checker"))) for k in kinds]
    with ThreadPoolExecutor(engine.size) as pool:  # the engine's concurrency (one worker per completion)
        ref, *muts = pool.map(lambda code: _score(engine, code, gt), programs)
    assert ref.verdict == V.CORRECT and ref.num_passed == ref.num_tests == len(p["tests"]), ref.detail
    wrong = {k: (m.verdict, m.detail) for k, m in zip(kinds, muts) if m.verdict == V.CORRECT}
    assert wrong == {}, f"{p['name']}: mutants judged correct"
    verdicts = dict(zip(kinds, (m.verdict for m in muts)))
    assert verdicts["crash_after"] == V.RUNTIME_ERROR
    last = dict(zip(kinds, muts))["last_test"]
    assert last.num_passed == len(p["tests"]) - 1, last.detail  # every test before the last one was run and passed
