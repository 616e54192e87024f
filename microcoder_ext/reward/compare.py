"""Output comparison, done in the supervisor only (never in the process that ran the code).

Stdout (``compare_stdout``), strategies tried in order, the first that applies decides:
  1. exact: identical strings pass.
  2. line-wise: ``\\r\\n``/``\\r`` -> ``\\n``, trailing whitespace of each line and trailing blank lines
     ignored; identical lines pass.
  3. whitespace-token: both outputs split on whitespace; token counts must be equal (with
     ``line_sensitive=True`` the non-blank line counts must be equal too and tokens compared per line).
     Whitespace is what judges (testlib) treat as blanks: space, tab, ``\\n``, ``\\r`` only (Python's
     ``str.split()`` also splits on NBSP, U+3000, ``\\x1c``-``\\x1f``, ``\\v``, ``\\f``: ``1\\u00a02`` would
     pass for ``1 2``); trailing blanks of a line are spaces and tabs.
  4. per token: equal strings pass; ``yes``/``no`` tokens case-insensitively (testlib ``yesno``);
     integer tokens (``[+-]?[0-9]+``, ASCII digits only: ``float("３.５") == 3.5`` in Python) exactly, big
     integers included (``007`` == ``7``); when the EXPECTED
     token is a non-integer decimal (``2.5``, ``1e-3``) the actual token may be any decimal within
     absolute or relative error ``float_tol`` (default 1e-6); ``nan``/``inf`` compare as strings;
     everything else is case-sensitive (``case_sensitive=False`` per problem relaxes it).
  ``unordered=True`` (per problem) compares the multisets of lines instead.

Values (``compare_values``, call-based results decoded from JSON in the supervisor), structural and
type-aware: tuple == list (JSON has no tuples); ``bool`` never equals a number (``True != 1``); int vs int
exact; when either side is a float, absolute or relative error ``float_tol``; dict keys compared as
strings (JSON object keys); ``None`` only equals ``None``; ``unordered=True`` compares top-level lists
as multisets.
"""

from __future__ import annotations

import json
import math
import re

FLOAT_TOL = 1e-6
_INT = re.compile(r"[+-]?[0-9]+\Z")  # ASCII digits only (``\d`` and ``float()`` accept any Unicode digit)
_DEC = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_YESNO = frozenset({"yes", "no"})
#: blanks as judges define them (testlib: space, tab, LF, CR)
BLANKS = " \t\n\r"
_BLANK_RUN = re.compile(r"[ \t\n\r]+")
_PY_ONLY_SPACE = re.compile(r"[\x0b\x0c\x1c-\x1f]")  # ASCII characters str.split() also treats as whitespace


def split_tokens(text: str) -> list[str]:
    """``text.split()`` on judge blanks only (space, tab, newline, carriage return)."""
    if text.isascii() and not _PY_ONLY_SPACE.search(text):
        return text.split()  # fast path, same result
    return [t for t in _BLANK_RUN.split(text) if t]


