"""Parse ground truth into a :class:`TestSuite` (auto-detected formats; malformed input raises
:class:`GroundTruthError`, which the reward turns into verdict ``sandbox_error`` with the message).

The ground truth is a JSON string (or bytes) or the decoded object; numpy arrays (parquet rows) are read
as lists. Each format follows what its own evaluator does (verl 0.9.1 ``prime_code``, APPS/TACO
``testing_util``, LiveCodeBench ``lcb_runner/evaluation/testing_util.py``, rLLM ``rewards/code_reward.py``):

Shapes
  dict  ``{"inputs": [...], "outputs": [...], "fn_name"?, <options>}``: verl/PRIME, APPS/TACO and ours.
  list  ``[{"input": ..., "output": ..., <per-test keys>}, ...]``, optionally wrapped as ``{"tests": [...],
        <options>}`` (or PrimeIntellect's ``{"test_cases": [...]}``); a JSON string in ``tests`` is decoded.
  Anything else (a number, a dict with neither ``inputs``/``outputs`` nor ``tests``, a test that is not an
  object with ``input`` and ``output``) is a GroundTruthError naming the shape found.

fn_name (first level that names one wins; the names inside a level must agree; ``null`` counts as absent):
  1. the ground-truth dict (or ``tests`` wrapper): ``fn_name``, or ``metadata.func_name`` (``metadata`` a
     dict or a JSON string, LiveCodeBench rows);
  2. the tests: each test's ``fn_name`` (PrimeIntellect) or ``metadata.func_name`` (rLLM/DeepCoder);
  3. ``extra_info["fn_name"]``, or ``extra_info["metadata"]["func_name"]`` (dict or JSON string; a
     non-JSON ``metadata`` string in extra_info is ignored: extra_info is free-form).
  With a name the suite is call-based (a function, or a method of ``class Solution``), else stdin/stdout.

Call-based decoding, per test (``"5"`` in a JSON-lines test is the int 5; the string "5" is ``"\\"5\\""``):
  * input a string: JSON lines, one positional argument per non-blank line (verl/PRIME, LCB, rLLM);
    input a list: positional arguments (APPS/TACO, PrimeIntellect); input a dict: keyword arguments (ours).
  * output: when the input is a string, a string output is JSON text and is decoded (verl ``prime_code``
    and LCB ``json.loads`` it; undecodable = GroundTruthError naming the test); LCB-typed list tests
    (``testtype``) decode a string output whatever the input (LCB does); otherwise the output is the
    expected value itself (APPS/TACO native: the string "5" stays a string).
  * ``[result]`` unwrapping, only where the encoding needs it (:func:`_unwrap_apps`): APPS stores each
    call-based output wrapped as ``[result]``, so a suite of APPS/TACO-native tests (dict shape with
    positional-argument lists, PrimeIntellect ``function_call`` tests, which come from TACO) whose outputs are
    all one-element lists expects the elements; every other suite (verl/PRIME JSON texts, ours, LCB, rLLM, an
    APPS-native suite with any other output) is compared as stored. Never "either": TACO's and ``prime_code``'s
    ``output == expected or output == expected[0]`` accepted ``[a, b]`` for ``[[a, b]]`` and ``[]`` for
    ``[[]]``, which LeetCode rejects.
  * not emulated: ``prime_code``'s conversion of a first dict argument's keys to int (JSON object keys stay
    strings); returned dicts compare with keys as strings (``compare.values_equal``).

Formats, one line each (where fn_name comes from / inputs / outputs / unwrap):
  verl/PRIME    dict, ``fn_name`` key or extra_info; inputs JSON-lines strings; outputs JSON texts, decoded; no
                unwrap (the JSON text is the value).
  APPS/TACO     dict, ``fn_name`` key; inputs lists of positional args; outputs values (APPS wraps as
                ``[result]``); unwrapped when every output is wrapped. Without fn_name: stdin, each input/output a
                string or a list of lines (joined with ``\\n``).
  ours          dict, ``fn_name`` key; inputs dicts of keyword args (or the above); outputs values; no unwrap.
  LCB           list, ``"testtype": "functional"``, fn_name from the wrapper (``fn_name``/``metadata``) or
                extra_info (``fn_name``/``metadata``); inputs JSON lines; outputs JSON texts; no unwrap.
                ``"testtype": "stdin"``: input/output strings.
  rLLM/DeepCoder list as LCB, fn_name in each test's ``metadata.func_name`` (``null`` on stdin rows).
  PrimeIntellect list, ``"type": "function_call"`` with a per-test ``fn_name``; native inputs (args list)
                and outputs; unwrapped as APPS. ``"type": "stdin_stdout"``: strings.
  CodeContests  list ``[{"input": {"stdin": s}, "output": {"stdout": s}}]`` (SandboxFusion); stdin.
  codeforces    list ``[{"input": s, "output": s}]`` without type or fn_name (rLLM codeforces): stdin.
  Untyped list tests under a wrapper/extra_info fn_name decode as LCB (no unwrap). Stdin and call tests
  may not be mixed in one suite.

Options next to the tests (dict shape or ``tests`` wrapper): ``checker`` (Python source defining
``check(input, expected, output) -> bool``, run in the supervisor for problems with several valid answers;
an exception in it means the output was rejected), ``float_tol``, ``case_sensitive``, ``line_sensitive``,
``unordered``, ``time_limit`` (s per test), ``memory_limit_mb``, ``setup_code`` (prepended to the program,
e.g. the LeetCode import header), ``arg_types`` / ``return_type`` (``"ListNode"``/``"TreeNode"`` for
LeetCode linked lists and trees, given as level-order lists; ``arg_types`` keyed by argument name or
position).
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
    expected: Any  # stdin: str; call: JSON value (APPS-wrapped outputs already unwrapped: :func:`_unwrap_apps`)
    apps_native: bool = False  #: an APPS/TACO-native call test (positional-argument list, output as stored)


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
#: keys of a wrapper dict that hold the list of tests
_TESTS_KEYS = ("tests", "test_cases")
_LCB_TYPES = {"stdin": "stdin", "functional": "call", "call": "call"}
_PRIME_INTELLECT_TYPES = {"stdin_stdout": "stdin", "function_call": "call"}


def _shape(v) -> str:
    """How a value looks, for error messages: ``a list``, ``a string``, ``null``..."""
    if v is None:
        return "null"
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", bytes: "bytes"}
    return names.get(type(v), f"a {type(v).__name__}")


def _plain(v):
    """numpy arrays (parquet columns) -> lists; everything else unchanged."""
    if hasattr(v, "tolist") and not isinstance(v, (dict, list, str, bytes)):
        return v.tolist()
    return v


def parse_ground_truth(gt: Any, extra_info: dict | None = None) -> TestSuite:
    """Detect the format of ``gt`` and return the suite (raises :class:`GroundTruthError`)."""
    if isinstance(gt, (bytes, bytearray)):
        gt = gt.decode("utf-8", "replace")
    if isinstance(gt, str):
        try:
            gt = json.loads(gt, parse_int=big_int)
        except ValueError as e:
            raise GroundTruthError(f"ground truth is not valid JSON ({e}); expected a JSON test specification"
                                   ) from None
    gt = _plain(gt)
    if isinstance(gt, dict):
        key = next((k for k in _TESTS_KEYS if k in gt), None)
        if key is not None:
            meta, items = gt, _plain(gt[key])
            if isinstance(items, str):
                try:
                    items = json.loads(items, parse_int=big_int)
                except ValueError as e:
                    raise GroundTruthError(f"ground truth {key!r} is a string that is not JSON ({e})") from None
            if not isinstance(items, list):
                raise GroundTruthError(f"ground truth {key!r} is {_shape(items)}; expected a list of tests")
            suite = _parse_list(items, meta, extra_info)
        elif "inputs" in gt and "outputs" in gt:
            meta = gt
            suite = _parse_dict(gt, extra_info)
        else:
            raise GroundTruthError(f"ground truth dict has keys {sorted(map(str, gt))[:8]}; expected inputs/outputs "
                                   f"(verl/PRIME, APPS/TACO), tests or test_cases (a list of input/output tests)")
    elif isinstance(gt, list):
        meta = {}
        suite = _parse_list(gt, meta, extra_info)
    else:
        raise GroundTruthError(f"ground truth is {_shape(gt)}; expected a JSON object or list of tests")
    _apply_options(suite, meta)
    if not suite.tests:
        raise GroundTruthError("ground truth has no tests")
    return suite


# --- fn_name --------------------------------------------------------------------------------------------------
def _metadata(v, where: str, strict: bool) -> dict:
    """A ``metadata`` field: a dict or a JSON string of one (LiveCodeBench rows store it as a string)."""
    if v is None:
        return {}
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else {}
        except ValueError as e:
            if strict:
                raise GroundTruthError(f"{where} is a string that is not JSON ({e})") from None
            return {}
    if isinstance(v, dict):
        return v
    if strict:
        raise GroundTruthError(f"{where} is {_shape(v)}; expected an object (or its JSON text)")
    return {}


def _names_from(d: dict, where: str, strict: bool) -> list[tuple[str, Any]]:
    out = []
    if d.get("fn_name") is not None:
        out.append((f"{where}fn_name", d["fn_name"]))
    meta = _metadata(d.get("metadata"), f"{where}metadata", strict)
    if meta.get("func_name") is not None:
        out.append((f"{where}metadata.func_name", meta["func_name"]))
    return out


def _fn_name(meta: dict, tests: list | None, extra_info: dict | None) -> str | None:
    """The function name, from the first level that gives one (see the module docstring)."""
    levels = [lambda: _names_from(meta, "", True)]
    if tests is not None:
        levels.append(lambda: [n for k, t in enumerate(tests) if isinstance(t, dict)
                               for n in _names_from(t, f"tests[{k}].", True)])
    if isinstance(extra_info, dict):
        levels.append(lambda: _names_from(extra_info, "extra_info.", False))
    for level in levels:
        names = level()
        if not names:
            continue
        where, name = names[0]
        if not isinstance(name, str) or not name.isidentifier():
            raise GroundTruthError(f"fn_name must be an identifier, got {name!r} ({where})")
        for other_where, other in names[1:]:
            if other != name:
                raise GroundTruthError(f"conflicting function names: {name!r} ({where}) and {other!r} ({other_where})")
        return name
    return None


# --- inputs and outputs ---------------------------------------------------------------------------------------
def _text(v, what: str) -> str:
    if isinstance(v, str):
        return v
    v = _plain(v)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(v)
    raise GroundTruthError(f"{what} is {_shape(v)}; a stdin test needs a string (or a list of lines)")


def _call_input(v, what: str) -> dict:
    v = _plain(v)
    if isinstance(v, list):
        return {"args": v, "kwargs": {}}
    if isinstance(v, dict):
        if not all(isinstance(k, str) and k.isidentifier() for k in v):
            raise GroundTruthError(f"{what}: keyword-argument names must be identifiers")
        return {"args": [], "kwargs": v}
    if isinstance(v, str):
        args = []
        for n, line in enumerate(v.split("\n")):
            if line.strip():
                try:
                    args.append(json.loads(line, parse_int=big_int))
                except ValueError as e:
                    raise GroundTruthError(f"{what}: line {n + 1} is not JSON ({e}); a string input of a call-based "
                                           f"test is one JSON argument per line") from None
        return {"args": args, "kwargs": {}}
    raise GroundTruthError(f"{what} is {_shape(v)}; a call-based input must be a list (args), an object (kwargs) or "
                           f"a JSON-lines string")


def _json_output(v, what: str):
    try:
        return json.loads(v, parse_int=big_int)
    except ValueError as e:
        raise GroundTruthError(f"{what} is not JSON text ({e}); with JSON-lines inputs each output is a JSON value "
                               f"encoded as a string (verl/PRIME, LiveCodeBench: the string \"abc\" is '\"abc\"')"
                               ) from None


def _call_test(inp, out, what_in: str, what_out: str, *, decode_output: bool, apps: bool) -> TestCase:
    args = _call_input(inp, what_in)
    out = _plain(out)
    if isinstance(out, str) and (decode_output or isinstance(inp, str)):
        out = _json_output(out, what_out)
    return TestCase(args, out, apps_native=apps and isinstance(inp, (list, tuple)))


def _unwrap_apps(tests: list[TestCase]) -> list[TestCase]:
    """APPS stores every call-based output wrapped as ``[result]``: a suite of APPS/TACO-native tests whose outputs
    are ALL one-element lists is such a row, and each test expects the element itself, compared as it is (a value
    of another shape, the wrapped ``[result]`` included, is wrong). Any other suite is left as stored. (TACO's and
    ``prime_code``'s judges accept either ``result`` or ``[result]`` for any one-element list, in every row: a
    program returning ``[a, b]`` where the list of pairs ``[[a, b]]`` is expected passed there.)"""
    if tests and all(t.apps_native and isinstance(t.expected, list) and len(t.expected) == 1 for t in tests):
        for t in tests:
            t.expected = t.expected[0]
    return tests


def _parse_dict(gt: dict, extra_info) -> TestSuite:
    inputs, outputs = _plain(gt["inputs"]), _plain(gt["outputs"])
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise GroundTruthError(f"'inputs' is {_shape(inputs)} and 'outputs' is {_shape(outputs)}; both must be lists")
    if len(inputs) != len(outputs):
        raise GroundTruthError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = _fn_name(gt, None, extra_info)
    if fn_name is None:
        tests = [TestCase(_text(i, f"inputs[{k}]"), _text(o, f"outputs[{k}]"))
                 for k, (i, o) in enumerate(zip(inputs, outputs))]
        return TestSuite("stdin", tests)
    tests = [_call_test(i, o, f"inputs[{k}]", f"outputs[{k}]", decode_output=False, apps=True)
             for k, (i, o) in enumerate(zip(inputs, outputs))]
    return TestSuite("call", _unwrap_apps(tests), fn_name=fn_name)


def _parse_list(items: list, meta: dict, extra_info) -> TestSuite:
    for k, t in enumerate(items):
        if not isinstance(t, dict):
            raise GroundTruthError(f"tests[{k}] is {_shape(t)}; expected an object with input/output")
        if "input" not in t or "output" not in t:
            raise GroundTruthError(f"tests[{k}] has keys {sorted(map(str, t))[:8]}; expected an object with "
                                   f"input/output")
    fn_name = _fn_name(meta, items, extra_info)
    tests, modes = [], set()
    for k, t in enumerate(items):
        inp, out = _plain(t["input"]), _plain(t["output"])
        if isinstance(inp, dict) and "stdin" in inp or isinstance(out, dict) and "stdout" in out:
            if not (isinstance(inp, dict) and isinstance(out, dict)):  # SandboxFusion / CodeContests
                raise GroundTruthError(f"tests[{k}]: input is {_shape(inp)} and output is {_shape(out)}; the "
                                       f"SandboxFusion shape is input {{stdin}} and output {{stdout}}")
            modes.add("stdin")
            tests.append(TestCase(_text(inp.get("stdin"), f"tests[{k}].input.stdin"),
                                  _text(out.get("stdout"), f"tests[{k}].output.stdout")))
            continue
        lcb = t.get("testtype") is not None
        if lcb:
            mode = _LCB_TYPES.get(t["testtype"]) if isinstance(t["testtype"], str) else None
            if mode is None:
                raise GroundTruthError(f"tests[{k}].testtype {t['testtype']!r} is not 'stdin' or 'functional'")
        elif t.get("type") is not None:
            mode = _PRIME_INTELLECT_TYPES.get(t["type"]) if isinstance(t["type"], str) else None
            if mode is None:
                raise GroundTruthError(f"tests[{k}].type {t['type']!r} is not 'stdin_stdout' or 'function_call'")
        else:
            mode = "call" if fn_name else "stdin"
        modes.add(mode)
        if mode == "stdin":
            tests.append(TestCase(_text(inp, f"tests[{k}].input"), _text(out, f"tests[{k}].output")))
        else:
            prime_intellect = t.get("type") == "function_call" or (not lcb and t.get("fn_name") is not None)
            tests.append(_call_test(inp, out, f"tests[{k}].input", f"tests[{k}].output", decode_output=lcb,
                                    apps=prime_intellect))
    if len(modes) > 1:
        raise GroundTruthError("tests mix stdin and functional test types")
    mode = modes.pop() if modes else "stdin"
    if mode == "call" and not fn_name:
        raise GroundTruthError("functional tests need 'fn_name' (in the ground truth, in each test's "
                               "metadata.func_name, or in extra_info fn_name/metadata)")
    if mode == "call":
        tests = _unwrap_apps(tests)
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
