"""The ``--mc.*`` flags of ``python -m microcoder_ext.openrlhf.train``: verl's ``microcoder.*`` keys as argparse flags.

One flag per field of :class:`~microcoder_ext.core.config.MaskConfig` and
:class:`~microcoder_ext.core.config.TemperatureConfig`, built from :func:`microcoder_ext.core.options.option_specs`
(the fields' help metadata), so the names, defaults and help are verl's one to one (``microcoder.mask.rho`` <->
``--mc.mask.rho``)::

    --mc.mask.rho 0.1  --mc.mask.enable false
    --mc.temperature.mode staged  --mc.temperature.stages '[[0, 0.6], [140, 1.2]]'   (JSON)
    --mc.temperature.candidates 0.6 0.8 1.0      (or one JSON list)
    --mc.temperature.target 0.5 | null

plus ``--mc.preset`` (default ``microcoder``), ``--mc.allow_override`` and ``--mc.dry_run``.

Flags that are not given are absent (``argparse.SUPPRESS``), so the merge is the core defaults <- the user's
values, validated by :func:`microcoder_ext.core.config.parse_config` exactly as verl's section is; its messages
name the flag (``--mc.mask.rho``) instead of the key. ``--mc.mask.*`` with a preset that runs no mask and
``--mc.temperature.*`` with a preset without the temperature controller are errors naming the flag. Everything
that is not ``--mc.*`` is left for OpenRLHF's own parser; an unknown ``--mc.*`` flag is an error here.

Every problem is collected and raised at once as :class:`OptionsError` (exit status 2, like argparse's usage
errors). Import-light: ``microcoder_ext.core.config`` (and with it torch) is imported when a parser is built.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from microcoder_ext.core.options import PREFIX, SECTIONS, OptionSpec, config_message, flag, given_values, nest
from microcoder_ext.core.options import option_specs as specs
from microcoder_ext.openrlhf.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset

__all__ = ["PREFIX", "SECTIONS", "McOptions", "OptionSpec", "OptionsError", "build_parser", "config_message", "flag",
           "format_help", "parse", "presets_table", "specs"]


class OptionsError(ValueError):
    """Invalid ``--mc.*`` flags; ``.errors`` lists every problem (each names its flag)."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class McOptions:
    """The parsed ``--mc.*`` flags."""

    preset: Preset
    #: validated :class:`~microcoder_ext.core.config.MicrocoderConfig` (defaults <- ``given``)
    config: Any
    #: ``{"mask.rho": 0.1, ...}``: the keys the user gave, parsed
    given: dict[str, Any]
    allow_override: bool = False
    dry_run: bool = False


# ------------------------------------------------------------------------------------------------ parser


class _Parser(argparse.ArgumentParser):
    """Raises :class:`OptionsError` instead of printing the usage and exiting."""

    def error(self, message: str):
        raise OptionsError([message])


def presets_table() -> str:
    width = max(map(len, PRESETS))
    lines = [f"  {name:<{width}}  {p.summary}" + (" (default)" if name == DEFAULT_PRESET else "")
             for name, p in PRESETS.items()]
    return "\n".join(lines)


