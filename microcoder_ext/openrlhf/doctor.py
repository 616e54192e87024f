"""``microcoder doctor openrlhf ARGS...``: the :class:`~microcoder_ext.core.doctor.TrainingPlan` of an OpenRLHF launch.

``ARGS`` are what a user would pass to ``python -m microcoder_ext.openrlhf.train`` (OpenRLHF 0.11.2's
``train_ppo_ray`` flags plus ``--mc.*``). They are parsed by the real launcher
(:func:`microcoder_ext.openrlhf.launcher.launch` with ``--mc.dry_run``): OpenRLHF's own argparse, ``hierarchize``,
the preset's injected flags and checks, and OpenRLHF's validation, stopped where ``train()`` would start Ray. The
dry-run table (stdout) is swallowed; the launcher's ``error:`` / ``WARNING:`` lines (stderr) are kept and become
findings.

What happens when the launcher does not accept the arguments:

* exit 2 (a bad ``--mc.*`` flag, OpenRLHF's argparse): nothing to diagnose, :class:`ArgvError` lists the messages;
* a temperature schedule the launcher refuses as a continuous ramp (``--mc.temperature.stages`` /
  ``candidates`` / ``min_interval``): the schedule is kept unvalidated
  (:func:`~microcoder_ext.core.doctor.lenient_temperature_config`) for the ``continuous-temperature`` rule, and the
  launcher runs without the ``--mc.temperature.*`` flags to parse everything else;
* exit 1 after OpenRLHF's parser ran (a flag contradicting the preset, async training with our trainer, no reward,
  OpenRLHF's own validation, e.g. ``group_norm`` with ``--rollout.n_samples_per_prompt 1``): the launcher's
  ``hierarchize`` wrapper already holds the parsed args, so the plan is built from them (``--actor.eps_clip_low_high``
  completed from ``--actor.eps_clip`` as OpenRLHF would) and each of the launcher's ``error:`` messages goes to
  ``plan.config_errors`` (one ``invalid-config`` error finding each). Re-parsing with ``--mc.allow_override`` is not
  needed (the args are already there) and would not help for the refusals that are not overridable;
* the launcher's ``WARNING:`` lines (a flag kept by ``--mc.allow_override``, a non-group estimator with the mask) are
  not findings: the rules (``kl-with-microcoder``, ``symmetric-clip``, ...) judge the values themselves; they are
  kept on :class:`Inspection`.

Mapping (OpenRLHF's nested args -> TrainingPlan):

======================  ==================================================================================
TrainingPlan            OpenRLHF
======================  ==================================================================================
recipe                  ``--mc.preset``
estimator               ``--algo.advantage.estimator``; group estimators: group_norm, dr_grpo, rloo,
                        reinforce_baseline (:data:`~microcoder_ext.openrlhf.launcher.GROUP_ESTIMATORS`)
group_size              ``--rollout.n_samples_per_prompt``
train_batch_size        ``--rollout.batch_size`` (prompts per step)
mini_batch_size         ``--train.batch_size`` / n (OpenRLHF counts samples; prompts per optimizer update)
max_response_length     ``--rollout.max_new_tokens``; unset: OpenRLHF generates up to ``--data.max_len`` minus
                        the prompt, so ``--data.max_len`` (an upper bound)
kl_loss / kl_coef       ``--algo.kl.use_loss`` with ``--algo.kl.init_coef`` > 0 / ``--algo.kl.init_coef``
kl_in_reward            ``--algo.kl.init_coef`` > 0 without ``--algo.kl.use_loss``
clip_low / clip_high    ``--actor.eps_clip_low_high`` (default ``(eps_clip, eps_clip)``)
loss_agg                ``--actor.loss_agg_mode``
rollout_temperature     ``--rollout.temperature`` (the controller's step-0 value under ``microcoder``)
logprob_temperature     ``--rollout.temperature`` too: OpenRLHF builds the Actor with it
temperature_synced      True: under ``microcoder`` our trainer sets both every step; otherwise both stay the one
                        constant ``--rollout.temperature``
temperature             ``--mc.temperature.*`` when the preset runs the controller (``microcoder``), else None
mask                    ``--mc.mask.*`` when the preset applies the mask and ``--mc.mask.enable`` is true
reward_verdicts         ``--reward.remote_url`` = microcoder-ext's reward file -> True; a reward model
                        (``--reward.model_name_or_path`` without a remote url) -> False; another file / URL /
                        agent -> None (unknown)
async_rollout           ``--train.async_enable`` or ``--train.partial_rollout_enable``
fixes                   the launcher flags that change each setting (below)
======================  ==================================================================================
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROG = "python -m microcoder_ext.openrlhf.train"
TEMPERATURE_FLAG = "--mc.temperature."


class ArgvError(ValueError):
    """The arguments cannot be parsed at all (a bad ``--mc.*`` flag, OpenRLHF's argparse: the launcher's exit 2);
    ``.errors`` holds the messages."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors) or ["the arguments were rejected"]
        super().__init__("\n".join(self.errors))


