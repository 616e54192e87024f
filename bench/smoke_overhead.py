"""MicroCoder-GRPO vs plain GRPO in the frameworks' real training loops, side by side in one run (``microcoder smoke``).

    python bench/smoke_overhead.py                         # verl and OpenRLHF, whatever is installed here
    python bench/smoke_overhead.py --frameworks verl --steps 6 --repeats 2 --json out.json

For each framework two launches with identical settings, data, seed and model differ only in the algorithm:

* verl: ``+recipe=dapo_baseline`` (verl's own ``sync`` trainer: no KL, clip 0.2/0.28, T 1.2) vs
  ``+recipe=microcoder`` (our ``microcoder_sync`` trainer: the same loss + the conditional truncation mask + the
  temperature controller and its diversity measurement);
* OpenRLHF: ``--mc.preset dapo_baseline`` (OpenRLHF's own ``PPOTrainer``) vs ``--mc.preset microcoder``
  (``MicrocoderPPOTrainer``).

Each launch runs ``--steps`` steps (the first is dropped: start-up effects); runs alternate baseline / microcoder
``--repeats`` times. Reported per framework: the mean per-step time **excluding generation and reward** (what the
framework logs as the step's total minus its generation time, which includes the reward in both frameworks), its
ratio microcoder / baseline (goal <= 1.05), and the full step time for reference. Generation is excluded there because
the two runs sample different texts after step 1 (the mask changes the update), so their generation times differ
for reasons that are not overhead. Generation itself (real vLLM, the CPU build) is compared two ways, each with our
agent loop and temperature plumbing (verl: ``microcoder_single_turn`` vs verl's ``single_turn_agent``; OpenRLHF: the
controller setting the sampling temperature) inside: the generation time the framework logs per step (verl's is
quantized: its agent loop manager waits for results in ~2 s polls), and the span vLLM itself saw, from the first of
the step's requests reaching it to the last one finishing (smoke evidence), per generated token so that the
lengths the two runs happened to sample do not count (goal <= 1.05 for both). Each phase's mean is printed too, as
the framework times it (verl's ``timing_s/*``: ``adv`` is where the microcoder trainer adds its own work, the mask
and the diversity measurement; OpenRLHF: the smoke report's phase times). CPU timings on a shared 2-core machine are
noisy: read the spread.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LAUNCHES = {
    "verl": {
        "baseline": ["+recipe=dapo_baseline"],
        "microcoder": ["+recipe=microcoder", "microcoder.temperature.value=1.2"],
        "common": ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "data.train_batch_size=4",
                   "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=32",
                   "data.max_prompt_length=256", "trainer.val_before_train=false", "trainer.test_freq=-1",
                   "trainer.save_freq=-1"],
    },
    "openrlhf": {
        "baseline": ["--mc.preset", "dapo_baseline"],
        "microcoder": ["--mc.preset", "microcoder"],
        "common": ["--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4", "--train.batch_size", "8",
                   "--rollout.max_new_tokens", "32", "--data.max_len", "288", "--vllm.num_engines", "1"],
    },
}


def _available(framework: str) -> bool:
    return importlib.util.find_spec(framework) is not None


def _one(framework: str, algo: str, steps: int, work: Path) -> dict:
    spec = LAUNCHES[framework]
    cmd = [sys.executable, "-m", "microcoder_ext.cli", "smoke", "--steps", str(steps), "--workdir", str(work),
           "--json", str(work / "report.json"), framework, *spec[algo], *spec["common"]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{framework} {algo} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    report = json.loads((work / "report.json").read_text())
    rows = []
    engine = _engine_spans(work / "evidence.jsonl")
    phases = _verl_phases(work / "metrics.jsonl") if framework == "verl" else {}
    for s in report["steps"][1:]:  # the first step pays start-up costs (and vLLM's first requests)
        total = s["framework"].get("step_s")
        gen = s["times"].get("generation")
        if total is None or gen is None:
            raise RuntimeError(f"{framework}: the report has no step / generation time for step {s['step']}")
        span, n = engine.get(s["step"], (None, None))
        times = phases.get(s["step"]) or {k: v for k, v in s["times"].items() if v is not None}
        rows.append({"step": s["step"], "step_s": total, "excl_gen_s": total - gen, "gen_s": gen, "tokens": n,
                     "engine_span_s": span, "engine_ms_per_token": None if not n else 1000 * span / n,
                     "phases": times})
    return {"steps": rows, "wall_s": report["wall_s"]}


def _verl_phases(path: Path) -> dict[int, dict[str, float]]:
    """verl's own per-step phase timers (``timing_s/*`` of its file logger, e.g. ``adv``: advantages, where the
    microcoder trainer adds the mask and the diversity measurement)."""
    out = {}
    for line in path.read_text().splitlines() if path.is_file() else ():
        row = json.loads(line)
        data = row.get("data", {})
        if "timing_s/step" in data:
            out[row["step"]] = {k[len("timing_s/"):]: float(v) for k, v in data.items()
                                if k.startswith("timing_s/") and isinstance(v, (int, float))}
    return out


def _engine_spans(path: Path) -> dict[int, tuple[float, int]]:
    """Per training step (weight version + 1): (seconds from the first request reaching vLLM to the last one
    finishing, tokens vLLM generated), from the smoke's ``generate`` evidence."""
    by_step: dict[int, list[dict]] = {}
    for line in path.read_text().splitlines() if path.is_file() else ():
        e = json.loads(line)
        if e.get("event") == "generate" and isinstance(e.get("version"), int) and e.get("started") is not None:
            by_step.setdefault(e["version"] + 1, []).append(e)
    return {step: (max(e["t"] for e in es) - min(e["started"] for e in es), sum(int(e["tokens"] or 0) for e in es))
            for step, es in by_step.items()}


