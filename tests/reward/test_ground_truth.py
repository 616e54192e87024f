"""Ground-truth formats (``microcoder_ext.reward.ground_truth``): one test per decoding rule of the module
docstring, one per error. The same rules, end to end on every LeetCodeDataset problem: test_accuracy_formats.py."""

import json

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import GroundTruthError, compute_score, evaluate_response, parse_ground_truth


def _args(s):
    return [t.input for t in s.tests]


def _expected(s):
    return [t.expected for t in s.tests]


# --- dict shape: verl/PRIME, APPS/TACO, ours -------------------------------------------------------------------
def test_apps_stdin_and_line_lists():
    s = parse_ground_truth(json.dumps({"inputs": [["1 2", "3"]], "outputs": [["3", "4"]]}))
    assert s.mode == "stdin" and s.tests[0].input == "1 2\n3" and s.tests[0].expected == "3\n4"


def test_verl_prime_strings_decode_inputs_and_outputs():
    """verl prime_code: each input newline-joined JSON arguments, each output a JSON string it decodes."""
    s = parse_ground_truth({"fn_name": "f", "inputs": ["[1, 2]\n3", "\"5\"\n[]"],
                            "outputs": ["[2, 2, 1]", "\"5\""]})
    assert s.mode == "call" and s.fn_name == "f"
    assert _args(s) == [{"args": [[1, 2], 3], "kwargs": {}}, {"args": ["5", []], "kwargs": {}}]
    assert _expected(s) == [[2, 2, 1], "5"]  # JSON texts decoded: "[2, 2, 1]" is a list, '"5"' the string 5
    assert not any(t.apps_native for t in s.tests)  # the JSON text is the value: compared as it is (no unwrap)


def test_verl_prime_json_number_text_is_a_number():
    s = parse_ground_truth({"fn_name": "f", "inputs": ["1"], "outputs": ["5"]})
    assert s.tests[0].expected == 5 and type(s.tests[0].expected) is int


def test_verl_prime_big_integers_and_blank_lines():
    big = "1" + "0" * 5000
    s = parse_ground_truth('{"fn_name": "f", "inputs": ["%s\\n\\n2\\n"], "outputs": ["%s"]}' % (big, big))
    assert s.tests[0].input["args"] == [10 ** 5000, 2] and s.tests[0].expected == 10 ** 5000


def test_verl_prime_non_string_output_is_kept_as_value():
    s = parse_ground_truth({"fn_name": "f", "inputs": ["[1,2]\n3"], "outputs": [4]})
    assert s.tests[0].expected == 4


def test_apps_native_lists_keep_outputs_as_values():
    """APPS/TACO native: inputs are argument lists; outputs are values (the string "5" stays a string)."""
    s = parse_ground_truth({"fn_name": "f", "inputs": [[1, 2], [[3]], ["x"]], "outputs": [[3], "5", ["abc"]]})
    assert _args(s) == [{"args": [1, 2], "kwargs": {}}, {"args": [[3]], "kwargs": {}}, {"args": ["x"], "kwargs": {}}]
    assert _expected(s) == [[3], "5", ["abc"]]  # not every output is a one-element list: no APPS wrapping
    assert all(t.apps_native for t in s.tests)


def test_apps_wrapped_outputs_expect_the_element_only():
    """APPS stores every call-based output as ``[result]``: such a suite expects the elements."""
    s = parse_ground_truth({"fn_name": "f", "inputs": [[1, 2], [[3]]], "outputs": [[3], [[1, 2]]]})
    assert _expected(s) == [3, [1, 2]]
    s = parse_ground_truth({"fn_name": "f", "inputs": ["[1, 2]", "[]"], "outputs": ["[[1, 2]]", "[[]]"]})
    assert _expected(s) == [[[1, 2]], [[]]]  # verl/PRIME JSON texts: the values as they are


def test_ours_keyword_arguments():
    s = parse_ground_truth({"fn_name": "f", "inputs": [{"a": 1, "b": [2]}], "outputs": [3]})
    assert _args(s) == [{"args": [], "kwargs": {"a": 1, "b": [2]}}] and not s.tests[0].apps_native