def normalise_lines(text: str) -> list[str]:
    """Split into lines with CR/CRLF normalised, trailing blanks and trailing blank lines removed."""
    lines = [ln.rstrip(" \t") for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _int_key(tok: str) -> str:
    neg = tok.startswith("-")
    digits = tok.lstrip("+-").lstrip("0") or "0"
    return ("-" if neg and digits != "0" else "") + digits


def floats_close(expected: float, actual: float, tol: float = FLOAT_TOL) -> bool:
    """Absolute or relative error within ``tol``; nan/inf only equal themselves."""
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    diff = abs(expected - actual)
    return diff <= tol or diff <= tol * abs(expected)


def tokens_equal(exp: str, act: str, *, float_tol: float = FLOAT_TOL, case_sensitive: bool = True) -> bool:
    if exp == act:
        return True
    low = exp.lower()
    if low in _YESNO or not case_sensitive:
        if low == act.lower():
            return True
    if _INT.match(exp):
        return bool(_INT.match(act)) and _int_key(exp) == _int_key(act)
    if _DEC.match(exp) and _DEC.match(act):
        try:
            return floats_close(float(exp), float(act), float_tol)
        except OverflowError:
            return False
    return False


def compare_stdout(expected: str, actual: str, *, float_tol: float = FLOAT_TOL, case_sensitive: bool = True,
                   line_sensitive: bool = False, unordered: bool = False) -> tuple[bool, str]:
    """Return ``(passed, reason)``; ``reason`` names the deciding rule or the first difference."""
    if expected == actual:
        return True, "exact"
    exp_lines, act_lines = normalise_lines(expected), normalise_lines(actual)
    if exp_lines == act_lines:
        return True, "line-wise"
    if unordered:
        ok = (sorted(" ".join(split_tokens(ln)) for ln in exp_lines)
              == sorted(" ".join(split_tokens(ln)) for ln in act_lines))
        return ok, "unordered lines" if ok else "lines differ as multisets"
    if line_sensitive:
        exp_lines = [ln for ln in exp_lines if ln.strip(BLANKS)]
        act_lines = [ln for ln in act_lines if ln.strip(BLANKS)]
        if len(exp_lines) != len(act_lines):
            return False, f"expected {len(exp_lines)} lines, got {len(act_lines)}"
        pairs = [(split_tokens(e), split_tokens(a)) for e, a in zip(exp_lines, act_lines)]
    else:
        pairs = [(split_tokens(expected), split_tokens(actual))]
    for n, (et, at) in enumerate(pairs):
        if len(et) != len(at):
            where = f" on line {n + 1}" if line_sensitive else ""
            return False, f"expected {len(et)} tokens{where}, got {len(at)}"
        for k, (e, a) in enumerate(zip(et, at)):
            if not tokens_equal(e, a, float_tol=float_tol, case_sensitive=case_sensitive):
                return False, f"token {k + 1}: expected {e[:40]!r}, got {a[:40]!r}"
    return True, "token"


def values_equal(expected, actual, *, float_tol: float = FLOAT_TOL, unordered: bool = False) -> bool:
    """Structural, type-aware equality of JSON-like values (see module docstring)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is bool and type(actual) is bool and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, int) and isinstance(actual, int):
            return expected == actual
        try:
            return floats_close(float(expected), float(actual), float_tol)
        except OverflowError:
            return False
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(expected) != len(actual):
            return False
        if unordered:
            return _multiset_equal(list(expected), list(actual), float_tol)
        return all(values_equal(e, a, float_tol=float_tol) for e, a in zip(expected, actual))
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return False
        exp = {str(k): v for k, v in expected.items()}
        act = {str(k): v for k, v in actual.items()}
        return exp.keys() == act.keys() and all(values_equal(exp[k], act[k], float_tol=float_tol) for k in exp)
    if expected is None or isinstance(expected, str):
        return type(actual) is type(expected) and expected == actual
    return False


def _canon(v) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _multiset_equal(exp: list, act: list, tol: float) -> bool:
    try:
        if sorted(map(_canon, exp)) == sorted(map(_canon, act)):
            return True
    except (TypeError, ValueError):
        pass
    remaining = list(act)  # quadratic fallback for float elements
    for e in exp:
        for j, a in enumerate(remaining):
            if values_equal(e, a, float_tol=tol):
                del remaining[j]
                break
        else:
            return False
    return not remaining


def compare_values(expected, actual, *, float_tol: float = FLOAT_TOL, unordered: bool = False) -> tuple[bool, str]:
    ok = values_equal(expected, actual, float_tol=float_tol, unordered=unordered)
    if ok:
        return True, "structural"
    return False, f"expected {_short(expected)}, got {_short(actual)}"


def _short(v, n: int = 80) -> str:
    try:
        s = json.dumps(v)
    except (TypeError, ValueError):
        s = f"<{type(v).__name__}>"
    return s if len(s) <= n else s[: n - 3] + "..."


def parse_json_value(text: str):
    """``json.loads`` that accepts integers of any length regardless of ``sys.int_max_str_digits``."""
    return json.loads(text, parse_int=big_int)


def big_int(s: str) -> int:
    """``int(s)`` for decimal strings of any length, regardless of ``sys.int_max_str_digits``.

    Long strings are split recursively (high part * 10**k + low part, ``k`` a power-of-two multiple of
    the 4000-digit base chunk, powers cached per call), so the cost is that of a few big multiplications
    (Karatsuba) instead of the quadratic chunk-by-chunk accumulation (or CPython's own quadratic
    ``int(str)``): a 1,000,000-digit literal takes well under a second instead of seconds."""
    if len(s) <= _CHUNK:
        return int(s)
    neg = s.startswith("-")
    digits = s.lstrip("+-")
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"invalid literal for big_int(): {s[:40]!r}...")
    value = _digits_to_int(digits, {})
    return -value if neg else value


_CHUNK = 4000  # below CPython's default int_max_str_digits (4300)


def _digits_to_int(d: str, powers: dict) -> int:
    n = len(d)
    if n <= _CHUNK:
        return int(d)
    k = _CHUNK
    while 2 * k < n:
        k *= 2
    p = powers.get(k)
    if p is None:
        p = powers[k] = _pow10(k, powers)
    return _digits_to_int(d[:-k], powers) * p + _digits_to_int(d[-k:], powers)


def _pow10(k: int, powers: dict) -> int:
    if k <= _CHUNK:
        return 10**k
    half = powers.get(k // 2)
    if half is None:
        half = powers[k // 2] = _pow10(k // 2, powers)
    return half * half
