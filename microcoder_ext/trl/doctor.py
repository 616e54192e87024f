"""``microcoder doctor trl ARGS...``: the :class:`~microcoder_ext.core.doctor.TrainingPlan` of a ``microcoder train``.

``ARGS`` are ``microcoder train`` flags. They go through ``microcoder train``'s own parser
(:func:`microcoder_ext.trl.train_settings.add_flags`) and settings resolution (:func:`microcoder_ext.trl.train_settings.plan`:
preset -> the seed's flags -> ``--mc.*``, every check of ``--dry_run``), then into TRL's real ``GRPOConfig``
(:func:`microcoder_ext.trl.config.microcoder_grpo_config`, whose ``__post_init__`` checks the batch arithmetic and
derives ``steps_per_generation`` / ``generation_batch_size``). No model, tokenizer or dataset is loaded:
``--model_name_or_path`` and ``--dataset`` are optional here.

Device: the plan is checked as for a GPU run (``plan(..., cuda=True)``) unless ``--use_cpu`` is given, so that
``--dtype bfloat16`` is not an error on the machine running the doctor; the ``GRPOConfig`` is then built with
``bf16=False, fp16=False, use_cpu=True`` (TrainingArguments refuses bf16 without a GPU; precision does not enter any
rule). Processes: ``WORLD_SIZE`` (as ``accelerate launch`` sets it) or the doctor-only flag ``--num_processes N``.

A staged / auto schedule that ``microcoder train`` refuses as a continuous ramp is kept unvalidated
(:func:`~microcoder_ext.core.doctor.lenient_temperature_config`) for the ``continuous-temperature`` rule; the rest is
resolved without the temperature flags.

Errors: ``microcoder train``'s other refusals (argparse, ``UsageError``: conflicting flags, batch not a multiple of
``--num_generations``, ...) raise :class:`ArgvError` (nothing to diagnose, as ``microcoder train`` would exit 2 before
loading anything); ``GRPOConfig``'s own ``ValueError`` becomes ``plan.config_errors`` (an ``invalid-config`` error)
and the plan is built from the keyword arguments. ``--num_generations 1`` is refused by ``microcoder train``'s
parser (``must be >= 2``): ``group-size-1`` cannot arise from these flags.

Mapping (GRPOConfig -> TrainingPlan):

======================  ==================================================================================
TrainingPlan            ``microcoder train`` / GRPOConfig
======================  ==================================================================================
recipe                  ``--preset``
estimator               ``grpo`` (TRL's group z-score, ``scale_rewards``; group_estimator True)
group_size              ``num_generations`` (``--num_generations``)
train_batch_size        ``generation_batch_size / num_generations``: prompts per generation
                        (``per_device_train_batch_size x steps_per_generation x processes``; ``microcoder train``
                        leaves ``steps_per_generation`` = ``gradient_accumulation_steps`` unless ``--steps_per_generation``)
mini_batch_size         ``per_device_train_batch_size x gradient_accumulation_steps x processes / num_generations``:
                        prompts per optimizer update
max_response_length     ``max_completion_length``
kl_loss / kl_coef       ``beta > 0`` / ``beta`` (``--remove_kl_loss``, ``--beta``); kl_in_reward False (TRL: a loss)
clip_low / clip_high    ``epsilon`` / ``epsilon_high`` (``--epsilon``, ``--clipping_ratio``; None -> ``epsilon``)
loss_agg                ``loss_type`` (``dapo`` = token-mean over the generation batch)
rollout_temperature     ``temperature``; under the controller its first value (stage 0 / ``value``), which our
                        trainer sets before the first generation
logprob_temperature     ``temperature``: TRL scales the log-prob logits by the same value
temperature_synced      True: one value for both; our trainer sets it each regeneration under a controller
temperature             the ``microcoder.temperature`` config when the controller runs, else None
mask                    the ``microcoder.mask`` config when the mask is on, else None
mask_all_truncated      ``mask_truncated_completions`` (TRL's own filter: "Mask All")
reward_verdicts         True: ``microcoder train`` always uses :class:`microcoder_ext.trl.reward.CodeReward`
async_rollout           False (TRL's GRPOTrainer generates synchronously)
fixes                   ``microcoder train`` flags (below)
======================  ==================================================================================
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import warnings
from typing import Any

PROG = "microcoder train"
OPTIONAL = ("model_name_or_path", "dataset")
PLACEHOLDER = "<not given>"


class ArgvError(ValueError):
    """``microcoder train`` refuses the flags before loading anything (its exit 2); ``.errors`` lists why."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors) or ["the flags were rejected"]
        super().__init__("\n".join(self.errors))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ArgvError([message])