def test_apps_call_based_forms_mixed():
    s = parse_ground_truth({"fn_name": "f", "inputs": [[1, 2], {"a": 1}, "[1,2]\n3"], "outputs": [3, 1, "4"]})
    assert _args(s) == [{"args": [1, 2], "kwargs": {}}, {"args": [], "kwargs": {"a": 1}},
                        {"args": [[1, 2], 3], "kwargs": {}}]
    assert _expected(s) == [3, 1, 4]  # the string output of the JSON-lines test is decoded, the others are values


def test_numpy_arrays_from_parquet_are_lists():
    import numpy as np  # a verl dependency: parquet columns arrive as numpy arrays

    s = parse_ground_truth({"fn_name": "f", "inputs": np.array(["1\n2"], dtype=object),
                            "outputs": np.array(["3"], dtype=object)})
    assert _args(s) == [{"args": [1, 2], "kwargs": {}}] and _expected(s) == [3]


# --- fn_name sources --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gt,extra,name", [
    ({"fn_name": "a", "inputs": ["1"], "outputs": ["1"]}, None, "a"),
    ({"metadata": {"func_name": "b"}, "inputs": ["1"], "outputs": ["1"]}, None, "b"),
    ({"metadata": '{"func_name": "c"}', "inputs": ["1"], "outputs": ["1"]}, None, "c"),
    ({"inputs": ["1"], "outputs": ["1"]}, {"fn_name": "d"}, "d"),
    ({"inputs": ["1"], "outputs": ["1"]}, {"metadata": {"func_name": "e"}}, "e"),
    ({"inputs": ["1"], "outputs": ["1"]}, {"metadata": '{"func_name": "g"}'}, "g"),
    ({"fn_name": "a", "inputs": ["1"], "outputs": ["1"]}, {"fn_name": "other"}, "a"),  # the ground truth wins
    ({"tests": [{"input": "1", "output": "1", "testtype": "functional"}], "fn_name": "h"}, None, "h"),
    ({"tests": [{"input": "1", "output": "1", "testtype": "functional"}], "metadata": '{"func_name": "i"}'}, None, "i"),
    ([{"input": "1", "output": "1", "testtype": "functional", "metadata": {"func_name": "j"}}], None, "j"),  # rLLM
    ([{"input": "1", "output": "1", "testtype": "functional", "metadata": {"func_name": "j"}}],
     {"fn_name": "other"}, "j"),  # the tests win over extra_info
    ([{"input": [1], "output": [1], "type": "function_call", "fn_name": "k"}], None, "k"),  # PrimeIntellect
    ([{"input": "1", "output": "1", "testtype": "functional"}], {"metadata": '{"func_name": "l"}'}, "l"),  # LCB row
])
def test_fn_name_sources(gt, extra, name):
    s = parse_ground_truth(gt, extra)
    assert s.mode == "call" and s.fn_name == name


def test_null_func_name_means_stdin():
    """DeepCoder stdin rows carry ``"metadata": {"func_name": null}``; extra_info metadata may be anything."""
    s = parse_ground_truth([{"input": "1\n", "output": "2\n", "testtype": "stdin", "metadata": {"func_name": None}}])
    assert s.mode == "stdin" and s.fn_name is None
    s = parse_ground_truth({"inputs": ["1"], "outputs": ["2"]}, {"metadata": "free text", "fn_name": None})
    assert s.mode == "stdin"
    s = parse_ground_truth({"inputs": ["1"], "outputs": ["2"]}, {"metadata": '{"difficulty": "easy"}'})
    assert s.mode == "stdin"


# --- list shapes ------------------------------------------------------------------------------------------------
def test_livecodebench_functional_decodes_json_and_never_unwraps():
    s = parse_ground_truth({"fn_name": "g", "tests": [{"input": "[1]\n2", "output": "[3]", "testtype": "functional"}]})
    assert s.mode == "call" and _args(s) == [{"args": [[1], 2], "kwargs": {}}]
    assert s.tests[0].expected == [3] and not s.tests[0].apps_native


def test_livecodebench_functional_decodes_string_output_even_with_list_input():
    s = parse_ground_truth([{"input": [1, 2], "output": "\"ab\"", "testtype": "functional"}], {"fn_name": "f"})
    assert _args(s) == [{"args": [1, 2], "kwargs": {}}] and s.tests[0].expected == "ab"


