"""Throughput of the MicroCoder code reward vs verl 0.9.1 ``prime_code``, side by side in one run, one call at a time.

Workloads (built at run time from bench/data by bench/reward_data.py; every completion is judged on all of
its problem's tests, the same code and tests for both evaluators):
  * leetcode: LeetCodeDataset v0.2.0 train (newfacade/LeetCodeDataset, MIT), call-based, each problem with its
    own 1-5 tests (problems with linked-list/tree arguments, which prime_code cannot build, and any-order
    answers are left out).
  * leetcode-100: the same problems with their test list CYCLED to ~100 tests (tests 1..n-1 repeated, the last
    test once at the end): the data has only a few tests per problem, so these are repeats, not new tests.
  * codecontests: 16 CodeContests stdin problems (DeepMind CodeContests, CC-BY-4.0, via SandboxFusion,
    Apache-2.0) with our reference solutions (bench/data), all 35-331 tests each; the 3 problems whose answers
    are not unique (prime_code has no checker) are left out.
Each workload runs twice: all-correct (reference solutions) and mixed (every other completion is the reference
wrapped to be wrong ONLY on its LAST test).

Evaluators: microcoder (``microcoder_ext.reward``, default engine, workers = cores: call-based tests one process per
completion, stdin tests one process per test); microcoder, process per test (LeetCode only: the same engine with
``call_process="test"``, a fresh process for every call-based test, which is what the engine did before); bare
in-process (LeetCode only:
the same solution compiled, exec'd and called in this process with no sandbox and no process at all, results compared
by the same comparison: the floor any evaluator has; and bare fork: a small pre-started process forks one child per
completion that runs it with no sandbox layer (it pre-imports what our workers pre-import), the cost of process
isolation alone; bare fork per test (CodeContests only): the same server forks one child per TEST, which runs the
program on that test's input, no sandbox layer: the floor of a fresh process per stdin test; all three printed as
"floor" slowdowns); verl prime_code as verl runs it
by default (``default_compute_score`` -> ``prime_code.compute_score(continuous=True)``: one process for all tests,
on a failure a re-run of only the FIRST 10 tests one by one; pass = score 1.0); prime_code strict
(``continuous=False``: the first all-tests run only; verl 0.9.1 raises UnboundLocalError on failures, counted as 0).
Reported: completions/s, CPU ms per completion (this process and every descendant, the sandboxed processes included;
/proc utime + stime of the living and of the reaped), tests/s (tests of the judged problems per second), p50/p99
latency per completion,
agreement with the labels, and peak memory: proportional set size (PSS) of this process plus all of its
descendants, sampled every 20 ms (short-lived per-test children can be missed between samples) in a separate,
untimed pass over the first ``--memory-items`` completions: reading every process's PSS walks its page tables
under its memory-map lock, which a fork needs too, so a sampler running in the timed pass slowed the evaluator
that forks most (ours: 0.97x prime_code with it, 1.08x without, CodeContests all-correct, one run on 2026-12-04).
``--repeats R`` times each evaluator R times per workload, the evaluators taking turns, and reports the medians.

Why the previous version of this bench showed 99 %/97 % agreement for BOTH evaluators: labelling bugs, not
misjudgements. (1) word-ladder-ii accepts its answer in any order, but its tests were given as exact, so the
correct reference "failed" everywhere; (2) the wrong-on-last-test mutant compared the arguments with the last
test's AFTER calling the method, and methods that sort or modify their arguments in place (plus-one, h-index,
number-of-islands, ...) no longer matched, so those "mutants" returned correct answers. Fixed: any-order
problems are excluded and the arguments are keyed before the call.

  python bench/reward_throughput.py [--leetcode 100] [--cycled 40] [--cycle-size 100] [--no-code-contests]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reward_data as rd  # noqa: E402

from microcoder_ext import process_tree  # noqa: E402

PER_TEST = "microcoder, process per test"
BARE = "bare in-process (no sandbox)"
BARE_FORK = "bare fork (no sandbox)"
BARE_FORK_TEST = "bare fork per test (no sandbox)"
#: what both fork servers run first: the modules our sandbox workers pre-import (argv[1]), /dev/null, and a reader
#: of a child's result pipe to its end
_SERVER_PRELUDE = r"""
import json, os, sys
for name in json.loads(sys.argv[1]):  # the modules our sandbox workers pre-import: same start for both
    try:
        __import__(name)
    except ImportError:
        pass
