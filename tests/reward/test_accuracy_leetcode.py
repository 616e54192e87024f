"""Accuracy on ../shared/data (LeetCodeDataset v0.2.0 train, newfacade/LeetCodeDataset, MIT): every
reference solution must pass; a deterministic mutant of each (answer perturbed) must fail."""

import gzip
import importlib.util
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import evaluate_response
from microcoder_ext.reward.leetcode import ConversionError, ground_truth_from_row

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "leetcode-v0.2.0-train.jsonl.gz")
DATA = os.environ.get("MICROCODER_LEETCODE_DATA", DATA)
#: problems whose statement accepts the answer in any order
ANY_ORDER = {"word-ladder-ii"}

MUTATE = """

def _mc_mutate(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, str):
        return r + "x"
    if isinstance(r, (list, tuple)):
        return list(r) + [0]
    return 12345

_mc_orig = Solution.{fn}
_mc_depth = [0]

def _mc_outer(self, *a, **k):  # perturb only the outermost call (recursive methods call themselves)
    _mc_depth[0] += 1
    try:
        r = _mc_orig(self, *a, **k)
    finally:
        _mc_depth[0] -= 1
    return _mc_mutate(r) if _mc_depth[0] == 0 else r

Solution.{fn} = _mc_outer
"""


def _rows():
    if not os.path.exists(DATA):
        pytest.skip(f"{DATA} not found (set MICROCODER_LEETCODE_DATA)")
    with gzip.open(DATA, "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def cases():
    have_sc = importlib.util.find_spec("sortedcontainers") is not None
    out, skipped = [], {"conversion": 0, "sortedcontainers": 0}
    for row in _rows():
        if "sortedcontainers" in row["completion"] and not have_sc:
            skipped["sortedcontainers"] += 1
            continue
        try:
            gt = ground_truth_from_row(row)
        except ConversionError:
            skipped["conversion"] += 1
            continue
        if row["task_id"] in ANY_ORDER:
            gt["unordered"] = True
        out.append((row, gt))
    return out, skipped


def test_conversion_covers_the_dataset(cases):
    out, skipped = cases
    assert len(out) >= 1800 and skipped["conversion"] <= 40, skipped


def test_every_reference_solution_passes_and_every_mutant_fails(cases, engine):
    out, _ = cases
    jobs = []  # (task_id, is_mutant, code, ground truth)
    for row, gt in out:
        gts = json.dumps(gt)
        jobs.append((row["task_id"], False, row["completion"], gts))
        if gt.get("return_type") or row["task_id"] in ANY_ORDER:
            continue  # linked structures / any-order answers: the generic mutation may not change the answer
        jobs.append((row["task_id"], True, row["completion"] + MUTATE.format(fn=gt["fn_name"]), gts))

    def score(job):
        return evaluate_response(f"```python\n{job[2]}\n```", job[3], engine=engine, timeout=5)

    with ThreadPoolExecutor(engine.size) as pool:  # the engine's concurrency
        results = list(pool.map(score, jobs))
    wrong_refs = [(tid, r.verdict, r.detail[:120]) for (tid, mut, _, _), r in zip(jobs, results)
                  if not mut and r.verdict != V.CORRECT]
    passing_mutants = [tid for (tid, mut, _, _), r in zip(jobs, results) if mut and r.verdict == V.CORRECT]
    assert wrong_refs == []
    assert passing_mutants == []
