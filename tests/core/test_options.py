"""microcoder_ext.core.options: every ``microcoder.*`` key is documented once, in its config field's ``help``
metadata, and becomes one option record (flag, type, default, help, command-line parser) that the OpenRLHF launcher,
``microcoder train`` and the configuration reference build their surfaces from (each surface's own test checks that
it shows the field's help: tests/openrlhf/test_launcher.py, tests/trl/test_train_cli.py, tests/docs/test_docs.py)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from microcoder_ext.core import options
from microcoder_ext.core.config import ConfigError, MaskConfig, MicrocoderConfig, TemperatureConfig, parse_config

SECTIONS = {"mask": MaskConfig, "temperature": TemperatureConfig}


def test_every_config_field_has_help_metadata():
    for cls in (*SECTIONS.values(), MicrocoderConfig):
        for f in dataclasses.fields(cls):
            text = f.metadata.get("help")
            assert isinstance(text, str) and text.strip(), f"{cls.__name__}.{f.name} has no help metadata"
            assert text == " ".join(text.split()), f"{cls.__name__}.{f.name}: help with stray whitespace"


def test_one_record_per_field_with_its_flag_type_default_and_help():
    specs = options.option_specs()
    assert [s.key for s in specs] == [f"{section}.{f.name}" for section, cls in SECTIONS.items()
                                      for f in dataclasses.fields(cls)]
    for spec in specs:
        cls = SECTIONS[spec.section]
        f = next(f for f in dataclasses.fields(cls) if f"{spec.section}.{f.name}" == spec.key)
        assert spec.help == f.metadata["help"]
        assert spec.type == str(f.type)
        assert spec.default == getattr(cls(), f.name)
        assert spec.flag == f"--mc.{spec.key}" and spec.dest == f"mc.{spec.key}"
        assert spec.flag_help() == f"{f.metadata['help']} (default {spec.show_default()})".replace("%", "%%")


def test_a_field_without_help_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Bare:
        x: int = 0

    with pytest.raises(TypeError, match=r"Bare\.x has no help"):
        options.field_help(Bare, dataclasses.fields(Bare)[0])


def test_defaults_as_a_user_types_them():
    by = {s.key: s for s in options.option_specs()}
    shown = {key: by[key].show_default() for key in ("mask.enable", "mask.rho", "mask.mode", "temperature.target",
                                                       "temperature.stages", "temperature.candidates")}
    assert shown == {"mask.enable": "true", "mask.rho": "0.2", "mask.mode": "non_incorrect",
                     "temperature.target": "null", "temperature.stages": "[]",
                     "temperature.candidates": "0.6 0.8 1 1.2 1.4 1.6 1.8"}
    assert by["mask.mode"].metavar == "{non_incorrect,correct_only}"
    assert (by["mask.rho"].metavar, by["temperature.target"].metavar) == ("FLOAT", "{FLOAT,null}")


def test_command_line_values_and_their_errors():
    by = {s.key: s for s in options.option_specs()}
    assert by["mask.rho"].parse("0.1") == 0.1 and by["mask.m"].parse("64") == 64
    assert by["mask.enable"].parse("off") is False and by["temperature.target"].parse("null") is None
    assert by["temperature.stages"].parse("[[0, 0.6], [140, 1.2]]") == [[0, 0.6], [140, 1.2]]
    with pytest.raises(argparse.ArgumentTypeError, match="expected an integer, got '1.5'"):
        by["mask.m"].parse("1.5")
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false"):
        by["mask.enable"].parse("maybe")

    given, errors = options.given_values({"mc.mask.rho": 0.1, "mc.temperature.candidates": ["0.6", "0.8"],
                                          "mc.preset": "microcoder", "other": 1})
    assert given == {"mask.rho": 0.1, "temperature.candidates": [0.6, 0.8]} and errors == []
    assert options.given_values({"mc.temperature.candidates": ["[0.6, 0.8]"]})[0] == {"temperature.candidates":
                                                                                       [0.6, 0.8]}
    given, errors = options.given_values({"mc.temperature.candidates": ["0.6", "x"]})
    assert given == {} and errors == ["argument --mc.temperature.candidates: expected a number, got 'x'"]
    assert options.nest({"mask.rho": 0.1}) == {"mask": {"rho": 0.1}, "temperature": {}}


def test_config_errors_name_the_flag():
    with pytest.raises(ConfigError) as e:
        parse_config(options.nest({"mask.rho": 2.0}))
    assert options.config_message(str(e.value), ["mask.rho"]).startswith("--mc.mask.rho: ")
    with pytest.raises(ConfigError) as e:
        parse_config(options.nest({"temperature.smoothing": 1.5}))
    assert "--mc.temperature.smoothing" in options.config_message(str(e.value), ["temperature.smoothing"])