devnull = os.open(os.devnull, os.O_WRONLY)


def read_all(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)
"""
#: the "bare fork" reference: per request line {code, fn, inputs}, fork a child that runs the solution, answer one
#: line with the JSON list of return values ({"error": ...} if it raised)
FORK_SERVER = _SERVER_PRELUDE + r"""
for line in sys.stdin.buffer:
    job = json.loads(line)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(devnull, 1)
        try:
            g = {"__name__": "__main__"}
            exec(compile(job["code"], "solution.py", "exec"), g)
            fn = getattr(g["Solution"](), job["fn"])
            data = json.dumps([fn(**kw) for kw in job["inputs"]]).encode()
        except BaseException as e:
            data = json.dumps({"error": repr(e)}).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
        os._exit(0)
    os.close(w)
    data = read_all(r)
    os.waitpid(pid, 0)
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()
"""
#: the floor of a fresh process per stdin test: per test one fork of a small pre-started server, the test's input
#: on the child's stdin (a memfd), its stdout in a pipe; the program compiled once per completion, the modules our
#: launcher imports when a program names them imported likewise before the forks; no sandbox layer
FORK_SERVER_STDIN = _SERVER_PRELUDE + r"""
for line in sys.stdin.buffer:
    job = json.loads(line)
    for name in json.loads(sys.argv[2]):  # what our launcher imports when the program names it
        if name in job["code"] and name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                pass
    try:
        code = compile(job["code"], "solution.py", "exec")
    except BaseException as e:
        sys.stdout.buffer.write(json.dumps({"error": repr(e)}).encode() + b"\n")
        sys.stdout.buffer.flush()
        continue
    outs = []
    for data in job["inputs"]:
        fd = os.memfd_create("stdin")
        os.write(fd, data.encode())
        os.lseek(fd, 0, 0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.dup2(fd, 0)
            os.dup2(w, 1)
            os.dup2(devnull, 2)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            try:
                exec(code, {"__name__": "__main__"})
            except BaseException:  # SystemExit included: the output is what counts
                pass
            try:
                sys.stdout.flush()
            finally:
                os._exit(0)
        os.close(w)
        os.close(fd)
        out = read_all(r)
        os.waitpid(pid, 0)
        outs.append(out.decode(errors="replace"))
    sys.stdout.buffer.write(json.dumps(outs).encode() + b"\n")
    sys.stdout.buffer.flush()
"""
CC_SEVERAL_ANSWERS = ("1025_B", "1090_C", "1214_H")  # need a checker; prime_code cannot judge other valid answers


# --- workloads -----------------------------------------------------------------------------------------------
def leetcode_items(problems, cycle_size: int | None):
    """(correct items, mutant items): dicts with code, ours, prime (ground truths), n (tests)."""
    correct, mutants = [], []
    for p in problems:
        idx = list(range(len(p["kwargs"])))
        if cycle_size:
            idx = rd.cycled_index(len(idx), cycle_size)
            last = rd.canon(p["kwargs"][-1])
            if idx is None or any(rd.canon(kw) == last for kw in p["kwargs"][:-1]):
                continue  # the last test must be distinct for "wrong only on the last test"
        ours, prime = json.dumps(rd.lc_ground_truth(p, idx)), json.dumps(rd.lc_prime_truth(p, idx))
        last_args = list(p["kwargs"][idx[-1]].values())
        base = {"id": p["id"], "ours": ours, "prime": prime, "n": len(idx)}
        correct.append({**base, "code": p["code"], "want": True})
        mutants.append({**base, "code": rd.call_program(p["code"], p["fn"], "last_test", last_args), "want": False})
    return correct, mutants


def cc_items(problems):
    correct, mutants = [], []
    for p in problems:
        if p["name"].startswith(CC_SEVERAL_ANSWERS):
            continue
        base = {"id": p["name"], "ours": json.dumps(rd.cc_ground_truth(p)), "prime": json.dumps(rd.cc_prime_truth(p)),
                "n": len(p["tests"])}
        correct.append({**base, "code": p["solution"], "want": True})
        mutants.append({**base, "code": rd.stdin_program(p["solution"], "last_test", p["tests"][-1][0],
                                                          several_answers=bool(p.get("checker"))), "want": False})
    return correct, mutants


def mixed(correct, mutants):
    return [c if i % 2 == 0 else m for i, (c, m) in enumerate(zip(correct, mutants))]


# --- memory and CPU ----------------------------------------------------------------------------------------------
def _tree_pss_mib(root: int) -> tuple[float, float]:
    """(PSS of ``root`` and its descendants, PSS of the descendants alone), MiB."""
    kids = sum(process_tree.pss_bytes(p) for p in process_tree.descendants(root)) / 2**20
    return process_tree.pss_bytes(root) / 2**20 + kids, kids


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and its descendants, reaped ones included (user + system time of
    each living process and of the children it has reaped, /proc/<pid>/stat; the sandbox's fork server reaps every
    sandboxed process, orphans included)."""
    return sum(process_tree.cpu_seconds(p) for p in process_tree.tree(os.getpid()))


def measure(fn, items) -> dict:
    """One timed pass (no memory sampling: see the module docstring): total seconds, latencies, agreement, and the
    CPU seconds of this process and all of its descendants over the pass."""
    lat, agree = [], 0
    cpu0 = tree_cpu_s()
    t0 = time.perf_counter()
    for it in items:
        s = time.perf_counter()
        got = fn(it)
        lat.append(time.perf_counter() - s)
        agree += got == it["want"]
    total = time.perf_counter() - t0
    return {"total_s": total, "lat": lat, "agree": agree / len(items), "cpu_s": tree_cpu_s() - cpu0}


def summarize(passes: list[dict], items) -> dict:
    """The row of one evaluator from its timed passes: the median pass's throughput, latencies of all passes."""
    total = statistics.median(p["total_s"] for p in passes)
    lat = sorted(x for p in passes for x in p["lat"])
    cpu = statistics.median(p["cpu_s"] for p in passes)
    return {"completions_s": len(items) / total, "tests_s": sum(it["n"] for it in items) / total,
            "cpu_ms": 1000 * cpu / len(items),
            "p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "total_s": total, "totals_s": [p["total_s"] for p in passes], "agree": min(p["agree"] for p in passes),
            "n": len(items)}


def measure_memory(fn, items) -> dict:
    """Peak PSS (MiB) while judging ``items`` (untimed)."""
    me = os.getpid()
    with process_tree.PeakSampler(lambda: _tree_pss_mib(me)[0], 0.02) as total, \
            process_tree.PeakSampler(lambda: _tree_pss_mib(me)[1], 0.02) as children:
        for it in items:
            fn(it)
    return {"mem_total": total.stop(), "mem_children": children.stop()}


def _pass_range(ours: dict, theirs: dict) -> str:
    """With several passes: the range of the per-pass ratios (pass k of ours against pass k of theirs)."""
    pairs = list(zip(ours["totals_s"], theirs["totals_s"]))
    if len(pairs) < 2:
        return ""
    ratios = sorted(t / o for o, t in pairs)
    return f"; per pass {ratios[0]:.2f}-{ratios[-1]:.2f}x"


BASELINE_HELPER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from microcoder_ext.reward import Engine, EngineConfig, evaluate_response
assert sys.modules["microcoder_ext"].__file__.startswith(sys.argv[1]), sys.modules["microcoder_ext"].__file__
engine = Engine(EngineConfig(timeout=5.0))
engine.warmup()
out = sys.stdout
sys.stdout = sys.stderr
for line in sys.stdin:
    job = json.loads(line)
    r = evaluate_response(job["response"], job["gt"], engine=engine)
    out.write(json.dumps({"score": r.score, "verdict": r.verdict}) + "\n")
    out.flush()
engine.close()
"""


class _Baseline:
    """The reward of another commit, in a helper process that imports it from a temporary git worktree."""

    def __init__(self, ref: str):
        import tempfile

        root = Path(__file__).resolve().parents[1]
        self.tmp = tempfile.mkdtemp(prefix="mc-bench-baseline-")
        self.tree = os.path.join(self.tmp, "tree")
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", self.tree, ref], check=True,
                       capture_output=True)
        self.root = root
        self.proc = subprocess.Popen([sys.executable, "-c", BASELINE_HELPER, self.tree], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def score(self, it) -> bool:
        self.proc.stdin.write(json.dumps({"response": f"```python\n{it['code']}\n```", "gt": it["ours"]}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["score"] == 1.0

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        subprocess.run(["git", "-C", str(self.root), "worktree", "remove", "--force", self.tree], capture_output=True)
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leetcode", type=int, default=100, help="LeetCode problems, own tests (default 100; 0: skip)")
    ap.add_argument("--cycled", type=int, default=40, help="LeetCode problems with tests cycled (default 40; 0: skip)")
    ap.add_argument("--cycle-size", type=int, default=100, help="tests per problem in the cycled workload")
    ap.add_argument("--no-code-contests", action="store_true")
    ap.add_argument("--no-strict", action="store_true", help="skip the prime_code continuous=False rows")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--repeats", type=int, default=1,
                    help="timed passes per evaluator and workload, the evaluators taking turns; medians reported")
    ap.add_argument("--memory-items", type=int, default=20,
                    help="completions of the untimed memory pass per row (default 20; 0: no memory pass)")
    ap.add_argument("--baseline", metavar="GIT_REF",
                    help="also measure the reward of this commit (e.g. the previous engine), checked out in a "
                         "temporary git worktree and run in a helper process on the same workloads: row "
                         "'microcoder @REF' (its calls cross one extra pipe, ~0.1 ms each)")
    args = ap.parse_args()

    from verl.utils.reward_score import prime_code

    from microcoder_ext.reward import Engine, EngineConfig, evaluate_response
    from microcoder_ext.reward.compare import compare_stdout, compare_values

    try:
        lc = rd.leetcode_problems(limit=max(args.leetcode, args.cycled))
        cc = [] if args.no_code_contests else rd.code_contests()
    except rd.DataMissing as e:
        print(f"reward_throughput: {e}", file=sys.stderr)
        return 2
    workloads = []
    if args.leetcode:
        c, m = leetcode_items(lc[:args.leetcode], None)
        workloads.append(("leetcode (own 1-5 tests)", c, m))
    if args.cycled:
        c, m = leetcode_items(lc[:args.cycled], args.cycle_size)
        workloads.append((f"leetcode-{args.cycle_size} (tests cycled)", c, m))
    if cc:
        c, m = cc_items(cc)
        workloads.append(("codecontests stdin (35-331 tests)", c, m))

    engine = Engine(EngineConfig(timeout=5.0))
    layers = engine.warmup()
    if engine.fatal:
        print(f"microcoder sandbox unavailable: {engine.fatal}", file=sys.stderr)
        return 2
    print(f"microcoder: {engine.size} workers; sandbox " + ", ".join(f"{k}={layers.get(k)}" for k in
                                                                     ("uid_drop", "seccomp", "landlock")))
    for name, c, _ in workloads:
        print(f"  {name}: {len(c)} problems, {sum(it['n'] for it in c)} tests per pass")

    infra = []  # microcoder results that are infrastructure failures (they would invalidate the timings)

    def ours(it):
        r = evaluate_response(f"```python\n{it['code']}\n```", it["ours"], engine=engine)
        if r.verdict == "sandbox_error":
            infra.append(f"{it['id']}: {r.detail[:200]}")
        return r.score == 1.0

    per_test_engine = None

    def ours_per_test(it):
        """Ours with ``call_process="test"``: every call-based test in a fresh process (the engine before
        one process per submission)."""
        nonlocal per_test_engine
        if per_test_engine is None:
            per_test_engine = Engine(EngineConfig(timeout=5.0, call_process="test"))
            per_test_engine.warmup()
        r = evaluate_response(f"```python\n{it['code']}\n```", it["ours"], engine=per_test_engine)
        if r.verdict == "sandbox_error":
            infra.append(f"{it['id']} (a process per test): {r.detail[:200]}")
        return r.score == 1.0

    def bare_in_process(it):
        """The floor: the same solution run in this process, no sandbox, no process, no pipe: compile, exec,
        one call per test, results compared with the same comparison as ours (unsafe: reference only)."""
        g = {"__name__": "__main__"}
        exec(compile(it["code"], "solution.py", "exec"), g)
        truth = json.loads(it["ours"])
        fn = getattr(g["Solution"](), truth["fn_name"])
        return all(compare_values(exp, fn(**kw))[0] for kw, exp in zip(truth["inputs"], truth["outputs"]))

    from microcoder_ext.reward.sandbox.child import ON_DEMAND_IMPORT
    from microcoder_ext.reward.sandbox.worker import JUDGE_MODULES, STDLIB_PREIMPORT

    preimport = json.dumps(list(STDLIB_PREIMPORT) + list(JUDGE_MODULES))
    fork_server = subprocess.Popen([sys.executable, "-I", "-c", FORK_SERVER, preimport], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, env={"PYTHONINTMAXSTRDIGITS": "0", "PATH": os.defpath})

    def bare_fork(it):
        """Process isolation and nothing else: a small pre-started server forks one child per completion, which
        runs the solution (no sandbox layer, no limits) and returns the values through a pipe; compared here."""
        truth = json.loads(it["ours"])
        fork_server.stdin.write(json.dumps({"code": it["code"], "fn": truth["fn_name"],
                                            "inputs": truth["inputs"]}).encode() + b"\n")
        fork_server.stdin.flush()
        got = json.loads(fork_server.stdout.readline())
        return isinstance(got, list) and all(compare_values(exp, v)[0] for v, exp in zip(got, truth["outputs"]))

    stdin_fork_server = None

    def bare_fork_per_test(it):
        """The floor of a fresh process per stdin test: a small pre-started server forks one child per test (no
        sandbox layer, no limit, no time-out), which runs the program on the test's input; outputs compared here
        by the same comparison as ours."""
        nonlocal stdin_fork_server
        if stdin_fork_server is None:
            stdin_fork_server = subprocess.Popen([sys.executable, "-I", "-c", FORK_SERVER_STDIN, preimport,
                                                  json.dumps(list(ON_DEMAND_IMPORT))],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                 env={"PYTHONINTMAXSTRDIGITS": "0", "PATH": os.defpath})
        tests = json.loads(it["ours"])["tests"]
        stdin_fork_server.stdin.write(json.dumps({"code": it["code"],
                                                  "inputs": [t["input"]["stdin"] for t in tests]}).encode() + b"\n")
        stdin_fork_server.stdin.flush()
        got = json.loads(stdin_fork_server.stdout.readline())
        return isinstance(got, list) and all(compare_stdout(t["output"]["stdout"], out)[0]
                                             for t, out in zip(tests, got))

    def prime_default(it):
        res, _ = prime_code.compute_score(f"```python\n{it['code']}\n```", it["prime"], continuous=True)
        return float(res) == 1.0

    def prime_strict(it):
        try:
            res, _ = prime_code.compute_score(f"```python\n{it['code']}\n```", it["prime"], continuous=False)
        except UnboundLocalError:  # verl 0.9.1: continuous=False on a failing solution raises
            return False
        return res is True

    baseline = _Baseline(args.baseline) if args.baseline else None
    evaluators = [("microcoder", ours), ("prime_code (verl default)", prime_default)]
    if baseline is not None:
        evaluators.insert(1, (f"microcoder @{args.baseline}", baseline.score))
    if not args.no_strict:
        evaluators.append(("prime_code strict", prime_strict))
    rows = []
    for wl, correct, mutants in workloads:
        for mode, items in (("all-correct", correct), ("mixed: half wrong on LAST test", mixed(correct, mutants))):
            extra = ([(PER_TEST, ours_per_test), (BARE, bare_in_process), (BARE_FORK, bare_fork)]
                     if wl.startswith("leetcode") else [(BARE_FORK_TEST, bare_fork_per_test)])
            passes = {ev: [] for ev, _ in evaluators + extra}
            for rep in range(args.repeats):
                for ev, fn in evaluators + extra:
                    with rd.quiet_stdout():  # prime_code prints errors to stdout
                        passes[ev].append(measure(fn, items))
                    print(f"  measured {wl} / {mode} / {ev} (pass {rep + 1}/{args.repeats}): "
                          f"{passes[ev][-1]['total_s']:.1f} s", file=sys.stderr, flush=True)
            for ev, fn in evaluators + extra:
                r = summarize(passes[ev], items)
                mem = {"mem_total": float("nan"), "mem_children": float("nan")}
                if args.memory_items > 0:
                    with rd.quiet_stdout():
                        mem = measure_memory(fn, items[:args.memory_items])
                r.update(mem, workload=wl, mode=mode, evaluator=ev)
                rows.append(r)
    engine.close()
    if per_test_engine is not None:
        per_test_engine.close()
    for server in (fork_server, stdin_fork_server):
        if server is not None:
            server.stdin.close()
            server.wait()
    if baseline is not None:
        baseline.close()
    if infra:
        print(f"\nWARNING: {len(infra)} microcoder sandbox_error results (timings invalid), e.g. {infra[0]}")

    print(f"\n{'workload':<36}{'mode':<32}{'evaluator':<30}{'compl/s':>9}{'CPU ms':>8}{'tests/s':>10}{'p50 ms':>9}"
          f"{'p99 ms':>9}{'agree':>8}{'PSS MiB':>9}{'child':>7}")
    for r in rows:
        print(f"{r['workload']:<36}{r['mode']:<32}{r['evaluator']:<30}{r['completions_s']:>9.1f}{r['cpu_ms']:>8.1f}"
              f"{r['tests_s']:>10.0f}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}{100 * r['agree']:>7.1f}%"
              f"{r['mem_total']:>9.0f}{r['mem_children']:>7.0f}")
    print("(CPU ms: CPU time per completion of this process and all of its descendants, the sandboxes included, "
          "median pass)")
    def selections():
        """(workload, mode, {evaluator: row}, our row) for every workload and mode, in order."""
        for wl, _, _ in workloads:
            for mode in ("all-correct", "mixed: half wrong on LAST test"):
                sel = {r["evaluator"]: r for r in rows if r["workload"] == wl and r["mode"] == mode}
                yield wl, mode, sel, sel["microcoder"]

    print("\nratios microcoder / prime_code (and / the baseline commit; completions per second; p50 latency "
          "theirs/ours):")
    for wl, mode, sel, ours_r in selections():
        parts = [f"vs {ev.split(' ', 1)[1]}: {ours_r['completions_s'] / r['completions_s']:.2f}x "
                 f"(p50 {r['p50_ms'] / ours_r['p50_ms']:.1f}x{_pass_range(ours_r, r)})" for ev, r in sel.items()
                 if ev not in ("microcoder", BARE, BARE_FORK, BARE_FORK_TEST)]
        print(f"  {wl:<36}{mode:<32}" + "; ".join(parts))
    print("\nfloor: microcoder time / bare time (same completions; 1.0 = no overhead at all):")
    for wl, mode, sel, ours_r in selections():
        parts = [f"vs {ev.split(' (')[0]}: {ours_r['total_s'] / sel[ev]['total_s']:.1f}x "
                 f"(p50 {ours_r['p50_ms']:.2f} ms vs {sel[ev]['p50_ms']:.2f} ms)"
                 for ev in (BARE, BARE_FORK, BARE_FORK_TEST)
                 if ev in sel]
        if parts:
            print(f"  {wl:<36}{mode:<32}" + "; ".join(parts))
    print(f"(PSS MiB: peak of this process + descendants, in an untimed pass over {args.memory_items} completions; "
          "child: descendants alone. Both evaluators share this process, which has imported verl.)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if infra else 0


if __name__ == "__main__":
    sys.exit(main())
