"""A file of (response, tests) records scored with the code reward (``microcoder eval-code``).

Each line: ``{"response": str, "ground_truth": <tests>}`` (``solution_str`` / ``tests`` accepted as aliases,
optional ``extra_info``, ``id``). :func:`read_records` reads and checks the whole file first: a line that is not a
record (not UTF-8, not JSON, not an object, no response or no ground-truth field, a response that is not a string)
is returned as bad with its line number and the reason. A record whose ground truth is present but malformed is a
record: it is scored, as verdict ``sandbox_error`` (as in training). :func:`score_records` scores the records on
one engine, concurrently, in input order.
"""

from __future__ import annotations

import codecs
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

RESPONSE_KEYS = ("response", "solution_str")
GROUND_TRUTH_KEYS = ("ground_truth", "tests")


class InputError(Exception):
    """The input file cannot be read at all."""


def why(e: OSError) -> str:
    """The reason of an ``OSError`` as one short phrase (``No such file or directory``)."""
    return e.strerror or str(e)


def _lines(path: str):
    """``(line number, bytes or str)`` of every line; raises :class:`InputError` when unreadable."""
    try:
        if path == "-":
            f = getattr(sys.stdin, "buffer", sys.stdin)
            return list(enumerate(f, 1))
        with open(path, "rb") as f:
            return list(enumerate(f, 1))
    except OSError as e:
        raise InputError(f"cannot read {'<stdin>' if path == '-' else path}: {why(e)}") from None


def check_record(line) -> tuple[dict | None, str | None]:
    """``(record, None)`` for a scorable line, ``(None, why)`` for a bad one."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return None, f"not UTF-8 ({e.reason} at byte {e.start})"
    try:
        rec = json.loads(line)
    except RecursionError:
        return None, "invalid JSON (nested too deeply)"
    except ValueError as e:
        return None, f"invalid JSON ({e})"
    if not isinstance(rec, dict):
        return None, f"expected a JSON object, got {type(rec).__name__ if rec is not None else 'null'}"
    missing = [f"{a!r} (or {b!r})" for a, b in (RESPONSE_KEYS, GROUND_TRUTH_KEYS) if a not in rec and b not in rec]
    if missing:
        return None, f"missing {' and '.join(missing)}"
    resp = rec[RESPONSE_KEYS[0]] if RESPONSE_KEYS[0] in rec else rec[RESPONSE_KEYS[1]]
    if not isinstance(resp, str):
        return None, f"the response must be a string, got {type(resp).__name__ if resp is not None else 'null'}"
    return rec, None


def read_records(path: str) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    """All records of ``path`` (``-``: stdin): ``(good [(line, record)], bad [(line, why)])``; empty lines
    are neither. Raises :class:`InputError` when the file cannot be read."""
    good, bad = [], []
    for n, line in _lines(path):
        if n == 1 and isinstance(line, bytes) and line.startswith(codecs.BOM_UTF8):
            line = line[len(codecs.BOM_UTF8):]
        if not line.strip():
            continue
        rec, reason = check_record(line)
        if rec is None:
            bad.append((n, reason))
        else:
            good.append((n, rec))
    return good, bad


def score_records(engine, records: list[tuple[int, dict]], on_done: Callable[[], None] | None = None) -> list[dict]:
    """Score every ``(line, record)`` on ``engine`` (``engine.size`` at a time), in input order: one result dict
    per record (:meth:`EvalResult.to_dict` plus ``line`` and the record's ``id`` if it has one). ``on_done`` is
    called after each record."""
    from microcoder_ext.reward import evaluate_response

    def score(item):
        n, rec = item
        resp = rec[RESPONSE_KEYS[0]] if RESPONSE_KEYS[0] in rec else rec[RESPONSE_KEYS[1]]
        gt = rec[GROUND_TRUTH_KEYS[0]] if GROUND_TRUTH_KEYS[0] in rec else rec[GROUND_TRUTH_KEYS[1]]
        res = evaluate_response(resp, gt, rec.get("extra_info"), engine=engine).to_dict()
        res["line"] = n
        if "id" in rec:
            res["id"] = rec["id"]
        extra = rec.get("extra_info")
        if isinstance(extra, dict) and extra.get("weak_tests"):
            res["weak_tests"] = str(extra["weak_tests"])  # flagged by `microcoder data prepare`
        if on_done is not None:
            on_done()
        return res

    with ThreadPoolExecutor(max_workers=max(1, engine.size)) as pool:
        return list(pool.map(score, records))
