"""The ``microcoder:`` keys as option records, built from :mod:`microcoder_ext.core.config`'s dataclasses.

Each field of :class:`~microcoder_ext.core.config.MaskConfig` and
:class:`~microcoder_ext.core.config.TemperatureConfig` is documented once, in its ``metadata={"help": ...}`` (as
TRL's ``GRPOConfig`` does). :func:`option_specs` turns the fields into :class:`OptionSpec` records (key, flag,
type, default, help, command-line parser), from which every surface is built: the OpenRLHF launcher's and
``microcoder train``'s ``--mc.<section>.<key>`` flags (``microcoder.mask.rho`` <-> ``--mc.mask.rho``), and the
configuration reference (docs/configuration.md). Command-line values::

    --mc.mask.rho 0.1  --mc.mask.enable false
    --mc.temperature.stages '[[0, 0.6], [140, 1.2]]'   (JSON)
    --mc.temperature.candidates 0.6 0.8 1.0            (or one JSON list)
    --mc.temperature.target 0.5 | null

The parsers raise ``argparse.ArgumentTypeError``; the merged values are validated by
:func:`microcoder_ext.core.config.parse_config`, whose messages :func:`config_message` rewrites to name the flag.
Import-light: the standard library only at module level (``core.config``, and with it torch, on first use).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

PREFIX = "--mc."
#: ``--mc.<section>.<key>`` <-> ``microcoder.<section>.<key>``, section -> dataclass name in core.config
SECTIONS = {"mask": "MaskConfig", "temperature": "TemperatureConfig"}


def flag(key: str) -> str:
    """``"mask.rho"`` -> ``"--mc.mask.rho"``."""
    return f"{PREFIX}{key}"


def field_help(cls: type, f: dataclasses.Field) -> str:
    """The ``help`` metadata of a config field; a field without one is a programming error."""
    text = f.metadata.get("help")
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"{cls.__name__}.{f.name} has no help: give it field(..., metadata={{'help': ...}})")
    return text


# ------------------------------------------------------------------------------------------------ value parsing


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_number(kind: type) -> Callable[[str], Any]:
    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    parse.__name__ = kind.__name__
    return parse


def parse_optional_float(text: str) -> float | None:
    if text.strip().lower() in ("null", "none"):
        return None
    return parse_number(float)(text)


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"expected JSON, e.g. '[[0, 0.6], [140, 1.2]]', got {text!r} ({e})") from None


def parse_float_list(tokens: list[str]) -> Any:
    """``0.6 0.8 1.0`` or one JSON list ``'[0.6, 0.8]'`` -> list (elements validated by parse_config)."""
    if len(tokens) == 1 and tokens[0].lstrip().startswith("["):
        return parse_json(tokens[0])
    return [parse_number(float)(t) for t in tokens]


# ------------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class OptionSpec:
    """One ``microcoder.<key>`` as a command-line option."""

    key: str  # "mask.rho"
    type: str  # the field's annotation as written: "float", "float | None", ...
    default: Any
    help: str  # the field's help metadata
    parse: Callable[[str], Any]  # argparse ``type=``: one token -> value
    metavar: str
    nargs: str | None = None
    post: Callable[[Any], Any] | None = None  # applied to the parsed tokens (nargs="+")

    @property
    def flag(self) -> str:
        return flag(self.key)

    @property
    def dest(self) -> str:
        """The argparse ``dest`` both launchers use: ``"mc.mask.rho"``."""
        return f"mc.{self.key}"

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    def show_default(self) -> str:
        """The default as a user would type it: ``true``, ``null``, ``0.6 0.8``, ``[[0, 0.6]]``."""
        value = self.default
        if isinstance(value, bool):
            return "true" if value else "false"
        if value is None:
            return "null"
        if self.nargs == "+":
            return " ".join(f"{v:g}" for v in value)
        if isinstance(value, (tuple, list)):
            return json.dumps([list(v) if isinstance(v, tuple) else v for v in value])
        return str(value)

    def flag_help(self) -> str:
        """The flag's help text: the field's help and its default (``%`` escaped for argparse)."""
        return f"{self.help} (default {self.show_default()})".replace("%", "%%")


def _choices() -> dict[str, tuple[str, ...]]:
    from microcoder_ext.core.config import MISSING_VERDICT_POLICIES, TEMPERATURE_MODES, TEMPERATURE_STARTS
    from microcoder_ext.core.diversity import METRICS
    from microcoder_ext.core.masking import MODES, REPEAT_CHECKS

    return {"mask.mode": MODES, "mask.repeat_check": REPEAT_CHECKS, "mask.missing_verdict": MISSING_VERDICT_POLICIES,
            "temperature.mode": TEMPERATURE_MODES, "temperature.start": TEMPERATURE_STARTS,
            "temperature.metric": METRICS}


def option_specs() -> list[OptionSpec]:
    """One record per dataclass field of the ``microcoder:`` sections, in field order."""
    from microcoder_ext.core import config as core_config

    choices = _choices()
    out = []
    for section, cls_name in SECTIONS.items():
        cls = getattr(core_config, cls_name)
        for f in dataclasses.fields(cls):
            key = f"{section}.{f.name}"
            kind = str(f.type)
            common = dict(key=key, type=kind, help=field_help(cls, f),
                          default=f.default if f.default is not dataclasses.MISSING else f.default_factory())
            if key in choices:
                spec = OptionSpec(**common, parse=str, metavar="{" + ",".join(choices[key]) + "}")
            elif kind == "bool":
                spec = OptionSpec(**common, parse=parse_bool, metavar="{true,false}")
            elif kind == "int":
                spec = OptionSpec(**common, parse=parse_number(int), metavar="INT")
            elif kind == "float":
                spec = OptionSpec(**common, parse=parse_number(float), metavar="FLOAT")
            elif kind == "float | None":
                spec = OptionSpec(**common, parse=parse_optional_float, metavar="{FLOAT,null}")
            elif kind == "str":
                spec = OptionSpec(**common, parse=str, metavar="STR")
            elif key == "temperature.stages":
                spec = OptionSpec(**common, parse=parse_json, metavar="JSON")
            elif key == "temperature.candidates":
                spec = OptionSpec(**common, parse=str, nargs="+", metavar="T", post=parse_float_list)
            else:  # a new field: give it a command-line type here (tests/core/test_options.py checks every field)
                raise TypeError(f"no --mc flag type for microcoder.{key} ({kind})")
            out.append(spec)
    return out


def given_values(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ``--mc.<key>`` values present in an argparse namespace's ``vars()`` (absent flags are not there:
    ``default=argparse.SUPPRESS``) as ``{"mask.rho": 0.1, ...}``, and the errors of their post-processing."""
    given, errors = {}, []
    for spec in option_specs():
        if spec.dest in values:
            try:
                given[spec.key] = spec.post(values[spec.dest]) if spec.post else values[spec.dest]
            except argparse.ArgumentTypeError as e:
                errors.append(f"argument {spec.flag}: {e}")
    return given, errors


def nest(given: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"mask.rho": 0.1}`` -> ``{"mask": {"rho": 0.1}, "temperature": {}}`` (for ``parse_config``)."""
    nested: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for key, value in given.items():
        section, name = key.split(".", 1)
        nested[section][name] = value
    return nested


# ------------------------------------------------------------------------------------------------ messages

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
        return _KEY.sub(lambda k: flag(f"{k.group(1)}.{k.group(2)}"), message)
    return message.replace("microcoder.", PREFIX)
