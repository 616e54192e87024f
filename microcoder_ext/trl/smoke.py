"""``microcoder smoke trl <microcoder train flags>``: a few real steps of ``microcoder train`` (TRL's
``GRPOTrainer`` + :class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer`) on the local CPU.

:func:`plan` parses the flags with ``microcoder train``'s own parser and rewrites what a CPU run needs (each a
:class:`~microcoder_ext.smoke.report.Substitution`): the model (a tiny model of the same family,
:func:`microcoder_ext.smoke.model.prepare_model`), the first rows of ``--dataset`` (same format) or the bundled
problems, ``--max_steps``, the batch (group size capped, prompts per optimizer step scaled down), the completion
budget, CPU and fp32, vLLM off, the output dir, reporting off, and a staged temperature schedule compressed into the
smoke's steps. :func:`run` runs ``python -m microcoder_ext.cli train`` in a child process and reads TRL's own log
history (written into ``microcoder_train.json``).

TRL generates with the model it trains (no separate engine, no weight sync): the report's weight columns compare the
saved model with the model the run started from.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from microcoder_ext.smoke.report import SmokeReport, StepRecord, Substitution
from microcoder_ext.smoke.runner import EXIT_FAILED, EXIT_OK, SmokeOptions, SmokeUsageError

FRAMEWORK_METRICS = {"pg_loss": "loss", "grad_norm": "grad_norm", "reward_mean": "reward",
                     "truncated_frac": "completions/clipped_ratio", "step_s": "step_time",
                     "response_length_mean": "completions/mean_length"}


@dataclass
class TrlSmokePlan:
    argv: list[str]
    env: dict
    work: Path
    substitutions: list[Substitution]
    model: dict
    data: dict
    steps: int
    samples_per_step: int
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "microcoder_ext.cli", "train", *self.argv]


def _parser() -> argparse.ArgumentParser:
    from microcoder_ext.trl.train_settings import add_flags

    class _Parser(argparse.ArgumentParser):
        def error(self, message):
            raise SmokeUsageError(f"microcoder train: {message}")

    p = _Parser(prog="microcoder train", add_help=False)
    add_flags(p)
    return p


def _drop(argv: list[str], flag: str, takes_value: bool) -> list[str]:
    out, skip = [], False
    for i, tok in enumerate(argv):
        if skip:
            skip = False
            continue
        if tok == flag:
            skip = takes_value
            continue
        if tok.startswith(flag + "="):
            continue
        out.append(tok)
    return out


def plan(launch: Sequence[str], opts: SmokeOptions, work: Path) -> TrlSmokePlan:
    from microcoder_ext.smoke.schedule import compress_stages
    from microcoder_ext.smoke.data import problems_data
    from microcoder_ext.smoke.model import prepare_model
    from microcoder_ext.smoke.runner import base_env

    argv = list(launch)
    fill = []
    if "--model_name_or_path" not in " ".join(argv):
        fill += ["--model_name_or_path", "none"]
    if "--dataset" not in " ".join(argv):
        fill += ["--dataset", "none"]
    args = _parser().parse_args(argv + fill)
    subs: list[Substitution] = []
    notes: list[str] = []
    values: dict[str, Any] = {}

    def set_flag(flag: str, value: Any, what: str, launch_value: Any, why: str = "", *, flagged: bool = True):
        values[flag] = value
        if str(launch_value) != str(value) and what:
            subs.append(Substitution(what, "unset" if launch_value is None else str(launch_value),
                                     str(value) if flagged else "on", why))

    model_arg = None if args.model_name_or_path == "none" else args.model_name_or_path
    tiny = prepare_model(model_arg, warm_steps=opts.warm_start)
    set_flag("--model_name_or_path", tiny.path, "model", model_arg,
             f"{tiny.architecture}, {tiny.parameters / 1e6:.2f} M parameters, {tiny.config_source}; tokenizer: "
             f"{tiny.tokenizer_source}" + (f"; warm start {tiny.warm_start_steps} steps" if tiny.warm_start_steps
                                           else ""))
    data = problems_data(None if args.dataset == "none" else args.dataset, work / "data", opts.rows)
    set_flag("--dataset", data.path, "train data", args.dataset, data.source)
    set_flag("--max_steps", opts.steps, "optimizer steps", args.max_steps, "smoke")
    group = min(int(args.num_generations), opts.max_samples)
    accum = min(int(args.gradient_accumulation_steps), opts.prompts)
    per_device = group * max(1, opts.prompts // accum)
    set_flag("--num_generations", group, "samples per prompt", args.num_generations, "CPU time")
    set_flag("--gradient_accumulation_steps", accum, "gradient accumulation", args.gradient_accumulation_steps,
             "CPU time")
    set_flag("--per_device_train_batch_size", per_device, "per-device batch", args.per_device_train_batch_size,
             f"{per_device * accum // group} prompts per optimizer step")
    budget = min(int(args.max_completion_length), opts.response_length)
    set_flag("--max_completion_length", budget, "completion budget (tokens)", args.max_completion_length, "CPU time")
    if args.dtype not in (None, "float32"):
        set_flag("--dtype", "float32", "dtype", args.dtype, "CPU")
    set_flag("--output_dir", str(work / "out"), "output dir", args.output_dir, "")
    set_flag("--report_to", "none", "report to", args.report_to, "no network")
    drops = []
    if args.use_vllm:
        drops.append(("--use_vllm", False))
        subs.append(Substitution("generation", "vLLM (colocate)", "transformers generate",
                                 "CPU run: microcoder train takes --use_vllm only with a GPU"))
    if not args.use_cpu:
        subs.append(Substitution("device", "GPU", "CPU (--use_cpu)", "no GPU"))
    mode = getattr(args, "mc.temperature.mode", None) or args.temperature_mode
    stages = getattr(args, "mc.temperature.stages", None)
    if mode == "staged" and stages:
        from microcoder_ext.core.schedule import normalize_stages

        parsed = normalize_stages(json.loads(stages) if isinstance(stages, str) else stages)
        if parsed and parsed[-1][0] >= opts.steps:
            short = compress_stages(parsed, opts.steps, first_step=0)
            set_flag("--mc.temperature.stages", json.dumps(short), "temperature stages", json.dumps(parsed),
                     "compressed into the smoke's steps")
            values["--mc.temperature.min_stage_steps"] = 1
    for flag, takes_value in drops:
        argv = _drop(argv, flag, takes_value)
    for flag in values:
        argv = _drop(argv, flag, True)
    final = argv + [tok for flag, value in values.items() for tok in (flag, str(value))] + ["--use_cpu"]
    env = base_env(work, {"CUDA_VISIBLE_DEVICES": "", **opts.extra_env})
    return TrlSmokePlan(argv=final, env=env, work=work, substitutions=subs, model=tiny.to_dict(),
                        data={"train": vars(data)}, steps=opts.steps, samples_per_step=per_device * accum,
                        notes=notes)


def build_steps(log_history: list[dict], samples: int, changed: bool | None) -> list[StepRecord]:
    steps = []
    for row in log_history:
        if "loss" not in row or "step" not in row:
            continue
        rec = StepRecord(step=int(row["step"]))
        rec.times = {"generation": None, "reward": None, "old_log_prob": None, "update": None, "weight_sync": None}
        rec.microcoder = {k: float(v) for k, v in row.items() if k.startswith("microcoder/")}
        rec.framework = {name: float(row[key]) for name, key in FRAMEWORK_METRICS.items() if key in row}
        rec.responses = samples
        rec.verdicts = {k.split("/", 2)[2]: round(float(v) * samples) for k, v in row.items()
                        if k.startswith("microcoder/verdict/") and float(v)}
        t = row.get("microcoder/temperature")
        if t is not None:
            rec.sampler_temperature = [float(t)]
            rec.logprob_temperature = float(t)
        steps.append(rec)
    if steps:
        steps[-1].weights_changed = changed
    return steps


def _model_checksum(path: str) -> str | None:
    from safetensors.torch import load_file

    from microcoder_ext.smoke.weights import weights_checksum

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        return None
    tensors = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return weights_checksum(tensors.items())


def run(p: TrlSmokePlan, opts: SmokeOptions, progress=None) -> SmokeReport:
    from microcoder_ext.smoke.runner import error_excerpt, run_logged

    log = p.work / "train.log"
    t0 = time.monotonic()
    rc = run_logged(p.command, p.env, log, cwd=p.work, verbose=opts.verbose, timeout=opts.timeout)
    settings_file = p.work / "out" / "microcoder_train.json"
    settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
    history = settings.get("log_history", [])
    changed = None
    if rc == 0:
        before, after = _model_checksum(p.model["path"]), _model_checksum(str(p.work / "out"))
        changed = None if before is None or after is None else before != after
    steps = build_steps(history, p.samples_per_step, changed)
    constant = settings.get("grpo_config", {}).get("temperature") if settings else None
    for s in steps:  # no controller: TRL samples and scores at GRPOConfig.temperature
        if s.logprob_temperature is None and constant is not None:
            s.sampler_temperature, s.logprob_temperature = [float(constant)], float(constant)
    ok = rc == 0 and len(steps) >= p.steps
    report = SmokeReport(framework="trl", ok=ok, exit_code=EXIT_OK if ok else EXIT_FAILED, steps_requested=p.steps,
                         command=p.command, substitutions=p.substitutions, model=p.model, data=p.data, steps=steps,
                         wall_s=round(time.monotonic() - t0, 1), log=str(log), notes=list(p.notes))
    if not ok:
        report.error = (f"microcoder train exited with status {rc} after {len(steps)} of {p.steps} steps; its "
                        "error:\n" + error_excerpt(log))
    if progress is not None:
        progress(f"  {len(steps)}/{p.steps} steps ({report.wall_s:.0f} s)")
    return report