@dataclass
class Inspection:
    """One parse of the arguments: the plan and the launcher's own verdict and messages."""

    plan: Any  # TrainingPlan
    code: int  # the launcher's exit status (0 accepted, 1 refused)
    errors: list[str] = field(default_factory=list)  # its error: messages (also plan.config_errors)
    warnings: list[str] = field(default_factory=list)  # its WARNING: lines (--mc.allow_override, estimator)
    lenient_temperature: bool = False  # the --mc.temperature.* schedule was refused and kept unvalidated


def _messages(stderr: str) -> tuple[list[str], list[str]]:
    """``error:`` and ``WARNING:`` messages of the launcher's stderr (continuation lines joined)."""
    errors: list[str] = []
    warnings: list[str] = []
    current: list[str] | None = None
    for line in stderr.splitlines():
        if line.startswith("error: "):
            errors.append(line[len("error: "):])
            current = errors
        elif line.startswith("WARNING: "):
            warnings.append(line[len("WARNING: "):])
            current = warnings
        elif line.startswith("  ") and current is not None:
            current[-1] += " " + line.strip()
        elif ": error: " in line:  # argparse: "train_ppo_ray: error: ..."
            errors.append(line.split(": error: ", 1)[1])
            current = errors
        else:
            current = None
    return errors, warnings


def _run_launcher(argv: list[str]):
    from microcoder_ext.openrlhf import launcher

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = launcher.launch([*argv, "--mc.dry_run"])
    return result, err.getvalue()


def _without_temperature_flags(argv: list[str]) -> list[str]:
    """``argv`` without the ``--mc.temperature.*`` flags and their values."""
    out, skipping = [], False
    for token in argv:
        if token.startswith(TEMPERATURE_FLAG):
            skipping = "=" not in token
            continue
        if skipping and not token.startswith("--"):
            continue
        skipping = False
        out.append(token)
    return out


def _lenient_temperature(argv: list[str]):
    """The ``--mc.temperature.*`` values as an unvalidated-schedule TemperatureConfig, or None when they are not
    the reason the flags were refused."""
    import argparse

    from microcoder_ext.core.config import ConfigError
    from microcoder_ext.core.doctor import lenient_temperature_config
    from microcoder_ext.openrlhf import options as mc_options

    try:
        ns, _ = mc_options.build_parser().parse_known_args(argv)
    except mc_options.OptionsError:
        return None
    values: dict[str, Any] = {}
    for spec in mc_options.specs():
        dest = f"mc.{spec.key}"
        if spec.key.startswith("temperature.") and dest in vars(ns):
            try:
                values[spec.key.split(".", 1)[1]] = spec.post(vars(ns)[dest]) if spec.post else vars(ns)[dest]
            except argparse.ArgumentTypeError:
                return None
    if values.get("mode") not in ("staged", "auto"):
        return None
    try:
        return lenient_temperature_config(values)
    except ConfigError:
        return None


