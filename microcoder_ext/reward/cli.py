"""``microcoder eval-code FILE.jsonl``: score (response, tests) records with the code reward.

Each line: ``{"response": str, "ground_truth": <tests>}`` (``solution_str`` / ``tests`` accepted as
aliases, optional ``extra_info``, ``id``). Prints a progress bar (stderr) and a verdict table; ``-o``
writes one result line per record, in input order.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from microcoder_ext.core import verdicts as V


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSONL with response + ground_truth per line ('-' for stdin)")
    p.add_argument("-o", "--output", help="write per-record results (JSONL) here")
    p.add_argument("--workers", type=int, default=0, help="concurrent sandboxes (default: usable cores)")
    p.add_argument("--timeout", type=float, default=5.0, help="CPU seconds per test (default 5)")
    p.add_argument("--memory-mb", type=int, default=2048, help="address-space limit per run, MiB (default 2048)")
    p.add_argument("--all-tests", action="store_true", help="run every test even after a failure (exact pass_rate)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _records(path: str):
    f = sys.stdin if path == "-" else open(path, encoding="utf-8")
    with f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield n, json.loads(line)
                except ValueError as e:
                    yield n, {"_error": f"line {n}: invalid JSON ({e})"}


def _progress(total: int, disabled: bool):
    try:
        from tqdm import tqdm
        return tqdm(total=total, disable=disabled, unit="resp", file=sys.stderr)
    except ImportError:  # pragma: no cover
        class _Null:
            def update(self, n=1): pass
            def close(self): pass
        return _Null()


def verdict_table(results: list[dict]) -> str:
    counts = collections.Counter(r["verdict"] for r in results)
    n = len(results) or 1
    lines = [f"{'verdict':<15}{'count':>8}{'share':>9}", "-" * 32]
    for v in V.ALL:
        lines.append(f"{v:<15}{counts.get(v, 0):>8}{100 * counts.get(v, 0) / n:>8.1f}%")
    lines.append("-" * 32)
    mean_pr = sum(r["pass_rate"] for r in results) / n
    lines.append(f"{'total':<15}{len(results):>8}   score {sum(r['score'] for r in results) / n:.3f}  "
                 f"pass_rate {mean_pr:.3f}")
    return "\n".join(lines)


def run(args) -> int:
    from . import EngineConfig, Engine, EvalResult, evaluate_response

    recs = list(_records(args.file))
    engine = Engine(EngineConfig(workers=args.workers, timeout=args.timeout, memory_mb=args.memory_mb,
                                 stop_on_first_failure=not args.all_tests))
    t0 = time.monotonic()
    layers = engine.warmup()
    if engine.fatal:
        print(f"error: {engine.fatal}", file=sys.stderr)
    else:
        active = [k for k in ("uid_drop", "seccomp", "landlock") if layers.get(k) == "active"]
        print(f"sandbox layers active: {', '.join(active) or 'none'}", file=sys.stderr)
    bar = _progress(len(recs), args.no_progress)

    def score(item):
        n, rec = item
        if "_error" in rec:
            res = EvalResult(V.SANDBOX_ERROR, 0, 0, rec["_error"]).to_dict()
        else:
            resp = rec.get("response", rec.get("solution_str", ""))
            gt = rec.get("ground_truth", rec.get("tests"))
            res = evaluate_response(resp, gt, rec.get("extra_info"), engine=engine).to_dict()
        res["line"] = n
        if "id" in rec:
            res["id"] = rec["id"]
        bar.update(1)
        return res

    try:
        with ThreadPoolExecutor(max_workers=engine.size) as pool:
            results = list(pool.map(score, recs))
    finally:
        bar.close()
        engine.close()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    print(verdict_table(results))
    print(f"{len(results)} responses in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0
