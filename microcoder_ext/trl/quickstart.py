"""MicroCoder-GRPO on a laptop CPU in a few minutes: ``python -m microcoder_ext.trl.quickstart``.

Nothing is downloaded. The run:

1. builds the demo's model (:func:`microcoder_ext.smoke.model.prepare_model`, the model ``microcoder demo`` trains
   through verl; cached under ``$MICROCODER_CACHE/smoke-models``): a byte-level BPE tokenizer (digits always single
   tokens, ChatML chat template, ``<|im_end|>`` = EOS) trained in-process on the bundled problems and a tiny
   2-layer Qwen3 (about 0.4 M parameters), **warm-started** on the *train* problems only, on the demo's mixed
   demonstrations (:mod:`microcoder_ext.bundled.demonstrations`: each problem's reference and its family's
   plausible wrong answer), so that completions end with EOS and the model writes right and wrong programs alike: the
   execution reward then has something to select. A purely random model truncates every completion (equal rewards in
   every group, no gradient); one warm-started on references only is already as right as it will get
   (``--demonstrations reference``);
2. measures the pass rate on the held-back problems (the "before GRPO" number);
3. **MicroCoder-GRPO** through :class:`microcoder_ext.trl.trainer.MicrocoderGRPOTrainer` (TRL's ``GRPOTrainer``
   with the conditional truncation mask and the temperature controller) and
   :class:`microcoder_ext.trl.reward.CodeReward` (the real sandboxed code reward: every completion's code block is
   run against the problem's tests), preset ``microcoder`` (no KL, clip-higher), on the train problems, with the
   demo's sizes (8 prompts x 8 samples a step, 48-token budget, T = 1.2, learning rate 1e-3), printing one line
   per step from TRL's logs: reward, pass rate, truncated and masked fractions, diversity, temperature;
4. measures the pass rate once more ("after GRPO") and writes ``report.json`` and ``curves.png``.

Pass rates are measured on the **held-back** problems (``microcoder_ext/bundled/``: 10 families x 2 values of K that
no training step ever sees; the 60 others are trained on), ``--eval-samples`` samples per problem at
``--eval-temperature`` (1.0, as the demo's validation), so they measure whether what was learnt transfers to unseen
instances. They are reported as measured, whatever they are. The same seed gives the same run (torch, sampling and
the mask coins are seeded; CPU only).

Options: ``--steps`` (GRPO steps), ``--output-dir``, ``--seed``, ``--quick`` (2 GRPO steps and a shorter warm
start, for tests), ``--warm-steps``, ``--eval-samples``, ``--no-progress``; ``--help`` lists them all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

PROG = "python -m microcoder_ext.trl.quickstart"
from microcoder_ext.bundled import DATA, answer, load_problems, messages, split_problems  # noqa: F401
from microcoder_ext.tiny import CHAT_TEMPLATE, SPECIAL_TOKENS  # noqa: F401  (re-exported)


class MatplotlibMissing(RuntimeError):
    """``curves.png`` needs matplotlib, which is not installed in this environment."""


@dataclass
class Settings:
    seed: int = 0
    # the model: the demo's tiny Qwen3 and its warm start (microcoder_ext.smoke.model.prepare_model)
    warm_steps: int = 300
    warm_lr: float = 3e-3
    demonstrations: str = "mixed"  # "mixed" (reference + the family's wrong answer) or "reference"
    # MicroCoder-GRPO (the demo's sizes: microcoder_ext.demo.run.DemoSettings)
    steps: int = 30
    prompts_per_step: int = 8
    num_generations: int = 8
    max_completion_length: int = 48
    learning_rate: float = 1e-3
    temperature: float = 1.2  # the microcoder recipe's training temperature (rollout and log-probs)
    preset: str = "microcoder"
    mask_rho: float = 0.2
    mask_m: int = 8  # repeat window: the paper's 128 is longer than these completions
    # evaluation
    eval_samples: int = 8
    eval_temperature: float = 1.0
    eval_problems: int = 0  # 0 = every held-back problem; --quick: the first 5
    quick: bool = False


# ------------------------------------------------------------------------------------------------- data


# ------------------------------------------------------------------------------------------------ model


def build_model(s: Settings):
    """(model, tokenizer, record): the demo's tiny Qwen3 warm-started as ``s`` says (built once, then cached;
    :func:`microcoder_ext.smoke.model.prepare_model`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from microcoder_ext.smoke.model import prepare_model

    record = prepare_model(None, family="qwen3", demonstrations=s.demonstrations, warm_steps=s.warm_steps,
                           warm_lr=s.warm_lr, seed=s.seed, threads=1)  # the quickstart's model as it always was
    tokenizer = AutoTokenizer.from_pretrained(record.path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(record.path, local_files_only=True, dtype=torch.float32)
    return model, tokenizer, record


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------- evaluation


def evaluate(model, tokenizer, problems: Sequence, *, samples: int, temperature: float, max_new_tokens: int,
             seed: int, label: str = "eval", progress: bool = True) -> dict:
    """Sample ``samples`` completions per problem (temperature only: top-k 0, top-p 1), score each with the
    sandboxed reward; pass rate = fraction of completions whose code passes every test."""
    import torch

    from microcoder_ext.reward import evaluate_response

    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    per_problem, verdicts, truncated = {}, {}, 0
    bar = _bar(problems, label, progress)
    for p in bar:
        prompt = tokenizer.apply_chat_template(messages(p), tokenize=False, add_generation_prompt=True)
        enc = tokenizer([prompt], return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, num_return_sequences=samples,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        completions = out[:, enc["input_ids"].shape[1]:]
        passed = 0
        for row in completions.tolist():
            ended = tokenizer.eos_token_id in row
            truncated += not ended
            text = tokenizer.decode(row[:row.index(tokenizer.eos_token_id)] if ended else row,
                                    skip_special_tokens=True)
            res = evaluate_response(text, p.tests)
            verdicts[res.verdict] = verdicts.get(res.verdict, 0) + 1
            passed += res.verdict == "correct"
        per_problem[p.id] = passed / samples
    if was_training:
        model.train()
    total = samples * max(len(problems), 1)
    return {"pass_rate": sum(per_problem.values()) / max(len(per_problem), 1),
            "problems_solved_at_least_once": sum(v > 0 for v in per_problem.values()),
            "num_problems": len(problems), "samples_per_problem": samples, "temperature": temperature,
            "truncated_frac": truncated / total, "verdicts": dict(sorted(verdicts.items())),
            "per_problem": per_problem}


# ------------------------------------------------------------------------------------------------- GRPO

#: what the per-step line shows: (label, TRL log key(s), format); the first present key wins
STEP_COLUMNS = (
    ("reward", ("reward",), "{:.3f}"),
    ("pass", ("pass_rate",), "{:.3f}"),  # = reward: the score is 1.0 exactly when every test passes
    ("trunc", ("microcoder/truncated_frac", "completions/clipped_ratio"), "{:.3f}"),
    ("masked", ("microcoder/masked_frac",), "{:.3f}"),
    ("div4", ("microcoder/diversity/distinct4",), "{:.3f}"),
    ("pooled", ("microcoder/diversity/group_pooled",), "{:.3f}"),
    ("temp", ("microcoder/temperature",), "{:.2f}"),
    ("loss", ("loss",), "{:+.4f}"),
)


def _pick(logs: dict, keys: Sequence[str]):
    for k in keys:
        if k in logs and isinstance(logs[k], (int, float)):
            return logs[k]
    return None


def step_line(step: int, total: int, logs: dict) -> str:
    parts = [f"step {step:>3}/{total}"]
    for label, keys, fmt in STEP_COLUMNS:
        v = _pick(logs, keys)
        parts.append(f"{label} " + ("  -  " if v is None or not math.isfinite(v) else fmt.format(v)))
    return "  ".join(parts)


def train_dataset(problems: Sequence):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": messages(p), "tests": json.dumps(p.tests), "id": p.id} for p in problems])


def run_grpo(model, tokenizer, problems: Sequence, s: Settings, output_dir: Path, progress: bool = True) -> list[dict]:
    """MicroCoder-GRPO on ``problems``; returns TRL's per-step logs (plus ``pass_rate`` from the reward's verdicts)."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from microcoder_ext.trl.config import microcoder_grpo_config
    from microcoder_ext.trl.reward import CodeReward
    from microcoder_ext.trl.trainer import MicrocoderGRPOTrainer

    per_step = s.prompts_per_step * s.num_generations
    args = microcoder_grpo_config(
        s.preset, output_dir=str(output_dir / "trl"), use_cpu=True, bf16=False, seed=s.seed, data_seed=s.seed,
        max_steps=s.steps, learning_rate=s.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        per_device_train_batch_size=per_step, gradient_accumulation_steps=1, num_generations=s.num_generations,
        max_completion_length=s.max_completion_length, temperature=s.temperature, top_k=0, top_p=1.0,
        logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=not progress,
        dataloader_num_workers=0, max_grad_norm=1.0,
    )
    reward = CodeReward()
    records: list[dict] = []

    class StepPrinter(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):  # noqa: D401 - TRL/transformers hook
            if not logs or "reward" not in logs:
                return
            row = {"step": int(state.global_step), **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
            # pass rate = share of completions whose code passed every test (the reward is 1.0 exactly then, so
            # it equals the reward mean); logged by the trainer from CodeReward's verdicts
            if "microcoder/verdict/correct" in row:
                row["pass_rate"] = row["microcoder/verdict/correct"]
            elif getattr(reward, "last_verdicts", None):
                row["pass_rate"] = sum(v == "correct" for v in reward.last_verdicts) / len(reward.last_verdicts)
            records.append(row)
            _write(step_line(row["step"], s.steps, row))

    microcoder = {"mask": {"rho": s.mask_rho, "m": s.mask_m, "seed": s.seed},
                  "temperature": {"mode": "constant", "value": s.temperature}}
    trainer = MicrocoderGRPOTrainer(model=model, args=args, reward_funcs=[reward],
                                    train_dataset=train_dataset(problems), processing_class=tokenizer,
                                    callbacks=[StepPrinter()], microcoder=microcoder)
    # one compact line per step instead of TRL's printed log dicts; the progress bar stays
    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(_BarOnly())
    trainer.train()
    model.eval()
    return records


def _bar_only_callback():
    from transformers.trainer_callback import ProgressCallback

    class BarOnly(ProgressCallback):
        """TRL's progress bar without its ``str(logs)`` lines (the quickstart prints its own)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    return BarOnly


def _BarOnly():  # noqa: N802 - a class factory (transformers is imported lazily)
    return _bar_only_callback()()


# ---------------------------------------------------------------------------------------------- outputs


def plot_curves(report: dict, path: Path) -> Path:
    """``curves.png``: per-step reward / pass rate, truncated / masked fractions, diversity, temperature, and the
    held-back pass rate at the three checkpoints. Raises :class:`MatplotlibMissing` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MatplotlibMissing(f"curves.png not written: matplotlib is not installed ({e}); "
                                "pip install matplotlib, or read the curves from report.json") from None

    steps = report["steps"]
    xs = [r["step"] for r in steps]

    def series(*keys):
        return [(_pick(r, keys) if _pick(r, keys) is not None else float("nan")) for r in steps]

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0][0]
    reward = series("reward")
    ax.plot(xs, reward, marker="o", alpha=0.5, label="reward = pass rate (train rollouts)")
    k = 5
    if len(reward) >= k:
        avg = [sum(reward[i - k + 1:i + 1]) / k for i in range(k - 1, len(reward))]
        ax.plot(xs[k - 1:], avg, color="black", label=f"{k}-step mean")
    ax.set_title("reward"), ax.set_xlabel("GRPO step"), ax.set_ylim(-0.02, 1.02), ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(xs, series("microcoder/truncated_frac", "completions/clipped_ratio"), marker="o", label="truncated")
    ax.plot(xs, series("microcoder/masked_frac"), marker=".", label="masked (advantage zeroed)")
    ax.set_title("truncation mask"), ax.set_xlabel("GRPO step"), ax.set_ylim(-0.02, 1.02), ax.legend(fontsize=8)
    ax = axes[1][0]
    ax.plot(xs, series("microcoder/diversity/distinct4"), marker="o", label="distinct-4 (per response)",
            color="tab:green")
    ax.plot(xs, series("microcoder/diversity/group_pooled"), marker="s", label="group-pooled distinct-4",
            color="tab:olive")
    ax.legend(fontsize=8, loc="lower left")
    ax2 = ax.twinx()
    ax2.plot(xs, series("microcoder/temperature"), marker=".", label="temperature", color="tab:red")
    ax.set_title("diversity and temperature"), ax.set_xlabel("GRPO step")
    ax.set_ylabel("diversity"), ax2.set_ylabel("temperature (red)")
    ax = axes[1][1]
    ev = report["eval"]
    names = [k for k in ("after_warm_start", "after_grpo") if k in ev]
    vals = [ev[k]["pass_rate"] for k in names]
    bars = ax.bar([n.replace("_", "\n") for n in names], vals, color=["tab:blue", "tab:orange"][:len(vals)])
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.3f}", ha="center", fontsize=9)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"held-back pass rate ({ev[names[0]]['num_problems']} problems x "
                 f"{ev[names[0]]['samples_per_problem']} samples)")
    fig.suptitle("MicroCoder-GRPO quickstart (tiny Qwen3, CPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write(line: str) -> None:
    try:
        from tqdm.auto import tqdm

        tqdm.write(line)
    except ImportError:
        print(line, flush=True)


def _bar(it, desc: str, progress: bool):
    if not progress:
        return it
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return it
    return tqdm(it, desc=desc, leave=False, dynamic_ncols=True)


# ------------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    d = Settings()
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ")[0] + ".",
                                epilog="Writes OUTPUT_DIR/report.json and OUTPUT_DIR/curves.png.")
    p.add_argument("--steps", type=int, default=None, help=f"GRPO steps (default {d.steps}; 2 with --quick)")
    p.add_argument("--output-dir", default="quickstart-out", help="where report.json / curves.png go "
                                                                  "(default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of everything (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="2 GRPO steps, short warm start, 2 samples per held-back "
                                                        "problem: a smoke test (for the test suite)")
    p.add_argument("--warm-steps", type=int, default=None, help=f"supervised warm-start steps (default {d.warm_steps})")
    p.add_argument("--demonstrations", choices=("mixed", "reference"), default=d.demonstrations,
                   help="warm-start answers: each train problem's reference and its family's plausible wrong answer "
                        "(mixed), or the references only (default %(default)s)")
    p.add_argument("--eval-samples", type=int, default=None,
                   help=f"samples per held-back problem for the pass rates (default {d.eval_samples})")
    p.add_argument("--learning-rate", type=float, default=d.learning_rate,
                   help="GRPO learning rate (default %(default)s)")
    p.add_argument("--temperature", type=float, default=d.temperature,
                   help="training temperature: rollout sampling and the trainer's log-probs (default %(default)s)")
    p.add_argument("--eval-temperature", type=float, default=d.eval_temperature,
                   help="sampling temperature of the held-back pass rates (default %(default)s)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: this model's matrices are too small to gain from more, and "
                        "the other core runs the sandboxed tests; 0 = torch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (the per-step lines stay)")
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings(seed=args.seed, quick=args.quick, learning_rate=args.learning_rate, temperature=args.temperature,
                 eval_temperature=args.eval_temperature, demonstrations=args.demonstrations)
    if args.quick:
        s.steps, s.warm_steps, s.eval_samples, s.eval_problems = 2, 30, 2, 5
        s.prompts_per_step, s.num_generations = 4, 4
    if args.steps is not None:
        s.steps = args.steps
    if args.warm_steps is not None:
        s.warm_steps = args.warm_steps
    if args.eval_samples is not None:
        s.eval_samples = args.eval_samples
    for name in ("steps", "eval_samples"):
        if getattr(s, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(s, name)}")
    if s.warm_steps < 0:
        raise ValueError(f"--warm-steps must be >= 0, got {s.warm_steps}")
    for name in ("temperature", "eval_temperature"):
        if not (getattr(s, name) > 0 and math.isfinite(getattr(s, name))):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive number, got {getattr(s, name)}")
    if not (s.learning_rate > 0 and math.isfinite(s.learning_rate)):
        raise ValueError(f"--learning-rate must be a positive number, got {s.learning_rate}")
    return s


def run(s: Settings, output_dir: str | Path, progress: bool = True, threads: int = 1) -> dict:
    """The whole quickstart; returns the report (also written to ``output_dir/report.json``)."""
    import torch

    from microcoder_ext.eval.learning import summarize
    from microcoder_ext.trl.guard import check_trl

    check_trl()
    t0 = time.monotonic()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    random.seed(s.seed)
    torch.manual_seed(s.seed)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    problems = load_problems()
    train, held = split_problems(problems)
    if s.eval_problems:
        held = held[: s.eval_problems]
    t = time.monotonic()
    model, tokenizer, built = build_model(s)
    timings: dict[str, float] = {"model_s": time.monotonic() - t}
    _write(f"tiny {built.architecture}: {n_params(model) / 1e6:.2f} M parameters, vocabulary {len(tokenizer)}, "
           f"warm start {built.warm_start_steps} steps on {built.demonstrations or 'nothing'} demonstrations"
           f"{' (cached)' if built.cached else ''}; {len(train)} train problems, {len(held)} held back "
           f"(unseen K of the same families)")
    ev: dict[str, dict] = {}

    def measure(name: str) -> None:
        t = time.monotonic()
        ev[name] = evaluate(model, tokenizer, held, samples=s.eval_samples, temperature=s.eval_temperature,
                            max_new_tokens=s.max_completion_length,
                            seed=s.seed + 1,  # the same sampling seed at every checkpoint
                            label=f"eval {name}", progress=progress)
        timings[f"eval_{name}_s"] = time.monotonic() - t
        _write(f"held-back pass rate {name.replace('_', ' ')}: {ev[name]['pass_rate']:.3f} "
               f"({ev[name]['problems_solved_at_least_once']}/{len(held)} problems solved at least once, "
               f"truncated {ev[name]['truncated_frac']:.2f})")

    measure("after_warm_start")
    t = time.monotonic()
    steps = run_grpo(model, tokenizer, train, s, out, progress)
    timings["grpo_s"] = time.monotonic() - t
    measure("after_grpo")
    timings["total_s"] = time.monotonic() - t0

    before, after = ev["after_warm_start"]["pass_rate"], ev["after_grpo"]["pass_rate"]
    report = {
        "settings": asdict(s),
        "model": {"parameters": n_params(model), "vocab_size": len(tokenizer), "architecture": built.architecture,
                  "path": built.path, "warm_start_steps": built.warm_start_steps,
                  "demonstrations": built.demonstrations},
        "data": {"file": str(DATA), "train_problems": len(train), "heldout_problems": len(held),
                 "heldout_ids": [p.id for p in held]},
        "warm_start_loss": {"first": built.warm_start_loss[0] if built.warm_start_loss else None,
                            "last": built.warm_start_loss[-1] if built.warm_start_loss else None},
        "steps": steps,
        "eval": ev,
        # the numbers of the demo's learning bar, as ``microcoder demo`` reports them (bench/demo_learning.py)
        "summary": summarize(steps, [{"step": 0, "pass_rate": before}, {"step": s.steps, "pass_rate": after}]),
        "pass_rate_heldout": {"before_grpo": before, "after_grpo": after, "change": after - before},
        "timings": timings,
        "wall_time_s": timings["total_s"],
        "environment": _environment(),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    try:
        plot_curves(report, out / "curves.png")
        report["curves"] = str(out / "curves.png")
    except MatplotlibMissing as e:
        report["curves"] = None
        report["curves_error"] = str(e)
        _write(f"note: {e}")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _environment() -> dict:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
           "torch_threads": torch.get_num_threads()}
    for name in ("trl", "transformers"):
        try:
            env[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            env[name] = None
    return env


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        s = settings_from(args)
    except ValueError as e:
        parser.error(str(e))
    from microcoder_ext.trl.guard import check_trl

    try:
        check_trl()
    except Exception as e:  # noqa: BLE001 - the guard's message is the point
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = run(s, args.output_dir, progress=not args.no_progress, threads=args.threads)
    p = report["pass_rate_heldout"]
    print(f"\nheld-back pass rate: after warm start {p['before_grpo']:.3f} "
          f"-> after {s.steps} MicroCoder-GRPO steps {p['after_grpo']:.3f} (change {p['change']:+.3f}); "
          f"{report['wall_time_s']:.0f} s")
    print(f"report: {Path(args.output_dir) / 'report.json'}"
          + (f", curves: {report['curves']}" if report.get("curves") else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
