"""Problems whose tests cannot tell a solution from a program that hard-codes the statement's examples.

RL finds that shortcut: when a problem's tests are exactly the examples printed in its statement (LiveCodeBench rows
with public tests only, CodeContests rows with ``public_tests`` only, TACO/APPS rows with one or two tests), a
program that prints the examples' answers passes in any format. That is a property of the data, not of the judge,
so it is reported here, per problem, and ``microcoder data prepare`` can drop such problems (``--drop-weak-tests``).

Two findings, the first that applies:

* ``examples only``: every test appears in the statement, its input and its expected output (compared with all
  whitespace removed; call-based tests by the compact JSON of each argument and of the result, the way LeetCode-style
  statements print ``nums = [2,7,11,15]``), or the row says it has no private tests (LiveCodeBench's
  ``n_private_tests``, recorded by the loader);
* ``fewer than N tests``: the row has fewer than ``min_tests`` tests.
"""

from __future__ import annotations

import json
import re

from microcoder_ext.reward.ground_truth import GroundTruthError, parse_ground_truth

from .problem import Problem

EXAMPLES_ONLY = "examples only"
_SPACE = re.compile(r"\s+")


def fewer_than(n: int) -> str:
    return f"fewer than {n} tests"


def _compact(text: str) -> str:
    return _SPACE.sub("", text)


def _json(value) -> str | None:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return None


def _in_statement(piece: str | None, statement: str) -> bool:
    return piece is not None and _compact(piece) in statement


def examples_only(p: Problem, suite=None) -> bool:
    """Whether every test of ``p`` is one of its statement's examples (see the module docstring)."""
    if p.extra.get("n_private_tests") == 0 and p.extra.get("n_public_tests"):
        return True
    suite = suite if suite is not None else parse_ground_truth(p.tests)
    statement = _compact(p.statement or "")
    if not statement or not suite.tests:
        return False
    for t in suite.tests:
        if suite.mode == "stdin":
            if not (_in_statement(t.input, statement) and _in_statement(t.expected, statement)):
                return False
            continue
        args = list(t.input.get("args", [])) + list((t.input.get("kwargs") or {}).values())
        if not all(_in_statement(_json(a), statement) for a in args):
            return False
        if not _in_statement(_json(t.expected), statement):
            return False
    return True


def weakness(p: Problem, min_tests: int = 0) -> str | None:
    """Why ``p``'s tests are weak (:data:`EXAMPLES_ONLY` or :func:`fewer_than`), or None. Malformed tests are not
    judged here (the loaders reject them)."""
    try:
        suite = parse_ground_truth(p.tests)
    except GroundTruthError:
        return None
    if examples_only(p, suite):
        return EXAMPLES_ONLY
    if min_tests and len(suite.tests) < min_tests:
        return fewer_than(min_tests)
    return None
