"""``microcoder demo``: verl's own ``main_ppo`` with ``+recipe=microcoder`` (or a baseline recipe) training a tiny
Qwen3 model on the CPU, with verl's real vLLM rollout, and the report of what it learned.

Steps (the model and data are built here, the launch is ``microcoder smoke``'s CPU plan of verl):

1. the model: a tiny Qwen3 (:func:`microcoder_ext.smoke.model.prepare_model`, cached), warm-started on the mixed
   demonstrations of :mod:`microcoder_ext.bundled.demonstrations` (train problems only);
2. the data: the 60 train problems and the 20 held-back ones as verl parquet files (``Problem.to_verl_row``);
3. ``python -m verl.trainer.main_ppo +recipe=RECIPE`` with the demo's sizes: 8 prompts x 8 samples per step, a
   48-token budget, verl's validation on the held-back problems before training and every ``--test-freq`` steps
   (8 samples per problem at T = 1.0: the held-back pass rate is verl's ``val-core/<source>/acc/mean@8``);
4. ``report.json`` and ``curves.png`` from verl's own file logger (``metrics.jsonl``): training reward, held-back
   pass rate, response length, truncation, masked fraction, diversity, temperature.

Nothing is tuned per recipe: ``--recipe grpo_baseline`` runs the same launch with verl's GRPO (reference model, KL
loss, symmetric clip; T = 1.2 as in the microcoder recipe).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from microcoder_ext.eval.learning import summarize
from microcoder_ext.verl.request_seeds import OVERRIDE as REQUEST_SEEDS

RECIPES = ("microcoder", "grpo_baseline", "dapo_baseline", "microcoder_mask_only")
#: the recipes whose agent loop and trainer (microcoder_single_turn, microcoder_sync) seed each vLLM request and keep
#: each step's rows in submission order (microcoder_ext.verl.request_seeds): their runs repeat for a seed
SEEDED_RECIPES = ("microcoder", "microcoder_mask_only")
A = "actor_rollout_ref"
#: what the report reads from verl's metrics, per training step
TRAIN_METRICS = {
    "reward": "critic/score/mean",
    "response_length": "response_length/mean",
    "truncated_frac": "microcoder/truncated_frac",
    "masked_frac": "microcoder/masked_frac",
    "temperature": "microcoder/temperature",
    "diversity": "microcoder/diversity/distinct4",
    "pg_loss": "actor/pg_loss",
    "entropy": "actor/entropy",
}


@dataclass
class DemoSettings:
    """One demo run (``microcoder demo --help``)."""

    recipe: str = "microcoder"
    seed: int = 0
    steps: int = 30
    test_freq: int = 10
    prompts: int = 8  #: prompts per step
    samples: int = 8  #: samples per prompt (the group)
    response_length: int = 48  #: tokens
    lr: float = 1e-3  #: the actor's learning rate (a 0.4 M-parameter model)
    warm_steps: int = 300  #: supervised warm-start steps on the mixed demonstrations
    val_samples: int = 8  #: samples per held-back problem at each validation
    val_temperature: float = 1.0
    threads: int = 2  #: torch threads per process (the phases of a sync step do not overlap: both cores for each)
    output_dir: str = "demo-out"
    timeout: float | None = 3600.0  #: a hang guard far above the 7-minute run on a loaded machine (make test)
    verbose: bool = False

    def __post_init__(self):
        from microcoder_ext.smoke.runner import require_ints

        if self.recipe not in RECIPES:
            raise ValueError(f"unknown recipe {self.recipe!r}; one of {', '.join(RECIPES)}")
        require_ints(self, ("steps", "test_freq", "prompts", "samples", "response_length", "val_samples", "threads"))
        require_ints(self, ("warm_steps",), minimum=0)
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"--lr must be a positive number, got {self.lr!r}")


@dataclass
class DemoReport:
    settings: dict
    ok: bool
    model: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)  #: per training step: TRAIN_METRICS keys
    heldout: list = field(default_factory=list)  #: [{"step", "pass_rate"}]: verl's validations (step 0: before RL)
    summary: dict = field(default_factory=dict)
    wall_s: float = 0.0
    error: str | None = None
    smoke_report: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def launch(s: DemoSettings, model_path: str, train: Path, val: Path) -> list[str]:
    """The ``main_ppo`` overrides of the demo (before ``microcoder smoke``'s CPU substitutions)."""
    return [
        f"+recipe={s.recipe}",
        f"{A}.model.path={model_path}",
        f"data.train_files={train}",
        f"data.val_files={val}",
        "algorithm.adv_estimator=grpo",
        f"data.train_batch_size={s.prompts}",
        f"{A}.rollout.n={s.samples}",
        f"{A}.actor.ppo_mini_batch_size={s.prompts}",
        f"data.max_response_length={s.response_length}",
        "data.max_prompt_length=256",
        f"data.seed={s.seed}",
        f"{A}.rollout.seed={s.seed}",
        f"{A}.actor.optim.lr={s.lr}",
        f"{A}.rollout.val_kwargs.n={s.val_samples}",
        f"{A}.rollout.val_kwargs.do_sample=true",
        f"{A}.rollout.val_kwargs.temperature={s.val_temperature}",
        f"trainer.test_freq={s.test_freq}",
        "trainer.val_before_train=true",
        "trainer.save_freq=-1",
        "trainer.project_name=microcoder_demo",
        f"trainer.experiment_name={s.recipe}_seed{s.seed}",
    ] + ([REQUEST_SEEDS] if s.recipe in SEEDED_RECIPES else [])


def heldout_pass_rates(metrics: dict[int, dict]) -> list[dict]:
    """verl's validations: ``val-core/<source>/acc/mean@N`` per logged step (step 0 = before training)."""
    out = []
    for step in sorted(metrics):
        keys = [k for k in metrics[step] if k.startswith("val-core/") and "/acc/mean@" in k]
        if keys:
            out.append({"step": step, "pass_rate": float(statistics.fmean(float(metrics[step][k]) for k in keys))})
    return out


def train_rows(metrics: dict[int, dict]) -> list[dict]:
    rows = []
    for step in sorted(k for k, m in metrics.items() if k >= 1 and "timing_s/step" in m):
        m = metrics[step]
        row: dict[str, Any] = {"step": step}
        for name, key in TRAIN_METRICS.items():
            value = m.get(key)
            row[name] = float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else None
        rows.append(row)
    return rows


def step_line(row: dict, total: int, heldout: dict | None) -> str:
    """One short progress line per step."""
    parts = [f"step {row['step']:>3}/{total}", f"reward {_fmt(row.get('reward'))}",
             f"len {_fmt(row.get('response_length'), '.1f')}", f"trunc {_fmt(row.get('truncated_frac'))}",
             f"masked {_fmt(row.get('masked_frac'))}", f"div4 {_fmt(row.get('diversity'))}",
             f"T {_fmt(row.get('temperature'), 'g')}"]
    if heldout is not None:
        parts.append(f"held-back pass {heldout['pass_rate']:.3f}")
    return "  ".join(parts)


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def run(s: DemoSettings, say: Callable[[str], None] = print) -> DemoReport:
    """Build, launch, report; writes ``report.json`` and ``curves.png`` into ``s.output_dir``."""
    from microcoder_ext.data.writers import write_verl_parquet
    from microcoder_ext.smoke.data import bundled_problems
    from microcoder_ext.smoke.model import prepare_model
    from microcoder_ext.smoke.runner import SmokeOptions
    from microcoder_ext.verl import smoke as verl_smoke

    t0 = time.monotonic()
    out = Path(s.output_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    say(f"microcoder demo: +recipe={s.recipe}, seed {s.seed}, {s.steps} steps of verl's main_ppo on this CPU "
        f"(output {out})")
    say(f"  model: tiny Qwen3, warm start {s.warm_steps} steps on mixed demonstrations (cached after the first run)")
    model = prepare_model(None, family="qwen3", demonstrations="mixed", warm_steps=s.warm_steps, seed=s.seed)
    train_problems, held = bundled_problems("train"), bundled_problems("heldout")
    train = write_verl_parquet(train_problems, out / "data" / "train.parquet", "train")
    val = write_verl_parquet(held, out / "data" / "heldout.parquet", "test")

    work = out / "run"
    opts = SmokeOptions(steps=s.steps, rows=len(train_problems), val_rows=len(held), prompts=s.prompts,
                        max_samples=s.samples, response_length=s.response_length, warm_start=0, workdir=str(work),
                        timeout=s.timeout, verbose=s.verbose,
                        extra_env={"OMP_NUM_THREADS": str(s.threads), "MKL_NUM_THREADS": str(s.threads)})
    work.mkdir(parents=True, exist_ok=True)
    plan = verl_smoke.plan(launch(s, model.path, train, val), opts, work)
    say(f"  launch: python -m verl.trainer.main_ppo ({len(plan.command) - 3} arguments; log {work / 'main_ppo.log'})")

    printed: set[int] = set()

    def progress(_line: str) -> None:  # a step ended: print the new rows of verl's own metrics
        metrics = verl_smoke.read_metrics(work / "metrics.jsonl")
        held_by_step = {h["step"]: h for h in heldout_pass_rates(metrics)}
        if 0 in held_by_step and 0 not in printed:
            printed.add(0)
            say(f"  held-back pass rate before RL: {held_by_step[0]['pass_rate']:.3f}")
        for row in train_rows(metrics):
            if row["step"] not in printed:
                printed.add(row["step"])
                say("  " + step_line(row, s.steps, held_by_step.get(row["step"])))

    smoke = verl_smoke.run(plan, opts, progress=progress)
    smoke_path = smoke.write_json(out / "smoke_report.json")
    metrics = verl_smoke.read_metrics(work / "metrics.jsonl")
    steps, heldout = train_rows(metrics), heldout_pass_rates(metrics)
    report = DemoReport(settings=asdict(s), ok=smoke.ok, model=model.to_dict(),
                        data={"train": str(train), "heldout": str(val), "train_problems": len(train_problems),
                              "heldout_problems": len(held)},
                        steps=steps, heldout=heldout, summary=summarize(steps, heldout),
                        wall_s=round(time.monotonic() - t0, 1), error=smoke.error, smoke_report=str(smoke_path))
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    try:
        from microcoder_ext.demo.curves import plot

        plot(report.to_dict(), out / "curves.png")
    except ImportError as e:  # matplotlib
        say(f"  curves.png not written: {e}")
    return report
