"""One test per verdict, and the stdin/call-based failure cases of code-reward.md run end to end."""

import asyncio
import json
import threading

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import RESULT_KEYS, compute_score, compute_score_async, evaluate_response

SUM_GT = {"inputs": ["1 2\n", "10 20\n", "5 5\n"], "outputs": ["3\n", "30\n", "10\n"]}
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)"


def test_correct(run):
    r = run(SUM_OK, SUM_GT)
    assert r.verdict == V.CORRECT and r.score == 1.0 and r.pass_rate == 1.0 and r.num_tests == 3


def test_wrong_answer_stops_at_first_failure(run):
    r = run("a, b = map(int, input().split())\nprint(a + b if a != 10 else 0)", SUM_GT)
    assert r.verdict == V.WRONG_ANSWER and r.num_passed == 1 and "test 2/3" in r.detail


def test_all_tests_run_without_early_stop(run):
    r = run("a, b = map(int, input().split())\nprint(a + b if a != 10 else 0)", SUM_GT, stop_on_first_failure=False)
    assert r.verdict == V.WRONG_ANSWER and r.num_passed == 2 and r.pass_rate == pytest.approx(2 / 3)


def test_wrong_only_on_a_late_test_never_scores():
    """verl's first-10-tests false positive: wrong only on test 12 of 15 must score 0."""
    gt = {"inputs": [f"{i}\n" for i in range(15)], "outputs": [f"{i * 2}\n" for i in range(15)]}
    code = "n = int(input())\nprint(n * 2 if n != 11 else -1)"
    assert compute_score("s", f"```python\n{code}\n```", json.dumps(gt))["score"] == 0.0


def test_runtime_error_even_after_correct_output(run):
    r = run(SUM_OK + "\nraise ValueError('after')", SUM_GT)
    assert r.verdict == V.RUNTIME_ERROR and "ValueError" in r.detail


def test_timeout(run):
    r = run("while True: pass", SUM_GT)
    assert r.verdict == V.TIMEOUT


def test_timeout_sleep_uses_wall_clock(run):
    assert run("import time; time.sleep(30)", SUM_GT).verdict == V.TIMEOUT


def test_memory_limit(run):
    assert run("x = bytearray(4 << 30)", SUM_GT).verdict == V.MEMORY_LIMIT


def test_compile_error(run):
    assert run("def f(:\n  pass", SUM_GT).verdict == V.COMPILE_ERROR
    assert run("def f(:\n  pass", {"inputs": [[1]], "outputs": [1], "fn_name": "f"}).verdict == V.COMPILE_ERROR


def test_no_answer_executes_nothing():
    r = evaluate_response("```python\nprint(3)", json.dumps(SUM_GT))
    assert r.verdict == V.NO_ANSWER and r.num_tests == 3 and r.time_s < 0.5


def test_sandbox_error_for_malformed_ground_truth():
    assert compute_score("s", "```python\nprint(1)\n```", "{")["verdict"] == V.SANDBOX_ERROR


@pytest.mark.parametrize("code", [
    "import sys\nd = sys.stdin.buffer.read().split()\nprint(int(d[0]) + int(d[1]))",
    "import sys\nl = sys.stdin.buffer.readline().split()\nprint(int(l[0]) + int(l[1]))",
    "import os\na, b = map(int, input().split())\nos.write(1, f'{a + b}\\n'.encode())",
    SUM_OK + "\nquit()",
    SUM_OK + "\nexit()",
    SUM_OK + "\nimport sys; sys.exit(0)",
    "a, b = map(int, open(0).read().split())\nprint(a + b, end='   \\r\\n')",
    "import threading\ndef main():\n    a, b = map(int, input().split())\n    print(a + b)\n"
    "threading.stack_size(1 << 26)\nthreading.Thread(target=main).start()",
    "import sys\nsys.setrecursionlimit(10**6)\ndef d(n): return 0 if n == 0 else 1 + d(n - 1)\n"
    "a, b = map(int, input().split())\nprint(a + b + d(20000) - 20000)",
])
def test_stdin_io_styles_that_must_pass(run, code):
    r = run(code, SUM_GT)
    assert r.verdict == V.CORRECT, r.detail


def test_stdin_buffer_readline_twice(run):
    gt = {"inputs": ["1\n2\n"], "outputs": ["3\n"]}
    assert run("import sys\na = int(sys.stdin.buffer.readline())\nb = int(sys.stdin.buffer.readline())\nprint(a + b)",
               gt).verdict == V.CORRECT


def test_float_and_bigint_stdout(run):
    gt = {"inputs": [""], "outputs": ["0.3333333333\n" + str(2**200) + "\n"]}
    assert run(f"print(1/3)\nprint({2**200})", gt).verdict == V.CORRECT
    assert run(f"print(1/3)\nprint({2**200 + 1})", gt).verdict == V.WRONG_ANSWER
    big = {"inputs": [""], "outputs": ["1" * 6000 + "\n"]}
    assert run("print(int('1' * 6000))", big).verdict == V.CORRECT


CALL = {"fn_name": "twoSum", "inputs": [{"nums": [2, 7, 11, 15], "target": 9}, {"nums": [3, 3], "target": 6}],
        "outputs": [[0, 1], [0, 1]]}


