"""The streaming JSON judge (json_match) agrees with the value semantics (compare.values_equal) on every value, and
stays linear with bounded memory on hostile text; the integer rule on every path; the payload framing."""

import json
import math
import os
import threading
import random
import time
import tracemalloc

import pytest

from microcoder_ext.reward.compare import compare_stdout, values_equal
from microcoder_ext.reward.json_match import Mismatch, TooLarge, checker_budget, match_json, parse_bounded
from microcoder_ext.reward.sandbox import protocol


def _value(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice([0, 1, -5, 2, 10**20, 2**53 + 1, 2.5, 0.1 + 0.2, 0.3, 2.0, 1e30, True, False, None, "a", "é",
                           "\u0000x", "", "\U0001F600", float("nan"), float("inf")])
    if r < 0.7:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "b", "1", "é"]): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def test_the_sandbox_s_own_encoding_agrees_with_values_equal_on_random_values():
    """A returned value reaches the judge as the sandbox encodes it (compact, UTF-8): text identical to the expected
    value's encoding is judged equal without the walk (``"exact"``), and only then."""
    from microcoder_ext.reward.sandbox.child import _dumps  # what the sandboxed process sends

    rng = random.Random(1)
    exact = 0
    for _ in range(20000):
        e = _value(rng)
        a = e if rng.random() < 0.4 else _value(rng)
        text = _dumps(a).encode("utf-8", "surrogatepass")
        for unordered in (False, True):
            ok, why = match_json(e, text, unordered=unordered)
            assert ok is values_equal(e, json.loads(text), unordered=unordered), (e, text, unordered)
            exact += why == "exact"
    assert exact > 10000  # the identical ones took the exact path
    lone = ["\ud800", {"k": "\udfff x"}]  # lone surrogates: kept as their 3-byte form on both sides
    assert match_json(lone, _dumps(lone).encode("utf-8", "surrogatepass")) == (True, "exact")
    huge = 10 ** 5000  # past the int-digit limit: no encoding of the expected value, the walk decides
    assert match_json(huge, "1" + "0" * 5000) == (True, "structural")


def test_agrees_with_values_equal_on_random_values():
    rng = random.Random(0)
    for _ in range(20000):
        e = _value(rng)
        a = e if rng.random() < 0.4 else _value(rng)
        if isinstance(e, list) and rng.random() < 0.3:
            a = list(reversed(e))
        text = json.dumps(a)
        for unordered in (False, True):
            want = values_equal(e, json.loads(text), unordered=unordered)
            assert match_json(e, text, unordered=unordered)[0] is want, (e, text, unordered)
            assert match_json(e, text.encode(), unordered=unordered)[0] is want


@pytest.mark.parametrize("expected,text,ok", [
    (2000000000, "2000000001.0", False),       # the integer answer: no tolerance
    (2000000000, "2000000000.0", True),        # an integral float, exactly equal
    (2000000000, "2e9", True),
    (10**30, "1e+30", False),                  # the float 1e30 is 1000000000000000019884624838656
    (3, "3.0000001", False),
    ([[1, 5]], "[[1, 5.000001]]", False),      # nested
    ({"k": 5}, '{"k": 5.0000001}', False),     # dict value
    (0.3, "0.30000000000000004", True),        # a float answer keeps the tolerance
    (2.0, "2", True),
    (True, "1", False), (1, "true", False),
    (5, "9" * 100000, False),                  # a huge integer is rejected by its length, never converted
])
def test_integer_and_float_rules(expected, text, ok):
    assert match_json(expected, text)[0] is ok


def test_integers_beyond_the_int_digit_limit():
    assert match_json(10**5000, "1" + "0" * 5000)[0] and not match_json(10**5000, "1" + "0" * 4999 + "1")[0]


def test_stdout_integer_tokens_are_exact():
    assert not compare_stdout("2000000000\n", "2000000001.0\n")[0]
    assert not compare_stdout("2000000000\n", "2000000000.0\n")[0]  # token judges: an integer token is exact
    assert compare_stdout("2.5\n", "2.5000001\n")[0]


def test_any_order_is_n_log_n_and_exact():
    n = 8000
    t = time.process_time()  # CPU seconds: waiting for a CPU on a loaded machine does not count
    assert not match_json(list(range(n)), json.dumps(list(range(1, n + 1))), unordered=True)[0]
    assert match_json([i / 3 for i in range(n)], json.dumps([i / 3 + 1e-12 for i in reversed(range(n))]),
                      unordered=True)[0]
    assert not match_json([0.5] * n, json.dumps([0.5] * (n - 1) + [0.6]), unordered=True)[0]
    assert time.process_time() - t < 10  # quadratic matching took tens of seconds at this size
    assert match_json([[1, "a"], [2, "b"]], '[[2, "b"], [1.0, "a"]]', unordered=True)[0]
    assert not match_json([1, 1, 2], "[1, 2, 2]", unordered=True)[0]


@pytest.mark.parametrize("text", [
    "[" + ",".join(["[]"] * 2_000_000) + "]",   # millions of objects
    "[" * 1_000_000 + "]" * 1_000_000,          # deep nesting
    '"' + "\\u00e9" * 1_000_000 + '"',         # a long string
    "1" * 5_000_000,                            # a long number
])
def test_hostile_text_costs_little(text):
    tracemalloc.start()
    t = time.process_time()  # CPU seconds, which a loaded machine does not add to
    ok, why = match_json([[1]], text)
    elapsed = time.process_time() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not ok and elapsed < 2
    assert peak < 2 * len(text) + (1 << 20), peak  # at most one copy of the text (str -> bytes) plus a token


def test_parse_bounded_refuses_large_values():
    budget = checker_budget([1, 2, 3])
    assert parse_bounded("[3, 2, 1]", **budget) == [3, 2, 1]
    with pytest.raises(TooLarge):
        parse_bounded("[" + ",".join(["0"] * 100_000) + "]", **budget)
    with pytest.raises(TooLarge):
        parse_bounded('"' + "x" * 10**6 + '"', max_nodes=10, max_str=100, max_digits=10)
    with pytest.raises(Mismatch):
        parse_bounded("[1,", **budget)
    assert math.isnan(parse_bounded("NaN", **budget))


def test_not_json_and_trailing_data_are_wrong_answers():
    for text in ("", "[1", "[1,]", "{1: 2}", "[1] x", "'a'", "[\x00]"):
        assert match_json([1], text)[0] is False


def test_reason_shows_each_side_once():
    assert match_json(3, "-1") == (False, "expected 3, got -1")
    assert match_json(3, '"x"') == (False, 'expected 3, got "x" (expected the integer 3)')
    assert match_json([1, 2, 3], "[1, 2, -1]") == (False, "expected [1, 2, 3], got [1, 2, -1] ([2]: expected 3, got -1)")


def test_payload_framing_keeps_bytes_undecoded():
    r, w = os.pipe()
    data = bytes(range(256)) * 4096  # 1 MiB: more than a pipe holds, so the writer runs beside the reader

    def write():
        protocol.write_all(w, protocol.encode({"op": "result", "i": 0, "stdout": data}) + protocol.encode({"op": "done"}))
        os.close(w)

    writer = threading.Thread(target=write)
    writer.start()
    reader = protocol.LineReader(r)
    msg = reader.read(5)
    assert msg["stdout"] == data and "_payload" not in msg and reader.read(5) == {"op": "done"}
    writer.join()
    os.close(r)
    with pytest.raises(ValueError):
        protocol.encode({"a": b"x", "b": b"y"})
