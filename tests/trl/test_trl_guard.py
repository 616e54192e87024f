"""The TRL version guard: passes on the installed TRL 1.16.0, and names every changed internal at once."""

from __future__ import annotations

import pytest
from datasets import Dataset
from trl.trainer import grpo_trainer, utils as trl_utils

from microcoder_ext import compat
from microcoder_ext.trl import guard
from microcoder_ext.trl.reward import CodeReward


def test_installed_trl_passes():
    assert guard.problems() == []
    assert guard.check_trl() == "1.16.0"


def test_changed_internals_are_all_listed(monkeypatch):
    GRPOTrainer = grpo_trainer.GRPOTrainer
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")

    def renamed(self, batch):  # a renamed parameter
        return batch

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", renamed)

    def add_fused_lm_head(model, temperature=1.0, **kw):  # a head that no longer keeps `temperature` in a closure
        return None

    monkeypatch.setattr(trl_utils, "add_fused_lm_head", add_fused_lm_head)
    with pytest.raises(guard.TRLInternalsError) as err:
        guard.check_trl()
    msg = str(err.value)
    assert "installed trl 1.16.0" in msg and "Install trl==1.16.0 or port microcoder_ext/trl" in msg
    assert "GRPOTrainer._calculate_rewards(self, inputs, prompts, completions, completion_ids_list): AttributeError" \
        in msg
    assert "GRPOTrainer._generate_and_score_completions(self, inputs): parameters ['self', 'batch']" in msg
    assert "add_fused_lm_head divides the logits by the closure variable `temperature`" in msg
    assert "no nested function _fused_forward" in msg


def test_trainer_refuses_before_building(monkeypatch, tmp_path, tokenizer):
    from microcoder_ext.trl.config import microcoder_grpo_config
    from microcoder_ext.trl.trainer import MicrocoderGRPOTrainer

    built = []
    monkeypatch.setattr(grpo_trainer.GRPOTrainer, "log", lambda self, logs, start_time=None: None)  # no _metrics use
    monkeypatch.setattr(grpo_trainer.GRPOTrainer, "__init__", lambda self, *a, **k: built.append(1))
    args = microcoder_grpo_config(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                                  num_generations=2, per_device_train_batch_size=2)
    with pytest.raises(guard.TRLInternalsError) as err:
        MicrocoderGRPOTrainer(model=None, reward_funcs=[CodeReward()], args=args,
                              train_dataset=Dataset.from_list([{"prompt": "p"}]), processing_class=tokenizer)
    assert "GRPOTrainer.log averages and clears self._metrics[mode]" in str(err.value)
    assert "GRPOTrainer.__init__ keeps temperature" in str(err.value)
    assert built == []  # refused before TRL's __init__ ran


def test_unsupported_version(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda dist: "1.17.0")
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedVersionError, match=r"supports trl>=1.16,<1.17, found trl==1.17.0"):
        guard.check_trl()