def build_parser() -> argparse.ArgumentParser:
    """``microcoder train``'s parser, with ``--model_name_or_path`` / ``--dataset`` optional and ``--num_processes``."""
    from microcoder_ext.trl import train_settings

    parser = _Parser(prog="microcoder doctor trl", add_help=False, allow_abbrev=False)
    train_settings.add_flags(parser)
    for action in parser._actions:
        if action.dest in OPTIONAL:
            action.required = False
            action.default = PLACEHOLDER
    parser.add_argument("--num_processes", type=train_settings.positive_int, default=None,
                        help="doctor only: processes of `accelerate launch` (default: $WORLD_SIZE or 1)")
    return parser


@dataclasses.dataclass
class Inspection:
    plan: Any  # TrainingPlan
    settings: Any  # microcoder_ext.trl.train_settings.Plan
    grpo_config: Any  # trl.GRPOConfig, None when it refused the arguments
    notes: list[str] = dataclasses.field(default_factory=list)
    lenient_temperature: bool = False  # the temperature schedule was refused and kept unvalidated


def _fixes(settings: Any, grpo: dict, world: int) -> dict[str, str]:
    control, mode = settings.temperature_control, settings.microcoder.temperature.mode
    fixes = {
        "temperature": "--temperature {}" if not control or mode == "constant"
        else "--temperature_mode constant --temperature {}",
        "temperature_stages": "--temperature_mode staged --mc.temperature.stages '{}'",
        "logprob_temperature": "--temperature {}",
        "kl_loss": "--remove_kl_loss True",
        "kl_coef": "--beta {}" if grpo["beta"] and settings.preset != "microcoder" else "--remove_kl_loss True",
        "clip_low": "--epsilon {}",
        "clip_high": "--clipping_ratio {}",
        "max_response_length": "--max_completion_length {}",
        "mask_rho": "--mc.mask.rho {}" if settings.mask else "--use_conditional_mask True --mc.mask.rho {}",
        "mask_mode": "--mc.mask.mode {}",
        "missing_verdict": "--mc.mask.missing_verdict {}",
    }
    # prompts per optimizer step = per_device x accumulation x processes / num_generations: one flag can't say it in
    # prompts, so the batch fixes name the product; microcoder train updates once per generation batch unless
    # --steps_per_generation is a multiple > 1 of --gradient_accumulation_steps
    g = grpo["num_generations"]
    fixes["train_batch_size"] = (f"--per_device_train_batch_size x --gradient_accumulation_steps x {world} process(es) "
                                 f"= {{}} prompts x {g} (--num_generations)")
    fixes["mini_batch_size"] = (f"--steps_per_generation {2 * grpo['gradient_accumulation_steps']} (two optimizer "
                                "updates per generation batch)")
    fixes["group_size"] = "--num_generations {}"
    return fixes


def _settings(args: argparse.Namespace, world: int) -> Any:
    """``train_settings.plan`` with ``world`` processes (it checks the batch arithmetic with ``WORLD_SIZE``)."""
    from microcoder_ext.trl import train_settings

    saved = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(world)
    try:
        return train_settings.plan(args, cuda=not args.use_cpu)
    finally:
        if saved is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = saved


TEMPERATURE_FLAGS = ("--temperature_mode", "--diversity_driven_temp")


def _without_temperature_flags(argv: list[str]) -> list[str]:
    """``argv`` without the schedule flags (``--mc.temperature.*``, ``--temperature_mode``,
    ``--diversity_driven_temp``), plus ``--temperature_mode constant`` so that the controller still runs."""
    out, skipping = [], False
    for token in argv:
        name = token.split("=", 1)[0]
        if name.startswith("--mc.temperature.") or name in TEMPERATURE_FLAGS:
            skipping = "=" not in token
            continue
        if skipping and not token.startswith("--"):
            continue
        skipping = False
        out.append(token)
    return [*out, "--temperature_mode", "constant"]


def _lenient_temperature(args: argparse.Namespace):
    """The temperature flags as an unvalidated-schedule TemperatureConfig (None: they are not what was refused)."""
    from microcoder_ext.core.config import ConfigError
    from microcoder_ext.core.doctor import lenient_temperature_config
    from microcoder_ext.trl import train_settings

    given, errors = train_settings.given_mc(args)
    if errors:
        return None
    values = {k.split(".", 1)[1]: v for k, v in given.items() if k.startswith("temperature.")}
    if args.diversity_driven_temp is not None:
        values["mode"] = "auto" if args.diversity_driven_temp else "constant"
    if args.temperature_mode is not None:
        values["mode"] = args.temperature_mode
    if args.temperature is not None:
        values["value"] = args.temperature
    if values.get("mode") not in ("staged", "auto"):
        return None
    try:
        return lenient_temperature_config(values)
    except ConfigError:
        return None


