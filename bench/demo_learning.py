"""Does the demo learn, on every seed? ``microcoder demo`` (verl's own ``main_ppo``, real vLLM) over seeds, with
``+recipe=microcoder`` and ``+recipe=grpo_baseline`` side by side, and the TRL quickstart on the same task.

    bash compat/in_venv.sh verl python bench/demo_learning.py                      # seeds 0-4, both recipes
    bash compat/in_venv.sh verl python bench/demo_learning.py --seeds 0,1 --recipes microcoder --json out.json
    bash compat/in_venv.sh trl python bench/demo_learning.py --trl                 # the TRL quickstart, seeds 0-4

Per run: the held-back pass rate before RL (verl's validation at step 0, after the warm start) and after the last
step, and the training reward (mean of the first ten steps and of the last ten). The learning bar of the demo
(issue 23): held-back change >= +0.20 on average and >= +0.10 on every seed, training reward +0.15. Every run is
a full, separate process (``microcoder demo`` / ``python -m microcoder_ext.trl.quickstart``); nothing is tuned per
recipe. Each verl run takes ~5-7 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

BAR = {"heldout_mean": 0.20, "heldout_each": 0.10, "reward": 0.15}


def _run(cmd: list[str], out: Path) -> tuple[dict | None, dict]:
    """Run one demo process; (its report.json, or None if it failed; the row so far: ok, wall_s, error)."""
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, "--output-dir", str(out)], capture_output=True, text=True)
    report = out / "report.json"
    row = {"wall_s": round(time.monotonic() - t0, 1)}
    if proc.returncode != 0 or not report.is_file():
        return None, {**row, "ok": False, "error": (proc.stdout + proc.stderr)[-2000:]}
    return json.loads(report.read_text()), {**row, "ok": True}


def run_verl(recipe: str, seed: int, work: Path, extra: list[str]) -> dict:
    data, row = _run([sys.executable, "-m", "microcoder_ext.cli", "demo", "--recipe", recipe, "--seed", str(seed),
                      *extra], work / f"{recipe}_seed{seed}")
    return row if data is None else {"ok": data["ok"], "wall_s": data["wall_s"], **data["summary"]}


def run_trl(seed: int, work: Path, extra: list[str]) -> dict:
    data, row = _run([sys.executable, "-m", "microcoder_ext.trl.quickstart", "--seed", str(seed), "--no-progress",
                      *extra], work / f"trl_seed{seed}")
    return row if data is None else {**row, "wall_s": round(data["wall_time_s"], 1), **data["summary"]}


def verdict(rows: list[dict]) -> dict:
    """The bar over a recipe's seeds."""
    held = [r["heldout_change"] for r in rows if r.get("heldout_change") is not None]
    rew = [r["reward_change"] for r in rows if r.get("reward_change") is not None]
    out = {"seeds": len(rows), "ok_runs": sum(bool(r.get("ok")) for r in rows)}
    if held:
        out.update(heldout_mean=round(statistics.fmean(held), 4), heldout_min=round(min(held), 4),
                   heldout_sd=round(statistics.pstdev(held), 4))
    if rew:
        out.update(reward_mean=round(statistics.fmean(rew), 4), reward_min=round(min(rew), 4))
    out["meets_bar"] = bool(held and rew and len(held) == len(rows) and out["heldout_mean"] >= BAR["heldout_mean"]
                            and out["heldout_min"] >= BAR["heldout_each"] and out["reward_mean"] >= BAR["reward"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--recipes", default="microcoder,grpo_baseline", help="verl recipes (ignored with --trl)")
    ap.add_argument("--trl", action="store_true", help="run the TRL quickstart instead (in the TRL venv)")
    ap.add_argument("--workdir", help="keep every run's output here (default: a temporary directory)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at a time (default 1); with more, each run gets --threads cores/jobs (the wall times "
                         "are then not those of a run alone)")
    ap.add_argument("extra", nargs="*", help="more options for each run (after --)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="microcoder-demo-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    names = ["trl"] if args.trl else [r for r in args.recipes.split(",") if r]
    # seeds outermost: the recipes of one seed run back to back (side by side with --jobs 2), on the same machine state
    cells = [(seed, name) for seed in seeds for name in names]
    extra = list(args.extra)
    if args.jobs > 1 and not any(a.startswith("--threads") for a in extra):
        extra += ["--threads", str(max(1, (os.cpu_count() or 2) // args.jobs))]

    def one(cell):
        seed, name = cell
        row = run_trl(seed, work, extra) if args.trl else run_verl(name, seed, work, extra)
        return {"seed": seed, **row}

    done: dict[tuple, dict] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(one, cell): cell for cell in cells}
        for fut in as_completed(futures):
            seed, name = futures[fut]
            done[(seed, name)] = row = fut.result()
            print(f"{name} seed {seed}: " + json.dumps(row), flush=True)
    results: dict[str, list[dict]] = {}
    for seed, name in cells:
        results.setdefault(name, []).append(done[(seed, name)])
    print()
    print(f"{'run':<16} {'seed':>4} {'held-back before':>16} {'after':>7} {'change':>8} {'reward first':>12} "
          f"{'last':>6} {'change':>8} {'wall s':>7}")
    for name, rows in results.items():
        for r in rows:
            def f(k, spec=".3f"):
                v = r.get(k)
                return "-" if v is None else format(v, spec)
            print(f"{name:<16} {r['seed']:>4} {f('heldout_before'):>16} {f('heldout_after'):>7} "
                  f"{f('heldout_change', '+.3f'):>8} {f('reward_first'):>12} {f('reward_last'):>6} "
                  f"{f('reward_change', '+.3f'):>8} {f('wall_s', '.0f'):>7}")
    summary = {name: verdict(rows) for name, rows in results.items()}
    print()
    for name, v in summary.items():
        print(f"{name}: {json.dumps(v)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"bar": BAR, "results": results, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
