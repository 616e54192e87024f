"""Hostile programs against the JUDGE side of the reward, through the real engine in its default configuration.

Classes (issue 16): integer answers accepted within a float tolerance; super-linear judging (a backtracking number
regex, a quadratic any-order match, judging past the first failure); memory amplification in the host (16 MiB of
stdout, millions of returned objects); strings the host cannot write (lone surrogates, terminal escapes). For each
program: the score (0 for every wrong answer), the verdict (a program verdict, never ``sandbox_error``), the call's
wall time, the host's RSS growth and longest stall (``hostile_host.observe``), nothing left behind, and the same
engine still judging a correct and a wrong program right afterwards.
"""

from __future__ import annotations

import json

import pytest

from microcoder_ext.core import verdicts as V


def call_gt(expected, fn="f", **opts):
    return json.dumps({"fn_name": fn, "inputs": [[1]], "outputs": [expected], **opts})


def stdin_gt(expected: str, **opts):
    return json.dumps({"inputs": [""], "outputs": [expected], **opts})


# ------------------------------------------------------------------------------------------------ integer answers


INT_CASES = {
    "scalar": (2000000000, "return 2000000001.0"),
    "nested_list": ([[1, 2000000000]], "return [[1, 2000000001.0]]"),
    "dict_value": ({"n": 2000000000}, "return {'n': 2000000001.0}"),
    "tuple_in_list": ([[3, 4000000000]], "return [(3, 4000000000.5)]"),
    "huge_int_as_float": (10**30, "return 1e30"),  # 1e30 == 1000000000000000019884624838656, not 10**30
}


@pytest.mark.parametrize("name", sorted(INT_CASES))
def test_a_float_near_an_integer_answer_is_wrong(hostile, name):
    expected, body = INT_CASES[name]
    obs = hostile(f"def f(x):\n    {body}\n", call_gt(expected))
    assert (obs.score, obs.verdict) == (0.0, V.WRONG_ANSWER), obs


def test_an_integral_float_equal_to_the_integer_is_accepted(hostile):
    obs = hostile("def f(x):\n    return [2000000000.0, {'k': 7.0}]\n", call_gt([2000000000, {"k": 7}]))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs


def test_stdin_integer_token_is_exact(hostile):
    obs = hostile("print(2000000001.0)\n", stdin_gt("2000000000\n"))
    assert obs.score == 0.0 and obs.verdict == V.WRONG_ANSWER, obs
    obs = hostile("print('2000000001')\n", stdin_gt("2000000000\n"))
    assert obs.score == 0.0, obs


def test_float_expected_keeps_its_tolerance(hostile):
    obs = hostile("def f(x):\n    return [0.1 + 0.2, 2]\n", call_gt([0.3, 2.0]))
    assert obs.score == 1.0, obs


# ------------------------------------------------------------------------------------------------ super-linear judging


def test_long_digit_token_then_a_letter_does_not_stall_the_host(hostile):
    obs = hostile("import sys\nsys.stdout.write('1' * (4 << 20) + 'x')\n", stdin_gt("2.5\n"))
    assert obs.score == 0.0 and obs.verdict == V.WRONG_ANSWER, obs


def test_any_order_wrong_answer_of_8000_floats_is_judged_fast(hostile):
    expected = [i / 7 for i in range(8000)]
    obs = hostile("def f(x):\n    return [i / 7 for i in range(1, 8001)]\n", call_gt(expected, unordered=True))
    assert obs.score == 0.0 and obs.verdict == V.WRONG_ANSWER and obs.wall_s < 10, obs


def test_any_order_correct_answer_of_8000_floats_is_accepted(hostile):
    expected = [i / 7 for i in range(8000)]
    obs = hostile("def f(x):\n    return [i / 7 + 1e-12 for i in reversed(range(8000))]\n",
                 call_gt(expected, unordered=True))
    assert obs.score == 1.0, obs