def _options(argv: list[str]):
    """(McOptions, the argv for the launcher, lenient?)"""
    import dataclasses

    from microcoder_ext.core.config import MicrocoderConfig
    from microcoder_ext.openrlhf import options as mc_options

    try:
        return mc_options.parse(argv)[0], argv, False
    except mc_options.OptionsError as e:
        temperature = _lenient_temperature(argv)
        if temperature is None:
            raise ArgvError(e.errors) from None
        stripped = _without_temperature_flags(argv)
        try:
            mc = mc_options.parse(stripped)[0]
        except mc_options.OptionsError as e2:
            raise ArgvError(e2.errors) from None
        if not mc.preset.temperature_control:
            raise ArgvError(e.errors) from None
        config = MicrocoderConfig(mask=mc.config.mask, temperature=temperature)
        return dataclasses.replace(mc, config=config), stripped, True


def _reward_verdicts(args: Any) -> bool | None:
    from microcoder_ext.openrlhf.launcher import reward_file
    from microcoder_ext.openrlhf.presets import lookup

    if lookup(args, "train.agent_func_path"):
        return None  # an agent's own reward
    remote = lookup(args, "reward.remote_url")
    if remote:
        urls = [remote] if isinstance(remote, str) else list(remote)
        ours = 0
        for url in urls:
            path = Path(str(url))
            try:
                if path.resolve() == Path(reward_file()).resolve() or (
                        path.is_file() and "microcoder_ext.openrlhf.reward" in path.read_text(errors="replace")):
                    ours += 1  # the packaged file or a copy of it (reward_fns/openrlhf_reward.py)
            except OSError:
                pass
        return True if ours == len(urls) else None
    if lookup(args, "reward.model_name_or_path"):
        return False  # a reward model scores; it returns no verdicts
    return None


def _fixes(preset: Any, mc: Any, n: int | None, batch: int | None, use_loss: bool) -> dict[str, str]:
    """Concept -> the launcher flags that set it (``{}`` = the value the finding suggests)."""
    from microcoder_ext.openrlhf.launcher import reward_file

    fixes = {
        # OpenRLHF has no KL term (loss or reward) at --algo.kl.init_coef 0
        "kl_loss": "--algo.kl.init_coef 0" + (" (and drop --algo.kl.use_loss)" if use_loss else ""),
        "kl_coef": "--algo.kl.init_coef {}",
        "clip_low": "--actor.eps_clip_low_high {}",
        "clip_high": "{}",  # with clip_low: --actor.eps_clip_low_high LOW HIGH
        "max_response_length": "--rollout.max_new_tokens {}",
        "train_batch_size": "--rollout.batch_size {}",
        "group_size": "--rollout.n_samples_per_prompt {}",
        "reward": f"--reward.remote_url {reward_file()}",
    }
    if n and batch:  # OpenRLHF counts samples: the paper's mini-batch of half the batch, times n
        fixes["mini_batch_size"] = f"--train.batch_size {max(1, batch // 2) * n}"
    if preset.temperature_control:
        fixes["temperature"] = ("--mc.temperature.value {}" if mc.config.temperature.mode == "constant"
                                else "--mc.temperature.mode constant --mc.temperature.value {}")
        fixes["temperature_stages"] = "--mc.temperature.mode staged --mc.temperature.stages '{}'"
        fixes["logprob_temperature"] = "--mc.temperature.value {}"
    else:
        fixes["temperature"] = "--rollout.temperature {}"
        fixes["logprob_temperature"] = fixes["temperature"]
        fixes["temperature_stages"] = "--mc.preset microcoder --mc.temperature.mode staged --mc.temperature.stages '{}'"
    prefix = "" if preset.mask else "--mc.preset microcoder "
    fixes["mask_rho"] = prefix + "--mc.mask.rho {}"
    fixes["mask_mode"] = prefix + "--mc.mask.mode {}"
    fixes["missing_verdict"] = prefix + "--mc.mask.missing_verdict {}"
    return fixes


def _start_temperature(t: Any) -> float:
    if t.mode == "staged" and t.stages:
        return float(t.stages[0][1])
    return float(t.value)


