"""``microcoder recipe``: list the shipped verl recipes, or show and check what one does.

  microcoder recipe list
  microcoder recipe show NAME [OVERRIDES...] [--yaml [--resolve]]

``show`` composes verl's real ``main_ppo`` config (config module ``verl.trainer.config``, config
``ppo_trainer``) with ``+recipe=NAME`` and the Hydra overrides through Hydra's compose API: the config that
``python -m verl.trainer.main_ppo +recipe=NAME OVERRIDES... --cfg job`` prints. It then runs, in this process,
the checks a training run would otherwise hit only after Ray and the workers have started:

* the installed verl version (:func:`microcoder_ext.compat.require`);
* verl's start-up validation, called as ``verl/trainer/main_ppo.py`` calls it
  (``validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))``),
  after building the actor config dataclass (``omega_conf_to_dataclass(actor_rollout_ref.actor)``);
* the lookups verl does later: advantage estimator, policy loss, v1 trainer (``trainer.v1.trainer_mode``; needs
  the ``verl.plugins`` entry point of microcoder-ext to have loaded) and the custom reward function;
* ``trainer.use_v1=false`` with a non-``sync`` trainer mode (verl's legacy trainer ignores ``trainer_mode``, so
  ``microcoder_sync``'s mask would silently not be applied);
* the ``microcoder:`` section (:func:`microcoder_ext.core.config.parse_config`, as the trainer reads it) and the
  temperature rules of ``microcoder_sync`` (:func:`microcoder_ext.verl.temperature.check_temperature_config`: one
  source of truth, refused async modes); the temperature plan (mode, stages, value at step 0) is shown beside the
  mask settings, and the notes warn where the rollout's and the actor's temperatures could differ.

verl's validation requires micro-batch sizes that depend on the GPUs and that no recipe sets; unset ones are
filled with :data:`PLACEHOLDER_MICRO_BATCH` for the checks only, and the output says so.

Exit status: 0 valid, 1 a check failed, 2 usage error (unknown recipe, override rejected by Hydra).
verl, Hydra and torch are imported only when a command runs, so ``microcoder --help`` works anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib.resources
import io
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

RECIPE_PACKAGE = "microcoder_ext.configs"
RECIPE_GROUP = "recipe"
VERL_CONFIG_MODULE = "verl.trainer.config"
VERL_CONFIG_NAME = "ppo_trainer"

#: trainer mode of :class:`microcoder_ext.verl.trainer.MicrocoderSyncTrainer` (applies the ``microcoder:`` section)
MASK_TRAINER_MODE = "microcoder_sync"

#: (section, keys) shown by ``show``, then every ``microcoder.*`` key
SHOWN_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("advantage", ("algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo", "algorithm.use_kl_in_reward")),
    (
        "policy loss",
        (
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            "actor_rollout_ref.actor.use_kl_loss",
            "actor_rollout_ref.actor.kl_loss_coef",
            "actor_rollout_ref.actor.kl_loss_type",
            "actor_rollout_ref.actor.clip_ratio_low",
            "actor_rollout_ref.actor.clip_ratio_high",
            "actor_rollout_ref.actor.loss_agg_mode",
            "actor_rollout_ref.actor.entropy_coeff",
        ),
    ),
    (
        "rollout",
        (
            "actor_rollout_ref.rollout.temperature",
            "actor_rollout_ref.rollout.response_length",
            "actor_rollout_ref.rollout.n",
            "actor_rollout_ref.rollout.agent.default_agent_loop",
        ),
    ),
    ("trainer", ("trainer.use_v1", "trainer.v1.trainer_mode")),
    ("reward", ("reward.custom_reward_function.path", "reward.custom_reward_function.name")),
)

#: value given, for the checks only, to micro-batch sizes verl's validation requires but nobody set
PLACEHOLDER_MICRO_BATCH = 1

#: legacy top-level reward sections (verl/trainer/config/legacy_reward_impl.yaml): verl 0.9.1's main_ppo never
#: migrates them (only fully_async_main calls migrate_legacy_reward_impl), so values set there are ignored
LEGACY_REWARD_SECTIONS = ("custom_reward_function", "reward_model", "sandbox_fusion")

MISSING = "???"


class RecipeError(Exception):
    """A failure :func:`run` reports on stderr, exiting with ``exit_code``."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# ------------------------------------------------------------------------------------------------ recipes