def test_rllm_deepcoder_per_test_metadata():
    tests = [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional", "metadata": {"func_name": "mul"}},
             {"input": "[5]\n2", "output": "10", "testtype": "functional", "metadata": {"func_name": "mul"}}]
    s = parse_ground_truth(json.dumps(tests))
    assert s.fn_name == "mul" and _expected(s) == [6, 10] and not any(t.apps_native for t in s.tests)


def test_prime_intellect_function_call_native_and_unwrapped():
    tests = [{"input": [[1, 2], 3], "output": [6], "type": "function_call", "fn_name": "f"}]
    s = parse_ground_truth({"test_cases": tests, "language": "python"})
    assert _args(s) == [{"args": [[1, 2], 3], "kwargs": {}}] and _expected(s) == [6]  # TACO's [result], unwrapped
    assert s.tests[0].apps_native
    s = parse_ground_truth([{"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"}])
    assert s.mode == "stdin" and s.tests[0].input == "1 2\n"


def test_stdin_lists_livecodebench_codecontests_codeforces():
    s = parse_ground_truth([{"input": "1\n", "output": "2\n", "testtype": "stdin"}])
    assert s.mode == "stdin" and s.tests[0].expected == "2\n"
    s = parse_ground_truth([{"input": {"stdin": "1"}, "output": {"stdout": "2"}}])
    assert s.mode == "stdin" and s.tests[0].input == "1" and s.tests[0].expected == "2"
    s = parse_ground_truth([{"input": "3 30\n2 2 1", "output": "5"}])  # rLLM codeforces: untyped, no fn_name
    assert s.mode == "stdin" and s.tests[0].input == "3 30\n2 2 1"


def test_tests_wrapper_json_string_and_untyped_functional():
    s = parse_ground_truth({"tests": json.dumps([{"input": "[1]", "output": "1"}]), "fn_name": "h"})
    assert s.fn_name == "h" and _expected(s) == [1] and not s.tests[0].apps_native


def test_options_and_checker():
    s = parse_ground_truth({"inputs": ["x"], "outputs": ["y"], "float_tol": 0.01, "unordered": True, "time_limit": 2,
                            "checker": "def check(i, e, o):\n    return o.strip() == 'z'\n"})
    assert s.float_tol == 0.01 and s.unordered and s.time_limit == 2 and s.checker("x", "y", "z\n")


