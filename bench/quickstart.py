"""Wall time, peak memory and the pass-rate change of the CPU quickstart (``python -m microcoder_ext.trl.quickstart``).

    python bench/quickstart.py                    # the full quickstart (default settings), once
    python bench/quickstart.py --quick --json     # the 2-step smoke version, one JSON object

The quickstart runs in a child process (``sys.executable -m microcoder_ext.trl.quickstart``), so the numbers are
those of a user's run: wall time measured here around the child; peak memory = the child's peak resident set size
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``: the largest RSS of any waited-for descendant, i.e. the trainer
process; the sandbox workers are smaller); pass rates read from the report the child writes (held-back problems,
``eval_samples`` samples each, at the training temperature). Run it on the machine the README quotes (2 cores, no
GPU) with nothing else running: the tiny model's steps are short, so a busy machine changes the wall time a lot.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quickstart's --quick (2 GRPO steps)")
    p.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the quickstart's)")
    p.add_argument("--seed", type=int, default=0, help="(default 0)")
    p.add_argument("--output-dir", default=None, help="keep the quickstart's output here (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="mc-quickstart-bench-") as tmp:
        out = Path(args.output_dir or tmp)
        cmd = [sys.executable, "-m", "microcoder_ext.trl.quickstart", "--output-dir", str(out), "--seed",
               str(args.seed), "--no-progress"]
        if args.quick:
            cmd.append("--quick")
        if args.steps is not None:
            cmd += ["--steps", str(args.steps)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            print(f"quickstart failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
        report = json.loads((out / "report.json").read_text())

    rates = report["pass_rate_heldout"]
    ev = report["eval"]["after_grpo"]
    result = {
        "wall_s": round(wall, 1),
        "quickstart_reported_s": round(report["wall_time_s"], 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "pass_rate_before_grpo": rates["before_grpo"],
        "pass_rate_after_grpo": rates["after_grpo"],
        "pass_rate_change": rates["change"],
        "heldout_problems": ev["num_problems"],
        "samples_per_problem": ev["samples_per_problem"],
        "grpo_steps": report["settings"]["steps"],
        "timings_s": {k: round(v, 1) for k, v in report["timings"].items()},
    }
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            **{k: report["environment"].get(k) for k in ("torch", "trl", "transformers", "torch_threads")}}
    if args.json:
        print(json.dumps({**meta, **result}))
        return 0
    print(f"quickstart: {result['grpo_steps']} GRPO steps, {report['settings']['warm_steps']} warm-start steps, "
          f"{os.cpu_count()} CPUs, torch {meta['torch']}, trl {meta['trl']}")
    print(f"{'measurement':<34}{'value':>12}")
    print(f"{'wall time (s)':<34}{result['wall_s']:>12.1f}")
    for k, v in result["timings_s"].items():
        print(f"{'  ' + k:<34}{v:>12.1f}")
    print(f"{'peak memory, RSS (MiB)':<34}{result['peak_rss_mib']:>12.1f}")
    n = f"{result['heldout_problems']} x {result['samples_per_problem']}"
    print(f"{'held-back pass rate, warm start':<34}{result['pass_rate_before_grpo']:>12.3f}")
    print(f"{'  after GRPO':<34}{result['pass_rate_after_grpo']:>12.3f}")
    print(f"{'  change from GRPO':<34}{result['pass_rate_change']:>+12.3f}   ({n} samples each time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
