"""GRPOConfig presets: the values, their precedence, and what TRL's GRPOConfig makes of them."""

from __future__ import annotations

import pytest
from trl import GRPOConfig

from microcoder_ext.trl.config import PAPER_TEMPERATURE, PRESETS, microcoder_grpo_config, preset_settings

CPU = dict(use_cpu=True, bf16=False, report_to="none", num_generations=2, per_device_train_batch_size=2)


def test_microcoder_preset(tmp_path):
    cfg = microcoder_grpo_config(output_dir=str(tmp_path), **CPU)
    assert isinstance(cfg, GRPOConfig)
    assert (cfg.beta, cfg.epsilon, cfg.epsilon_high, cfg.loss_type, cfg.scale_rewards) == (0.0, 0.2, 0.28, "dapo",
                                                                                             "group")
    assert cfg.mask_truncated_completions is False and cfg.entropy_coef == 0.0
    assert cfg.temperature == PAPER_TEMPERATURE == 1.2
    assert PRESETS["microcoder"].mask and PRESETS["microcoder"].temperature_control


@pytest.mark.parametrize("name,beta,high,mask,control", [
    ("dapo_baseline", 0.0, 0.28, False, False), ("grpo_baseline", 0.001, 0.2, False, False),
    ("mask_only", 0.0, None, True, False)])
def test_other_presets(tmp_path, name, beta, high, mask, control):
    cfg = microcoder_grpo_config(name, output_dir=str(tmp_path), **CPU)
    assert (cfg.beta, cfg.epsilon, cfg.epsilon_high) == (beta, 0.2, high)
    assert (PRESETS[name].mask, PRESETS[name].temperature_control) == (mask, control)
    if name == "mask_only":  # TRL's defaults untouched
        assert preset_settings(name) == {} and cfg.temperature == GRPOConfig(output_dir=str(tmp_path), **CPU).temperature


def test_overrides_win_and_unknown_preset(tmp_path):
    cfg = microcoder_grpo_config(output_dir=str(tmp_path), epsilon_high=0.3, beta=0.01, max_completion_length=64, **CPU)
    assert (cfg.epsilon_high, cfg.beta, cfg.max_completion_length) == (0.3, 0.01, 64)
    assert preset_settings("microcoder")["epsilon_high"] == 0.28  # a copy: the preset is unchanged
    with pytest.raises(ValueError, match="unknown preset 'dapo'; one of microcoder, dapo_baseline"):
        microcoder_grpo_config("dapo", output_dir=str(tmp_path))
    with pytest.raises(TypeError):
        microcoder_grpo_config(output_dir=str(tmp_path), not_a_field=1)
