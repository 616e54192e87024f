"""Output comparison, done in the supervisor only (never in the process that ran the code).

Every comparison is linear in the size of the output (n log n for the any-order rules), uses no backtracking regular
expression on program output, stops at the first difference, and holds at most one copy of the output plus one line
of it: a hostile program's 16 MiB of output costs the host a bounded amount of time and memory. The actual output may
be ``bytes`` (as the local sandbox sends it: undecoded) or ``str``; the expected output is the ground truth's text.

Stdout (``compare_stdout``), strategies tried in order, the first that applies decides:
  1. exact: identical bytes pass.
  2. line-wise: ``\\r\\n``/``\\r`` -> ``\\n``, trailing whitespace of each line and trailing blank lines
     ignored; identical lines pass.
  3. whitespace-token: both outputs split on whitespace; token counts must be equal (with
     ``line_sensitive=True`` the non-blank line counts must be equal too and tokens compared per line).
     Whitespace is what judges (testlib) treat as blanks: space, tab, ``\\n``, ``\\r`` only (Python's
     ``str.split()`` also splits on NBSP, U+3000, ``\\x1c``-``\\x1f``, ``\\v``, ``\\f``: ``1\\u00a02`` would
     pass for ``1 2``); trailing blanks of a line are spaces and tabs.
  4. per token: equal tokens pass; ``yes``/``no`` tokens case-insensitively (testlib ``yesno``);
     integer tokens (``[+-]?[0-9]+``, ASCII digits only: ``float("３.５") == 3.5`` in Python) exactly, big
     integers included (``007`` == ``7``), never a decimal for an integer (``10.0`` is not ``10``); when the
     EXPECTED token is a non-integer decimal (``2.5``, ``1e-3``) the actual token may be any decimal within absolute
     or relative error ``float_tol`` (default 1e-6); ``nan``/``inf`` compare as strings; everything else is
     case-sensitive (``case_sensitive=False`` per problem relaxes it).
  ``unordered=True`` (per problem) compares the multisets of lines instead.

Values (``compare_values`` on Python values; :mod:`microcoder_ext.reward.json_match` on the JSON text a program
returned), structural and type-aware: tuple == list (JSON has no tuples); ``bool`` never equals a number
(``True != 1``); an INTEGER expected value accepts only an equal integer, or a float that is integral and exactly
equal (``2000000000.0`` for ``2000000000``, never ``2000000001.0``); a FLOAT expected value accepts a number within
absolute or relative error ``float_tol``; dict keys compared as strings (JSON object keys); ``None`` only equals
``None``; ``unordered=True`` compares top-level lists as multisets (sorted, n log n).
"""

from __future__ import annotations

import json
import math
import re
from typing import Iterator, Union

Text = Union[str, bytes, bytearray, memoryview]

FLOAT_TOL = 1e-6
#: blanks as judges define them (testlib: space, tab, LF, CR)
BLANKS = " \t\n\r"
_BLANKS_B = b" \t\n\r"
_TOKEN = re.compile(rb"[^ \t\n\r]+")
_LINE_END = re.compile(rb"\r\n?|\n")
# deterministic patterns (no two ways to match the same text): linear on any input, e.g. 25 kB of digits + "x"
_INT = re.compile(rb"[+-]?[0-9]+\Z")
_DEC = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_YESNO = frozenset({b"yes", b"no"})
#: a decimal token longer than this (and than twice the expected token) is never parsed as a number
MAX_NUMBER_TOKEN = 4096


def as_bytes(text: Text) -> bytes | bytearray:
    """Output as bytes (str: UTF-8; lone surrogates kept as their 3-byte form, never an error); ``bytes`` and
    ``bytearray`` (what the sandbox protocol delivers) are used as they are, without a copy."""
    if isinstance(text, (bytes, bytearray)):
        return text
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    return bytes(text)


def split_tokens(text: str) -> list[str]:
    """Tokens split on judge blanks only (space, tab, newline, carriage return)."""
    return [t.decode("utf-8", "surrogatepass") for t in _TOKEN.findall(as_bytes(text))]


def normalise_lines(text: Text) -> list[bytes]:
    """Lines with CR/CRLF normalised, trailing blanks and trailing blank lines removed (for trusted, expected text)."""
    lines = [line for line, _ in _lines(as_bytes(text))]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _lines(buf: bytes, pos: int = 0) -> Iterator[tuple[bytes, int]]:
    """``(line without terminator and trailing spaces/tabs, position after it)``, lazily (copies each line)."""
    for start, end, nxt in _spans(buf, pos):
        yield buf[start:end], nxt


#: program output is scanned in windows of this many bytes: each regex call holds the GIL for one window only, so a
#: 16 MiB output never freezes the other threads of the host (the trainer) for the whole scan
_WINDOW = 1 << 18


