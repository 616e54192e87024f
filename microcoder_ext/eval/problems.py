"""The problems ``microcoder eval`` scores: prepared files (verl parquet, OpenRLHF JSONL, Problem JSONL) or
LiveCodeBench (:func:`microcoder_ext.data.lcb.read_lcb`), in a contest-date window, matched with their responses.

Bad input raises :class:`EvalInputError` with one message for the user (``microcoder eval`` exits 2).
"""

from __future__ import annotations

import collections
import json
import os
from dataclasses import dataclass, field

from microcoder_ext.jsonl import iter_objects


class EvalInputError(Exception):
    """Bad usage or unreadable input: one message on stderr, exit status 2."""


@dataclass
class EvalProblem:
    """One problem to evaluate: its ground truth (the reward's), prompt messages and the table's columns."""

    id: str
    ground_truth: object
    messages: list = field(default_factory=list)
    platform: str | None = None
    difficulty: str | None = None
    date: str | None = None
    title: str = ""
    extra_info: dict = field(default_factory=dict)

    @classmethod
    def from_problem(cls, p) -> "EvalProblem":
        return cls(p.id, json.dumps(p.tests), [{"role": "user", "content": p.prompt_text()}], p.platform,
                   p.difficulty, p.date, p.title, p.metadata())


def _plain(v):
    return v.tolist() if hasattr(v, "tolist") else v


def _from_verl_row(row: dict, i: int, where: str) -> EvalProblem:
    info = _plain(row.get("extra_info")) or {}
    rm = row.get("reward_model") or {}
    if "ground_truth" not in rm:
        raise EvalInputError(f"{where}: row {i} has no reward_model.ground_truth")
    return EvalProblem(str(info.get("id", i)), rm["ground_truth"], _plain(row.get("prompt")) or [],
                       info.get("platform"), info.get("difficulty"), info.get("date"), info.get("title") or "", info)


def _from_jsonl_record(rec: dict, where: str) -> EvalProblem:
    if "label" in rec:  # OpenRLHF row
        meta = {k[5:]: v for k, v in rec.items() if k.startswith("meta_")}
        prompt = rec.get("prompt")
        msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else (prompt or [])
        if "id" not in meta:
            raise EvalInputError(f"{where}: OpenRLHF row without meta_id")
        return EvalProblem(str(meta["id"]), rec["label"], msgs, meta.get("platform"), meta.get("difficulty"),
                           meta.get("date"), meta.get("title") or "", meta)
    if "reward_model" in rec:
        return _from_verl_row(rec, 0, where)
    if "tests" in rec and "statement" in rec and "id" in rec:
        from microcoder_ext.data.problem import Problem

        try:
            return EvalProblem.from_problem(Problem(**rec))
        except TypeError as e:
            raise EvalInputError(f"{where}: not a Problem record ({e})") from None
    raise EvalInputError(f"{where}: unknown record (expected an OpenRLHF row with 'label', a verl row with "
                         "'reward_model', or a Problem record with 'id', 'statement', 'tests')")


def load_problems_file(path: str) -> list[EvalProblem]:
    if not os.path.isfile(path):
        raise EvalInputError(f"problems file {path} does not exist" if not os.path.exists(path)
                             else f"problems file {path} is not a file")
    out: list[EvalProblem] = []
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except ImportError:
            raise EvalInputError("reading parquet needs pyarrow") from None
        except Exception as e:  # ArrowInvalid, OSError
            raise EvalInputError(f"{path}: not a readable parquet file ({str(e).splitlines()[0]})") from None
        out = [_from_verl_row(r, i, path) for i, r in enumerate(rows)]
    else:
        out = [_from_jsonl_record(rec, where) for where, rec in iter_objects(path, EvalInputError)]
    if not out:
        raise EvalInputError(f"{path}: no problems")
    dup = [k for k, n in collections.Counter(p.id for p in out).items() if n > 1]
    if dup:
        raise EvalInputError(f"{path}: duplicate problem ids: {', '.join(dup[:5])}")
    return out


def load_problems(*, problems: str | None = None, lcb: str | None = None, release: str | None = None,
                  start_date: str | None = None, end_date: str | None = None) -> tuple[list[EvalProblem], dict]:
    """The problems to evaluate (a prepared ``problems`` file or a LiveCodeBench ``lcb`` file / hub id) in the
    ``[start_date, end_date)`` window (``release`` gives its default ends), and the selection settings."""
    start, end = start_date, end_date
    sel = {"start_date": start, "end_date": end, "release": release}
    if lcb:
        try:
            from microcoder_ext.data.lcb import read_lcb
        except ImportError as e:
            raise EvalInputError(f"--lcb needs microcoder_ext.data.lcb ({e})") from None
        try:
            probs = [EvalProblem.from_problem(p) for p in read_lcb(lcb, start_date=start, end_date=end,
                                                                    release=release)]
        except (OSError, ValueError) as e:
            raise EvalInputError(f"--lcb {lcb}: {e}") from None
        if not probs:
            raise EvalInputError(f"--lcb {lcb}: no problems in the selected window")
        from microcoder_ext.data.lcb import window

        start, end = window(release, start, end)
        return probs, {"source": lcb, **sel, "start_date": start, "end_date": end}
    probs = load_problems_file(problems)
    if release or start or end:
        try:
            from microcoder_ext.data.lcb import in_window, window
        except ImportError as e:
            raise EvalInputError(f"a date window needs microcoder_ext.data.lcb ({e})") from None
        try:
            start, end = window(release, start, end)
        except ValueError as e:
            raise EvalInputError(f"--release: {e}") from None
        sel.update(start_date=start, end_date=end)
        undated = [p.id for p in probs if not p.date]
        if undated:
            raise EvalInputError(f"{problems}: a date window was given but {len(undated)} problems have no "
                                 f"date (e.g. {', '.join(undated[:3])})")
        probs = [p for p in probs if in_window(str(p.date)[:10], start, end)]
        if not probs:
            raise EvalInputError(f"{problems}: no problem dated in [{start or '...'}, {end or '...'})")
    return probs, {"source": problems, **sel}


def match_responses(problems: list[EvalProblem], responses: dict[str, list[str]], allow_missing: bool,
                    where: str) -> tuple[list[EvalProblem], list[str]]:
    """``(problems that have responses, ids of those that have none)``; unknown ids (and, unless allowed, problems
    without responses) raise :class:`EvalInputError`."""
    known = {p.id for p in problems}
    unknown = [pid for pid in responses if pid not in known]
    if unknown:
        raise EvalInputError(f"{where}: responses for {len(unknown)} unknown problem id"
                             f"{'s' if len(unknown) != 1 else ''}: {', '.join(unknown[:5])}"
                             f"{', ...' if len(unknown) > 5 else ''} (not in the {len(known)} problems)")
    missing = [p.id for p in problems if not responses.get(p.id)]
    if missing and not allow_missing:
        raise EvalInputError(f"{where}: no response for {len(missing)} of {len(problems)} problems: "
                             f"{', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''} "
                             "(--allow-missing leaves them out)")
    return [p for p in problems if responses.get(p.id)], missing