def recipe_dir():
    """The ``recipe`` config group shipped in :mod:`microcoder_ext.configs` (a ``Traversable``)."""
    return importlib.resources.files(RECIPE_PACKAGE).joinpath(RECIPE_GROUP)


def available_recipes() -> dict[str, str]:
    """Recipe name -> one-line summary (the first comment line after ``# @package _global_``)."""
    recipes = {}
    for entry in sorted(recipe_dir().iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        comments = (line for line in entry.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
        summary = next((c.lstrip("#").strip() for c in comments if "@package" not in c), "")
        recipes[entry.name.removesuffix(".yaml")] = summary
    return recipes


def load_recipe(name: str):
    """The recipe file itself (what it sets, before composition) as a DictConfig."""
    from omegaconf import OmegaConf

    return OmegaConf.create(recipe_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------- composition


def compose(name: str | None, overrides: Sequence[str] = ()) -> Any:
    """verl's main_ppo config with ``+recipe=name`` (``None``: no recipe) and the Hydra ``overrides``.

    Raises :class:`RecipeError` (usage) for an unknown recipe or an override Hydra rejects.
    """
    return compose_many([(name, overrides)])[0]


def compose_many(requests: Sequence[tuple[str | None, Sequence[str]]]) -> list[Any]:
    """Several :func:`compose` calls under one Hydra initialisation (the first compose costs seconds)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    recipes = available_recipes()
    for name, _ in requests:
        if name is not None and name not in recipes:
            raise RecipeError(f"unknown recipe {name!r}; available: {', '.join(recipes)}", EXIT_USAGE)
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time noise of verl's config package (no megatron etc.)
        with initialize_config_module(config_module=VERL_CONFIG_MODULE, version_base=None):
            for name, overrides in requests:
                full = ([f"+{RECIPE_GROUP}={name}"] if name is not None else []) + list(overrides)
                try:
                    results.append(hydra_compose(config_name=VERL_CONFIG_NAME, overrides=full))
                except (HydraException, OmegaConfBaseException) as e:
                    raise RecipeError(f"cannot compose {' '.join(full)}:\n{_message(e)}", EXIT_USAGE) from e
    return results


_ABSENT = object()


def select(cfg, key: str, default: Any = None) -> Any:
    """Resolved value at a dotted key (containers as plain dicts/lists); ``default`` if absent, ``"???"`` if unset."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue

    try:
        value = OmegaConf.select(cfg, key, default=default, throw_on_missing=True)
    except (MissingMandatoryValue, InterpolationToMissingValueError):
        return MISSING
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def has_key(cfg, key: str) -> bool:
    """Whether the dotted ``key`` is present in ``cfg`` (with a value other than ``???``)."""
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False) is not _ABSENT


# ------------------------------------------------------------------------------------------------- checks


@dataclass
class CheckReport:
    """Outcome of :func:`check_config`. ``log`` holds ``(status, text)`` in the order the checks ran."""

    log: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: dotted key -> value filled in for verl's validation only
    placeholders: dict[str, int] = field(default_factory=dict)
    use_reference_policy: bool | None = None
    use_critic: bool | None = None
    actor_config_type: str | None = None
    trainer_class: str | None = None
    mask_applied: bool = False
    #: parsed :class:`~microcoder_ext.core.config.MicrocoderConfig` when the section is used or present, and valid
    microcoder: Any = None
    #: the :class:`~microcoder_ext.core.config.TemperatureConfig` microcoder_sync runs with (when valid)
    temperature: Any = None

    @property
    def failures(self) -> list[str]:
        return [text for status, text in self.log if status == "FAIL"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def check(self, label: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; log ``label`` as passed, or the exception as a failure (never raises)."""
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001  (every failure is reported, none is raised)
            self.log.append(("FAIL", f"{label}: {type(e).__name__}: {_message(e)}"))
            return None
        self.log.append(("ok", label))
        return result


def check_config(cfg) -> CheckReport:
    """Every start-up check on a composed main_ppo config (see the module docstring); never raises."""
    from omegaconf import OmegaConf

    from microcoder_ext.compat import require
    from microcoder_ext.core.config import parse_config

    report = CheckReport()
    report.check("verl version supported by microcoder-ext", lambda: require("verl"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time noise, need_critic's "Disabled critic" (shown in the table)
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config

        report.use_reference_policy = bool(need_reference_policy(cfg))
        report.use_critic = bool(need_critic(cfg))

        # 1. verl's start-up validation (verl/trainer/main_ppo.py), on a copy with placeholder micro-batch sizes
        vcfg = _validation_copy(cfg, report)
        actor = report.check(
            "actor config: omega_conf_to_dataclass(actor_rollout_ref.actor)",
            lambda: omega_conf_to_dataclass(vcfg.actor_rollout_ref.actor),
        )
        if actor is None:  # validate_config builds the same dataclass first and would fail the same way
            report.log.append(("skip", "verl validate_config: the actor config is invalid"))
        else:
            report.actor_config_type = _qualname(type(actor))
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):  # it prints its verdict and notices
                report.check(
                    "verl validate_config (as main_ppo calls it)",
                    lambda: validate_config(
                        config=vcfg, use_reference_policy=need_reference_policy(vcfg), use_critic=need_critic(vcfg)
                    ),
                )
            report.notes.extend(
                f"verl: {line.strip()}"
                for line in printed.getvalue().splitlines()
                if line.strip() and "All configuration checks passed" not in line
            )

        # 2. registries verl reads only once training runs; plugins loaded via model.external_lib first
        external_lib = select(cfg, "actor_rollout_ref.model.external_lib")
        if external_lib:
            from verl.utils.import_utils import import_external_libs

            report.check(f"import external_lib {external_lib}", lambda: import_external_libs(external_lib))
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

        estimator = select(cfg, "algorithm.adv_estimator")
        report.check(f"advantage estimator {estimator!r} registered", lambda: get_adv_estimator_fn(estimator))
        loss_mode = select(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode")
        report.check(f"policy loss {loss_mode!r} registered", lambda: get_policy_loss_fn(loss_mode))

        use_v1 = bool(select(cfg, "trainer.use_v1"))
        mode = select(cfg, "trainer.v1.trainer_mode")
        if use_v1:
            cls = report.check(f"v1 trainer {mode!r} registered", lambda: _get_trainer_cls(mode))
            report.trainer_class = _qualname(cls) if cls is not None else None
        elif mode != "sync":
            consequence = (
                "the truncation mask would silently not be applied"
                if mode == MASK_TRAINER_MODE
                else f"the {mode!r} trainer would silently not be used"
            )
            report.log.append(
                (
                    "FAIL",
                    f"trainer.use_v1=false runs verl's legacy trainer (main_ppo_v0), which ignores "
                    f"trainer.v1.trainer_mode={mode}: {consequence}. Set trainer.use_v1=true.",
                )
            )
        else:
            report.trainer_class = "verl.trainer.main_ppo_v0.TaskRunner (legacy, deprecated)"

        reward_path = select(cfg, "reward.custom_reward_function.path")
        if reward_path:
            from verl.trainer.ppo.reward import get_custom_reward_fn

            reward_name = select(cfg, "reward.custom_reward_function.name")
            report.check(f"reward function {reward_path} : {reward_name} loads", lambda: get_custom_reward_fn(cfg))

    # 3. the microcoder: section, as the microcoder_sync trainer reads it (defaults when absent)
    uses_mask_trainer = use_v1 and mode == MASK_TRAINER_MODE
    section = cfg.get("microcoder", None)
    if section is not None or uses_mask_trainer:
        values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
        report.microcoder = report.check("microcoder section: microcoder_ext.core.config", lambda: parse_config(values))
    if uses_mask_trainer and report.microcoder is not None:
        report.mask_applied = report.microcoder.mask.enable
        if not report.mask_applied:
            report.notes.append("microcoder.mask.enable=false: microcoder_sync then trains exactly like sync")
    elif section is not None and not uses_mask_trainer:
        report.notes.append(
            f"warning: the microcoder: section is ignored; only trainer.v1.trainer_mode={MASK_TRAINER_MODE} "
            f"with trainer.use_v1=true applies it"
        )
    _check_temperature(cfg, report, use_v1, mode, uses_mask_trainer)
    _add_warnings(cfg, report)
    return report


def _check_temperature(cfg, report: CheckReport, use_v1: bool, mode: Any, uses_mask_trainer: bool) -> None:
    """The temperature rules of microcoder_sync and the notes on rollout vs actor temperature."""
    from microcoder_ext.verl import temperature as mc_temp

    refusal = mc_temp.async_refusal(cfg) if use_v1 else None
    if refusal:
        report.log.append(("FAIL", refusal))
        return
    if mode in mc_temp.ASYNC_TRAINER_MODES and use_v1:
        report.notes.append(
            f"warning: trainer.v1.trainer_mode={mode} (async): a sample can be generated by older weights, still at "
            f"the same constant {mc_temp.ROLLOUT_KEY}; watch training/rollout_probs_diff_*"
        )
    if not uses_mask_trainer or report.microcoder is None:
        return
    checked = report.check(
        "microcoder temperature: one source of truth for sampling and log-probs (microcoder_ext.verl.temperature)",
        lambda: mc_temp.check_temperature_config(cfg, report.microcoder),
    )
    if checked is None:
        return
    report.temperature, notes = checked
    report.notes.extend(notes)
    agent = select(cfg, mc_temp.AGENT_LOOP_KEY)
    if agent != mc_temp.AGENT_LOOP_NAME:
        report.notes.append(
            f"{mc_temp.AGENT_LOOP_KEY}={agent}: samples at the workers' fixed {mc_temp.ROLLOUT_KEY} (same constant as "
            f"the log-probs here), without the per-response temperature check of {mc_temp.AGENT_LOOP_NAME}"
        )
    if not select(cfg, "actor_rollout_ref.rollout.calculate_log_probs"):
        report.notes.append(
            "actor_rollout_ref.rollout.calculate_log_probs=false: verl's training/rollout_probs_diff_* (the live check "
            "that sampling and log-prob temperatures agree) is not computed"
        )
    if select(cfg, "actor_rollout_ref.rollout.logprobs_mode") not in (None, "processed_logprobs"):
        report.notes.append(
            "actor_rollout_ref.rollout.logprobs_mode is not processed_logprobs: rollout log-probs are then not "
            "temperature-scaled, so training/rollout_probs_diff_* no longer checks the temperature"
        )


def _get_trainer_cls(mode: str):
    from verl.trainer.ppo.v1 import get_trainer_cls

    return get_trainer_cls(mode)


def _validation_copy(cfg, report: CheckReport):
    """A copy of ``cfg`` with placeholder micro-batch sizes where verl's validation requires one nobody set."""
    from omegaconf import open_dict
    from verl.trainer.ppo.utils import need_reference_policy

    vcfg = copy.deepcopy(cfg)
    arr = vcfg.actor_rollout_ref
    if arr.actor.use_dynamic_bsz:  # validate_config and the actor dataclass skip the micro-batch checks
        return vcfg
    roles = [("actor", "ppo_micro_batch_size"), ("rollout", "log_prob_micro_batch_size")]
    if need_reference_policy(vcfg):
        roles.append(("ref", "log_prob_micro_batch_size"))
    for role, key in roles:
        node = arr[role]
        if node.get(key) is None and node.get(f"{key}_per_gpu") is None:
            with open_dict(node):
                node[f"{key}_per_gpu"] = PLACEHOLDER_MICRO_BATCH
            report.placeholders[f"actor_rollout_ref.{role}.{key}_per_gpu"] = PLACEHOLDER_MICRO_BATCH
    return vcfg


def _add_warnings(cfg, report: CheckReport) -> None:
    from omegaconf import OmegaConf

    n = select(cfg, "actor_rollout_ref.rollout.n")
    if select(cfg, "algorithm.adv_estimator") == "grpo" and isinstance(n, int) and n < 2:
        report.notes.append(
            f"warning: GRPO groups are the actor_rollout_ref.rollout.n responses per prompt; with n={n} verl's "
            f"GRPO uses the raw score as the advantage. Set rollout.n (the paper does not state its group size)."
        )
    for section in LEGACY_REWARD_SECTIONS:
        if section in cfg and _any_leaf_set(OmegaConf.to_container(cfg[section], resolve=False)):
            report.notes.append(
                f"warning: legacy top-level {section}.* is set, but verl 0.9.1's main_ppo ignores it: "
                f"use the keys under reward.* instead"
            )
    missing = sorted(OmegaConf.missing_keys(cfg))
    if not select(cfg, "reward.reward_model.enable"):  # read only when a reward model is enabled
        missing = [k for k in missing if not k.startswith("reward.reward_model.")]
    if missing:
        report.notes.append(f"still {MISSING}, set before training: {', '.join(missing)}")


def _any_leaf_set(values: Any) -> bool:
    if isinstance(values, dict):
        return any(_any_leaf_set(v) for v in values.values())
    if isinstance(values, list):
        return bool(values)
    return values is not None


def _qualname(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _message(e: BaseException) -> str:
    """The exception text plus its causes (Hydra puts the useful part, e.g. 'Key 'x' is not in struct', there)."""
    parts: list[str] = []
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).strip()
        if text and not any(text in p for p in parts):
            parts.append(text)
        e = e.__cause__
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------- output


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def _yes_no(value: bool | None) -> str:
    return "(unknown)" if value is None else ("yes" if value else "no")


def _indent(text: str, width: int) -> str:
    return text.replace("\n", "\n" + " " * width)


def _flatten(values: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(values, dict):
        for k, v in values.items():
            yield from _flatten(v, f"{prefix}.{k}")
    else:
        yield prefix, values


def _override_keys(overrides: Sequence[str]) -> set[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return {o.key_or_group for o in OverridesParser.create().parse_overrides(list(overrides))}


def _temperature_rows(cfg, report: CheckReport, source: Callable[..., str]) -> list[tuple[str, str, str]]:
    from microcoder_ext.verl import temperature as mc_temp

    if report.temperature is None:
        return [("=> temperature plan", "(not checked)", "see checks below")]
    if mc_temp.section_present(cfg):
        origin = "microcoder.temperature"
        rows = [
            (f"microcoder.temperature.{key}", _fmt(select(cfg, f"microcoder.temperature.{key}")),
             source(f"microcoder.temperature.{key}", "default (TemperatureConfig)"))
            for key in ("mode", "value", "stages")
        ]
    else:
        origin = f"{mc_temp.ROLLOUT_KEY} (no microcoder.temperature section)"
        rows = []
    for label, value in mc_temp.describe_plan(report.temperature):
        rows.append((f"=> temperature {label}", value, origin))
    rows.append(
        ("=> sampling & log-prob temperature", "same value, set per step", f"trainer -> {mc_temp.ROLLOUT_KEY}")
    )
    return rows


def render(name: str, overrides: Sequence[str], cfg, recipe_only, report: CheckReport) -> str:
    """The settings table (value and where it comes from), the checks and the notes, as text.

    ``recipe_only`` is the config composed with the recipe and no overrides: a value that differs from it, or
    whose key was overridden, comes from the command line; else from the recipe if the recipe file sets it.
    """
    from microcoder_ext.compat import installed_version

    recipe_file = load_recipe(name)
    override_keys = _override_keys(overrides)

    def source(key: str, default_label: str = "verl default") -> str:
        if key in override_keys or select(cfg, key) != select(recipe_only, key):
            return "command line"
        return "recipe" if has_key(recipe_file, key) else default_label

    rows: list[tuple[str, str, str]] = []
    for section, keys in SHOWN_KEYS:
        rows.append((f"[{section}]", "", ""))
        rows.extend((key, _fmt(select(cfg, key)), source(key)) for key in keys)
        if section == "policy loss":
            rows.append(("=> reference model", _yes_no(report.use_reference_policy), "verl need_reference_policy()"))
            rows.append(("=> critic", _yes_no(report.use_critic), "verl need_critic()"))
        elif section == "trainer":
            rows.append(("=> trainer class", report.trainer_class or "(not resolved)", "verl get_trainer_cls()"))
    rows.append(("[microcoder]", "", ""))
    rows.append(("=> truncation mask applied", _yes_no(report.mask_applied), "trainer mode, microcoder.mask.enable"))
    if report.microcoder is not None:
        for key, value in dataclasses.asdict(report.microcoder.mask).items():
            dotted = f"microcoder.mask.{key}"
            rows.append((dotted, _fmt(value), source(dotted, "default (MaskConfig)")))
        rows.extend(_temperature_rows(cfg, report, source))
    elif select(cfg, "microcoder") is not None:  # present but invalid: show what was given
        rows.extend((k, _fmt(v), "see FAIL below") for k, v in _flatten(select(cfg, "microcoder"), "microcoder"))
    else:
        rows.append(("microcoder", "(not set)", ""))

    kw, vw, sw = (max(len(r[i]) for r in rows) for i in range(3))
    command = " ".join([f"+{RECIPE_GROUP}={name}", *overrides])
    lines = [f"verl {installed_version('verl')} main_ppo config with {command}", ""]
    lines.append(f"  {'key':<{kw}}  {'value':<{vw}}  set by")
    lines.append(f"  {'-' * kw}  {'-' * vw}  {'-' * sw}")
    for key, value, src in rows:
        lines.append(f"  {key:<{kw}}  {value:<{vw}}  {src}".rstrip())
    lines += ["", "checks:"]
    lines.extend(f"  {status:<4}  {_indent(text, 8)}" for status, text in report.log)
    if report.actor_config_type:
        lines.append(f"  (actor config dataclass: {report.actor_config_type})")
    notes = list(report.notes)
    if report.placeholders:
        filled = ", ".join(f"{k}={v}" for k, v in report.placeholders.items())
        notes.insert(0, f"placeholders used for verl's validation only (not in the config; set them to run): {filled}")
    if notes:
        lines += ["", "notes:"]
        lines.extend(f"  - {note}" for note in notes)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ command


class _IntermixedArgumentParser(argparse.ArgumentParser):
    """Accepts options between positionals (``show NAME --yaml key=value``), like Hydra's own command line."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing:  # parse_known_intermixed_args calls back into parse_known_args
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands ``list`` and ``show`` of ``microcoder recipe``."""
    sub = parser.add_subparsers(
        dest="recipe_command", metavar="{list,show}", required=True, parser_class=_IntermixedArgumentParser
    )
    sub.add_parser("list", help="list the shipped recipes", description="List the shipped recipes (+recipe=NAME).")
    show = sub.add_parser(
        "show",
        help="compose verl's main_ppo config with +recipe=NAME, check it, print the effective settings",
        description=(
            "Compose verl's main_ppo config with +recipe=NAME and OVERRIDES (the config `python -m "
            "verl.trainer.main_ppo +recipe=NAME OVERRIDES --cfg job` prints), run verl's start-up validation and "
            "microcoder-ext's checks, and print the effective settings. "
            "Exit status: 0 valid, 1 a check failed, 2 usage error."
        ),
    )
    show.add_argument("name", metavar="NAME", help="recipe name (see `microcoder recipe list`)")
    show.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDES",
        help="Hydra overrides as on the main_ppo command line (key=value, +key=value, ~key)",
    )
    show.add_argument("--yaml", action="store_true", help="print the whole composed config instead of the table")
    show.add_argument("--resolve", action="store_true", help="with --yaml: resolve ${...} interpolations")


def _run_list() -> int:
    recipes = available_recipes()
    width = max(map(len, recipes))
    for name, summary in recipes.items():
        print(f"{name:<{width}}  {summary}")
    print("\ntrain:   python -m verl.trainer.main_ppo +recipe=NAME [OVERRIDES...]")
    print("inspect: microcoder recipe show NAME [OVERRIDES...]")
    return EXIT_OK


def _run_show(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    if args.resolve and not args.yaml:
        raise RecipeError("--resolve only applies to --yaml", EXIT_USAGE)
    overrides = list(args.overrides)
    if args.yaml:
        cfg, recipe_only = compose(args.name, overrides), None
    else:
        cfg, recipe_only = compose_many([(args.name, overrides), (args.name, [])])
    report = check_config(cfg)
    if args.yaml:
        print(OmegaConf.to_yaml(cfg, resolve=args.resolve), end="")
    else:
        print(render(args.name, overrides, cfg, recipe_only, report))
    if report.ok:
        return EXIT_OK
    print(f"error: +recipe={args.name} with these overrides fails {len(report.failures)} check(s):", file=sys.stderr)
    for failure in report.failures:
        print(f"  - {_indent(failure, 4)}", file=sys.stderr)
    return EXIT_INVALID


def run(args: argparse.Namespace) -> int:
    """Entry point of ``microcoder recipe``; returns the exit status."""
    try:
        return _run_list() if args.recipe_command == "list" else _run_show(args)
    except RecipeError as e:
        print(f"error: {_indent(str(e), 2)}", file=sys.stderr)
        return e.exit_code
    except ImportError as e:
        print(
            f"error: `microcoder recipe show` needs verl 0.9.1 and hydra-core ({e}); install microcoder-ext[verl]",
            file=sys.stderr,
        )
        return EXIT_INVALID
