import pytest
import torch

from microcoder_ext.core.config import ConfigError, MaskConfig, parse_config


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
