"""``microcoder eval-code FILE.jsonl``: score (response, tests) records with the code reward.

Each line: ``{"response": str, "ground_truth": <tests>}`` (``solution_str`` / ``tests`` accepted as
aliases, optional ``extra_info``, ``id``). Prints a progress bar (stderr) and a verdict table; ``-o``
writes one result line per record, in input order.

The whole file is read and checked before anything runs (:mod:`microcoder_ext.reward.batch`). A line that is
not a record is reported on stderr with its line number; without ``--skip-bad`` nothing is scored and the exit
status is 2, with it the bad lines are left out and listed as skipped.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward.batch import InputError, read_records, why

PROG = "microcoder eval-code"
EXIT_OK, EXIT_SANDBOX, EXIT_INPUT = 0, 1, 2

EPILOG = """\
input: one JSON object per line
  {"response": "<text with a ```python block>", "ground_truth": <tests>,
   "id": <any, optional>, "extra_info": {...optional}}
  aliases: solution_str for response, tests for ground_truth; empty lines are ignored

The whole file is checked before anything runs. Bad lines (not UTF-8, not JSON, not
an object, no response or no ground_truth field, a response that is not a string) are
reported as FILE:LINE: REASON on stderr. A record whose ground truth is present but
malformed is not a bad line: it is scored, as verdict sandbox_error.

exit status:
  0  every record was scored (with --skip-bad: every good one; bad lines are listed
     as skipped below the verdict table)
  1  the sandbox could not start (the records got verdict sandbox_error)
  2  the input could not be read, or -o could not be written, or the input has bad
     lines and --skip-bad was not given (nothing was scored), or every line was bad
"""

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("file", help="JSONL with response + ground_truth per line ('-' for stdin)")
    p.add_argument("-o", "--output", help="write per-record results (JSONL, with the input line number) here")
    p.add_argument("--skip-bad", action="store_true",
                   help="report bad lines, skip them and score the rest (default: exit 2 before scoring)")
    p.add_argument("--workers", type=int, default=0, help="concurrent sandboxes (default: usable cores)")
    p.add_argument("--timeout", type=float, default=5.0, help="CPU seconds per test (default 5)")
    p.add_argument("--memory-mb", type=int, default=2048, help="address-space limit per run, MiB (default 2048)")
    p.add_argument("--all-tests", action="store_true", help="run every test even after a failure (exact pass_rate)")
    p.add_argument("--min-tests", type=int, default=5, metavar="N",
                   help="report the records with fewer than N tests, or flagged weak_tests by 'microcoder data "
                        "prepare' (tests that are only the statement's examples): a pass there says little "
                        "(default 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _err(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr)


def _progress(total: int, disabled: bool):
    try:
        from tqdm import tqdm
        return tqdm(total=total, disable=disabled, unit="resp", file=sys.stderr)
    except ImportError:  # pragma: no cover
        class _Null:
            def update(self, n=1): pass
            def close(self): pass
        return _Null()


def _line_list(lines: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (f", ... ({len(lines) - limit} more)" if len(lines) > limit else "")


def verdict_table(results: list[dict], skipped: list[int] | None = None, min_tests: int = 0) -> str:
    """Count and share of each verdict, mean score and pass rate; ``skipped``: line numbers of bad input
    lines that were not scored (listed below the total, not counted in the shares); the records with weak tests
    (fewer than ``min_tests``, or flagged ``weak_tests`` by ``microcoder data prepare``) and how many of them
    passed."""
    counts = collections.Counter(r["verdict"] for r in results)
    n = len(results) or 1
    lines = [f"{'verdict':<15}{'count':>8}{'share':>9}", "-" * 32]
    for v in V.ALL:
        lines.append(f"{v:<15}{counts.get(v, 0):>8}{100 * counts.get(v, 0) / n:>8.1f}%")
    lines.append("-" * 32)
    mean_pr = sum(r["pass_rate"] for r in results) / n
    lines.append(f"{'total':<15}{len(results):>8}   score {sum(r['score'] for r in results) / n:.3f}  "
                 f"pass_rate {mean_pr:.3f}")
    if skipped:
        lines.append(f"{'skipped':<15}{len(skipped):>8}   bad input lines: {_line_list(skipped)}")
    weak = [r for r in results if r.get("weak_tests") or (min_tests and r.get("num_tests", min_tests) < min_tests)]
    if weak:
        passed = sum(r["verdict"] == V.CORRECT for r in weak)
        lines.append(f"{'weak_tests':<15}{len(weak):>8}   records with fewer than {min_tests} tests or only the "
                     f"statement's examples; {passed} of them correct (a pass there says little)")
    return "\n".join(lines)


def run(args) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    try:
        recs, bad = read_records(args.file)
    except InputError as e:
        _err(str(e))
        return EXIT_INPUT
    for n, reason in bad:
        _err(f"{name}:{n}: {reason}")
    if bad and not args.skip_bad:
        _err(f"{len(bad)} bad line{'s' if len(bad) != 1 else ''} in {name}; nothing scored "
             "(fix them, or pass --skip-bad to score the other records)")
        return EXIT_INPUT
    if bad and not recs:
        _err(f"no record to score in {name}: every non-empty line is bad")
        return EXIT_INPUT
    out = None
    if args.output:
        try:
            out = open(args.output, "w", encoding="utf-8")
        except OSError as e:
            _err(f"cannot write {args.output}: {why(e)}")
            return EXIT_INPUT
    try:
        return _score(args, recs, [n for n, _ in bad], out)
    finally:
        if out is not None:
            out.close()


def _score(args, recs: list[tuple[int, dict]], skipped: list[int], out) -> int:
    from microcoder_ext.reward import Engine, EngineConfig
    from microcoder_ext.reward.batch import score_records

    if args.min_tests < 0:
        _err("--min-tests must be >= 0")
        return EXIT_INPUT
    engine = Engine(EngineConfig(workers=args.workers, timeout=args.timeout, memory_mb=args.memory_mb,
                                 stop_on_first_failure=not args.all_tests))
    t0 = time.monotonic()
    layers = engine.warmup()
    if engine.fatal:
        _err(f"sandbox unavailable: {engine.fatal}")
    else:
        active = [k for k in ("uid_drop", "seccomp", "landlock") if layers.get(k) == "active"]
        print(f"sandbox layers active: {', '.join(active) or 'none'}", file=sys.stderr)
    bar = _progress(len(recs), args.no_progress)
    try:
        results = score_records(engine, recs, on_done=lambda: bar.update(1))
    finally:
        bar.close()
        engine.close()
    if out is not None:
        try:
            for r in results:
                out.write(json.dumps(r) + "\n")
            out.flush()
        except OSError as e:
            _err(f"cannot write {args.output}: {why(e)}")
            return EXIT_INPUT
    print(verdict_table(results, skipped, args.min_tests))
    print(f"{len(results)} responses in {time.monotonic() - t0:.1f} s"
          + (f" ({len(skipped)} bad line{'s' if len(skipped) != 1 else ''} skipped)" if skipped else ""),
          file=sys.stderr)
    return EXIT_SANDBOX if engine.fatal else EXIT_OK