def measure(framework: str, steps: int, repeats: int) -> dict:
    runs = {"baseline": [], "microcoder": []}
    with tempfile.TemporaryDirectory(prefix=f"bench-{framework}-") as tmp:
        for r in range(repeats):
            for algo in ("baseline", "microcoder"):
                runs[algo].append(_one(framework, algo, steps, Path(tmp) / f"{algo}{r}"))
    out = {}
    for algo, items in runs.items():
        excl = [row["excl_gen_s"] for run in items for row in run["steps"]]
        full = [row["step_s"] for run in items for row in run["steps"]]
        gen = [row["gen_s"] for run in items for row in run["steps"]]
        per_token = [row["engine_ms_per_token"] for run in items for row in run["steps"] if row["engine_ms_per_token"]]
        out[algo] = {"excl_gen_mean_s": statistics.mean(excl), "excl_gen_stdev_s": statistics.pstdev(excl),
                     "step_mean_s": statistics.mean(full), "n_steps": len(excl),
                     "gen_mean_s": statistics.mean(gen), "gen_median_s": statistics.median(gen),
                     "engine_ms_per_token_mean": statistics.mean(per_token) if per_token else None,
                     "engine_ms_per_token_stdev": statistics.pstdev(per_token) if per_token else None,
                     "phases_mean_s": _phase_means([row for run in items for row in run["steps"]]), "runs": items}
    out["ratio_excl_generation"] = out["microcoder"]["excl_gen_mean_s"] / out["baseline"]["excl_gen_mean_s"]
    out["ratio_generation"] = out["microcoder"]["gen_mean_s"] / out["baseline"]["gen_mean_s"]
    b, m = out["baseline"]["engine_ms_per_token_mean"], out["microcoder"]["engine_ms_per_token_mean"]
    out["ratio_engine_per_token"] = m / b if b and m else None
    out["ratio_full_step"] = out["microcoder"]["step_mean_s"] / out["baseline"]["step_mean_s"]
    return out


def _phase_means(rows: list[dict]) -> dict[str, float]:
    """Mean seconds of each phase every step logged."""
    keys = set.intersection(*(set(r["phases"]) for r in rows)) if rows else set()
    return {k: statistics.mean(r["phases"][k] for r in rows) for k in sorted(keys)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frameworks", default="verl,openrlhf", help="comma-separated (default %(default)s)")
    ap.add_argument("--steps", type=int, default=6, help="steps per launch, the first is dropped (default 6)")
    ap.add_argument("--repeats", type=int, default=2, help="launch pairs per framework (default 2)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "load_before": os.getloadavg()}, "frameworks": {}}
    for fw in [f.strip() for f in args.frameworks.split(",") if f.strip()]:
        if not _available(fw):
            print(f"{fw}: not installed in this environment, skipped (run it in that framework's venv)")
            continue
        print(f"{fw}: {args.repeats} x (baseline, microcoder), {args.steps} steps each ...", flush=True)
        res = measure(fw, args.steps, args.repeats)
        results["frameworks"][fw] = res
        b, m = res["baseline"], res["microcoder"]
        print(f"{fw}: step time excluding generation+reward  baseline {b['excl_gen_mean_s']:.3f} s "
              f"(sd {b['excl_gen_stdev_s']:.3f}, n={b['n_steps']})  microcoder {m['excl_gen_mean_s']:.3f} s "
              f"(sd {m['excl_gen_stdev_s']:.3f}, n={m['n_steps']})  ratio {res['ratio_excl_generation']:.3f} "
              f"(goal <= 1.05); full step ratio {res['ratio_full_step']:.3f}", flush=True)
        print(f"{fw}: generation as the framework logs it  baseline mean {b['gen_mean_s']:.3f} s (median "
              f"{b['gen_median_s']:.3f})  microcoder mean {m['gen_mean_s']:.3f} s (median {m['gen_median_s']:.3f})  "
              f"ratio {res['ratio_generation']:.3f} (goal <= 1.05)", flush=True)
        if res["ratio_engine_per_token"] is not None:
            print(f"{fw}: vLLM's span per generated token  baseline {b['engine_ms_per_token_mean']:.2f} ms "
                  f"(sd {b['engine_ms_per_token_stdev']:.2f})  microcoder {m['engine_ms_per_token_mean']:.2f} ms "
                  f"(sd {m['engine_ms_per_token_stdev']:.2f})  ratio {res['ratio_engine_per_token']:.3f} "
                  "(goal <= 1.05)", flush=True)
        pb, pm = b["phases_mean_s"], m["phases_mean_s"]
        print(f"{fw}: phases, mean s baseline -> microcoder: " + ", ".join(
            f"{k} {pb[k]:.3f} -> {pm[k]:.3f}" for k in pb if k in pm and k not in ("step", "gen")), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
