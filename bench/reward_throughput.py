"""Throughput of the MicroCoder code reward vs verl 0.9.1 ``prime_code``, side by side, one call at a time.

Workload: LeetCodeDataset v0.2.0 train problems from ../shared/data (newfacade/LeetCodeDataset, MIT), every
problem with all of its tests; (1) reference solutions (all correct), (2) mixed: half correct, half mutants
wrong ONLY on their last test. Both evaluators get the same tests (prime_code in its JSON-lines format).

  python bench/reward_throughput.py [--problems 200] [--data PATH]
Reports completions/s, tests/s, p50/p99 latency (ms), peak RSS (MiB, process + children) and ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "leetcode-v0.2.0-train.jsonl.gz")

MUTANT = """

_mc_last = {last!r}
_mc_orig = Solution.{fn}
def _mc_wrap(self, *a, **k):
    r = _mc_orig(self, *a, **k)
    if repr(list(a) + sorted(k.items())) == _mc_last or repr(list(k.values())) == _mc_last_v:
        return [r, "mutant"]
    return r
_mc_last_v = {last_v!r}
Solution.{fn} = _mc_wrap
"""


def load(path: str, n: int):
    from microcoder_ext.reward.leetcode import ConversionError, ground_truth_from_row
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            row = json.loads(line)
            if "sortedcontainers" in row["completion"]:
                continue
            try:
                gt = ground_truth_from_row(row)
            except ConversionError:
                continue
            if gt.get("arg_types") or gt.get("return_type"):
                continue  # prime_code cannot build ListNode/TreeNode arguments
            ours = dict(gt, inputs=[list(kw.values()) for kw in gt["inputs"]])
            ours["outputs"] = [[o] for o in gt["outputs"]]  # APPS-style wrapping, as prime_code data has it
            prime = {"fn_name": gt["fn_name"], "inputs": ["\n".join(json.dumps(v) for v in kw.values())
                                                          for kw in gt["inputs"]],
                     "outputs": [json.dumps(o) for o in gt["outputs"]]}
            code = row["prompt"] + "\n" + row["completion"]
            last = list(gt["inputs"][-1].values())
            mutant = code + MUTANT.format(fn=gt["fn_name"], last=repr(last), last_v=repr(last))
            ours.pop("setup_code", None)
            out.append({"id": row["task_id"], "code": code, "mutant": mutant, "ours": ours, "prime": prime,
                        "n": len(gt["inputs"])})
            if len(out) >= n:
                break
    return out


def peak_rss_mib() -> float:
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024


def measure(name, fn, items):
    lat, tests, scores = [], 0, []
    t0 = time.perf_counter()
    for it, code, want in items:
        s = time.perf_counter()
        scores.append((fn(code, it), want))
        lat.append(time.perf_counter() - s)
        tests += it["n"]
    total = time.perf_counter() - t0
    lat.sort()
    agree = sum(1 for got, want in scores if bool(got) == want) / len(scores)
    return {"name": name, "completions_s": len(items) / total, "tests_s": tests / total,
            "p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "total_s": total, "agreement": agree}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--data", default=DEFAULT_DATA)
    args = ap.parse_args()
    from verl.utils.reward_score import prime_code

    from microcoder_ext.reward import Engine, EngineConfig, evaluate_response

    probs = load(args.data, args.problems)
    engine = Engine(EngineConfig(timeout=5.0))
    layers = engine.warmup()
    print(f"{len(probs)} problems, {sum(p['n'] for p in probs)} tests; sandbox: "
          + ", ".join(f"{k}={layers.get(k)}" for k in ("uid_drop", "seccomp", "landlock")), file=sys.stderr)

    def ours(code, it):
        return evaluate_response(f"```python\n{code}\n```", it["ours"], engine=engine).score == 1.0

    def prime(code, it):
        try:
            ok, _ = prime_code.compute_score(f"```python\n{code}\n```", json.dumps(it["prime"]), continuous=False)
        except UnboundLocalError:  # verl 0.9.1 bug: continuous=False on a failing solution raises
            return False
        return ok is True

    correct = [(p, p["code"], True) for p in probs]
    mixed = [(p, p["code"] if i % 2 == 0 else p["mutant"], i % 2 == 0) for i, p in enumerate(probs)]
    rows = []
    import contextlib
    import io
    for wl, items in (("all-correct", correct), ("mixed (half wrong on last test)", mixed)):
        for name, fn in (("microcoder", ours), ("verl prime_code", prime)):
            with contextlib.redirect_stdout(io.StringIO()):
                r = measure(name, fn, items)
            r["workload"] = wl
            rows.append(r)
    engine.close()
    print(f"{'workload':<34}{'evaluator':<17}{'compl/s':>9}{'tests/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'agree':>7}")
    for r in rows:
        print(f"{r['workload']:<34}{r['name']:<17}{r['completions_s']:>9.1f}{r['tests_s']:>9.1f}{r['p50_ms']:>9.1f}"
              f"{r['p99_ms']:>9.1f}{100 * r['agreement']:>6.1f}%")
    for wl in ("all-correct", "mixed (half wrong on last test)"):
        a, b = [r for r in rows if r["workload"] == wl]
        print(f"ratio microcoder/prime_code throughput on {wl}: {a['completions_s'] / b['completions_s']:.2f}x")
    print(f"peak RSS (process + largest child) {peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
