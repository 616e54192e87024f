"""Judging a returned value from its JSON text without building it: linear time, memory bounded by the EXPECTED value.

A call-based program's return value reaches the supervisor as JSON text (up to the output cap, 16 MiB by default).
``json.loads`` of ``[[],[],...]`` (5.5 M empty lists) costs the host ~450 MB; decoding a megabyte integer is
quadratic. :func:`match_json` instead walks the expected value and the text together, token by token, and stops at
the first difference: what it ever holds is one token (bounded by the expected value's own sizes) and a stack as
deep as the expected value (text identical to the expected value's compact encoding, which is what a correct
program's value is sent as, is equal at once: one C-level encode and compare). Semantics are
:func:`microcoder_ext.reward.compare.values_equal`'s (integers exact, an integral float allowed for an integer;
float tolerance for float expected values only; bool never a number; tuple == list; dict keys as strings;
``unordered``: top-level list as a multiset, n log n).

:func:`parse_bounded` builds the value (for per-problem checkers and the elements of an any-order list) but refuses
text with more nodes or longer strings than the caller allows (:class:`TooLarge`), so a hostile value never gets
materialised.
"""

from __future__ import annotations

import json
import math
import re

from .compare import FLOAT_TOL, as_bytes, big_int, floats_close, multiset_equal

_WS = re.compile(rb"[ \t\n\r]*")
# deterministic (each part introduced by a distinct character): linear on any input
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = (b"true", b"false", b"null", b"NaN", b"Infinity", b"-Infinity")
MAX_NUMBER_TOKEN = 4096
MAX_DEPTH = 400


class Mismatch(Exception):
    """The text does not match (``str(e)`` says where); also raised for text that is not JSON."""


class TooLarge(ValueError):
    """:func:`parse_bounded`: the value has more nodes or longer strings than allowed."""


class _Scanner:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def ws(self) -> None:
        self.pos = _WS.match(self.buf, self.pos).end()

    def peek(self) -> int:
        self.ws()
        if self.pos >= len(self.buf):
            raise Mismatch("the value ends early")
        return self.buf[self.pos]

    def expect(self, ch: bytes) -> None:
        if self.peek() != ch[0]:
            raise Mismatch(f"expected {ch.decode()!r} at byte {self.pos}")
        self.pos += 1

    def number(self) -> bytes | None:
        """The number token at the cursor (JSON or NaN/Infinity/-Infinity), or None if there is none."""
        self.ws()
        for lit in (b"NaN", b"Infinity", b"-Infinity"):
            if self.buf.startswith(lit, self.pos):
                self.pos += len(lit)
                return lit
        m = _NUMBER.match(self.buf, self.pos)
        if not m or m.end() == self.pos:
            return None
        self.pos = m.end()
        return m.group()

    def string_span(self) -> tuple[int, int]:
        """``(start, end)`` of the string token at the cursor, quotes included; linear in its length."""
        start = self.pos
        if self.peek() != 0x22:
            raise Mismatch(f"expected a string at byte {self.pos}")
        start = self.pos
        i = start + 1
        buf = self.buf
        while True:
            j = buf.find(b'"', i)
            if j < 0:
                raise Mismatch("unterminated string")
            k = j - 1
            while buf[k] == 0x5C:  # count the backslashes before the quote (each byte visited once)
                k -= 1
            if (j - 1 - k) % 2 == 0:
                self.pos = j + 1
                return start, j + 1
            i = j + 1

    def string(self, max_len: int) -> str:
        """The string at the cursor decoded; :class:`TooLarge` if its JSON text is longer than ``max_len``."""
        a, b = self.string_span()
        if b - a > max_len:
            raise TooLarge(f"a string of {b - a} bytes")
        try:
            return json.loads(self.buf[a:b])
        except (ValueError, UnicodeDecodeError) as e:
            raise Mismatch(f"invalid string: {e}") from None

    def literal(self) -> bytes | None:
        self.ws()
        for lit in _LITERALS:
            if self.buf.startswith(lit, self.pos):
                self.pos += len(lit)
                return lit
        return None


