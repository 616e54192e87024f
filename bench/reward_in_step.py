"""The code reward inside real training steps, a process per test against a process per sample: ``microcoder demo``
(verl's own ``main_ppo`` with ``+recipe=microcoder``, the real vLLM, a seed per request) run twice with one seed,
once with ``MICROCODER_REWARD_CALL_PROCESS=test`` (a fresh process per test of a call-based program: the engine
before issue 33) and once with the default (``submission``: one process per sample, as LeetCode's judge runs a
submission). Both runs sample the same completions (per-request seeds), so the reward judges the same programs:
checked, every step's verdict counts must be equal, or the pair is reported as not comparable.

    bash compat/in_venv.sh verl python bench/reward_in_step.py                        # seed 0, 5 steps, 2 pairs
    bash compat/in_venv.sh verl python bench/reward_in_step.py --steps 3 --pairs 1 --json out.json

Per step, the reward's seconds as ``microcoder smoke`` reports them (``smoke_report.json``, ``times.reward``: the sum
of the seconds of the step's reward calls; verl's agent loop scores each sample as its generation ends, so the calls
overlap one another and the generation, and the sum can exceed the step's generation time) and the step's seconds
(``timing_s/step``, verl's own). Reported: per pair and mode the totals over the steps, and the ratio process per
test / process per sample. The two modes alternate in order from one pair to the next. Each run is a full, separate
process, ~2-3 minutes on 2 cores for 5 steps (the tiny model's warm start is cached after the first run); run it on
a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"test": "a process per test", "submission": "a process per sample (default)"}


def run_demo(mode: str, seed: int, steps: int, out: Path) -> dict:
    """One ``microcoder demo`` run with ``MICROCODER_REWARD_CALL_PROCESS=mode``; returns its per-step rows
    ``{"reward_s", "step_s", "verdicts"}`` (or raises with the run's output tail)."""
    env = {**os.environ, "MICROCODER_REWARD_CALL_PROCESS": mode}
    cmd = [sys.executable, "-m", "microcoder_ext.cli", "demo", "--seed", str(seed), "--steps", str(steps),
           "--test-freq", str(steps), "--output-dir", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    smoke = out / "smoke_report.json"
    if proc.returncode != 0 or not smoke.is_file():
        raise RuntimeError(f"{' '.join(cmd)} (MICROCODER_REWARD_CALL_PROCESS={mode}) failed:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    steps_rec = json.loads(smoke.read_text())["steps"]
    rows = [{"reward_s": s["times"].get("reward"), "step_s": s["framework"].get("step_s"),
             "verdicts": s.get("verdicts")} for s in steps_rec]
    return {"mode": mode, "wall_s": round(wall, 1), "steps": rows}


def summarize(pair: dict[str, dict]) -> dict:
    before, after = pair["test"], pair["submission"]
    same = [a["verdicts"] for a in before["steps"]] == [b["verdicts"] for b in after["steps"]]
    total = {m: round(sum(r["reward_s"] or 0.0 for r in pair[m]["steps"]), 3) for m in MODES}
    out = {"same_samples": same, "reward_s": total, "wall_s": {m: pair[m]["wall_s"] for m in MODES},
           "verdicts": [r["verdicts"] for r in after["steps"]]}
    if same and total["submission"] > 0:
        out["ratio"] = round(total["test"] / total["submission"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="the demo's seed (default %(default)s)")
    p.add_argument("--steps", type=int, default=5, help="training steps per run (default %(default)s)")
    p.add_argument("--pairs", type=int, default=2, help="pairs of runs, the order alternating (default %(default)s)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--workdir", help="keep the runs here (default: a temporary directory, removed)")
    args = p.parse_args(argv)
    if min(args.steps, args.pairs) < 1:
        p.error("--steps and --pairs must be >= 1")
    results = []
    with tempfile.TemporaryDirectory(prefix="microcoder-reward-in-step-") as tmp:
        work = Path(args.workdir or tmp)
        for i in range(args.pairs):
            order = list(MODES) if i % 2 == 0 else list(MODES)[::-1]
            pair = {}
            for n, mode in enumerate(order, 1):
                print(f"pair {i + 1}/{args.pairs}, run {n}/2: {MODES[mode]} ...", file=sys.stderr, flush=True)
                pair[mode] = run_demo(mode, args.seed, args.steps, work / f"pair{i + 1}-{mode}")
            row = {"pair": i + 1, "order": order, **summarize(pair), "runs": pair}
            results.append(row)
            print(f"pair {i + 1}: reward seconds over {args.steps} steps: process per test "
                  f"{row['reward_s']['test']:.2f}, per sample {row['reward_s']['submission']:.2f}"
                  + (f", ratio {row['ratio']:.2f}x" if "ratio" in row else ", NOT COMPARABLE (samples differ)"),
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": args.seed, "steps": args.steps, "pairs": results}, indent=1))
    return 0 if all(r["same_samples"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
