"""The paper's recipe cells smoked at their declared size (``microcoder smoke --topology``): wall time and peak memory.

    bash compat/in_venv.sh verl python bench/smoke_topology.py                     # every verl cell
    bash compat/in_venv.sh verl python bench/smoke_topology.py --cells qwen3_1.7b/microcoder --json out.json
    bash compat/in_venv.sh openrlhf python bench/smoke_topology.py --framework openrlhf --cells ds_8b/microcoder

A cell is ``verl_recipes/train.sh`` (``--framework openrlhf``: ``openrlhf_recipes/train.sh``) with ``MODEL`` and
``ALGO`` and ``SMOKE=1 SMOKE_ARGS="--topology --steps N"``:
each model with ``microcoder``, and each algorithm (GRPO, DAPO, MicroCoder-GRPO) with ``qwen3_1.7b``, at what
``train.sh`` declares (1 node x 8 GPUs; vLLM TP 2 for ``ds_8b``; 64 prompts x 8 samples, 2 mini-batches). ``--nnodes
2 --gpus-per-node 4`` runs the same cells as 2 x 4 (``NNODES`` / ``GPUS_PER_NODE`` of train.sh: a local cluster of
two raylets). The cells run one after another, alone on the machine (run nothing else beside them: peak memory is the
point), each in a session of its own, its memory sampled every 2 s as the proportional set size (PSS) of every
process it started (its process tree: Ray's raylets and workers, vLLM's engine processes). Reported per cell: ok or
the smoke's error, wall time, peak PSS (and the largest kinds of process at the peak), and what the smoke kept and
shrank (its substitutions and notes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from microcoder_ext import process_tree  # noqa: E402

MODELS = ("qwen3_1.7b", "qwen3_4b_instruct", "ds_8b")
ALGOS = ("grpo_baseline", "dapo_baseline", "microcoder")
CELLS = [f"{m}/microcoder" for m in MODELS] + [f"qwen3_1.7b/{a}" for a in ALGOS if a != "microcoder"]


def _kind(pid: int) -> str:
    """What a process of a smoke is: a Ray actor or vLLM process by its title, else its program."""
    cmd = process_tree.command_line(pid)
    hit = re.match(r"(ray::\w+|VLLM::\w+)", cmd)
    if hit:
        return hit.group(1)
    for key in ("raylet", "gcs_server", "main_ppo", "microcoder_ext.openrlhf.cpu.run", "microcoder_ext.cli",
                "ray start", "default_worker"):
        if key in cmd:
            return key
    return Path(cmd.split(" ", 1)[0]).name or "?"


def tree_pss(root: int) -> tuple[int, dict]:
    """PSS (bytes) of ``root``'s process tree, and per kind of process: (GB, how many)."""
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for pid in process_tree.tree(root):
        size = process_tree.pss_bytes(pid)
        by[_kind(pid)][0] += size
        by[_kind(pid)][1] += 1
    return sum(v for v, _ in by.values()), {k: (round(v / 1e9, 2), n) for k, (v, n) in by.items()}


#: each framework's recipe script and what the bench adds to its launch
RECIPES = {"verl": ("verl_recipes/train.sh", ["trainer.val_before_train=false"]),
           "openrlhf": ("openrlhf_recipes/train.sh", [])}


def run_cell(cell: str, steps: int, nnodes: int | None, gpus: int | None, work: Path, timeout_s: float,
             framework: str = "verl") -> dict:
    model, algo = cell.split("/")
    script, extra = RECIPES[framework]
    report = work / "report.json"
    env = {**os.environ, "SMOKE": "1", "MODEL": model, "ALGO": algo,
           "SMOKE_ARGS": f"--topology --steps {steps} --workdir {work} --json {report}"}
    if nnodes:
        env["NNODES"] = str(nnodes)
    if gpus:
        env["GPUS_PER_NODE"] = str(gpus)
    t0 = time.monotonic()
    with open(work / "bench.log", "w") as log:
        proc = subprocess.Popen(["bash", str(ROOT / script), *extra],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        watch = process_tree.PeakSampler(lambda: tree_pss(proc.pid), interval_s=2.0)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # microcoder smoke stops what it started on SIGTERM
            rc = proc.wait()
        finally:
            peak, kinds = watch.stop() or (0, {})
    row = {"cell": cell, "rc": rc, "wall_s": round(time.monotonic() - t0, 1), "peak_pss_gb": round(peak / 1e9, 2),
           "at_peak": dict(sorted(kinds.items(), key=lambda kv: -kv[1][0])[:6])}
    if report.exists():
        got = json.loads(report.read_text())
        row.update(ok=got["ok"], steps=len(got["steps"]), error=(got.get("error") or "")[-600:],
                   changed={s["what"]: f"{s['launch']} -> {s['smoke']}" for s in got["substitutions"]},
                   notes=got.get("notes", []))
    else:
        row.update(ok=False, steps=0, error=(work / "bench.log").read_text(errors="replace")[-600:])
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", choices=sorted(RECIPES), default="verl", help="whose recipes (default %(default)s)")
    ap.add_argument("--cells", default=",".join(CELLS), help="MODEL/ALGO, comma-separated (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=2, help="steps per cell (default %(default)s)")
    ap.add_argument("--nnodes", type=int, help="NNODES of train.sh (default: its own, 1)")
    ap.add_argument("--gpus-per-node", type=int, help="GPUS_PER_NODE of train.sh (default: its own, 8)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per cell (default %(default)s)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    rows = []
    for cell in args.cells.split(","):
        work = Path(tempfile.mkdtemp(prefix="bench-topology-"))
        print(f"== {cell} ({work})", flush=True)
        row = run_cell(cell, args.steps, args.nnodes, args.gpus_per_node, work, args.timeout, args.framework)
        rows.append(row)
        print(f"   {'ok' if row['ok'] else 'FAILED'}  {row['wall_s']:.0f} s  peak {row['peak_pss_gb']:.1f} GB PSS  "
              f"at peak: {row['at_peak']}", flush=True)
        if not row["ok"]:
            print(f"   error: {row['error']}", flush=True)
    print("\n| framework | cell | size | result | time | peak memory (PSS) |\n|---|---|---|---|---|---|")
    size = f"{args.nnodes or 1} x {args.gpus_per_node or 8}"
    for r in rows:
        print(f"| {args.framework} | {r['cell']} | {size} | {'ok' if r['ok'] else 'failed'} ({r['steps']} steps) | "
              f"{r['wall_s']:.0f} s | "
              f"{r['peak_pss_gb']:.1f} GB |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                                               "framework": args.framework, "steps": args.steps, "rows": rows},
                                              indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