@pytest.mark.parametrize("body,verdict", [
    ("return [0, 1]", V.CORRECT),
    ("return (0, 1)", V.CORRECT),                       # tuple for list, class Solution method
    ("return [1, 0]", V.WRONG_ANSWER),
    ("return {0, 1}", V.WRONG_ANSWER),                  # unserialisable
    ("raise ValueError('x')", V.RUNTIME_ERROR),
    ("import sys; sys.exit(0)", V.RUNTIME_ERROR),
    ("import os; os._exit(0)", V.RUNTIME_ERROR),        # early exit never looks like success
    ("while True: pass", V.TIMEOUT),
    ("x = bytearray(4 << 30)", V.MEMORY_LIMIT),
])
def test_call_based_verdicts(run, body, verdict):
    code = f"class Solution:\n    def twoSum(self, nums, target):\n        {body}\n"
    r = run(code, CALL)
    assert r.verdict == verdict, r.detail


@pytest.mark.parametrize("code,expected,ok", [
    ("def f():\n    return 0.1 + 0.2", 0.3, True),
    ("def f():\n    return 'cba'", "cba", True),
    ("def f():\n    return [3, 3]", [3, 3], True),
    ("def f():\n    return True", 1, False),
    ("def f():\n    raise ValueError()", None, False),
    ("def f():\n    return None", None, True),
    ("def f():\n    return 5 * 10**16 + 1", 5 * 10**16, False),
])
def test_call_based_cases_from_notes(run, code, expected, ok):
    r = run(code, {"fn_name": "f", "inputs": [[]], "outputs": [expected]})
    assert (r.verdict == V.CORRECT) is ok, r.detail


def test_call_based_huge_int_crosses_the_boundary_exactly(run):
    digits = "1" * 6000  # above Python's default 4300-digit int<->str limit
    gt = '{"fn_name": "f", "inputs": [[]], "outputs": [' + digits + ']}'
    assert run(f"def f():\n    return int('{digits}')", gt).verdict == V.CORRECT
    assert run(f"def f():\n    return int('{digits}') + 1", gt).verdict == V.WRONG_ANSWER
    gt_in = '{"fn_name": "f", "inputs": [[' + digits + ']], "outputs": [true]}'
    assert run(f"def f(x):\n    return x == int('{digits}')", gt_in).verdict == V.CORRECT


def test_apps_list_inputs_and_wrapped_outputs(run):
    gt = {"fn_name": "f", "inputs": [[[1, 2]], [[5]]], "outputs": [[3], [5]]}
    assert run("def f(a):\n    return sum(a)", gt).verdict == V.CORRECT


def test_call_crash_mid_list_resumes_in_a_fresh_child(run):
    gt = {"fn_name": "f", "inputs": [[1], [2], [3]], "outputs": [1, 2, 3]}
    code = "import os\ndef f(x):\n    if x == 2:\n        os._exit(3)\n    return x"
    r = run(code, gt, stop_on_first_failure=False)
    assert r.verdict == V.RUNTIME_ERROR and r.num_passed == 2


def test_linked_list_and_tree_types(run):
    gt = {"fn_name": "reverseList", "inputs": [{"head": [1, 2, 3]}, {"head": []}], "outputs": [[3, 2, 1], []],
          "arg_types": {"head": "ListNode"}, "return_type": "ListNode"}
    code = ("class Solution:\n    def reverseList(self, head):\n        prev = None\n        while head:\n"
            "            head.next, prev, head = prev, head, head.next\n        return prev\n")
    assert run(code, gt).verdict == V.CORRECT
    tgt = {"fn_name": "invert", "inputs": [{"root": [4, 2, 7, None, 3]}], "outputs": [[4, 7, 2, None, None, 3]],
           "arg_types": {"root": "TreeNode"}, "return_type": "TreeNode"}
    tcode = ("class Solution:\n    def invert(self, root):\n        if root:\n"
             "            root.left, root.right = self.invert(root.right), self.invert(root.left)\n        return root\n")
    assert run(tcode, tgt).verdict == V.CORRECT


def test_checker_for_several_valid_answers(run):
    gt = {"inputs": ["4\n"], "outputs": ["1 3\n"],
          "checker": "def check(inp, exp, out):\n    a, b = map(int, out.split())\n    return a + b == int(inp)\n"}
    assert run("print(2, 2)", gt).verdict == V.CORRECT
    assert run("print(2, 3)", gt).verdict == V.WRONG_ANSWER
    assert run("print('x')", gt).verdict == V.WRONG_ANSWER  # checker raised on malformed output


def test_output_limit_is_wrong_answer(engine):
    from microcoder_ext.reward import Engine, EngineConfig
    eng = Engine(EngineConfig(workers=1, timeout=2.0, output_limit=1 << 16))
    try:
        r = evaluate_response("```python\nprint('x' * (1 << 20))\n```", json.dumps(SUM_GT), engine=eng)
        assert r.verdict == V.WRONG_ANSWER and "output" in r.detail
    finally:
        eng.close()


def test_same_keys_every_sample():
    outs = [compute_score("s", "```python\nprint(3)\n```", json.dumps(SUM_GT)),
            compute_score("s", "no code", json.dumps(SUM_GT)),
            compute_score("s", "```python\nprint(3)\n```", "garbage")]
    for o in outs:
        assert tuple(o) == RESULT_KEYS
        assert isinstance(o["score"], float) and isinstance(o["num_tests"], int) and isinstance(o["verdict"], str)


def test_thread_and_asyncio_safety():
    gt = json.dumps(SUM_GT)
    good, bad = f"```python\n{SUM_OK}\n```", "```python\nprint(0)\n```"
    results = {}

    def worker(k):
        results[k] = compute_score("s", good if k % 2 == 0 else bad, gt)["score"]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: 1.0 if k % 2 == 0 else 0.0 for k in range(12)}

    async def main():
        return await asyncio.gather(*[compute_score_async("s", good, gt) for _ in range(6)])

    assert [r["score"] for r in asyncio.run(main())] == [1.0] * 6
