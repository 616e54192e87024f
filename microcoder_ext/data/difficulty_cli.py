"""``microcoder data difficulty IN... -o OUT``: add the five-dimension difficulty scores
(:mod:`microcoder_ext.data.difficulty`) to prepared data, so ``microcoder data prepare --min-difficulty`` (or any
reader) can filter on ``difficulty_scores.score``.

Inputs (all of one kind; the kind is recognised from the rows):

=============  =====================================================  =========================================
kind           rows                                                    scores written to
=============  =====================================================  =========================================
``verl``       ``data prepare``'s verl parquet (or the same rows as    ``extra_info["difficulty_scores"]``
               JSONL): ``prompt``, ``extra_info``
``openrlhf``   ``data prepare``'s OpenRLHF JSONL: ``prompt``,          ``"meta_difficulty_scores"``
               ``label``, ``meta_*``
``problem``    JSONL of ``Problem.to_dict()``                          ``extra["difficulty_scores"]``
=============  =====================================================  =========================================

The statement is the last user message of ``prompt`` (verl/OpenRLHF) or ``statement`` (problem); the reference
solutions are ``extra_info["solutions"]`` / ``meta_solutions`` / ``solutions`` when the rows carry them (without
them only the statement-based algorithmic part and the judge's two dimensions can be scored). OUT is written in the
kind of the input; its container follows its suffix: ``.parquet``, or ``.jsonl`` / ``.jsonl.gz``.

Exit codes: 0 every row scored (and judged, with a judge); 1 OUT written but some rows have a judge failure or could
not be scored (listed in the summary); 2 bad arguments or unreadable / unrecognised input (nothing written).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from microcoder_ext.data.problem import Problem

SCORES_KEY = "difficulty_scores"


class InputError(Exception):
    pass


# ----------------------------------------------------------------------------------------------- reading / writing
def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        opener = gzip.open if path.endswith(".gz") else open
        rows = []
        with opener(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise InputError(f"{path}:{i}: not a JSON object")
                    rows.append(row)
        return rows
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - any read error is an input error
        raise InputError(f"{path}: cannot read: {type(e).__name__}: {e}") from None


def write_rows(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
        return
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def row_kind(row: dict) -> str | None:
    if isinstance(row.get("extra_info"), dict) and "prompt" in row:
        return "verl"
    if "prompt" in row and any(k.startswith("meta_") for k in row):
        return "openrlhf"
    if "statement" in row and "tests" in row and "id" in row:
        return "problem"
    return None


def _last_user(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") or "" for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return users[-1]
    raise InputError(f"prompt is neither text nor chat messages with a user turn: {str(prompt)[:120]}")


def _solutions(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    return [s for s in value or [] if isinstance(s, str)]


def to_problem(row: dict, kind: str) -> Problem:
    """The :class:`Problem` the scorer needs (statement, solutions; tests are not used) from one row."""
    if kind == "verl":
        info = row["extra_info"]
        return Problem(id=str(info.get("id", "")), source=str(info.get("source", "")),
                       statement=_last_user(row["prompt"]), tests={}, solutions=_solutions(info.get("solutions")))
    if kind == "openrlhf":
        return Problem(id=str(row.get("meta_id", "")), source=str(row.get("meta_source", "")),
                       statement=_last_user(row["prompt"]), tests={}, solutions=_solutions(row.get("meta_solutions")))
    fields = Problem.__dataclass_fields__
    return Problem(**{k: v for k, v in row.items() if k in fields})


def store(row: dict, kind: str, scores: dict) -> dict:
    """``row`` with ``scores`` at the documented place (a new dict; nested dicts copied)."""
    row = dict(row)
    if kind == "verl":
        row["extra_info"] = {**row["extra_info"], SCORES_KEY: scores}
    elif kind == "openrlhf":
        row[f"meta_{SCORES_KEY}"] = scores
    else:
        row["extra"] = {**(row.get("extra") or {}), SCORES_KEY: scores}
    return row


def stored_scores(row: dict) -> dict | None:
    """The scores a row carries, whatever its kind (``None`` if none)."""
    kind = row_kind(row)
    if kind == "verl":
        return row["extra_info"].get(SCORES_KEY)
    if kind == "openrlhf":
        return row.get(f"meta_{SCORES_KEY}")
    if kind == "problem":
        return (row.get("extra") or {}).get(SCORES_KEY)
    return None


# ----------------------------------------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="IN",
                   help="verl parquet / JSONL rows of `data prepare`, OpenRLHF JSONL, or a JSONL of Problem dicts")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output file: .parquet, .jsonl or .jsonl.gz")
    p.add_argument("--judge-url", default=None,
                   help="OpenAI-compatible API root for the cognitive/domain judge, e.g. http://127.0.0.1:8000/v1 "
                        "(API key from $MICROCODER_JUDGE_API_KEY if set)")
    p.add_argument("--judge-model", default=None, help="model name sent to the judge endpoint")
    p.add_argument("--judge-concurrency", type=int, default=8, help="parallel judge requests (default 8)")
    p.add_argument("--judge-timeout", type=float, default=60.0, help="seconds per judge request (default 60)")
    p.add_argument("--judge-retries", type=int, default=2, help="retries after a failed/malformed answer (default 2)")
    p.add_argument("--weights", default=None, metavar="DIM=W,...",
                   help="dimension weights, e.g. structural=1,halstead=0.5 (default: all 1; the paper's weights "
                        "are unpublished)")
    p.add_argument("--limit", type=int, default=None, help="score only the first N rows (they alone are written)")
    p.add_argument("--summary-json", default=None, metavar="PATH", help="also write the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _parse_weights(text: str | None) -> dict | None:
    from microcoder_ext.data.difficulty import DIMENSIONS

    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, _, val = part.partition("=")
        name = name.strip()
        if name not in DIMENSIONS:
            raise InputError(f"--weights: unknown dimension {name!r} (one of {', '.join(DIMENSIONS)})")
        try:
            out[name] = float(val)
        except ValueError:
            raise InputError(f"--weights: {part!r} is not DIM=NUMBER") from None
        if out[name] < 0:
            raise InputError(f"--weights: {name} must be >= 0")
    return out


def summarise(scores: list[dict | None]) -> dict:
    from microcoder_ext.data.difficulty import DIMENSIONS

    ok = [s for s in scores if s]
    dims = {}
    for d in (*DIMENSIONS, "score"):
        vals = [s[d] for s in ok if s.get(d) is not None]
        dims[d] = {"rows": len(vals), "mean": round(sum(vals) / len(vals), 4) if vals else None}
    hist = [0] * 10
    for s in ok:
        if s.get("score") is not None:
            hist[min(int(s["score"] * 10), 9)] += 1
    judge_failed = sum(1 for s in ok if "judge" in s["raw"] and not s["raw"]["judge"].get("ok"))
    errors = Counter(str(s["raw"]["judge"].get("error"))[:120] for s in ok
                     if "judge" in s["raw"] and not s["raw"]["judge"].get("ok"))
    return {"rows": len(scores), "scored": len(ok), "unscored": len(scores) - len(ok),
            "with_solutions": sum(1 for s in ok if s["raw"]["code"]["solutions"] > 0),
            "with_constraints": sum(1 for s in ok if s["raw"]["constraints"]["n"] is not None),
            "no_score": sum(1 for s in ok if s.get("score") is None),
            "judge_failed": judge_failed, "judge_errors": dict(errors.most_common(5)),
            "dimensions": dims, "histogram": {f"{i / 10:.1f}-{(i + 1) / 10:.1f}": n for i, n in enumerate(hist)}}


def print_summary(summary: dict, inputs: list[str], output: str, judge: str | None, out=sys.stdout) -> None:
    pr = lambda *a: print(*a, file=out)  # noqa: E731
    pr(f"difficulty: {summary['rows']} rows from {', '.join(inputs)} -> {output} (judge: {judge or 'none'})")
    pr(f"  with reference solutions: {summary['with_solutions']}, with a parsed size bound: "
       f"{summary['with_constraints']}, unscored: {summary['unscored']}, judge failures: {summary['judge_failed']}")
    if summary["no_score"]:
        pr(f"  {summary['no_score']} rows have no dimension to score (no reference solution, no stated bound, no "
           f"judge): their score is null")
    if summary["with_solutions"] < summary["scored"]:
        pr("  note: rows without reference solutions get no McCabe/Halstead score; `data prepare --format problems` "
           "keeps the solutions (Problem JSONL), verl/OpenRLHF rows carry them only in extra_info/meta_solutions")
    for err, n in summary["judge_errors"].items():
        pr(f"    judge error x{n}: {err}")
    pr(f"  {'dimension':<12} {'rows':>6} {'mean':>7}")
    for d, v in summary["dimensions"].items():
        mean = f"{v['mean']:.3f}" if v["mean"] is not None else "-"
        pr(f"  {d:<12} {v['rows']:>6} {mean:>7}")
    pr("  score histogram:")
    top = max(summary["histogram"].values()) or 1
    for b, n in summary["histogram"].items():
        pr(f"    {b}  {n:>6}  {'#' * round(40 * n / top)}")


def score_rows(problems: list[Problem], judge: Any, weights: dict | None, concurrency: int,
               progress: bool) -> list[dict | None]:
    from microcoder_ext.data.difficulty import score_problem

    def one(p: Problem) -> dict | None:
        try:
            return score_problem(p, judge, weights=weights)
        except Exception as e:  # noqa: BLE001 - one bad row must not stop the batch
            print(f"warning: {p.id}: not scored: {type(e).__name__}: {e}", file=sys.stderr)
            return None

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(problems), desc="difficulty", unit="row", file=sys.stderr)
    out: list[dict | None] = []
    it: Iterable
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency)) if judge is not None and concurrency > 1 else None
    try:
        it = pool.map(one, problems) if pool else map(one, problems)
        for s in it:
            out.append(s)
            if bar:
                bar.update(1)
    finally:
        if pool:
            pool.shutdown()
        if bar:
            bar.close()
    return out


def run(args: argparse.Namespace) -> int:
    try:
        if not (args.output.endswith(".parquet") or args.output.endswith(".jsonl")
                or args.output.endswith(".jsonl.gz")):
            raise InputError(f"-o {args.output}: use a .parquet, .jsonl or .jsonl.gz file name")
        if bool(args.judge_url) != bool(args.judge_model):
            raise InputError("--judge-url and --judge-model go together")
        if args.judge_concurrency < 1:
            raise InputError("--judge-concurrency must be >= 1")
        weights = _parse_weights(args.weights)
        rows, kinds = [], set()
        for path in args.inputs:
            for i, row in enumerate(read_rows(path), 1):
                kind = row_kind(row)
                if kind is None:
                    raise InputError(f"{path}: row {i} is neither a verl row (prompt + extra_info), an OpenRLHF row "
                                     f"(prompt + meta_*) nor a Problem dict (id, statement, tests); keys: "
                                     f"{sorted(row)[:12]}")
                kinds.add(kind)
                rows.append(row)
        if len(kinds) > 1:
            raise InputError(f"inputs mix row kinds {sorted(kinds)}: score them separately")
        if not rows:
            raise InputError("no rows in the input")
        if args.limit is not None:
            rows = rows[: max(args.limit, 0)]
        kind = kinds.pop()
        problems = [to_problem(r, kind) for r in rows]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    judge = None
    if args.judge_url:
        from microcoder_ext.data.llm_judge import LLMJudge

        judge = LLMJudge(args.judge_url, args.judge_model, timeout=args.judge_timeout, retries=args.judge_retries)
    scores = score_rows(problems, judge, weights, args.judge_concurrency, progress=not args.no_progress)
    out_rows = [store(r, kind, s) if s else r for r, s in zip(rows, scores)]
    write_rows(args.output, out_rows)
    summary = summarise(scores)
    summary.update({"inputs": list(args.inputs), "output": args.output, "kind": kind,
                    "judge": judge.model if judge else None})
    print_summary(summary, list(args.inputs), args.output, summary["judge"])
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if summary["unscored"] or summary["judge_failed"] else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="microcoder data difficulty", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
