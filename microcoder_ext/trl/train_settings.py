"""``microcoder train``'s flags -> the validated settings of a TRL run (:class:`Plan`: ``GRPOConfig`` overrides,
the ``microcoder:`` config, mask / temperature controller on or off, LoRA).

The flags (:func:`add_flags`): MicroCoder's own ``train_grpo.py`` (``--model_name_or_path``,
``--use_conditional_mask``, ``--diversity_driven_temp``, ``--remove_kl_loss``, ``--clipping_ratio``,
``--per_device_train_batch_size``, ``--gradient_accumulation_steps``) plus LoRA, the temperature mode, a preset, and
every ``microcoder.*`` key as a ``--mc.<section>.<key>`` flag (the same flags as the OpenRLHF launcher's, built
from :func:`microcoder_ext.core.options.option_specs`: the config fields' help metadata).

How they are put together (:func:`plan`): the preset (``--preset``, default ``microcoder``:
:data:`microcoder_ext.trl.config.PRESETS`) gives the ``GRPOConfig`` and whether the mask and the temperature
controller run; the seed's flags, when given, change exactly what they name (so ``--preset grpo_baseline
--remove_kl_loss True`` is the GRPO baseline without KL); the ``--mc.*`` flags set ``microcoder.*`` keys. A seed flag
and a ``--mc.*`` flag that set the same thing differently are an error. Every problem is collected into one
:class:`UsageError` before anything is loaded. Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

PRESET_NAMES = ("microcoder", "mask_only", "dapo_baseline", "grpo_baseline")  # microcoder_ext.trl.config.PRESETS
TEMPERATURE_MODES = ("constant", "staged", "auto")
DEFAULT_BETA = 0.001  # --remove_kl_loss False: the grpo_baseline preset's KL coefficient


class UsageError(Exception):
    """Bad flags or input: ``error:`` lines on stderr, exit status 2. ``.errors`` lists every problem."""

    def __init__(self, errors: Sequence[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


# ------------------------------------------------------------------------------------------------ value types


def bool_value(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def _number(kind: type, low: float | None = None, *, strict: bool = False, what: str = ""):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if low is not None and (value <= low if strict else value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {low:g}{what}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


positive_float = _number(float, 0.0, strict=True)
positive_int = _number(int, 1)
nonneg_float = _number(float, 0.0)


def clipping_ratio_value(text: str) -> float:
    value = _number(float, 0.0, strict=True, what=" (the upper clip is 1 + clipping_ratio)")(text)
    if value >= 10:
        raise argparse.ArgumentTypeError(f"must be < 10 (the upper clip is 1 + clipping_ratio), got {text!r}")
    return value


# ------------------------------------------------------------------------------------------------ flags


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``microcoder train`` (the doctor and the smoke parse the same command line)."""
    B = "{True,False}"

    g = parser.add_argument_group("model and data")
    g.add_argument("--model_name_or_path", required=True, metavar="PATH_OR_NAME",
                   help="local model directory or Hugging Face model name (loaded by transformers)")
    g.add_argument("--dataset", required=True, metavar="PATH_OR_NAME",
                   help="`microcoder data prepare` output (verl .parquet, OpenRLHF .jsonl, or its directory) or a "
                        "Hugging Face dataset name (see 'data' below)")
    g.add_argument("--dataset_config", default=None, help="Hugging Face dataset: configuration name")
    g.add_argument("--dataset_split", default="train", help="Hugging Face dataset: split (default %(default)s)")
    g.add_argument("--max_samples", type=positive_int, default=None, metavar="N", help="use the first N rows only")
    g.add_argument("--output_dir", default="microcoder-trl-out", help="where checkpoints and logs go "
                                                                      "(default %(default)s)")
    g.add_argument("--trust_remote_code", action="store_true", help="allow model code from the model directory")
    g.add_argument("--dtype", choices=("float32", "bfloat16", "float16", "auto"), default=None,
                   help="model dtype (default: bfloat16 on a GPU, float32 on CPU)")

    g = parser.add_argument_group("MicroCoder-GRPO (the seed's flags; see below for what each sets)")
    g.add_argument("--preset", choices=PRESET_NAMES, default="microcoder",
                   help="starting point of the settings (default %(default)s; table below)")
    g.add_argument("--use_conditional_mask", type=bool_value, metavar=B, default=None,
                   help="conditional truncation mask on/off (default: the preset's)")
    g.add_argument("--diversity_driven_temp", type=bool_value, metavar=B, default=None,
                   help="True: diversity-determined temperature (controller mode auto); False: constant "
                        "(default: the preset's)")
    g.add_argument("--temperature_mode", choices=TEMPERATURE_MODES, default=None,
                   help="the temperature controller's mode (= --mc.temperature.mode; staged needs "
                        "--mc.temperature.stages)")
    g.add_argument("--temperature", type=positive_float, default=None,
                   help="constant: the temperature; auto: the start (default 1.2, the paper's)")
    g.add_argument("--remove_kl_loss", type=bool_value, metavar=B, default=None,
                   help="True: no KL term (beta 0); False: beta = --beta (default: the preset's)")
    g.add_argument("--beta", type=nonneg_float, default=None,
                   help=f"KL coefficient when the KL loss is kept (default {DEFAULT_BETA})")
    g.add_argument("--clipping_ratio", type=clipping_ratio_value, default=None, metavar="X",
                   help="high clipping ratio: epsilon_high = X (default: the preset's, 0.28)")
    g.add_argument("--epsilon", type=positive_float, default=None,
                   help="low clipping ratio: the ratio is clipped below at 1 - epsilon (default 0.2)")

    g = parser.add_argument_group("training")
    g.add_argument("--per_device_train_batch_size", type=positive_int, default=4,
                   help="completions per device per micro-step (default %(default)s)")
    g.add_argument("--gradient_accumulation_steps", type=positive_int, default=8, help="(default %(default)s)")
    g.add_argument("--steps_per_generation", type=positive_int, default=None,
                   help="micro-steps per generation batch (TRL's GRPOConfig.steps_per_generation; default = "
                        "--gradient_accumulation_steps: one optimizer update per generated batch, fully on-policy; "
                        "2 x it gives two updates per batch, like the paper's batch 64 / mini-batch 32)")
    g.add_argument("--num_generations", type=_number(int, 2), default=8,
                   help="completions per prompt, the GRPO group (default %(default)s; per_device_train_batch_size x "
                        "gradient_accumulation_steps x processes must be a multiple of it)")
    g.add_argument("--max_completion_length", type=positive_int, default=1024,
                   help="completion budget in tokens, L_max of the mask (default %(default)s)")
    g.add_argument("--max_prompt_length", type=positive_int, default=None,
                   help="rows whose prompt is longer (in tokens) are dropped (default: keep all)")
    g.add_argument("--learning_rate", type=positive_float, default=None,
                   help="(default 1e-6; 1e-5 with --use_lora)")
    g.add_argument("--max_steps", type=int, default=-1, help="optimizer steps (default -1: --num_train_epochs)")
    g.add_argument("--num_train_epochs", type=positive_float, default=1.0, help="(default %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="(default %(default)s; also the mask's coins)")
    g.add_argument("--use_cpu", action="store_true", help="train on CPU (also chosen when no GPU is visible)")
    g.add_argument("--logging_steps", type=positive_int, default=1, help="(default %(default)s)")
    g.add_argument("--save_steps", type=positive_int, default=None,
                   help="checkpoint every N steps (default: none; the final model is saved)")
    g.add_argument("--report_to", default="none",
                   help="TRL/transformers loggers: none, tensorboard, wandb, ... (comma-separated; default none)")
    g.add_argument("--gradient_checkpointing", action="store_true", help="trade compute for memory")
    g.add_argument("--use_vllm", action="store_true", help="generate with vLLM (colocate mode; GPU runs only: refused with --use_cpu)")
    g.add_argument("--dry_run", action="store_true",
                   help="validate the flags, read the dataset, print the effective settings, stop (no model loaded)")

    g = parser.add_argument_group("LoRA (peft)")
    g.add_argument("--use_lora", action="store_true", help="train LoRA adapters instead of the full model")
    g.add_argument("--lora_r", type=positive_int, default=16, help="(default %(default)s)")
    g.add_argument("--lora_alpha", type=positive_int, default=32, help="(default %(default)s)")
    g.add_argument("--lora_dropout", type=nonneg_float, default=0.05, help="(default %(default)s)")
    g.add_argument("--lora_target_modules", default="all-linear",
                   help="comma-separated module names or all-linear (default %(default)s)")

    _add_mc_flags(parser)


def _add_mc_flags(parser: argparse.ArgumentParser) -> None:
    """``--mc.mask.*`` / ``--mc.temperature.*``: one flag per ``microcoder.*`` key (``core.options``' records)."""
    from microcoder_ext.core.options import option_specs

    groups = {
        "mask": parser.add_argument_group("conditional truncation mask (--mc.mask.*; verl: microcoder.mask.*)"),
        "temperature": parser.add_argument_group(
            "training temperature (--mc.temperature.*; verl: microcoder.temperature.*)"),
    }
    for spec in option_specs():
        groups[spec.section].add_argument(spec.flag, dest=spec.dest, type=spec.parse, nargs=spec.nargs,
                                          metavar=spec.metavar, default=argparse.SUPPRESS, help=spec.flag_help())


# ------------------------------------------------------------------------------------------------ settings


@dataclass
class Plan:
    """Everything ``microcoder train`` will do, validated."""

    preset: str
    grpo: dict  # GRPOConfig overrides (on top of the preset's)
    microcoder: Any  # validated MicrocoderConfig
    mask: bool
    temperature_control: bool
    lora: dict | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        import dataclasses

        return {"preset": self.preset, "grpo_config": self.grpo, "mask": self.mask,
                "temperature_control": self.temperature_control, "lora": self.lora,
                "microcoder": dataclasses.asdict(self.microcoder), "notes": self.notes}


def given_mc(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The ``--mc.*`` values given on the command line (key -> value) and the errors of their post-processing."""
    from microcoder_ext.core.options import given_values

    return given_values(vars(args))


def plan(args: argparse.Namespace, *, cuda: bool | None = None) -> Plan:
    """Preset <- seed flags <- ``--mc.*``, validated. Raises :class:`UsageError` listing every problem."""
    from microcoder_ext.core.config import ConfigError, parse_config
    from microcoder_ext.core.options import flag
    from microcoder_ext.trl.config import PRESETS, preset_settings

    preset = PRESETS[args.preset]
    base = preset_settings(args.preset)
    given, errors = given_mc(args)
    notes: list[str] = []
    keys: dict[str, Any] = {}  # microcoder.* keys the seed flags set, for conflicts with --mc.*

    def seed_sets(key: str, value: Any, by: str) -> None:
        if key in given and given[key] != value:
            errors.append(f"{by} sets microcoder.{key} = {value!r} but {flag(key)} {given[key]!r} says otherwise: "
                          "give one of them")
        keys[key] = value

    mask = preset.mask
    if args.use_conditional_mask is not None:
        mask = args.use_conditional_mask
        seed_sets("mask.enable", mask, f"--use_conditional_mask {mask}")
    elif "mask.enable" in given:
        mask = bool(given["mask.enable"])
    if not mask and any(k.startswith("mask.") and k != "mask.enable" for k in given):
        errors.append("--mc.mask.* given but the mask is off (" + (
            "--use_conditional_mask False" if args.use_conditional_mask is False else f"--preset {args.preset}")
            + "): pass --use_conditional_mask True or drop them")

    control = preset.temperature_control
    mode = None
    if args.diversity_driven_temp is not None:
        mode = "auto" if args.diversity_driven_temp else "constant"
        control = True
        seed_sets("temperature.mode", mode, f"--diversity_driven_temp {args.diversity_driven_temp}")
    if args.temperature_mode is not None:
        if mode is not None and args.temperature_mode != mode:
            errors.append(f"--temperature_mode {args.temperature_mode} contradicts --diversity_driven_temp "
                          f"{args.diversity_driven_temp} (which means mode {mode}): give one of them")
        mode = args.temperature_mode
        control = True
        seed_sets("temperature.mode", mode, f"--temperature_mode {mode}")
    if "temperature.mode" in given and mode is None:
        mode = given["temperature.mode"]
    if any(k.startswith("temperature.") for k in given):
        control = True
    temperature = args.temperature
    if temperature is not None and control:
        seed_sets("temperature.value", temperature, f"--temperature {temperature:g}")
    if not control and not preset.temperature_control and args.temperature is None and mode is None:
        notes.append(f"preset {args.preset}: constant temperature {base.get('temperature', 1.0):g} (TRL's own)")

    grpo: dict[str, Any] = {}
    if temperature is not None:
        grpo["temperature"] = temperature
    elif control:
        # the controller's start (value) also goes to GRPOConfig so that TRL's evaluation uses it
        from microcoder_ext.core.config import TemperatureConfig

        grpo["temperature"] = keys.get("temperature.value", given.get("temperature.value", TemperatureConfig().value))
    if args.remove_kl_loss is not None:
        grpo["beta"] = 0.0 if args.remove_kl_loss else (args.beta if args.beta is not None else DEFAULT_BETA)
        if args.remove_kl_loss and args.beta not in (None, 0.0):
            errors.append(f"--remove_kl_loss True contradicts --beta {args.beta:g}: give one of them")
    elif args.beta is not None:
        grpo["beta"] = args.beta
    if args.clipping_ratio is not None:
        grpo["epsilon_high"] = args.clipping_ratio
    if args.epsilon is not None:
        grpo["epsilon"] = args.epsilon
    eps_low = grpo.get("epsilon", base.get("epsilon", 0.2))
    eps_high = grpo.get("epsilon_high", base.get("epsilon_high"))
    if eps_high is not None and eps_high < eps_low:
        notes.append(f"clip: epsilon_high {eps_high:g} < epsilon {eps_low:g} (clip-lower, not clip-higher)")
    if mask:
        grpo["mask_truncated_completions"] = False  # TRL's "mask all" is what the conditional mask replaces

    if cuda is None:
        cuda = _cuda_available()
    use_cpu = bool(args.use_cpu or not cuda)
    if not args.use_cpu and not cuda:
        notes.append("no GPU visible: training on CPU (--use_cpu)")
    dtype = args.dtype or ("float32" if use_cpu else "bfloat16")
    if use_cpu and dtype in ("bfloat16", "float16"):
        errors.append(f"--dtype {dtype} on CPU: use float32 (GRPOConfig's bf16/fp16 need a GPU)")
    if args.use_vllm and use_cpu:
        errors.append("--use_vllm needs a GPU (vLLM generation)")
    lr = args.learning_rate if args.learning_rate is not None else (1e-5 if args.use_lora else 1e-6)
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * world_size()
    if per_step % args.num_generations:
        errors.append(f"--per_device_train_batch_size {args.per_device_train_batch_size} x "
                      f"--gradient_accumulation_steps {args.gradient_accumulation_steps} x {world_size()} process(es) "
                      f"= {per_step} completions per step is not a multiple of --num_generations "
                      f"{args.num_generations}")
    if args.max_steps == 0 or args.max_steps < -1:
        errors.append(f"--max_steps must be >= 1 (or -1: use --num_train_epochs), got {args.max_steps}")
    if args.lora_dropout >= 1:
        errors.append(f"--lora_dropout must be in [0, 1), got {args.lora_dropout:g}")
    grpo.update(
        output_dir=args.output_dir, seed=args.seed, data_seed=args.seed, learning_rate=lr, max_steps=args.max_steps,
        num_train_epochs=args.num_train_epochs, per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, num_generations=args.num_generations,
        max_completion_length=args.max_completion_length, logging_steps=args.logging_steps,
        save_strategy="steps" if args.save_steps else "no", report_to=_report_to(args.report_to),
        use_cpu=use_cpu, bf16=(dtype == "bfloat16"), fp16=(dtype == "float16"),
        gradient_checkpointing=args.gradient_checkpointing, use_vllm=args.use_vllm,
        model_init_kwargs={"dtype": dtype, "trust_remote_code": args.trust_remote_code},
        trust_remote_code=args.trust_remote_code,
    )
    if args.save_steps:
        grpo["save_steps"] = args.save_steps
    if args.steps_per_generation is not None:
        if args.steps_per_generation % args.gradient_accumulation_steps:
            errors.append(f"--steps_per_generation {args.steps_per_generation} must be a multiple of "
                          f"--gradient_accumulation_steps {args.gradient_accumulation_steps}")
        grpo["steps_per_generation"] = args.steps_per_generation
    if args.use_vllm:
        grpo["vllm_mode"] = "colocate"

    config = None
    nested: dict[str, dict[str, Any]] = {"mask": {}, "temperature": {}}
    for key, value in {**keys, **given}.items():
        section, name = key.split(".", 1)
        nested[section][name] = value
    nested["mask"].setdefault("seed", args.seed if args.seed >= 0 else 0)
    nested["mask"]["enable"] = mask
    if not errors:
        try:
            config = parse_config(nested)
        except ConfigError as e:
            errors.append(_flag_message(str(e), given, keys))
    if config is not None and control and config.temperature.mode == "auto" and config.temperature.start == "probe":
        errors.append("--mc.temperature.start probe is not run inside the trainer: run `microcoder temperature probe` "
                      "on the model, then pass --temperature <recommended>")
    lora = None
    if args.use_lora:
        targets = args.lora_target_modules.strip()
        lora = {"r": args.lora_r, "lora_alpha": args.lora_alpha, "lora_dropout": args.lora_dropout,
                "target_modules": targets if targets == "all-linear" else [t for t in targets.split(",") if t],
                "task_type": "CAUSAL_LM"}
    if errors:
        raise UsageError(errors)
    return Plan(args.preset, grpo, config, mask, control, lora, notes)


def _flag_message(message: str, given: dict, keys: dict) -> str:
    """A core ConfigError with the flag that set the key: --mc.* as the OpenRLHF launcher says it, the seed's flags
    by their own names."""
    from microcoder_ext.core.options import config_message

    seed_flag = {"temperature.value": "--temperature", "temperature.mode": "--diversity_driven_temp/--temperature_mode",
                 "mask.enable": "--use_conditional_mask"}
    for key, name in seed_flag.items():
        if key in keys and key not in given and f"microcoder.{key}" in message:
            return f"{name}: {message}" + (
                " (with --diversity_driven_temp True the start temperature must be one of the candidates)"
                if key == "temperature.value" else "")
    return config_message(message, list(given))


def _report_to(text: str) -> list[str] | str:
    names = [t.strip() for t in text.split(",") if t.strip()]
    return "none" if not names or names == ["none"] else names


def world_size() -> int:
    """Processes of this launch (``$WORLD_SIZE``, set by ``accelerate launch``; 1 when unset or invalid)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def preset_value(preset: str, key: str):
    """The preset's ``GRPOConfig`` value of ``key`` (``\"TRL default\"`` when the preset leaves it to TRL)."""
    from microcoder_ext.trl.config import preset_settings

    return preset_settings(preset).get(key, "TRL default")