def _start_temperature(t: Any) -> float:
    if t.mode == "staged" and t.stages:
        return float(t.stages[0][1])
    return float(t.value)


def inspect(argv: list[str]) -> Inspection:
    from microcoder_ext.core.doctor import TrainingPlan
    from microcoder_ext.trl import train_settings
    from microcoder_ext.trl.config import microcoder_grpo_config, preset_settings

    argv = [a for a in argv if a != "--dry_run"]
    if any(a in ("-h", "--help") for a in argv):
        raise ArgvError([f"--help is not a training flag (see `{PROG} --help`)"])
    parser = build_parser()
    args = parser.parse_args(list(argv))
    world = args.num_processes or train_settings.world_size()
    lenient = None
    try:
        settings = _settings(args, world)
    except train_settings.UsageError as e:
        # a staged / auto schedule refused as a continuous ramp: keep it unvalidated for continuous-temperature and
        # resolve everything else without the temperature flags
        lenient = _lenient_temperature(args)
        if lenient is None:
            raise ArgvError(e.errors) from None
        try:
            settings = _settings(parser.parse_args(_without_temperature_flags(argv)), world)
        except train_settings.UsageError:
            raise ArgvError(e.errors) from None
        settings = dataclasses.replace(settings, temperature_control=True, microcoder=dataclasses.replace(
            settings.microcoder, temperature=lenient))
    kwargs = {**preset_settings(settings.preset), **settings.grpo}
    config_errors: list[str] = []
    config = None
    try:
        with warnings.catch_warnings():  # transformers' deprecation notes on microcoder train's own keywords
            warnings.simplefilter("ignore", FutureWarning)
            config = microcoder_grpo_config(settings.preset, **{**settings.grpo, "bf16": False, "fp16": False,
                                                                 "use_cpu": True})
    except (ValueError, TypeError) as e:
        config_errors.append(f"{PROG}: GRPOConfig refuses the settings: {e}")

    def get(name: str, default: Any = None) -> Any:
        if config is not None:
            return getattr(config, name)
        return kwargs.get(name, default)

    g = get("num_generations")
    per_update = get("per_device_train_batch_size") * get("gradient_accumulation_steps") * world
    # GRPOConfig derives generation_batch_size with its own world size (1 here): recompute it for `world` processes
    per_generation = get("per_device_train_batch_size") * (get("steps_per_generation")
                                                           or get("gradient_accumulation_steps")) * world
    beta = float(get("beta", 0.0) or 0.0)
    eps = float(get("epsilon", 0.2))
    eps_high = get("epsilon_high")
    mc = settings.microcoder
    # a controller sets the temperature at every regeneration, from its first value on
    temperature = _start_temperature(mc.temperature) if settings.temperature_control else float(get("temperature", 1.0))
    plan = TrainingPlan(
        framework="trl",
        recipe=settings.preset,
        estimator="grpo",
        group_estimator=True,
        group_size=g,
        train_batch_size=per_generation // g if g else None,
        mini_batch_size=per_update // g if g else None,
        max_response_length=get("max_completion_length"),
        kl_loss=beta > 0,
        kl_coef=beta,
        kl_in_reward=False,
        clip_low=eps,
        clip_high=float(eps_high) if eps_high is not None else eps,
        loss_agg=get("loss_type"),
        rollout_temperature=temperature,
        logprob_temperature=temperature,  # GRPOTrainer: logits / self.temperature for the log-probs
        temperature_synced=True,
        temperature=mc.temperature if settings.temperature_control else None,
        mask=mc.mask if settings.mask else None,
        mask_all_truncated=bool(get("mask_truncated_completions", False)),
        reward_verdicts=True,  # CodeReward
        async_rollout=False,
        fixes=_fixes(settings, {**kwargs, "beta": beta, "num_generations": g}, world),
        config_errors=config_errors,
    )
    return Inspection(plan=plan, settings=settings, grpo_config=config, notes=list(settings.notes),
                      lenient_temperature=lenient is not None)


def plan_from_argv(argv: list[str]) -> Any:
    """The TrainingPlan of ``microcoder train ARGV`` (see the module docstring). Raises :class:`ArgvError` (a
    ``ValueError``) when ``microcoder train`` itself refuses the flags."""
    return inspect(list(argv)).plan
