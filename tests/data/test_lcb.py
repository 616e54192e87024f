"""LiveCodeBench ``code_generation_lite`` rows: conversion (public JSON tests + private tests stored exactly as LCB
stores them, base64(zlib(pickle(JSON text)))), judged 1.0 through the reward, release windows, and the restricted
unpickler: malicious pickles are refused, never executed, and their rows dropped with the reason."""

import base64
import json
import os
import pickle
import zlib

import pytest

from microcoder_ext.data import lcb
from microcoder_ext.data.sources import Drop, iter_source
from microcoder_ext.reward import compute_score

FUNC_STARTER = "class Solution:\n    def addPairs(self, nums: List[int], k: int) -> List[int]:\n        "
FUNC_SOLUTION = ("class Solution:\n    def addPairs(self, nums: List[int], k: int) -> List[int]:\n"
                 "        return [x + k for x in nums]\n")
STDIN_SOLUTION = "a, b = map(int, input().split())\nprint(a * b)\n"


def lcb_row(**kw):
    """A row as ``livecodebench/code_generation_lite`` stores it."""
    return {"question_title": "Q", "question_content": "Statement.", "platform": "atcoder", "question_id": "abc1_a",
            "contest_id": "abc1", "contest_date": "2025-03-08T00:00:00", "starter_code": "", "difficulty": "easy",
            "public_test_cases": "[]", "private_test_cases": "", "metadata": "{}", **kw}


def functional_row(**kw):
    public = [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"}]
    private = [{"input": "[]\n1", "output": "[]", "testtype": "functional"},
               {"input": "[-5, 10, 0]\n-1", "output": "[-6, 9, -1]", "testtype": "functional"}]
    return lcb_row(**{**dict(question_title="Add Pairs", question_content="Add k to every element of nums.",
                             platform="leetcode", question_id="3500", contest_id="weekly-contest-440",
                             contest_date="2025-03-09T02:30:00", starter_code=FUNC_STARTER, difficulty="medium",
                             public_test_cases=json.dumps(public),
                             private_test_cases=lcb.encode_private_tests(private),
                             metadata=json.dumps({"func_name": "addPairs"})), **kw})


def stdin_row(**kw):
    public = [{"input": "2 3\n", "output": "6\n", "testtype": "stdin"}]
    private = [{"input": "10 10\n", "output": "100\n", "testtype": "stdin"},
               {"input": "0 7\n", "output": "0\n", "testtype": "stdin"}]
    return lcb_row(**{**dict(question_title="Product", question_content="Print A times B.", question_id="abc400_a",
                             contest_id="abc400", contest_date="2025-04-05T12:00:00", difficulty="easy",
                             public_test_cases=json.dumps(public),
                             private_test_cases=lcb.encode_private_tests(private)), **kw})


def _score(p, code):
    row = p.to_verl_row(0)
    return compute_score(row["data_source"], f"```python\n{code}\n```", row["reward_model"]["ground_truth"],
                         row["extra_info"])


def test_private_tests_encoding_is_lcbs():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    blob = lcb.encode_private_tests(tests)
    # LCB's own decoding: json.loads(pickle.loads(zlib.decompress(base64.b64decode(blob))))
    assert json.loads(pickle.loads(zlib.decompress(base64.b64decode(blob.encode())))) == tests
    assert lcb.decode_private_tests(blob) == tests
    assert lcb.decode_private_tests(json.dumps(tests)) == tests  # some rows store plain JSON


def test_functional_row_scores_through_the_reward():
    p = lcb.problem_from_lcb_row(functional_row())
    assert (p.id, p.platform, p.difficulty, p.date, p.title) == ("lcb/3500", "leetcode", "medium", "2025-03-09",
                                                                 "Add Pairs")
    assert p.fn_name == "addPairs" and p.starter_code == FUNC_STARTER
    assert len(p.tests["tests"]) == 3 and all(t["testtype"] == "functional" for t in p.tests["tests"])
    assert p.extra["n_public_tests"] == 1 and p.extra["n_private_tests"] == 2
    assert "```python\nclass Solution:" in p.prompt_text()
    r = _score(p, FUNC_SOLUTION)
    assert r["score"] == 1.0 and r["num_tests"] == 3, r
    # LCB compares as it is, no APPS [result] unwrapping: returning a wrapped list is wrong
    wrong = FUNC_SOLUTION.replace("return [x + k for x in nums]", "return [[x + k for x in nums]]")
    assert _score(p, wrong)["score"] == 0.0


def test_stdin_row_scores_through_the_reward():
    p = lcb.problem_from_lcb_row(stdin_row())
    assert p.fn_name is None and p.platform == "atcoder" and p.date == "2025-04-05"
    r = _score(p, STDIN_SOLUTION)
    assert r["score"] == 1.0 and r["num_tests"] == 3, r
    assert _score(p, "print(0)")["score"] == 0.0


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _blob(obj, protocol=pickle.DEFAULT_PROTOCOL) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(obj, protocol=protocol))).decode()


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_malicious_pickle_is_refused_never_executed(tmp_path, protocol):
    marker = tmp_path / "pwned"
    blob = _blob(_Evil(marker), protocol)
    with pytest.raises(lcb.UnsafePickleError, match=r"references the global (posix|os)\.system"):
        lcb.decode_private_tests(blob)
    assert not marker.exists()
    # hand-written protocol-0 GLOBAL + REDUCE, and a pickle naming any other global (a class)
    raw = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    with pytest.raises(lcb.UnsafePickleError):
        lcb.decode_private_tests(base64.b64encode(zlib.compress(raw)).decode())
    import collections
    with pytest.raises(lcb.UnsafePickleError, match="collections.OrderedDict"):
        lcb.decode_private_tests(_blob(collections.OrderedDict(a=1), protocol))
    assert not marker.exists()


