import json

import pytest

from microcoder_ext.reward import GroundTruthError, compute_score, parse_ground_truth


def test_apps_stdin_and_line_lists():
    s = parse_ground_truth(json.dumps({"inputs": [["1 2", "3"]], "outputs": [["3", "4"]]}))
    assert s.mode == "stdin" and s.tests[0].input == "1 2\n3" and s.tests[0].expected == "3\n4"


def test_apps_call_based_forms():
    s = parse_ground_truth({"fn_name": "f", "inputs": [[1, 2], {"a": 1}, "[1,2]\n3"], "outputs": [3, 1, 4]})
    assert s.mode == "call"
    assert [t.input for t in s.tests] == [{"args": [1, 2], "kwargs": {}}, {"args": [], "kwargs": {"a": 1}},
                                          {"args": [[1, 2], 3], "kwargs": {}}]
    assert all(t.apps_unwrap for t in s.tests)


def test_livecodebench_and_codecontests_lists():
    s = parse_ground_truth({"fn_name": "g", "tests": [{"input": "[1]\n2", "output": "[3]", "testtype": "functional"}]})
    assert s.mode == "call" and s.tests[0].expected == [3] and not s.tests[0].apps_unwrap
    s = parse_ground_truth([{"input": "1\n", "output": "2\n", "testtype": "stdin"}])
    assert s.mode == "stdin"
    s = parse_ground_truth([{"input": {"stdin": "1"}, "output": {"stdout": "2"}}])
    assert s.tests[0].input == "1" and s.tests[0].expected == "2"
    s = parse_ground_truth([{"input": "[1]", "output": "1", "testtype": "functional"}], {"fn_name": "h"})
    assert s.fn_name == "h"


def test_options_and_checker():
    s = parse_ground_truth({"inputs": ["x"], "outputs": ["y"], "float_tol": 0.01, "unordered": True, "time_limit": 2,
                            "checker": "def check(i, e, o):\n    return o.strip() == 'z'\n"})
    assert s.float_tol == 0.01 and s.unordered and s.time_limit == 2 and s.checker("x", "y", "z\n")


@pytest.mark.parametrize("gt,msg", [
    ("not json", "not valid JSON"),
    ("42", "must be a JSON object or list"),
    (json.dumps({"inputs": ["1"]}), "needs 'inputs' and 'outputs'"),
    (json.dumps({"inputs": ["1", "2"], "outputs": ["1"]}), "2 inputs but 1 outputs"),
    (json.dumps({"inputs": [], "outputs": []}), "no tests"),
    (json.dumps({"inputs": [1], "outputs": ["1"]}), "must be a string"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "fn_name": "not an id"}), "identifier"),
    (json.dumps({"inputs": [5], "outputs": [1], "fn_name": "f"}), "must be a list"),
    (json.dumps([{"input": "1", "output": "2", "testtype": "functional"}]), "need 'fn_name'"),
    (json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}, {"input": "[1]", "output": "1",
                                                                      "testtype": "functional"}]), "mix"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "checker": "def check(:"}), "checker"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "time_limit": "fast"}), "wrong type"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "time_limit": 0}), "time_limit"),
])
def test_malformed_ground_truth_raises_clearly(gt, msg):
    with pytest.raises(GroundTruthError, match=msg):
        parse_ground_truth(gt)


@pytest.mark.parametrize("gt", ["not json", None, 42, {"inputs": []}, [{"bad": 1}], b"\xff"])
def test_malformed_ground_truth_is_sandbox_error_never_an_exception(gt):
    r = compute_score("code", "```python\nprint(1)\n```", gt)
    assert r["verdict"] == "sandbox_error" and r["score"] == 0.0 and "ground truth" in r["detail"]
