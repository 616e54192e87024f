"""What every execution backend shares: the judging of one test result, and the helpers that prepare a job.

A backend (the local sandbox pool in ``engine``, the remote SandboxFusion service in ``sandbox_fusion``)
only *runs* code; it turns each test's outcome into a worker-style result message (``{"status": "ok",
"stdout": ...}`` / ``{"status": "ok", "value": <JSON text>}`` / ``{"status": "timeout", "error": ...}``)
and hands it to :func:`judge`, which alone compares it with the expected output. So both backends give
the same verdicts for the same behaviour, and the expected outputs never leave the supervisor.

This module is the bottom of the reward's layering: it imports neither ``engine``, ``sandbox_fusion``
nor ``backends`` (``tests/reward/test_import_structure.py`` checks it).
"""

from __future__ import annotations

import json
import os

from microcoder_ext.core import verdicts as V

from .compare import as_bytes, compare_stdout
from .json_match import Mismatch, TooLarge, checker_budget, match_json, parse_bounded
from .ground_truth import TestCase, TestSuite
from .setup_error import RewardSetupError

MiB = 1 << 20

#: worker status -> verdict when a test did not produce a comparable result
_STATUS_VERDICT = {"exception": V.RUNTIME_ERROR, "signal": V.RUNTIME_ERROR, "memory": V.MEMORY_LIMIT,
                   "timeout": V.TIMEOUT, "compile_error": V.COMPILE_ERROR, "output_limit": V.WRONG_ANSWER,
                   "unserialisable": V.WRONG_ANSWER}


_FALSE, _TRUE = ("0", "false", "no", "off"), ("1", "true", "yes", "on")


def _env(name: str, default, cast=str):
    """Configuration value from the environment (unset or empty: ``default``; ``bool``: 1/true/yes/on or
    0/false/no/off). A value that does not parse raises :class:`RewardSetupError` naming the variable."""
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    if cast is bool:
        word = v.strip().lower()
        if word not in _FALSE + _TRUE:
            raise RewardSetupError(f"{name}={v!r}: expected one of {', '.join(_TRUE + _FALSE)}")
        return word in _TRUE
    try:
        return cast(v)
    except ValueError:
        raise RewardSetupError(f"{name}={v!r}: not a valid {cast.__name__}") from None


def judge(test: TestCase, msg: dict, suite: TestSuite) -> tuple[bool, str, str]:
    """Compare one worker result with the expected output: ``(passed, verdict if failed, detail)``.

    ``msg["stdout"]`` (stdin mode) and ``msg["value"]`` (call mode: the return value's JSON text) may be ``bytes``
    (the local sandbox sends them undecoded) or ``str``; neither is ever decoded or parsed whole (:mod:`.compare`,
    :mod:`.json_match`): time is linear in the output and memory bounded by the expected value."""
    status = msg.get("status")
    if status != "ok":
        verdict = _STATUS_VERDICT.get(status, V.SANDBOX_ERROR)
        err = str(msg.get("error") or status)
        if status == "signal" and msg.get("stderr"):
            err += f"; stderr: {str(msg['stderr'])[-200:]}"
        return False, verdict, err[-300:]
    if suite.mode == "stdin":
        actual = msg.get("stdout")
        if not isinstance(actual, (str, bytes, bytearray)):
            return False, V.SANDBOX_ERROR, "worker returned no stdout"
    else:
        actual = msg.get("value")
        if not isinstance(actual, (str, bytes, bytearray)):
            return False, V.WRONG_ANSWER, f"return value is {type(actual).__name__}, not JSON text"
    if suite.checker is not None:
        try:
            if suite.mode == "stdin":
                value = as_bytes(actual).decode("utf-8", "replace")
            else:
                value = parse_bounded(actual, **checker_budget(test.expected))
        except (TooLarge, Mismatch, ValueError, RecursionError) as e:
            return False, V.WRONG_ANSWER, f"return value not accepted: {e}"[:300]
        try:
            ok = bool(suite.checker(test.input, test.expected, value))
        except Exception as e:  # a checker raising on malformed output rejects it
            return False, V.WRONG_ANSWER, f"checker rejected output ({type(e).__name__}: {e})"[:300]
        return ok, V.WRONG_ANSWER, "checker accepted" if ok else "checker rejected output"
    if suite.mode == "stdin":
        ok, why = compare_stdout(test.expected, actual, float_tol=suite.float_tol,
                                 case_sensitive=suite.case_sensitive, line_sensitive=suite.line_sensitive,
                                 unordered=suite.unordered)
    else:
        ok, why = match_json(test.expected, actual, float_tol=suite.float_tol, unordered=suite.unordered)
    return ok, V.WRONG_ANSWER, why


def output_cap(expected, output_limit: int) -> int:
    """Output cap of a test: ``output_limit``, or twice the expected size when that is larger, rounded up
    to a power of two (the cap is visible to the program: it must not reveal the expected length)."""
    if isinstance(expected, str):
        size = len(expected.encode())
    else:
        try:
            size = len(_json_line(expected))  # in C; an integer past the int-digit limit: the estimate below
        except (TypeError, ValueError, RecursionError):
            size = _json_size(expected)
    need = 2 * size + 1024
    return output_limit if need <= output_limit else 1 << (need - 1).bit_length()


BIG_INT_KEY = "__mc_bigint__"
_BIG = 10**4000


def encode_big_ints(v):
    """Replace integers too long for ``json.dumps`` under Python's int-digit limit by ``{BIG_INT_KEY: hex}``
    (the worker, which runs without the limit, turns them back into ints)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return {BIG_INT_KEY: hex(v)} if abs(v) >= _BIG else v
    if isinstance(v, list):
        return [encode_big_ints(x) for x in v]
    if isinstance(v, dict):
        return {k: encode_big_ints(x) for k, x in v.items()}
    return v


def call_test_lines(inputs) -> bytes:
    """The inputs of call-based tests (``{"args": [...], "kwargs": {...}}`` each) as the sandbox takes them: one
    line of JSON per test (ASCII, so a line holds no raw newline), integers too long for ``json.dumps`` under the
    int-digit limit as ``{BIG_INT_KEY: hex}`` (:func:`encode_big_ints`; the test process turns them back)."""
    lines = []
    for v in inputs:
        try:
            lines.append(_json_line(v))
        except ValueError:  # an integer past the int-digit limit (rare: walk this test's value)
            lines.append(_json_line(encode_big_ints(v)))
    return "\n".join(lines).encode("ascii")


_json_line = json.JSONEncoder(separators=(",", ":")).encode


def _json_size(v) -> int:
    """Approximate JSON size of a value in bytes, without converting big ints to decimal."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v.bit_length() * 10 // 33 + 2
    if isinstance(v, (list, tuple)):
        return 2 + sum(_json_size(x) + 1 for x in v)
    if isinstance(v, dict):
        return 2 + sum(len(str(k)) + 4 + _json_size(x) for k, x in v.items())
    return len(str(v)) + 2


__all__ = ["BIG_INT_KEY", "MiB", "call_test_lines", "encode_big_ints", "judge", "output_cap"]