def test_results_after_the_first_failure_are_not_judged(default_engine, monkeypatch):
    from microcoder_ext.reward import evaluate_response
    from microcoder_ext.reward.engine import Engine

    calls = []
    real = Engine.judge

    def counting(test, msg, suite):
        calls.append(msg.get("i"))
        return real(test, msg, suite)

    monkeypatch.setattr(Engine, "judge", staticmethod(counting))
    gt = {"fn_name": "f", "inputs": [[i] for i in range(20)], "outputs": [-1] + list(range(1, 20))}
    res = evaluate_response("```python\ndef f(x):\n    return x\n```", gt, engine=default_engine)
    assert res.verdict == V.WRONG_ANSWER and res.num_passed == 0
    assert calls == [0], calls  # the worker may have run later tests before the stop arrived: never judged


# ------------------------------------------------------------------------------------------------ host memory


def test_the_stall_meter_sees_the_interpreter_held_and_not_the_load():
    """``hostile_host.Ticker``, which every hostile test reads: a thread that holds the interpreter for CPU work (one
    big-integer power, which never lets go of it) is a stall of about that long; a thread that sleeps is none."""
    import time

    from hostile_host import Ticker

    with Ticker() as held:
        t = time.thread_time()
        _ = 7 ** 1_500_000
        used = time.thread_time() - t
    assert held.max_gap > 0.5 * used > 0.05, (held.max_gap, used)
    with Ticker() as idle:
        time.sleep(0.3)
    assert idle.max_gap < 0.05, idle.max_gap


MEMORY_CASES = {
    "newlines": ("import sys\nsys.stdout.write('\\n' * (15 << 20))\n", "3\n"),
    "invalid_bytes": ("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe' * (15 << 19))\n", "ok\n"),
    "tokens": ("import sys\nsys.stdout.write('7 ' * (15 << 19))\n", "7 7\n"),
    "astral_chars": ("import sys\nsys.stdout.write('\\U0001F600' * (15 << 18))\n", "x\n"),
}


@pytest.mark.parametrize("name", sorted(MEMORY_CASES))
def test_16_mib_of_stdout_costs_the_host_a_bounded_amount(hostile, name):
    code, expected = MEMORY_CASES[name]
    obs = hostile(code, stdin_gt(expected))
    assert obs.score == 0.0 and obs.verdict == V.WRONG_ANSWER, obs


def test_millions_of_returned_empty_lists_are_not_materialised(hostile):
    obs = hostile("def f(x):\n    return [[] for _ in range(3_000_000)]\n", call_gt([[], []]))
    assert obs.score == 0.0 and obs.verdict == V.WRONG_ANSWER, obs


def test_a_deeply_nested_return_value_is_wrong_not_an_error(hostile):
    code = "def f(x):\n    v = 0\n    for _ in range(100000):\n        v = [v]\n    return v\n"
    obs = hostile(code, call_gt([[0]]))
    assert obs.score == 0.0, obs


# ------------------------------------------------------------------------------------------------ strings


def test_exception_text_with_surrogates_and_escapes_is_made_safe(hostile):
    code = ("def f(x):\n    bad = '\\udcff\\x1b[2J\\x1b]0;pwned\\x07\\u202e'\n"
            "    raise ValueError(bad + 'A' * 10000 + bad)\n")
    obs = hostile(code, call_gt(1))
    assert obs.score == 0.0 and obs.verdict == V.RUNTIME_ERROR, obs
    detail = obs.detail
    detail.encode("utf-8")  # valid UTF-8: a host logging it to a UTF-8 file does not raise
    assert "\x1b" not in detail and "\u202e" not in detail and "\x07" not in detail
    assert len(detail) <= 300 and "\\x1b" in detail


def test_stdout_control_characters_in_the_reason_are_escaped(hostile):
    obs = hostile("print('\\x1b[31m\\udcff')\n", stdin_gt("1\n"))
    assert obs.score == 0.0 and "\x1b" not in obs.detail
    obs.detail.encode("utf-8")
