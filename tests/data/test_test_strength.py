"""Issue 25, class 3: problems whose tests are only the statement's examples (or too few) are flagged by
``microcoder data prepare``, counted per source in its summary, and dropped on request. Real rows: the 20
CodeContests problems in SandboxFusion's encoding and LeetCodeDataset rows (bench/data), an LCB row's own fields."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from microcoder_ext.data.problem import Problem
from microcoder_ext.data.sources import Drop, iter_source
from microcoder_ext.data.test_strength import EXAMPLES_ONLY, fewer_than, weakness

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
CODE_CONTESTS = DATA / "code_contests-20-stdin.jsonl.gz"


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def cc_rows() -> list[dict]:
    with gzip.open(CODE_CONTESTS, "rt") as f:
        return [json.loads(line) for line in f]


def examples_of(row: dict) -> list[dict]:
    """The row's tests whose input and output are printed in its statement: its examples."""
    text = _squash(row["content"])
    return [t for t in json.loads(row["test"])
            if _squash(t["input"]["stdin"]) in text and _squash(t["output"]["stdout"]) in text]


def problems(path: Path) -> list[Problem]:
    return [p for p in iter_source(str(path)) if not isinstance(p, Drop)]


@pytest.fixture(scope="module")
def cc_files(tmp_path_factory):
    """The 20 problems as they are, and the same rows with only their statement's examples as tests."""
    d = tmp_path_factory.mktemp("cc")
    rows = cc_rows()
    full, examples = d / "full.jsonl", d / "examples.jsonl"
    full.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ex = [{**r, "test": json.dumps(examples_of(r))} for r in rows if examples_of(r)]
    examples.write_text("".join(json.dumps(r) + "\n" for r in ex))
    return full, examples, len(problems(examples))  # the loader drops the interactive one


def test_code_contests_rows_with_only_their_examples_are_flagged(cc_files):
    full, examples, n_examples = cc_files
    assert n_examples >= 15  # the statement's examples are among almost every row's tests
    assert all(weakness(p) is None for p in problems(full))  # 35-331 tests each: not the examples alone
    flagged = [weakness(p) for p in problems(examples)]
    assert len(flagged) == n_examples and set(flagged) == {EXAMPLES_ONLY}
    assert {weakness(p, min_tests=1000) for p in problems(full)} == {fewer_than(1000)}


def test_a_livecodebench_row_without_private_tests_is_examples_only():
    p = Problem(id="lcb/x", source="livecodebench", statement="Sum two numbers.",
                tests={"tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]},
                extra={"n_public_tests": 1, "n_private_tests": 0})
    assert weakness(p) == EXAMPLES_ONLY
    p.extra["n_private_tests"] = 12
    assert weakness(p) is None


def test_call_based_examples_are_found_as_leetcode_prints_them():
    statement = ("Given nums and target, return indices.\nExample 1:\nInput: nums = [2,7,11,15], target = 9\n"
                 "Output: [0,1]\nExample 2:\nInput: nums = [3,2,4], target = 6\nOutput: [1,2]\n")
    tests = {"fn_name": "twoSum", "inputs": [{"nums": [2, 7, 11, 15], "target": 9}, {"nums": [3, 2, 4], "target": 6}],
             "outputs": [[0, 1], [1, 2]]}
    p = Problem(id="lc/two-sum", source="leetcodedataset", statement=statement, tests=tests)
    assert weakness(p) == EXAMPLES_ONLY
    tests["inputs"].append({"nums": [3, 3], "target": 6})
    tests["outputs"].append([0, 1])
    assert weakness(p) is None and weakness(p, min_tests=5) == fewer_than(5)


def test_prepare_counts_them_per_source_and_drops_them_on_request(cc_files, tmp_path):
    from microcoder_ext.cli import main

    full, examples, n_examples = cc_files
    out = tmp_path / "out"
    assert main(["data", "prepare", str(full), str(examples), "-o", str(out), "--no-dedup", "--no-progress",
                 "--min-tests", "0", "--format", "openrlhf", "--report", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["sources"][str(examples)]["weak_tests"] == {EXAMPLES_ONLY: n_examples}
    assert report["sources"][str(full)]["weak_tests"] == {}
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    flagged = [r for r in rows if r.get("meta_weak_tests") == EXAMPLES_ONLY]  # OpenRLHF JSONL: meta_* columns
    assert len(flagged) == n_examples
    out2 = tmp_path / "out2"
    assert main(["data", "prepare", str(full), str(examples), "-o", str(out2), "--no-dedup", "--no-progress",
                 "--drop-weak-tests", "--min-tests", "0", "--format", "openrlhf",
                 "--report", str(tmp_path / "r2.json")]) == 0
    report = json.loads((tmp_path / "r2.json").read_text())
    assert report["sources"][str(examples)]["reasons"][f"weak tests: {EXAMPLES_ONLY}"] == n_examples
    assert report["sources"][str(examples)]["kept"] == 0
    assert report["sources"][str(full)]["kept"] == len(problems(full))


def test_summary_table_shows_the_flagged_counts(cc_files, tmp_path, capsys):
    from microcoder_ext.cli import main

    full, examples, n_examples = cc_files
    assert main(["data", "prepare", str(examples), "-o", str(tmp_path / "o"), "--no-dedup", "--no-progress",
                 "--format", "openrlhf"]) == 0
    table = capsys.readouterr().out
    line = next(ln for ln in table.splitlines() if "kept, weak tests: examples only" in ln)
    assert line.split()[-1] == str(n_examples), table