def build_plan(args: Any, mc: Any, config_errors: list[str] | None = None) -> Any:
    """The :class:`~microcoder_ext.core.doctor.TrainingPlan` of OpenRLHF's parsed ``args`` and the ``--mc.*`` options
    (:class:`microcoder_ext.openrlhf.options.McOptions`)."""
    from microcoder_ext.core.doctor import TrainingPlan
    from microcoder_ext.openrlhf.launcher import ASYNC_DESTS, GROUP_ESTIMATORS, _effective
    from microcoder_ext.openrlhf.presets import has, lookup

    preset = mc.preset
    estimator = lookup(args, "algo.advantage.estimator")
    n = lookup(args, "rollout.n_samples_per_prompt")
    batch = lookup(args, "rollout.batch_size")
    samples = lookup(args, "train.batch_size")
    mini = samples // n if isinstance(n, int) and n > 0 and isinstance(samples, int) else None
    max_new = lookup(args, "rollout.max_new_tokens")
    use_loss = bool(lookup(args, "algo.kl.use_loss"))
    coef = lookup(args, "algo.kl.init_coef")
    coef = float(coef) if coef is not None else None
    clip = _effective(args, "actor.eps_clip_low_high")
    clip_low, clip_high = (float(clip[0]), float(clip[1])) if clip is not None and len(clip) == 2 else (None, None)
    controller = mc.config.temperature if preset.temperature_control else None
    # under microcoder the launcher sets --rollout.temperature to the controller's step-0 value (and refuses another)
    temperature = _start_temperature(controller) if controller is not None else float(lookup(args, "rollout.temperature"))
    return TrainingPlan(
        framework="openrlhf",
        recipe=preset.name,
        estimator=estimator,
        group_estimator=estimator in GROUP_ESTIMATORS,
        group_size=n,
        train_batch_size=batch,
        mini_batch_size=mini,
        # unset: vLLM generates up to --data.max_len minus the prompt; --data.max_len is the upper bound
        max_response_length=max_new if max_new else lookup(args, "data.max_len"),
        kl_loss=use_loss and (coef or 0.0) > 0,  # --algo.kl.init_coef 0: no KL term at all
        kl_coef=coef,
        kl_in_reward=(not use_loss) and (coef or 0.0) > 0,
        clip_low=clip_low,
        clip_high=clip_high,
        # OpenRLHF 0.11.0/0.11.1 have no such flag: their PPO loss is always token-mean
        loss_agg=lookup(args, "actor.loss_agg_mode") if has(args, "actor.loss_agg_mode") else "token-mean",
        rollout_temperature=temperature,
        logprob_temperature=temperature,  # ppo_actor.py: Actor(..., temperature=args.rollout.temperature)
        temperature_synced=True,  # microcoder: our trainer sets both every step; otherwise one constant for both
        temperature=controller,
        mask=mc.config.mask if (preset.mask and mc.config.mask.enable) else None,
        reward_verdicts=_reward_verdicts(args),
        async_rollout=any(bool(lookup(args, d)) for d in ASYNC_DESTS),
        fixes=_fixes(preset, mc, n, batch, use_loss),
        config_errors=list(config_errors or []),
    )


def inspect(argv: list[str]) -> Inspection:
    """Parse ``argv`` with the real launcher (dry run) and build the plan; see the module docstring."""
    argv = [a for a in argv if a != "--mc.dry_run"]
    if any(a in ("-h", "--help") for a in argv):
        raise ArgvError([f"--help is not a training argument (see `{PROG} --help` for the flags)"])
    mc, launch_argv, lenient = _options(list(argv))
    result, stderr = _run_launcher(launch_argv)
    errors, warnings = _messages(stderr)
    if result.args is None:  # OpenRLHF's argparse (exit 2), the version guard, an import problem: nothing parsed
        raise ArgvError(errors or [stderr.strip() or f"the launcher exited with status {result.code}"])
    config_errors = [f"{PROG} refuses the arguments: {e}" for e in errors] if result.code else []
    plan = build_plan(result.args, mc, config_errors)
    return Inspection(plan=plan, code=result.code, errors=errors, warnings=warnings, lenient_temperature=lenient)


def plan_from_argv(argv: list[str]) -> Any:
    """The TrainingPlan of ``python -m microcoder_ext.openrlhf.train ARGV`` (see the module docstring).

    Raises :class:`ArgvError` (a ``ValueError``) when the arguments cannot be parsed at all."""
    return inspect(list(argv)).plan