def _search(pattern: re.Pattern, buf, pos: int, end: int):
    """``pattern.search(buf, pos, end)`` in :data:`_WINDOW`-byte windows (for patterns whose matches cannot start
    inside a window that has none: a token, a line end). A match that reaches a window's end is matched again to
    ``end`` (a token longer than a window, ``\r`` + ``\n`` across the cut)."""
    while pos < end:
        stop = min(end, pos + _WINDOW)
        m = pattern.search(buf, pos, stop)
        if m is not None:
            return pattern.match(buf, m.start(), end) if m.end() == stop < end else m
        pos = stop
    return None


def _finditer(pattern: re.Pattern, buf, pos: int, end: int):
    """``pattern.finditer(buf, pos, end)`` through :func:`_search` (non-empty matches only)."""
    while (m := _search(pattern, buf, pos, end)) is not None:
        yield m
        pos = m.end()


def _only_blanks(buf, pos: int) -> bool:
    """Whether ``buf[pos:]`` holds no token."""
    return _search(_TOKEN, buf, pos, len(buf)) is None


def _spans(buf: bytes, pos: int = 0) -> Iterator[tuple[int, int, int]]:
    """``(start, end, next)`` of each line: ``buf[start:end]`` is the line without its terminator and trailing
    spaces/tabs, ``next`` the position after the terminator. No copy of the output is made."""
    n = len(buf)
    while pos < n:
        m = _search(_LINE_END, buf, pos, n)
        end, nxt = (m.start(), m.end()) if m else (n, n)
        yield pos, _trim_end(buf, pos, end), nxt
        pos = nxt


def _trim_end(buf: bytes, start: int, end: int) -> int:
    """``end`` moved back over trailing spaces/tabs of ``buf[start:end]``: O(1) for a line that does not end in a blank,
    else in 4 KiB steps from the end (linear in the blanks, never a scan of the whole line)."""
    if end <= start or buf[end - 1] not in (0x20, 0x09):
        return end
    pos = end
    while pos > start:
        lo = max(start, pos - 4096)
        kept = len(bytes(buf[lo:pos]).rstrip(b" \t"))
        if kept:
            return lo + kept
        pos = lo
    return start


def _int_key(tok: bytes) -> bytes:
    neg = tok.startswith(b"-")
    digits = tok.lstrip(b"+-").lstrip(b"0") or b"0"
    return (b"-" if neg and digits != b"0" else b"") + digits


def floats_close(expected: float, actual: float, tol: float = FLOAT_TOL) -> bool:
    """Absolute or relative error within ``tol``; nan/inf only equal themselves."""
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    diff = abs(expected - actual)
    return diff <= tol or diff <= tol * abs(expected)


def tokens_equal(exp: Text, act: Text, *, float_tol: float = FLOAT_TOL, case_sensitive: bool = True) -> bool:
    """One expected token against one actual token (rule 4 of the module doc)."""
    exp, act = as_bytes(exp), as_bytes(act)
    if exp == act:
        return True
    low = exp.lower()
    if low in _YESNO and low == act.lower():
        return True
    if not case_sensitive and len(act) <= 4 * len(exp) + 8:
        if exp.decode("utf-8", "replace").lower() == act.decode("utf-8", "replace").lower():
            return True
    if _INT.match(exp):
        return bool(_INT.match(act)) and _int_key(exp) == _int_key(act)
    if len(act) <= max(MAX_NUMBER_TOKEN, 2 * len(exp)) and _DEC.match(exp) and _DEC.match(act):
        try:
            return floats_close(float(exp), float(act), float_tol)
        except (OverflowError, ValueError):
            return False
    return False


def _show(tok: bytes) -> str:
    return repr(tok[:40].decode("utf-8", "replace"))


def _lines_equal(exp_lines: list[bytes], act: bytes) -> bool:
    """Rule 2, driven by the expected lines: stops at the first different line; after the last expected line the
    rest of the output must be blank."""
    it = _spans(act)
    pos = 0
    for want in exp_lines:
        span = next(it, None)
        if span is None:
            return False
        start, end, pos = span
        if end - start != len(want) or act[start:end] != want:
            return False
    return _only_blanks(act, pos)


def _tokens_match(exp: bytes, act: bytes, start: int, end: int, where: str, **tok) -> tuple[bool, str]:
    """The tokens of ``exp`` against those of ``act[start:end]``, both read lazily, stopping at the first difference."""
    exp_it = _TOKEN.finditer(exp)
    count = 0
    for m in _finditer(_TOKEN, act, start, end):
        want = next(exp_it, None)
        if want is None:
            return False, f"expected {count} tokens{where}, got more"
        e = want.group()
        if m.end() - m.start() > max(MAX_NUMBER_TOKEN, 4 * len(e) + 8):  # equals nothing that short: never copied
            return False, f"token {count + 1}{where}: expected {_show(e)}, got {m.end() - m.start()} bytes"
        a = m.group()
        if a != e and not tokens_equal(e, a, **tok):
            return False, f"token {count + 1}{where}: expected {_show(e)}, got {_show(a)}"
        count += 1
    rest = sum(1 for _ in exp_it)
    if rest:
        return False, f"expected {count + rest} tokens{where}, got {count}"
    return True, "token"


