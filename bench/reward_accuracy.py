"""Accuracy of the MicroCoder code reward vs verl 0.9.1 ``prime_code`` on a labelled set built from bench/data.

Labelled set (bench/reward_data.py; every case has all of its problem's tests):
  * CodeContests, stdin (19 problems with our reference solutions, 35-331 tests each; DeepMind CodeContests,
    CC-BY-4.0, via SandboxFusion, Apache-2.0): the reference (must pass); semantics-preserving rewrites that must
    pass (sys.stdin.buffer / open(0) input, print(*a) spacing, trailing or double spaces, CRLF, no final newline,
    float formatting 2.50 vs 2.5 on the float problem, exit()/quit()/sys.exit(0) after the output, os.write);
    mutants that must fail (number off by one, float off by 1e-3, big integer off by one, True for 1, wrong case of
    a word where case matters, swapped lines, truncated output, an extra line, a no-break space U+00A0 between
    two tokens (judges split on space/tab/CR/LF only), a crash after the correct output, wrong only on the LAST
    test, a flipped comparison in the source).
  * LeetCodeDataset v0.2.0 train, call-based (newfacade/LeetCodeDataset, MIT; problems without linked-list/tree
    arguments, a deterministic spread plus problems that exercise each value kind): the reference; rewrites
    (tuple for list, float 1e-9 off, debug prints); mutants (off by one, True for 1, truncated/extra list element,
    swapped string case, wrong only on the last test, a flipped comparison).
  Mutants that transform the output are wrong by construction (for problems with several valid answers only
  transforms that break the answer format are used); source mutants (flipped comparison) are kept only when a
  plain, independent Python run shows a different answer on some test.

Evaluators, on identical inputs (code and tests):
  * microcoder: ``microcoder_ext.reward`` (per-problem checker / float tolerance where the statement says so).
  * verl prime_code: ``verl.utils.reward_score.prime_code.compute_score(solution, tests, continuous=True)``, exactly
    what ``verl.utils.reward_score.default_compute_score`` runs for code data sources without a sandbox URL; a case
    passes when the score is 1.0. The "strict" column is the same call judged by its first all-tests pass only
    (as with ``continuous=False``, which verl 0.9.1 cannot return for failures: UnboundLocalError).

  python bench/reward_accuracy.py [--leetcode 40] [--jobs 2] [--json out.json]     (~600 cases, minutes on 2 cores)
Exit status 1 when microcoder's agreement with the labels is below 100 %.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reward_data as rd  # noqa: E402


def build_cases(args, log) -> list[dict]:
    cases = []
    if not args.no_code_contests:
        problems = rd.code_contests()
        flipped = {}
        if not args.no_source_mutants:
            todo = [p for p in problems if rd.stdin_applies("flipped_cmp", p)]
            with ThreadPoolExecutor(args.jobs) as pool:
                found = pool.map(lambda p: rd.flipped_mutant(
                    p["solution"], lambda c: rd.oracle_stdin_wrong(c, p["tests"])), todo)
                flipped = {p["id"]: m for p, m in zip(todo, found)}
            log(f"flipped-comparison mutants verified on {sum(1 for m in flipped.values() if m)}/{len(todo)} "
                f"CodeContests problems")
        for p in problems:
            ours, prime = json.dumps(rd.cc_ground_truth(p)), json.dumps(rd.cc_prime_truth(p))
            for kind, (label, cat, desc) in rd.STDIN_KINDS.items():
                if kind == "flipped_cmp":
                    code = flipped.get(p["id"])
                    if not code:
                        continue
                elif not rd.stdin_applies(kind, p):
                    continue
                else:
                    code = p["solution"] if kind == "reference" else rd.stdin_program(
                        p["solution"], kind, p["tests"][-1][0], several_answers=bool(p.get("checker")))
                cases.append({"set": "codecontests-stdin", "problem": p["name"], "kind": kind, "category": cat,
                              "label": label, "desc": desc, "code": code, "ours": ours, "prime": prime,
                              "tests": len(p["tests"])})
    if args.leetcode:
        problems = pick_leetcode(args.leetcode)
        flipped = {}
        if not args.no_source_mutants:
            with ThreadPoolExecutor(args.jobs) as pool:
                found = pool.map(lambda p: rd.flipped_mutant(p["code"], lambda c: rd.oracle_call_wrong(c, p)), problems)
                flipped = {p["id"]: m for p, m in zip(problems, found)}
            log(f"flipped-comparison mutants verified on {sum(1 for m in flipped.values() if m)}/{len(problems)} "
                f"LeetCode problems")
        for p in problems:
            ours, prime = json.dumps(rd.lc_ground_truth(p)), json.dumps(rd.lc_prime_truth(p))
            last_args = list(p["kwargs"][-1].values())
            for kind, (label, cat, desc) in rd.CALL_KINDS.items():
                if kind == "flipped_cmp":
                    code = flipped.get(p["id"])
                    if not code:
                        continue
                elif not rd.call_applies(kind, p):
                    continue
                else:
                    code = rd.call_program(p["code"], p["fn"], kind, last_args)
                cases.append({"set": "leetcode-call", "problem": p["id"], "kind": kind, "category": cat,
                              "label": label, "desc": desc, "code": code, "ours": ours, "prime": prime,
                              "tests": len(p["kwargs"])})
    return cases


def pick_leetcode(n: int) -> list[dict]:
    """``n`` problems spread evenly over the eligible ones, plus (deterministically) enough problems for every
    value kind (tuple, float, bool-for-int, string case) to apply to at least 3."""
    eligible = rd.leetcode_problems()
    step = max(1, len(eligible) // n)
    chosen = eligible[::step][:n]
    ids = {p["id"] for p in chosen}
    for kind in ("tuple", "float_eps", "bool_for_int", "wrong_case", "truncate"):
        have = sum(rd.call_applies(kind, p) for p in chosen)
        for p in eligible:
            if have >= 3:
                break
            if p["id"] not in ids and rd.call_applies(kind, p):
                chosen.append(p)
                ids.add(p["id"])
                have += 1
    return chosen


def run_ours(cases, jobs, progress):
    from microcoder_ext.reward import Engine, EngineConfig, evaluate_response

    engine = Engine(EngineConfig(timeout=5.0))
    layers = engine.warmup()
    if engine.fatal:
        raise SystemExit(f"microcoder sandbox unavailable: {engine.fatal}")

    def one(c):
        r = evaluate_response(f"```python\n{c['code']}\n```", c["ours"], engine=engine)
        return {"pass": r.score == 1.0, "verdict": r.verdict, "detail": r.detail[:160]}

    try:
        return _map(one, cases, jobs, progress, "microcoder"), layers
    finally:
        engine.close()


def run_prime(cases, jobs, progress):
    from verl.utils.reward_score import prime_code

    def one(c):
        res, meta = prime_code.compute_score(f"```python\n{c['code']}\n```", c["prime"], continuous=True)
        score = float(res)
        detail = ""
        if isinstance(meta, dict):
            detail = str(meta.get("error") or meta.get("error_message") or "")[:160]
        elif isinstance(meta, list) and meta:
            detail = f"first-10 re-run: {str(meta[0].get('error') or meta[0].get('error_message') or '')[:120]}"
        return {"pass": score == 1.0, "strict": res is True, "verdict": f"score={score:.2f}", "detail": detail}

    with rd.quiet_stdout():  # prime_code prints its errors to stdout; os.write(1, ...) programs reach fd 1
        return _map(one, cases, jobs, progress, "verl prime_code")


def _map(fn, cases, jobs, progress, name):
    from tqdm import tqdm

    out = [None] * len(cases)
    with ThreadPoolExecutor(jobs) as pool, tqdm(total=len(cases), desc=name, unit="case", disable=not progress,
                                                file=sys.stderr) as bar:
        futs = {pool.submit(fn, c): i for i, c in enumerate(cases)}
        for f in futs:
            i = futs[f]
            try:
                out[i] = f.result()
            except Exception as e:  # an evaluator raising counts as "not passed", reported
                out[i] = {"pass": False, "strict": False, "verdict": "raised",
                          "detail": f"{type(e).__name__}: {e}"[:160]}
            bar.update(1)
    return out


def report(cases, columns) -> dict:
    """Print agreement per evaluator (overall, per category, per set and kind) and every misjudged case."""
    summary = {}
    sets = ", ".join(f"{s} {sum(c['set'] == s for c in cases)}" for s in sorted({c["set"] for c in cases}))
    cats = ", ".join(f"{cat} {sum(c['category'] == cat for c in cases)}" for cat in ("correct", "rewrite", "mutant"))
    print(f"\n{len(cases)} labelled cases: {sets}; {cats}")
    names = list(columns)
    head = f"{'':<44}" + "".join(f"{n:>28}" for n in names)
    groups = [("ALL", lambda c: True)]
    groups += [(f"category {cat}", lambda c, cat=cat: c["category"] == cat) for cat in ("correct", "rewrite", "mutant")]
    groups += [(f"{s} {cat}", lambda c, s=s, cat=cat: c["set"] == s and c["category"] == cat)
               for s in sorted({c["set"] for c in cases}) for cat in ("correct", "rewrite", "mutant")]
    order = {("codecontests-stdin", k): i for i, k in enumerate(rd.STDIN_KINDS)}
    order.update({("leetcode-call", k): i for i, k in enumerate(rd.CALL_KINDS)})
    keys = sorted({(c["set"], c["kind"]) for c in cases}, key=lambda k: (k[0], order.get(k, 99)))
    groups += [(f"  {s.split('-')[0]}: {k}", lambda c, s=s, k=k: c["set"] == s and c["kind"] == k) for s, k in keys]
    print("\nagreement with the labels (correct / total)")
    print(head)
    for gname, pred in groups:
        idx = [i for i, c in enumerate(cases) if pred(c)]
        if not idx:
            continue
        row = f"{gname:<44}"
        for n in names:
            ok = sum(columns[n][i] == (cases[i]["label"] == "pass") for i in idx)
            row += f"{f'{ok}/{len(idx)}':>20} {100 * ok / len(idx):6.1f}%"
            summary.setdefault(n, {})[gname.strip()] = {"agree": ok, "total": len(idx)}
        print(row)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leetcode", type=int, default=40, help="LeetCode problems in the spread (0: none; default 40)")
    ap.add_argument("--no-code-contests", action="store_true", help="leave out the CodeContests stdin problems")
    ap.add_argument("--no-source-mutants", action="store_true", help="skip the flipped-comparison source mutants")
    ap.add_argument("--no-prime", action="store_true", help="score with microcoder only")
    ap.add_argument("--jobs", type=int, default=2, help="concurrent cases per evaluator (default 2)")
    ap.add_argument("--json", help="write every case's labels and verdicts to this file")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t0 = time.time()
    try:
        cases = build_cases(args, log)
    except rd.DataMissing as e:
        log(f"reward_accuracy: {e}")
        return 2
    log(f"{len(cases)} cases built in {time.time() - t0:.0f} s")
    ours, layers = run_ours(cases, args.jobs, not args.no_progress)
    log("microcoder sandbox: " + ", ".join(f"{k}={layers.get(k)}" for k in ("uid_drop", "seccomp", "landlock")))
    infra = [r for r in ours if r["verdict"] == "sandbox_error"]
    if infra:
        log(f"WARNING: {len(infra)} microcoder sandbox_error results (infrastructure, not judgements), e.g. "
            f"{infra[0]['detail']}")
    columns = {"microcoder": [r["pass"] for r in ours]}
    results = {"microcoder": ours}
    if not args.no_prime:
        prime = run_prime(cases, args.jobs, not args.no_progress)
        columns["prime_code (verl default)"] = [r["pass"] for r in prime]
        columns["prime_code strict"] = [r["strict"] for r in prime]
        results["prime_code"] = prime
    summary = report(cases, columns)
    for name, col in columns.items():
        res = results["microcoder" if name == "microcoder" else "prime_code"]
        bad = [i for i, c in enumerate(cases) if col[i] != (c["label"] == "pass")]
        print(f"\n{name}: {len(bad)} misjudged")
        for i in bad:
            c, r = cases[i], res[i]
            print(f"  [{c['set']}] {c['problem']:<38} {c['kind']:<22} label={c['label']:<4} "
                  f"got={'pass' if col[i] else 'fail'}  ({r['verdict']}: {r['detail'][:110]})")
    print(f"\ntotal {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            rows = [{k: v for k, v in c.items() if k not in ("code", "ours", "prime")}
                    | {name: res[i] for name, res in results.items()} for i, c in enumerate(cases)]
            json.dump({"summary": summary, "cases": rows}, f, indent=1)
    agree = summary["microcoder"]["ALL"]
    return 0 if agree["agree"] == agree["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
