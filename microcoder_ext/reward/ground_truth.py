"""Parse ground truth into a :class:`TestSuite` (auto-detected formats; malformed input raises
:class:`GroundTruthError`, which the reward turns into verdict ``sandbox_error`` with the message).

Formats (a JSON string or the decoded object):
  (a) verl/APPS ``{"inputs": [...], "outputs": [...], "fn_name"?: str}``. Without ``fn_name``: stdin/stdout,
      each input/output a string (or a list of lines, joined with ``\\n``). With ``fn_name``: call-based (a
      function or a ``class Solution`` method); each input is a list of positional arguments, a dict of
      keyword arguments, or a string of JSON lines (one argument per line, LiveCodeBench style); each
      output is the expected value. APPS wraps call-based outputs in a 1-element list, so an output
      ``[x]`` also accepts a return value equal to ``x`` (``apps_unwrap``, on for this format only).
  (b) LiveCodeBench list ``[{"input": str, "output": str, "testtype": "stdin"|"functional"}, ...]``
      (functional: JSON-lines arguments, JSON output; ``fn_name`` from the wrapper dict or ``extra_info``),
      or SandboxFusion/CodeContests ``[{"input": {"stdin": s}, "output": {"stdout": s}}, ...]``; either list
      may be wrapped as ``{"tests": [...], <options>}``.
  (c) options next to the tests: ``checker`` (Python source defining ``check(input, expected, output) ->
      bool``, run in the supervisor for problems with several valid answers; an exception in it means the
      output was rejected), ``float_tol``, ``case_sensitive``, ``line_sensitive``, ``unordered``,
      ``time_limit`` (s per test), ``memory_limit_mb``, ``setup_code`` (prepended to the program, e.g. the
      LeetCode import header), ``arg_types`` / ``return_type`` (``"ListNode"``/``"TreeNode"`` for LeetCode
      linked lists and trees, given as level-order lists).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from .compare import FLOAT_TOL, big_int


class GroundTruthError(ValueError):
    """Malformed ground truth (reported as ``sandbox_error``, never as a wrong answer)."""


@dataclass
class TestCase:
    input: Any  # stdin: str; call: {"args": list, "kwargs": dict}
    expected: Any  # stdin: str; call: JSON value
    apps_unwrap: bool = False


@dataclass
class TestSuite:
    mode: str  # "stdin" | "call"
    tests: list[TestCase]
    fn_name: str | None = None
    setup_code: str = ""
    checker: Callable | None = None
    float_tol: float = FLOAT_TOL
    case_sensitive: bool = True
    line_sensitive: bool = False
    unordered: bool = False
    time_limit: float | None = None
    memory_limit_mb: int | None = None
    arg_types: dict = field(default_factory=dict)
    return_type: str | None = None


_OPTION_TYPES = {"float_tol": (int, float), "case_sensitive": bool, "line_sensitive": bool, "unordered": bool,
                 "time_limit": (int, float), "memory_limit_mb": int, "setup_code": str, "arg_types": dict,
                 "return_type": str}


def parse_ground_truth(gt: Any, extra_info: dict | None = None) -> TestSuite:
    """Detect the format of ``gt`` and return the suite (raises :class:`GroundTruthError`)."""
    if isinstance(gt, (bytes, bytearray)):
        gt = gt.decode("utf-8", "replace")
    if isinstance(gt, str):
        try:
            gt = json.loads(gt, parse_int=big_int)
        except ValueError as e:
            raise GroundTruthError(f"ground truth is not valid JSON ({e}); expected a JSON test specification") from None
    if hasattr(gt, "tolist") and not isinstance(gt, (dict, list)):  # numpy arrays from parquet
        gt = gt.tolist()
    meta: dict = {}
    if isinstance(gt, dict) and "tests" in gt:
        meta, gt = gt, gt["tests"]
    if isinstance(gt, dict):
        if "inputs" not in gt or "outputs" not in gt:
            raise GroundTruthError(f"ground-truth dict needs 'inputs' and 'outputs' (or 'tests'); got keys {sorted(gt)[:8]}")
        meta = gt
        suite = _parse_apps(gt, _fn_name(gt, extra_info))
    elif isinstance(gt, list):
        suite = _parse_list(gt, _fn_name(meta, extra_info))
    else:
        raise GroundTruthError(f"ground truth must be a JSON object or list, got {type(gt).__name__}")
    _apply_options(suite, meta)
    if not suite.tests:
        raise GroundTruthError("ground truth has no tests")
    return suite


def _fn_name(meta: dict, extra_info: dict | None):
    name = meta.get("fn_name") if isinstance(meta, dict) else None
    if name is None and isinstance(extra_info, dict):
        name = extra_info.get("fn_name")
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise GroundTruthError(f"fn_name must be an identifier, got {name!r}")
    return name


def _text(v, what: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(v)
    raise GroundTruthError(f"{what} must be a string or a list of strings, got {type(v).__name__}")


def _call_input(v, what: str) -> dict:
    if isinstance(v, list):
        return {"args": v, "kwargs": {}}
    if isinstance(v, dict):
        if not all(isinstance(k, str) and k.isidentifier() for k in v):
            raise GroundTruthError(f"{what}: keyword-argument names must be identifiers")
        return {"args": [], "kwargs": v}
    if isinstance(v, str):
        try:
            return {"args": [json.loads(line, parse_int=big_int) for line in v.split("\n") if line.strip()], "kwargs": {}}
        except ValueError as e:
            raise GroundTruthError(f"{what}: not JSON lines ({e})") from None
    raise GroundTruthError(f"{what} must be a list (args), dict (kwargs) or JSON-lines string, got {type(v).__name__}")


def _parse_apps(gt: dict, fn_name) -> TestSuite:
    inputs, outputs = gt["inputs"], gt["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise GroundTruthError("'inputs' and 'outputs' must be lists")
    if len(inputs) != len(outputs):
        raise GroundTruthError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    if fn_name is None:
        tests = [TestCase(_text(i, f"inputs[{k}]"), _text(o, f"outputs[{k}]"))
                 for k, (i, o) in enumerate(zip(inputs, outputs))]
        return TestSuite("stdin", tests)
    tests = [TestCase(_call_input(i, f"inputs[{k}]"), o, apps_unwrap=True) for k, (i, o) in enumerate(zip(inputs, outputs))]
    return TestSuite("call", tests, fn_name=fn_name)


def _parse_list(items: list, fn_name) -> TestSuite:
    tests, modes = [], set()
    for k, t in enumerate(items):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise GroundTruthError(f"tests[{k}] must be an object with 'input' and 'output'")
        inp, out = t["input"], t["output"]
        if isinstance(inp, dict) and isinstance(out, dict):  # SandboxFusion / CodeContests
            modes.add("stdin")
            tests.append(TestCase(_text(inp.get("stdin"), f"tests[{k}].input.stdin"),
                                  _text(out.get("stdout"), f"tests[{k}].output.stdout")))
            continue
        testtype = t.get("testtype", "functional" if fn_name else "stdin")
        if testtype == "stdin":
            modes.add("stdin")
            tests.append(TestCase(_text(inp, f"tests[{k}].input"), _text(out, f"tests[{k}].output")))
        elif testtype in ("functional", "call"):
            modes.add("call")
            if isinstance(out, str):
                try:
                    out = json.loads(out, parse_int=big_int)
                except ValueError as e:
                    raise GroundTruthError(f"tests[{k}].output is not JSON ({e})") from None
            tests.append(TestCase(_call_input(inp, f"tests[{k}].input"), out))
        else:
            raise GroundTruthError(f"tests[{k}].testtype {testtype!r} is not 'stdin' or 'functional'")
    if len(modes) > 1:
        raise GroundTruthError("tests mix stdin and functional test types")
    mode = modes.pop() if modes else "stdin"
    if mode == "call" and not fn_name:
        raise GroundTruthError("functional tests need 'fn_name' (in the ground truth or extra_info)")
    return TestSuite(mode, tests, fn_name=fn_name if mode == "call" else None)


def _apply_options(suite: TestSuite, meta: dict) -> None:
    for key, types in _OPTION_TYPES.items():
        if key in meta and meta[key] is not None:
            val = meta[key]
            if not isinstance(val, types) or (types is not bool and isinstance(val, bool)):
                raise GroundTruthError(f"option {key!r} has the wrong type ({type(val).__name__})")
            setattr(suite, key, val)
    if suite.time_limit is not None and not 0 < suite.time_limit <= 600:
        raise GroundTruthError("time_limit must be in (0, 600] seconds")
    if meta.get("checker"):
        if not isinstance(meta["checker"], str):
            raise GroundTruthError("checker must be Python source defining check(input, expected, output)")
        suite.checker = load_checker(meta["checker"])


@functools.lru_cache(maxsize=256)
def _compile_checker(source: str, _digest: str):
    ns: dict = {"__name__": "microcoder_checker"}
    try:
        exec(compile(source, f"<checker {_digest[:8]}>", "exec"), ns)
    except Exception as e:
        raise GroundTruthError(f"checker does not compile/run: {type(e).__name__}: {e}") from None
    fn = ns.get("check")
    if not callable(fn):
        raise GroundTruthError("checker source must define check(input, expected, output) -> bool")
    return fn


def load_checker(source: str) -> Callable:
    """Compile a trusted per-problem checker (cached by content)."""
    return _compile_checker(source, hashlib.sha256(source.encode()).hexdigest())
