"""``microcoder recipe``: list the shipped verl recipes, or show and check what one does.

  microcoder recipe list
  microcoder recipe show NAME [OVERRIDES...] [--yaml [--resolve]]

``show`` composes verl's real ``main_ppo`` config with ``+recipe=NAME`` and the Hydra overrides
(:func:`microcoder_ext.verl.recipes.compose`), runs the start-up checks a training run would otherwise hit only after
Ray and the workers have started (:func:`microcoder_ext.verl.recipe_checks.check_config`) and prints the effective
settings (value and where it comes from), the checks and the notes.

Exit status: 0 valid, 1 a check failed, 2 usage error (unknown recipe, override rejected by Hydra).
verl, Hydra and torch are imported only when a command runs, so ``microcoder --help`` works anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from microcoder_ext.verl.recipes import RecipeError

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

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


def _temperature_rows(cfg, report: Any, source: Callable[..., str]) -> list[tuple[str, str, str]]:
    from microcoder_ext.verl import temperature as mc_temp
    from microcoder_ext.verl.recipes import select

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


def render(name: str, overrides: Sequence[str], cfg, recipe_only, report: Any) -> str:
    """The settings table (value and where it comes from), the checks and the notes of a
    :class:`~microcoder_ext.verl.recipe_checks.CheckReport`, as text.

    ``recipe_only`` is the config composed with the recipe and no overrides: a value that differs from it, or
    whose key was overridden, comes from the command line; else from the recipe if the recipe file sets it.
    """
    from microcoder_ext.compat import installed_version
    from microcoder_ext.verl.recipes import RECIPE_GROUP, has_key, load_recipe, select

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
    from microcoder_ext.verl.recipes import available_recipes

    recipes = available_recipes()
    width = max(map(len, recipes))
    for name, summary in recipes.items():
        print(f"{name:<{width}}  {summary}")
    print("\ntrain:   python -m verl.trainer.main_ppo +recipe=NAME [OVERRIDES...]")
    print("inspect: microcoder recipe show NAME [OVERRIDES...]")
    return EXIT_OK


def _run_show(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from microcoder_ext.verl.recipe_checks import check_config
    from microcoder_ext.verl.recipes import compose, compose_many

    if args.resolve and not args.yaml:
        raise RecipeError("--resolve only applies to --yaml")
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
        return EXIT_USAGE
    except ImportError as e:
        print(
            f"error: `microcoder recipe show` needs verl 0.9.1 and hydra-core ({e}); install microcoder-ext[verl]",
            file=sys.stderr,
        )
        return EXIT_INVALID