def build_parser(prog: str = "python -m microcoder_ext.openrlhf.train") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        usage=f"{prog} [OpenRLHF train_ppo_ray flags ...] [--mc.preset NAME] [--mc.* flags ...]",
        description=(
            "Run OpenRLHF 0.11.2's own train_ppo_ray with a MicroCoder-GRPO preset. The --mc.* flags are "
            "microcoder-ext's (the same keys and defaults as verl's microcoder.* section); every other flag goes to "
            "OpenRLHF unchanged (its help follows below). The preset's OpenRLHF flags are put before yours; a flag "
            "of yours that contradicts the preset is an error (--mc.allow_override keeps it, with a warning)."
        ),
        epilog="presets (--mc.preset):\n" + presets_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        allow_abbrev=False,
    )
    run = parser.add_argument_group("microcoder-ext run (--mc.*)")
    run.add_argument("--mc.preset", dest="mc.preset", choices=list(PRESETS), default=DEFAULT_PRESET,
                     help=f"which MicroCoder-GRPO setup to run (default {DEFAULT_PRESET}; table below)")
    run.add_argument("--mc.allow_override", dest="mc.allow_override", action="store_true",
                     help="keep your OpenRLHF flags where they contradict the preset (a WARNING each); never for "
                          "--rollout.temperature under microcoder or async training")
    run.add_argument("--mc.dry_run", dest="mc.dry_run", action="store_true",
                     help="parse and validate everything (OpenRLHF's own checks included), print the effective "
                          "settings and stop before Ray starts: no GPU, model or data needed")
    groups = {
        "mask": parser.add_argument_group(
            "conditional truncation mask (--mc.mask.*, verl: microcoder.mask.*; presets microcoder, mask_only)"),
        "temperature": parser.add_argument_group(
            "training temperature (--mc.temperature.*, verl: microcoder.temperature.*; preset microcoder)"),
    }
    for spec in specs():
        groups[spec.section].add_argument(spec.flag, dest=spec.dest, type=spec.parse, nargs=spec.nargs,
                                          metavar=spec.metavar, default=argparse.SUPPRESS, help=spec.flag_help())
    return parser


def format_help(prog: str = "python -m microcoder_ext.openrlhf.train") -> str:
    return build_parser(prog).format_help()


# ------------------------------------------------------------------------------------------------ parse

def _unknown(rest: Sequence[str], known: Sequence[str]) -> list[str]:
    errors = []
    for token in rest:
        if not token.startswith(PREFIX) and token != "--mc":
            continue
        name = token.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        section = name[len(PREFIX):].split(".")[0]
        same = [k for k in known if k.startswith(f"{PREFIX}{section}.")] if section in SECTIONS else []
        listing = f" (the {PREFIX}{section}.* flags: {', '.join(same)})" if same else ""
        errors.append(f"unknown flag {name}{hint}{listing}")
    return errors


def _not_applicable(preset: Preset, given: dict[str, Any]) -> list[str]:
    errors = []
    for key in given:
        section = key.split(".")[0]
        if section == "mask" and not preset.mask:
            errors.append(f"{flag(key)}: --mc.preset {preset.name} runs no truncation mask (presets with the mask: "
                          f"{', '.join(n for n, p in PRESETS.items() if p.mask)})")
        elif section == "temperature" and not preset.temperature_control:
            fixed = next((r.value for r in preset.requirements if r.dest == "rollout.temperature"), None)
            how = (f"it trains at the constant --rollout.temperature {fixed:g}" if fixed is not None
                   else "it keeps OpenRLHF's own --rollout.temperature")
            errors.append(f"{flag(key)}: --mc.preset {preset.name} does not run the temperature controller ({how}; "
                          f"presets with it: {', '.join(n for n, p in PRESETS.items() if p.temperature_control)})")
    return errors


def parse(argv: Sequence[str]) -> tuple[McOptions, list[str]]:
    """Split ``argv`` into the parsed ``--mc.*`` flags and the rest (for OpenRLHF, order kept).

    Raises :class:`OptionsError` listing every problem.
    """
    from microcoder_ext.core.config import ConfigError, parse_config

    parser = build_parser()
    ns, rest = parser.parse_known_args(list(argv))
    values = vars(ns)
    known = [a.option_strings[0] for a in parser._actions if a.option_strings]
    errors = _unknown(rest, known)
    preset = get_preset(values["mc.preset"])
    given, post_errors = given_values(values)
    errors += post_errors
    errors += _not_applicable(preset, given)
    config = None
    if not errors:
        try:
            config = parse_config(nest(given))
        except ConfigError as e:
            errors.append(config_message(str(e), list(given)))
        else:
            if preset.temperature_control and config.temperature.mode == "auto" and config.temperature.start == "probe":
                errors.append(
                    "--mc.temperature.start probe: the diversity probe is not run inside OpenRLHF; run `microcoder "
                    "temperature probe` on the model, then pass --mc.temperature.start value "
                    "--mc.temperature.value <recommended>"
                )
    if errors:
        raise OptionsError(errors)
    return McOptions(preset=preset, config=config, given=given, allow_override=values["mc.allow_override"],
                     dry_run=values["mc.dry_run"]), rest
