"""Issue 25, class 2: a returned value is judged against the expected value as it is. A one-element expected list is
unwrapped only where the encoding stores outputs wrapped (APPS/TACO's ``[result]``), and then only the element is
accepted; never a value of another shape. Real engine, default configuration, every call-based encoding."""

from __future__ import annotations

import json

import pytest

from microcoder_ext.core import verdicts as V

PAIR = "class Solution:\n    def f(self, x):\n        return {ret}\n"
SUBSETS = ("class Solution:\n    def subsets(self, nums):\n        out = [[]]\n        for v in nums:\n"
           "            out += [s + [v] for s in out]\n        return {ret}\n")


def prime(fn, args, outputs, **opts):  # verl prime_code: JSON-lines inputs, JSON-text outputs
    return json.dumps({"fn_name": fn, "inputs": [json.dumps(a) for a in args],
                       "outputs": [json.dumps(o) for o in outputs], **opts})


def lcb(fn, args, outputs):
    return json.dumps({"tests": [{"input": json.dumps(a), "output": json.dumps(o), "testtype": "functional"}
                                 for a, o in zip(args, outputs)], "fn_name": fn})


def ours(fn, args, outputs, **opts):
    return json.dumps({"fn_name": fn, "inputs": [{"x" if fn == "f" else "nums": a} for a in args],
                       "outputs": outputs, **opts})


def apps(fn, args, outputs, wrapped):
    return json.dumps({"fn_name": fn, "inputs": [[a] for a in args], "outputs": [[o] if wrapped else o for o in outputs]})


def prime_intellect(fn, args, outputs):
    return json.dumps({"test_cases": [{"type": "function_call", "fn_name": fn, "input": [a], "output": [o]}
                                      for a, o in zip(args, outputs)]})


ENCODINGS = {
    "prime": prime,
    "lcb": lcb,
    "ours": ours,
    "apps-wrapped": lambda fn, a, o, **_: apps(fn, a, o, True),
    "apps-plain": lambda fn, a, o, **_: apps(fn, a, o, False),
    "prime-intellect": lambda fn, a, o, **_: prime_intellect(fn, a, o),
}


RIGHT = "[[k, k + 1] for k in range(x, x + (1 if x < 3 else 2))]"


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_one_pair_is_not_a_list_of_pairs(hostile, encoding):
    # a list of pairs per test: one pair in the first two tests, two in the third (so that the plain APPS-native
    # suite is not read as APPS-wrapped: see test_apps_wrapped_rows_expect_the_element)
    gt = ENCODINGS[encoding]("f", [1, 2, 3], [[[1, 2]], [[2, 3]], [[3, 4], [4, 5]]])
    assert hostile(PAIR.format(ret=RIGHT), gt).verdict == V.CORRECT
    for wrong in ("[x, x + 1]", "[[[x, x + 1]]]", "(x, x + 1)"):
        obs = hostile(PAIR.format(ret=f"{wrong} if x < 3 else {RIGHT}"), gt)
        assert obs.verdict == V.WRONG_ANSWER and obs.detail.startswith("test 1/3"), (encoding, wrong, obs)


@pytest.mark.parametrize("encoding", ["prime", "ours", "lcb"])
def test_empty_list_is_not_the_subsets_of_an_empty_list(hostile, encoding):
    opts = {"unordered": True} if encoding != "lcb" else {}
    gt = ENCODINGS[encoding]("subsets", [[]], [[[]]], **opts)
    assert hostile(SUBSETS.format(ret="out"), gt).verdict == V.CORRECT
    obs = hostile(SUBSETS.format(ret="[]"), gt)
    assert obs.verdict == V.WRONG_ANSWER, (encoding, obs)
    gt = ENCODINGS[encoding]("subsets", [[], [1]], [[[]], [[], [1]]], **opts)
    assert hostile(SUBSETS.format(ret="out[::-1]" if opts else "out"), gt).verdict == V.CORRECT
    assert hostile(SUBSETS.format(ret="out[1:] or []"), gt).verdict == V.WRONG_ANSWER


def test_apps_wrapped_rows_expect_the_element():
    """The rows that need unwrapping: APPS/TACO call-based rows store every output as ``[result]``."""
    from microcoder_ext.reward.ground_truth import parse_ground_truth

    row = {"fn_name": "f", "inputs": [[1], [2]], "outputs": [[2], [3]]}  # APPS: f(1) == 2, f(2) == 3
    assert [t.expected for t in parse_ground_truth(row).tests] == [2, 3]
    row = {"fn_name": "f", "inputs": [[1], [2]], "outputs": [[2], 3]}  # not every output wrapped: as stored
    assert [t.expected for t in parse_ground_truth(row).tests] == [[2], 3]
    # the one ambiguous case: a native suite whose every answer is itself a one-element list reads as wrapped
    row = {"fn_name": "f", "inputs": [[1]], "outputs": [[[1, 2]]]}
    assert [t.expected for t in parse_ground_truth(row).tests] == [[1, 2]]