def _line_key(line: bytes, limit: int, start: int = 0, end: int | None = None) -> bytes | None:
    """The tokens of ``line[start:end]`` joined by one space, or None when that is longer than ``limit`` bytes (then
    it equals no expected line); built token by token, never more than ``limit`` bytes."""
    out = bytearray()
    for m in _finditer(_TOKEN, line, start, len(line) if end is None else end):
        if out:
            out += b" "
        out += m.group()
        if len(out) > limit:
            return None
    return bytes(out)


def compare_stdout(expected: Text, actual: Text, *, float_tol: float = FLOAT_TOL, case_sensitive: bool = True,
                   line_sensitive: bool = False, unordered: bool = False) -> tuple[bool, str]:
    """Return ``(passed, reason)``; ``reason`` names the deciding rule or the first difference."""
    exp, act = as_bytes(expected), as_bytes(actual)
    if exp == act:
        return True, "exact"
    exp_lines = normalise_lines(exp)
    if _lines_equal(exp_lines, act):
        return True, "line-wise"
    tok = {"float_tol": float_tol, "case_sensitive": case_sensitive}
    if unordered:
        want = sorted(_line_key(line, len(line)) for line in exp_lines)
        limit = max((len(k) for k in want), default=0)
        got: list[bytes] = []
        for start, end, nxt in _spans(act):
            key = _line_key(act, limit, start, end)
            if key is None:
                return False, "a line is longer than every expected line"
            got.append(key)
            if len(got) >= len(want) and _only_blanks(act, nxt):
                break
            if len(got) > len(want):
                return False, f"expected {len(want)} lines, got more"
        while len(got) > len(want) and not got[-1]:
            got.pop()
        ok = sorted(got) == want
        return ok, "unordered lines" if ok else "lines differ as multisets"
    if line_sensitive:
        exp_nonblank = [line for line in exp_lines if line.strip(_BLANKS_B)]
        n = 0
        for start, end, _ in _spans(act):
            if _search(_TOKEN, act, start, end) is None:
                continue
            if n >= len(exp_nonblank):
                return False, f"expected {len(exp_nonblank)} lines, got more"
            ok, why = _tokens_match(exp_nonblank[n], act, start, end, f" on line {n + 1}", **tok)
            if not ok:
                return False, why
            n += 1
        if n != len(exp_nonblank):
            return False, f"expected {len(exp_nonblank)} lines, got {n}"
        return True, "token"
    return _tokens_match(exp, act, 0, len(act), "", **tok)


# ------------------------------------------------------------------------------------------------ values


def values_equal(expected, actual, *, float_tol: float = FLOAT_TOL, unordered: bool = False) -> bool:
    """Structural, type-aware equality of JSON-like values (see module docstring)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is bool and type(actual) is bool and expected == actual
    if isinstance(expected, int):
        if isinstance(actual, int):
            return expected == actual
        if isinstance(actual, float):  # only an integral float, exactly equal
            return math.isfinite(actual) and actual.is_integer() and int(actual) == expected
        return False
    if isinstance(expected, float):
        if not isinstance(actual, (int, float)):
            return False
        try:
            return floats_close(expected, float(actual), float_tol)
        except OverflowError:
            return False
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(expected) != len(actual):
            return False
        if unordered:
            return multiset_equal(list(expected), list(actual), float_tol)
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


def _shape(v, numbers: list) -> str:
    """A canonical form of ``v`` with every number replaced by ``#`` (its value appended to ``numbers``)."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        numbers.append(v)
        return "#"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_shape(x, numbers) for x in v) + "]"
    if isinstance(v, dict):
        items = sorted((str(k), x) for k, x in v.items())
        return "{" + ",".join(json.dumps(k) + ":" + _shape(x, numbers) for k, x in items) + "}"
    return f"<{type(v).__name__}>"


def _sort_key(v):
    numbers: list = []
    shape = _shape(v, numbers)
    # NaN sorts as +inf here (its own comparisons are all False); ints of any size compare with floats exactly
    return shape, tuple(math.inf if isinstance(x, float) and math.isnan(x) else x for x in numbers)


def multiset_equal(exp: list, act: list, tol: float = FLOAT_TOL) -> bool:
    """Whether ``act`` is a permutation of ``exp`` under :func:`values_equal`: both sorted by (structure, numbers),
    then compared pairwise; n log n. Elements equal up to ``tol`` pair up wherever their structure and the order of
    their numbers agree (always, for lists of numbers); two elements whose numbers differ within ``tol`` in a
    different order than their other numbers may not pair (then the answer is judged wrong)."""
    if len(exp) != len(act):
        return False
    try:
        exp_s, act_s = sorted(exp, key=_sort_key), sorted(act, key=_sort_key)
    except TypeError:
        return False
    return all(values_equal(e, a, float_tol=tol) for e, a in zip(exp_s, act_s))


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
    if isinstance(s, (bytes, bytearray)):
        s = s.decode("ascii")
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