# ------------------------------------------------------------------------------------------------ matching


def _digits(v: int) -> int:
    return max(1, v.bit_length() * 30103 // 100000 + 1)


def _match_int(expected: int, tok: bytes | None) -> str | None:
    if tok is None or tok in (b"NaN", b"Infinity", b"-Infinity"):
        return f"expected the integer {_short_int(expected)}"
    if b"." not in tok and b"e" not in tok and b"E" not in tok:
        digits = len(tok.lstrip(b"-"))
        if abs(digits - _digits(expected)) > 1:
            return f"expected the integer {_short_int(expected)}, got an integer of {digits} digits"
        return None if big_int(tok) == expected else f"expected {_short_int(expected)}, got {tok[:40].decode()}"
    # a float literal: only an integral float (the value the program returned), exactly equal
    if len(tok) > MAX_NUMBER_TOKEN:
        return f"expected the integer {_short_int(expected)}, got a {len(tok)}-character number"
    try:
        value = float(tok)
        ok = math.isfinite(value) and value.is_integer() and int(value) == expected
    except (OverflowError, ValueError):
        ok = False
    return None if ok else f"expected the integer {_short_int(expected)}, got {tok[:40].decode()}"


def _short_int(v: int) -> str:
    return str(v) if _digits(v) < 60 else f"<{_digits(v)}-digit integer>"


def _match_float(expected: float, tok: bytes | None, tol: float) -> str | None:
    if tok is None:
        return f"expected the number {expected!r}"
    if len(tok) > MAX_NUMBER_TOKEN:
        return f"expected {expected!r}, got a {len(tok)}-character number"
    value = {b"NaN": math.nan, b"Infinity": math.inf, b"-Infinity": -math.inf}.get(tok)
    try:
        value = float(tok) if value is None else value
    except (OverflowError, ValueError):
        return f"expected {expected!r}, got {tok[:40].decode()}"
    return None if floats_close(expected, value, tol) else f"expected {expected!r}, got {tok[:40].decode()}"


def _match(sc: _Scanner, expected, tol: float, depth: int) -> str | None:
    """None if the value at the cursor equals ``expected`` (the cursor then follows it), else the reason."""
    if depth > MAX_DEPTH:
        return "nesting deeper than any expected value"
    if isinstance(expected, bool) or expected is None:
        lit = sc.literal()
        want = json.dumps(expected).encode()
        return None if lit == want else f"expected {want.decode()}"
    if isinstance(expected, int):
        return _match_int(expected, sc.number())
    if isinstance(expected, float):
        return _match_float(expected, sc.number(), tol)
    if isinstance(expected, str):
        if sc.peek() != 0x22:
            return f"expected the string {json.dumps(expected)[:40]}"
        try:
            got = sc.string(12 * len(expected) + 2)  # two 6-byte \\u escapes (a surrogate pair) per character
        except TooLarge:
            return f"expected the string {json.dumps(expected)[:40]}, got a longer one"
        return None if got == expected else f"expected {json.dumps(expected)[:40]}, got {json.dumps(got)[:40]}"
    if isinstance(expected, (list, tuple)):
        if sc.peek() != 0x5B:
            return f"expected a list of {len(expected)}"
        sc.pos += 1
        for i, item in enumerate(expected):
            if i:
                if sc.peek() != 0x2C:
                    return f"expected a list of {len(expected)}, got {i} element(s)"
                sc.pos += 1
            elif sc.peek() == 0x5D:
                return f"expected a list of {len(expected)}, got an empty one"
            why = _match(sc, item, tol, depth + 1)
            if why:
                return f"[{i}]: {why}"
        if sc.peek() != 0x5D:
            return f"expected a list of {len(expected)}, got more elements"
        sc.pos += 1
        return None
    if isinstance(expected, dict):
        want = {str(k): v for k, v in expected.items()}
        if sc.peek() != 0x7B:
            return f"expected an object of {len(want)} key(s)"
        sc.pos += 1
        seen: set[str] = set()
        longest = max((len(json.dumps(k)) for k in want), default=2) * 6 + 2
        while sc.peek() != 0x7D:
            if seen:
                sc.expect(b",")
            if sc.peek() != 0x22:
                return "an object key is not a string"
            try:
                key = sc.string(longest)
            except TooLarge:
                return "an unexpected object key"
            if key not in want or key in seen:
                return f"unexpected or repeated key {json.dumps(key)[:40]}"
            seen.add(key)
            sc.expect(b":")
            why = _match(sc, want[key], tol, depth + 1)
            if why:
                return f"[{json.dumps(key)[:40]}]: {why}"
        sc.pos += 1
        if len(seen) != len(want):
            return f"missing key(s) {sorted(set(want) - seen)[:5]}"
        return None
    return f"cannot compare with a {type(expected).__name__}"


def _nodes(v, depth: int = 0) -> int:
    if depth > MAX_DEPTH:
        return 1
    if isinstance(v, (list, tuple)):
        return 1 + sum(_nodes(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return 1 + sum(_nodes(x, depth + 1) for x in v.values())
    return 1


def _max_str(v, depth: int = 0) -> int:
    if depth > MAX_DEPTH:
        return 0
    if isinstance(v, str):
        return len(v)
    if isinstance(v, (list, tuple)):
        return max((_max_str(x, depth + 1) for x in v), default=0)
    if isinstance(v, dict):
        return max([_max_str(x, depth + 1) for x in v.values()] + [len(str(k)) for k in v], default=0)
    return 0


def _max_digits(v, depth: int = 0) -> int:
    if isinstance(v, bool) or depth > MAX_DEPTH:
        return 0
    if isinstance(v, int):
        return _digits(v)
    if isinstance(v, (list, tuple)):
        return max((_max_digits(x, depth + 1) for x in v), default=0)
    if isinstance(v, dict):
        return max((_max_digits(x, depth + 1) for x in v.values()), default=0)
    return 0


def _match_unordered(sc: _Scanner, expected: list, tol: float) -> str | None:
    if sc.peek() != 0x5B:
        return f"expected a list of {len(expected)}"
    sc.pos += 1
    budget_nodes = max((_nodes(x) for x in expected), default=1) * 2 + 8
    budget_str = 12 * max((_max_str(x) for x in expected), default=0) + 64
    budget_digits = max((_max_digits(x) for x in expected), default=0) + 2
    got = []
    while sc.peek() != 0x5D:
        if got:
            sc.expect(b",")
        if len(got) >= len(expected):
            return f"expected a list of {len(expected)}, got more elements"
        try:
            got.append(_build(sc, [budget_nodes], budget_str, budget_digits, 0))
        except TooLarge:
            return f"element {len(got)} is larger than every expected element"
    sc.pos += 1
    if len(got) != len(expected):
        return f"expected a list of {len(expected)}, got {len(got)} element(s)"
    return None if multiset_equal(list(expected), got, tol) else "the elements differ as multisets"


def match_json(expected, text, *, float_tol: float = FLOAT_TOL, unordered: bool = False) -> tuple[bool, str]:
    """``(equal, reason)`` of the JSON ``text`` (str or bytes) against ``expected`` (see the module doc)."""
    buf = as_bytes(text)
    if buf == _compact(expected):
        return True, "exact"  # the sandbox's own encoding of an equal value: what a correct program returns
    sc = _Scanner(buf)
    try:
        if unordered and isinstance(expected, (list, tuple)):
            why = _match_unordered(sc, list(expected), float_tol)
        else:
            why = _match(sc, expected, float_tol, 0)
        if why is None:
            sc.ws()
            if sc.pos != len(sc.buf):
                why = "data after the value"
    except Mismatch as e:
        why = str(e)
    except RecursionError:
        why = "nesting deeper than any expected value"
    if why is None:
        return True, "structural"
    if not isinstance(expected, (list, tuple, dict)) and why.startswith("expected ") and ", got " in why:
        return False, why  # a scalar's reason already shows both sides
    return False, f"expected {_short(expected)}, got {_snippet(sc.buf)} ({why})"


_compact_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode


def _compact(expected) -> bytes | None:
    """``expected`` as the sandbox encodes a returned value (compact JSON, UTF-8, lone surrogates kept), or None
    when it has no such encoding (an integer past the int-digit limit, a non-JSON type): identical text means an
    equal value under every rule of :func:`match_json`, and costs one C-level encode instead of the walk."""
    try:
        return _compact_encoder(expected).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError, RecursionError):
        return None


def _short(v, n: int = 80) -> str:
    try:
        s = json.dumps(v)
    except (TypeError, ValueError):
        s = f"<{type(v).__name__}>"
    return s if len(s) <= n else s[: n - 3] + "..."


def _snippet(buf: bytes, n: int = 80) -> str:
    if len(buf) <= 4096:  # small: shown as json.dumps shows the expected value
        try:
            return _short(json.loads(buf), n)
        except (ValueError, RecursionError):
            pass
    head = buf[:n].decode("utf-8", "replace")
    return head if len(buf) <= n else head[: n - 3] + f"... ({len(buf)} bytes)"


# ------------------------------------------------------------------------------------------------ bounded parse


def _build(sc: _Scanner, nodes: list, max_str: int, max_digits: int, depth: int):
    """Parse one value; ``nodes[0]`` is the remaining node budget (decremented). Raises TooLarge / Mismatch."""
    if depth > MAX_DEPTH:
        raise TooLarge("too deep")
    nodes[0] -= 1
    if nodes[0] < 0:
        raise TooLarge("too many nodes")
    c = sc.peek()
    if c == 0x5B:
        sc.pos += 1
        out = []
        while sc.peek() != 0x5D:
            if out:
                sc.expect(b",")
            out.append(_build(sc, nodes, max_str, max_digits, depth + 1))
        sc.pos += 1
        return out
    if c == 0x7B:
        sc.pos += 1
        obj = {}
        while sc.peek() != 0x7D:
            if obj:
                sc.expect(b",")
            key = sc.string(max_str)
            sc.expect(b":")
            obj[key] = _build(sc, nodes, max_str, max_digits, depth + 1)
        sc.pos += 1
        return obj
    if c == 0x22:
        return sc.string(max_str)
    tok = sc.number()
    if tok is not None:
        if tok in (b"NaN", b"Infinity", b"-Infinity"):
            return {b"NaN": math.nan, b"Infinity": math.inf, b"-Infinity": -math.inf}[tok]
        if b"." in tok or b"e" in tok or b"E" in tok:
            if len(tok) > MAX_NUMBER_TOKEN:
                raise TooLarge("a number too long")
            try:
                return float(tok)
            except OverflowError:
                return math.inf if not tok.startswith(b"-") else -math.inf
        if len(tok.lstrip(b"-")) > max_digits:
            raise TooLarge("an integer longer than any expected one")
        return big_int(tok)
    lit = sc.literal()
    if lit in (b"true", b"false", b"null"):
        return {b"true": True, b"false": False, b"null": None}[lit]
    raise Mismatch(f"not JSON at byte {sc.pos}")


def parse_bounded(text, *, max_nodes: int, max_str: int, max_digits: int):
    """The value of JSON ``text``, or :class:`TooLarge` (more than ``max_nodes`` nodes, a string whose JSON text is
    longer than ``max_str`` bytes, an integer of more than ``max_digits`` digits) / :class:`Mismatch` (not JSON)."""
    sc = _Scanner(as_bytes(text))
    value = _build(sc, [max_nodes], max_str, max_digits, 0)
    sc.ws()
    if sc.pos != len(sc.buf):
        raise Mismatch("data after the value")
    return value


def checker_budget(expected) -> dict:
    """What :func:`parse_bounded` allows for an answer handed to a per-problem checker: 4x the expected value's
    nodes and longest string (+ slack), integers up to the expected ones' digits + 2 (at least 4300)."""
    return {"max_nodes": 4 * _nodes(expected) + 1024, "max_str": 12 * (4 * _max_str(expected) + 1024),
            "max_digits": max(4300, _max_digits(expected) + 2)}
