import pytest
import torch

from microcoder_ext.core.config import ConfigError, MaskConfig, MicrocoderConfig, TemperatureConfig, parse_config


def test_defaults_follow_the_paper():
    cfg = parse_config(None).mask
    assert (cfg.enable, cfg.rho, cfg.m, cfg.mode, cfg.repeat_check) == (True, 0.2, 128, "non_incorrect", "block")
    assert (cfg.verdict_key, cfg.missing_verdict, cfg.correct_score) == ("verdict", "score", 1.0)


def test_values_and_int_for_float():
    cfg = parse_config({"mask": {"rho": 1, "m": 64, "mode": "correct_only", "repeat_check": "periodic"}}).mask
    assert cfg.rho == 1.0 and isinstance(cfg.rho, float) and cfg.m == 64 and cfg.mode == "correct_only"


@pytest.mark.parametrize(
    "values, match",
    [
        ({"mask": {"rhoo": 0.1}}, r"unknown key\(s\) microcoder.mask.\{rhoo\}"),
        ({"temperature_schedule": {}}, r"unknown section\(s\)"),
        ({"mask": {"rho": 2}}, "rho"),
        ({"mask": {"rho": "0.2"}}, "rho"),
        ({"mask": {"m": 0}}, "m "),
        ({"mask": {"m": 1.5}}, "m "),
        ({"mask": {"mode": "incorrect"}}, "mode"),
        ({"mask": {"repeat_check": "ngram"}}, "repeat_check"),
        ({"mask": {"enable": "yes"}}, "enable"),
        ({"mask": {"seed": -1}}, "seed"),
        ({"mask": {"missing_verdict": "ignore"}}, "missing_verdict"),
        ({"mask": {"verdict_key": ""}}, "verdict_key"),
    ],
)
def test_invalid_config_is_rejected_with_the_key_name(values, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(values)


def test_step_generators_are_reproducible_and_distinct():
    cfg = MaskConfig(seed=5)
    a = torch.rand(8, generator=cfg.generator(10))
    b = torch.rand(8, generator=MaskConfig(seed=5).generator(10))
    c = torch.rand(8, generator=cfg.generator(11))
    d = torch.rand(8, generator=MaskConfig(seed=6).generator(10))
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, d)


def test_temperature_defaults_are_the_paper_setting():
    cfg = parse_config(None)
    assert cfg == MicrocoderConfig() and cfg.temperature == TemperatureConfig()
    t = cfg.temperature
    assert (t.mode, t.value, t.stages, t.metric, t.n) == ("constant", 1.2, (), "distinct", 4)
    assert t.candidates == (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8) and t.max_temperature == 1.8
    assert parse_config({"mask": {"rho": 0.1}}).temperature == t  # sections are independent


def test_temperature_values_normalised():
    t = parse_config({"temperature": {"mode": "staged", "stages": [[0, 1], [140, 2]], "value": 1}}).temperature
    assert t.stages == ((0, 1.0), (140, 2.0)) and isinstance(t.stages[0][1], float)
    assert t.value == 1.0 and isinstance(t.value, float)
    a = parse_config({"temperature": {"mode": "auto", "value": 1.0, "candidates": [1, 1.5, 2], "max_temperature": 2,
                                      "target": 1, "start": "probe"}}).temperature
    assert a.candidates == (1.0, 1.5, 2.0) and a.target == 1.0 and a.max_temperature == 2.0


@pytest.mark.parametrize(
    "values, match",
    [
        ({"tempreature": 1.0}, r"unknown key\(s\) microcoder.temperature.\{tempreature\}"),
        ({"mode": "schedule"}, "microcoder.temperature.mode"),
        ({"value": 0}, "microcoder.temperature.value"),
        ({"value": "1.2"}, "microcoder.temperature.value"),
        ({"stages": [[0, -1]]}, "microcoder.temperature.stages"),
        ({"mode": "staged"}, "microcoder.temperature.stages: stages must list"),
        ({"mode": "staged", "stages": [[0, 0.6], [1, 0.7]]}, "microcoder.temperature.stages: .*continuous"),
        ({"candidates": "0.6,1.2"}, "microcoder.temperature.candidates"),
        ({"candidates": [0.6, None]}, "microcoder.temperature.candidates"),
        ({"mode": "auto", "candidates": [0.6, 0.62], "value": 0.6}, "microcoder.temperature.candidates"),
        ({"mode": "auto", "min_interval": 5}, "min_interval"),
        ({"mode": "auto", "value": 1.3}, "microcoder.temperature.value"),
        ({"mode": "auto", "start": "probe"}, "microcoder.temperature.target must be set with start=probe"),
        ({"start": "random"}, "microcoder.temperature.start"),
        ({"target": 1.5}, "microcoder.temperature.target"),
        ({"target_margin": -0.1}, "microcoder.temperature.target_margin"),
        ({"smoothing": 1.0}, "microcoder.temperature.smoothing"),
        ({"window": 0}, "microcoder.temperature.window"),
        ({"min_interval": 2.5}, "microcoder.temperature.min_interval"),
        ({"target_steps": True}, "microcoder.temperature.target_steps"),
        ({"n": 0}, "microcoder.temperature.n"),
        ({"metric": "entropy"}, "microcoder.temperature.metric"),
        ({"max_temperature": -1}, "microcoder.temperature.max_temperature"),
        ({"probe_samples": 0}, "microcoder.temperature.probe_samples"),
        ({"probe_prompts": "all"}, "microcoder.temperature.probe_prompts"),
    ],
)
def test_invalid_temperature_config_names_the_key(values, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({"temperature": values})