def test_plain_pickles_are_accepted():
    value = [{"input": "1", "output": "2", "testtype": "stdin", "n": (1, 2.5, None, True, "é", 10 ** 30)}]
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        assert lcb.restricted_loads(pickle.dumps(value, protocol=proto)) == value
        if proto >= 3:  # protocols 0-2 pickle bytes through the global _codecs.encode: refused
            assert lcb.restricted_loads(pickle.dumps([b"x"], protocol=proto)) == [b"x"]
        assert lcb.decode_private_tests(_blob(json.dumps([value[0] | {"n": 1}]), proto))[0]["n"] == 1


def test_bad_rows_are_dropped_with_their_reason(tmp_path):
    marker = tmp_path / "pwned"
    rows = [functional_row(), stdin_row(),
            stdin_row(question_id="evil1", private_test_cases=_blob(_Evil(marker))),
            stdin_row(question_id="evil2", private_test_cases=_blob(__import__("datetime").date(2025, 1, 1))),
            stdin_row(question_id="bomb", private_test_cases=base64.b64encode(b"not zlib").decode()),
            stdin_row(question_id="badjson", public_test_cases="[{oops"),
            functional_row(question_id="nofn", metadata="{}"),
            stdin_row(question_id="notests", public_test_cases="[]", private_test_cases=""),
            stdin_row(question_id="mixed", public_test_cases=json.dumps(
                [{"input": "1", "output": "1", "testtype": "stdin"},
                 {"input": "1", "output": "1", "testtype": "functional"}]))]
    path = tmp_path / "lcb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = list(iter_source(str(path)))
    kept = [i for i in items if not isinstance(i, Drop)]
    drops = {d.id: (d.reason, d.detail) for d in items if isinstance(d, Drop)}
    assert [p.id for p in kept] == ["lcb/3500", "lcb/abc400_a"]
    assert drops["evil1"][0] == "unsafe pickle" and "system" in drops["evil1"][1]
    assert drops["evil2"][0] == "unsafe pickle" and "datetime.date" in drops["evil2"][1]
    assert drops["bomb"][0] == "undecodable private tests"
    assert drops["badjson"][0] == "malformed public_test_cases"
    assert drops["nofn"][0] == "missing fn_name"
    assert drops["notests"][0] == "no tests"
    assert drops["mixed"][0] == "mixed test types"
    assert not marker.exists()


def test_release_windows_and_read_lcb(tmp_path):
    assert lcb.RELEASE_WINDOWS["v6"] == ("2025-02-01", "2025-05-01")
    assert lcb.RELEASE_WINDOWS["release_v5"] == ("2023-05-01", "2025-02-01")
    assert lcb.RELEASE_FILES["release_v3"] == ["test.jsonl", "test2.jsonl", "test3.jsonl"]
    ends = [lcb.RELEASE_WINDOWS[f"v{i}"] for i in range(1, 7)]
    assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))  # contiguous
    dates = {"d1": "2025-01-31T23:00:00", "d2": "2025-02-01T00:00:00", "d3": "2025-04-30T12:00:00",
             "d4": "2025-05-01T00:00:00"}
    rows = [stdin_row(question_id=k, contest_date=v) for k, v in dates.items()] + [stdin_row(question_id="bad",
                                                                                            public_test_cases="x")]
    path = tmp_path / "lcb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    drops = []
    assert [p.id for p in lcb.read_lcb(path, release="v6", drops=drops)] == ["lcb/d2", "lcb/d3"]
    assert [(d.id, d.reason) for d in drops] == [("lcb/bad", "malformed public_test_cases")]
    assert [p.id for p in lcb.read_lcb(str(path), start_date="2025-04-01")] == ["lcb/d3", "lcb/d4"]
    assert [p.id for p in lcb.read_lcb(str(path), end_date="2025-02-01")] == ["lcb/d1"]
    assert len(list(lcb.read_lcb(str(path)))) == 4
    with pytest.raises(ValueError, match="unknown LiveCodeBench release"):
        list(lcb.read_lcb(str(path), release="v9"))