# --- errors -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gt,extra,msg", [
    ("not json", None, "not valid JSON"),
    ("42", None, r"ground truth is an integer; expected a JSON object or list"),
    ('"text"', None, r"ground truth is a string; expected"),
    (json.dumps({"inputs": ["1"]}), None, r"ground truth dict has keys \['inputs'\]; expected inputs/outputs"),
    (json.dumps({"input_output": "{}"}), None, r"has keys \['input_output'\]; expected inputs/outputs .*tests"),
    (json.dumps({"inputs": ["1", "2"], "outputs": ["1"]}), None, "2 inputs but 1 outputs"),
    (json.dumps({"inputs": "1", "outputs": ["1"]}), None, "'inputs' is a string and 'outputs' is a list"),
    (json.dumps({"inputs": [], "outputs": []}), None, "no tests"),
    (json.dumps({"inputs": [1], "outputs": ["1"]}), None, r"inputs\[0\] is an integer; a stdin test needs a string"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "fn_name": "not an id"}), None, "identifier"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "fn_name": 7}), None, "identifier"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"]}), {"fn_name": "a b"}, r"identifier.*extra_info\.fn_name"),
    (json.dumps({"inputs": [5], "outputs": [1], "fn_name": "f"}), None,
     r"inputs\[0\] is an integer; a call-based input must be a list"),
    (json.dumps({"inputs": ["[1,2]", "[1,"], "outputs": ["1", "2"], "fn_name": "f"}), None,
     r"inputs\[1\]: line 1 is not JSON"),
    (json.dumps({"inputs": ["[1]", "[2]"], "outputs": ["[1]", "abc"], "fn_name": "f"}), None,
     r"outputs\[1\] is not JSON text"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "fn_name": "f", "metadata": {"func_name": "g"}}), None,
     "conflicting function names: 'f' \\(fn_name\\) and 'g' \\(metadata.func_name\\)"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "metadata": "{oops"}), None,
     "metadata is a string that is not JSON"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "metadata": [1]}), None, "metadata is a list; expected an object"),
    (json.dumps({"tests": {"input": "1"}}), None, "ground truth 'tests' is an object; expected a list of tests"),
    (json.dumps({"tests": "[oops"}), None, "'tests' is a string that is not JSON"),
    (json.dumps([{"input": "1", "output": "2"}, [1, 2]]), None, r"tests\[1\] is a list; expected an object with "
                                                                r"input/output"),
    (json.dumps([{"inputs": ["1"], "outputs": ["2"]}]), None, r"tests\[0\] has keys \['inputs', 'outputs'\]; "
                                                              r"expected an object with input/output"),
    (json.dumps([{"input": "1", "output": "2", "testtype": "functional"}]), None, "need 'fn_name'"),
    (json.dumps([{"input": "1", "output": "2", "testtype": "assert"}]), None, r"testtype 'assert' is not"),
    (json.dumps([{"input": "1", "output": "2", "type": "assert"}]), None, r"type 'assert' is not 'stdin_stdout'"),
    (json.dumps([{"input": "1", "output": "1", "testtype": "functional", "metadata": {"func_name": "a"}},
                 {"input": "1", "output": "1", "testtype": "functional", "metadata": {"func_name": "b"}}]), None,
     r"conflicting function names: 'a' \(tests\[0\].metadata.func_name\) and 'b'"),
    (json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}, {"input": "[1]", "output": "1",
                                                                      "testtype": "functional"}]), {"fn_name": "f"},
     "mix"),
    (json.dumps([{"input": {"stdin": "1"}, "output": "2"}]), None, "SandboxFusion shape is input"),
    (json.dumps([{"input": "1", "output": 2, "testtype": "stdin"}]), None, r"tests\[0\].output is an integer"),
    (json.dumps([{"input": 5, "output": "2", "testtype": "functional"}]), {"fn_name": "f"},
     r"tests\[0\].input is an integer; a call-based input"),
    (json.dumps([{"input": "[1]", "output": "nope", "testtype": "functional"}]), {"fn_name": "f"},
     r"tests\[0\].output is not JSON text"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "checker": "def check(:"}), None, "checker"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "time_limit": "fast"}), None, "wrong type"),
    (json.dumps({"inputs": ["1"], "outputs": ["1"], "time_limit": 0}), None, "time_limit"),
])
def test_malformed_ground_truth_raises_clearly(gt, extra, msg):
    with pytest.raises(GroundTruthError, match=msg):
        parse_ground_truth(gt, extra)


@pytest.mark.parametrize("gt", ["not json", None, 42, {"inputs": []}, [{"bad": 1}], [[1]], b"\xff"])
def test_malformed_ground_truth_is_sandbox_error_never_an_exception(gt):
    r = compute_score("code", "```python\nprint(1)\n```", gt)
    assert r["verdict"] == "sandbox_error" and r["score"] == 0.0 and "ground truth" in r["detail"]


def test_unrecognised_shape_reason_reaches_the_result():
    r = compute_score("code", "```python\nprint(1)\n```", [{"input": "1", "output": "1"}, [1]])
    assert r["verdict"] == "sandbox_error" and "tests[1] is a list; expected an object with input/output" in r["detail"]


# --- end to end: the reproduction -------------------------------------------------------------------------
PRIME_CODE = """
class Solution:
    def countAll(self, nums, k):
        return [nums.count(x) + k - k for x in nums][:3]
"""


def test_correct_solution_in_verl_prime_format_is_correct(engine):
    """Before the fix: ``expected "[2, 2, 1]", got [2, 2, 1]`` for a correct solution."""
    gt = {"fn_name": "countAll", "inputs": ["[1, 1, 2]\n0", "[7]\n3"], "outputs": ["[2, 2, 1]", "[1]"]}
    r = evaluate_response(f"```python\n{PRIME_CODE}\n```", json.dumps(gt), engine=engine)
    assert r.verdict == V.CORRECT, r.detail
    wrong = PRIME_CODE.replace("[:3]", "[:2]")
    r = evaluate_response(f"```python\n{wrong}\n```", json.dumps(gt), engine=engine)
    assert r.verdict == V.WRONG_ANSWER and "expected [2, 2, 1], got [2, 2]" in r.detail, r.detail
