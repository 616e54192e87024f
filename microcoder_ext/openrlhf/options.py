"""The ``--mc.*`` flags of ``python -m microcoder_ext.openrlhf.train``: verl's ``microcoder.*`` keys as argparse flags.

One flag per field of :class:`~microcoder_ext.core.config.MaskConfig` and
:class:`~microcoder_ext.core.config.TemperatureConfig`, generated from the dataclasses, so the names and defaults
are verl's one to one (``microcoder.mask.rho`` <-> ``--mc.mask.rho``)::

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
import dataclasses
import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from microcoder_ext.openrlhf.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset

PREFIX = "--mc."
#: ``--mc.<section>.<key>`` <-> ``microcoder.<section>.<key>``, section -> dataclass name in core.config
SECTIONS = {"mask": "MaskConfig", "temperature": "TemperatureConfig"}

#: what each key means (the default is appended from the dataclass); keep in step with core.config's docstring
MEANING: dict[str, str] = {
    "mask.enable": "apply the conditional truncation mask (false: the preset trains without it)",
    "mask.rho": "probability of zeroing the advantage of a qualifying truncated response (0.1 = the ablation's "
                "'Cond. Mask')",
    "mask.m": "repeat window in tokens: a truncated response whose last m tokens repeat the m before is kept",
    "mask.mode": "which verdicts may be masked: non_incorrect (paper) or correct_only",
    "mask.repeat_check": "repetition test: block (paper, o[-m:] == o[-2m:-m]) or periodic",
    "mask.seed": "seed of the per-step coins (step s uses Generator(seed, s): resume-safe)",
    "mask.verdict_key": "key of the reward's extra info holding the verdict string",
    "mask.missing_verdict": "no verdict from the reward: score (score >= correct_score is correct), keep, error",
    "mask.correct_score": "with missing_verdict=score: a score >= this counts as correct",
    "temperature.mode": "training temperature: constant, staged, or auto (diversity-determined)",
    "temperature.value": "constant: the temperature (paper's main runs); auto: the start (one of the candidates)",
    "temperature.stages": "staged: JSON [[step, T], ...] from step 0, e.g. '[[0, 0.6], [140, 1.2]]'",
    "temperature.candidates": "auto: the temperatures it may use, increasing (JSON list or several numbers)",
    "temperature.start": "auto: value, or probe (not run inside OpenRLHF: run `microcoder temperature probe`)",
    "temperature.target": "auto: diversity target in [0, 1]; null estimates it from the first steps",
    "temperature.target_steps": "auto, target null: the estimate is the mean of the first target_steps steps ...",
    "temperature.target_margin": "... minus this margin",
    "temperature.window": "auto: smoothed diversity below target for this many consecutive steps ...",
    "temperature.min_interval": "... and at least this many steps since the last change -> next candidate",
    "temperature.max_temperature": "auto: never above this temperature",
    "temperature.smoothing": "EMA decay of the step diversity (0 = none)",
    "temperature.n": "n-gram order of the diversity metrics",
    "temperature.metric": "diversity metric: distinct, group_pooled or pairwise",
    "temperature.probe_prompts": "probe: prompts of the probe set",
    "temperature.probe_samples": "probe: responses per prompt and temperature",
    "temperature.min_stage_steps": "shortest stage / min_interval accepted, in steps (only smoke lowers it)",
}


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


def flag(key: str) -> str:
    """``"mask.rho"`` -> ``"--mc.mask.rho"``."""
    return f"{PREFIX}{key}"


# ------------------------------------------------------------------------------------------------ value parsing


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _number(kind: type) -> Callable[[str], Any]:
    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    parse.__name__ = kind.__name__
    return parse


def _optional_float(text: str) -> float | None:
    if text.strip().lower() in ("null", "none"):
        return None
    return _number(float)(text)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"expected JSON, e.g. '[[0, 0.6], [140, 1.2]]', got {text!r} ({e})") from None


def _float_list(tokens: list[str]) -> Any:
    """``0.6 0.8 1.0`` or one JSON list ``'[0.6, 0.8]'`` -> list (elements validated by parse_config)."""
    if len(tokens) == 1 and tokens[0].lstrip().startswith("["):
        return _json(tokens[0])
    return [_number(float)(t) for t in tokens]


@dataclass(frozen=True)
class _Spec:
    key: str  # "mask.rho"
    default: Any
    type: Callable[[str], Any]
    nargs: str | None = None
    metavar: str | None = None
    post: Callable[[Any], Any] | None = None  # applied to the parsed tokens (nargs="+")


def _choices() -> dict[str, tuple[str, ...]]:
    from microcoder_ext.core.config import MISSING_VERDICT_POLICIES, TEMPERATURE_MODES, TEMPERATURE_STARTS
    from microcoder_ext.core.diversity import METRICS
    from microcoder_ext.core.masking import MODES, REPEAT_CHECKS

    return {"mask.mode": MODES, "mask.repeat_check": REPEAT_CHECKS, "mask.missing_verdict": MISSING_VERDICT_POLICIES,
            "temperature.mode": TEMPERATURE_MODES, "temperature.start": TEMPERATURE_STARTS,
            "temperature.metric": METRICS}


def specs() -> list[_Spec]:
    """One spec per dataclass field of the ``microcoder:`` sections, in field order."""
    from microcoder_ext.core import config as core_config

    choices = _choices()
    out = []
    for section, cls_name in SECTIONS.items():
        for f in dataclasses.fields(getattr(core_config, cls_name)):
            key = f"{section}.{f.name}"
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            kind = str(f.type)
            if key in choices:
                spec = _Spec(key, default, str, metavar="{" + ",".join(choices[key]) + "}")
            elif kind == "bool":
                spec = _Spec(key, default, _bool, metavar="{true,false}")
            elif kind == "int":
                spec = _Spec(key, default, _number(int), metavar="INT")
            elif kind == "float":
                spec = _Spec(key, default, _number(float), metavar="FLOAT")
            elif kind == "float | None":
                spec = _Spec(key, default, _optional_float, metavar="{FLOAT,null}")
            elif kind == "str":
                spec = _Spec(key, default, str, metavar="STR")
            elif key == "temperature.stages":
                spec = _Spec(key, default, _json, metavar="JSON")
            elif key == "temperature.candidates":
                spec = _Spec(key, default, str, nargs="+", metavar="T", post=_float_list)
            else:  # a new field: give it a flag type here (tests/openrlhf/test_launcher.py checks every field)
                raise TypeError(f"no --mc flag type for microcoder.{key} ({kind})")
            out.append(spec)
    return out


def _show_default(spec: _Spec) -> str:
    value = spec.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if spec.key == "temperature.candidates":
        return " ".join(f"{v:g}" for v in value)
    if isinstance(value, (tuple, list)):
        return json.dumps([list(v) if isinstance(v, tuple) else v for v in value])
    return str(value)


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
        section = spec.key.split(".")[0]
        groups[section].add_argument(
            flag(spec.key), dest=f"mc.{spec.key}", type=spec.type, nargs=spec.nargs, metavar=spec.metavar,
            default=argparse.SUPPRESS, help=f"{MEANING[spec.key]} (default {_show_default(spec)})".replace("%", "%%"),
        )
    return parser


def format_help(prog: str = "python -m microcoder_ext.openrlhf.train") -> str:
    return build_parser(prog).format_help()


# ------------------------------------------------------------------------------------------------ parse

_KEY = re.compile(r"\bmicrocoder\.(mask|temperature)\.(\w+)")
_SECTION_KEY = re.compile(r"\bmicrocoder\.(mask|temperature): (\w+)")


def config_message(message: str, keys: Sequence[str]) -> str:
    """A :class:`~microcoder_ext.core.config.ConfigError` message with the flags instead of the keys:
    ``microcoder.mask: rho must be ...`` -> ``--mc.mask.rho: rho must be ...``."""
    keys = set(keys)
    m = _SECTION_KEY.search(message)
    if m and f"{m.group(1)}.{m.group(2)}" in keys:
        return f"{flag(m.group(1) + '.' + m.group(2))}: {message[m.end(2):].lstrip()}"
    m = _KEY.search(message)
    if m:
        message = _KEY.sub(lambda k: flag(f"{k.group(1)}.{k.group(2)}"), message)
        return message
    return message.replace("microcoder.", PREFIX)


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
    given: dict[str, Any] = {}
    for spec in specs():
        dest = f"mc.{spec.key}"
        if dest in values:
            try:
                given[spec.key] = spec.post(values[dest]) if spec.post else values[dest]
            except argparse.ArgumentTypeError as e:
                errors.append(f"argument {flag(spec.key)}: {e}")
    errors += _not_applicable(preset, given)
    config = None
    if not errors:
        nested: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
        for key, value in given.items():
            section, name = key.split(".", 1)
            nested[section][name] = value
        try:
            config = parse_config(nested)
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
