"""Time and host memory of judging one test result against its size, for hostile output shapes (1 KiB .. 16 MiB).

    python bench/judge_scaling.py                  # sizes 1 KiB, 16 KiB, 256 KiB, 4 MiB, 16 MiB (the default output cap)
    python bench/judge_scaling.py --json out.json

Only the supervisor's side is measured: ``microcoder_ext.reward.judge.judge`` on a worker result message whose
payload is the output as the sandbox delivers it (``bytearray``, undecoded). Every shape is a WRONG answer for a
short expected output (the case a policy produces and the host must reject cheaply), except ``correct_long`` (a
correct answer as long as the output: judged in full). Reported per shape and size: the median time of 3 runs
(without tracing), the peak of Python allocations during one run (``tracemalloc``) in MiB and as a multiple of the
output size; then the time growth from 4 MiB to 16 MiB (linear: ~4x, quadratic: ~16x). Goals: every comparison
linear (or n log n), memory within 4x the output cap.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import tracemalloc

from microcoder_ext.reward.ground_truth import parse_ground_truth
from microcoder_ext.reward.judge import judge

KiB, MiB = 1 << 10, 1 << 20


def _stdin(expected: str, **opts):
    return parse_ground_truth({"inputs": [""], "outputs": [expected], **opts}), "stdout"


def _call(expected, **opts):
    return parse_ground_truth({"fn_name": "f", "inputs": [[1]], "outputs": [expected], **opts}), "value"


def _fill(unit: bytes, size: int, tail: bytes = b"") -> bytearray:
    return bytearray(unit * max(1, (size - len(tail)) // len(unit)) + tail)


#: shape -> (suite, field, output of a given size)
SHAPES = {
    "newlines": (lambda: _stdin("3\n"), lambda n: _fill(b"\n", n)),
    "digits_then_letter": (lambda: _stdin("2.5\n"), lambda n: _fill(b"1", n, b"x")),
    "many_tokens": (lambda: _stdin("1 2 3\n"), lambda n: _fill(b"1 ", n)),
    "invalid_bytes": (lambda: _stdin("ok\n"), lambda n: _fill(b"\xff\xfe", n)),
    "one_long_line_unordered": (lambda: _stdin("a\nb\n", unordered=True), lambda n: _fill(b"ab ", n)),
    "many_lines_line_sensitive": (lambda: _stdin("1 2\n3\n", line_sensitive=True), lambda n: _fill(b"7 7\n", n)),
    "correct_long": (None, None),  # built per size below
    "json_empty_lists": (lambda: _call([[], [], []]), lambda n: bytearray(b"[" + b"[]," * (n // 3 - 1) + b"[]]")),
    "json_deep_nesting": (lambda: _call([[1]]), lambda n: bytearray(b"[" * (n // 2) + b"]" * (n // 2))),
    "json_long_string": (lambda: _call("abc"), lambda n: bytearray(b'"' + b"\\u00e9" * ((n - 2) // 6) + b'"')),
    "json_ints_unordered_wrong": (lambda: _call(list(range(8000)), unordered=True),
                                  lambda n: bytearray(json.dumps(list(range(1, n // 6 + 1))).encode())),
    "json_floats_unordered": (lambda: _call([0.5] * 8000, unordered=True),
                              lambda n: bytearray(json.dumps([0.5] * max(1, n // 5 - 1) + [0.6]).encode())),
    "json_huge_integer": (lambda: _call(5), lambda n: _fill(b"9", n)),
}


def _case(shape: str, size: int):
    if shape == "correct_long":
        tokens = " ".join(str(i % 1000) for i in range(size // 4))
        suite, field = _stdin(tokens + "\n")
        return suite, field, bytearray((tokens.replace(" ", "  ") + "\n").encode())
    make_suite, make_out = SHAPES[shape]
    suite, field = make_suite()
    return suite, field, make_out(size)


def _judge_once(suite, field, out) -> tuple[float, bool]:
    msg = {"op": "result", "i": 0, "status": "ok", field: out}
    t0 = time.perf_counter()
    ok, verdict, detail = judge(suite.tests[0], msg, suite)
    return time.perf_counter() - t0, ok


def measure(shape: str, size: int, repeats: int = 3) -> dict:
    suite, field, out = _case(shape, size)
    times, ok = [], None
    for _ in range(repeats):
        t, ok = _judge_once(suite, field, out)
        times.append(t)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    _judge_once(suite, field, out)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return {"shape": shape, "size": len(out), "passed": ok, "median_s": statistics.median(times),
            "peak_mib": peak / MiB, "peak_over_size": peak / max(len(out), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024,16384,262144,4194304,16777216", help="output sizes in bytes")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated (default: all)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    print(f"{'shape':<28}{'size':>10}{'ok':>6}{'time ms':>11}{'peak MiB':>10}{'peak/size':>10}")
    for shape in [s for s in args.shapes.split(",") if s]:
        for size in sizes:
            r = measure(shape, size)
            rows.append(r)
            print(f"{shape:<28}{r['size']:>10}{str(r['passed']):>6}{r['median_s'] * 1e3:>11.2f}"
                  f"{r['peak_mib']:>10.2f}{r['peak_over_size']:>10.2f}", flush=True)
    print("\ntime growth 4 MiB -> 16 MiB (linear ~4x):")
    worst_mem = 0.0
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["size"] // MiB: r for r in rows if r["shape"] == shape and r["size"] >= 4 * MiB}
        if 4 in by and 16 in by:
            g = by[16]["median_s"] / max(by[4]["median_s"], 1e-9)
            print(f"  {shape:<28}{g:6.2f}x")
        worst_mem = max(worst_mem, max(r["peak_over_size"] for r in rows if r["shape"] == shape and
                                       r["size"] >= 4 * MiB) if any(r["size"] >= 4 * MiB for r in rows) else 0)
    print(f"largest peak memory / output size at >= 4 MiB: {worst_mem:.2f} (goal <= 4)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": platform.python_version(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
