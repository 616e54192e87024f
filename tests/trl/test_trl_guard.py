"""The TRL version guard: passes on the installed TRL (1.16.0 in the trl venv, 1.15.0 in trl-1.15.0's), names every
changed internal at once, and refuses releases outside the range with the oldest supported one named."""

from __future__ import annotations

import pytest
from datasets import Dataset
from trl.trainer import grpo_trainer, utils as trl_utils

from importlib import metadata

from microcoder_ext import compat
from microcoder_ext.trl import guard
from microcoder_ext.trl.reward import CodeReward


INSTALLED = metadata.version("trl")


def test_installed_trl_passes():
    assert INSTALLED in compat.TESTED["trl"]
    assert guard.problems() == []
    assert guard.check_trl() == INSTALLED


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
    assert f"installed trl {INSTALLED} (tested: 1.15.0, 1.16.0" in msg
    assert "Install trl==1.16.0 or port microcoder_ext/trl" in msg
    assert "GRPOTrainer._calculate_rewards(self, inputs, prompts, completions, completion_ids_list): AttributeError" \
        in msg
    assert "GRPOTrainer._generate_and_score_completions(self, inputs): parameters ['self', 'batch']" in msg
    assert "add_fused_lm_head divides the logits by the closure variable `temperature`" in msg
    assert "no nested function _fused_forward" in msg


def test_trainer_refuses_before_building(monkeypatch, tmp_path, tokenizer):
    from microcoder_ext.trl.config import microcoder_grpo_config
    from microcoder_ext.trl.trainer import MicrocoderGRPOTrainer

    built = []
    args = microcoder_grpo_config(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none",
                                  num_generations=2, per_device_train_batch_size=2)
    monkeypatch.setattr(grpo_trainer.GRPOTrainer, "log", lambda self, logs, start_time=None: None)  # no _metrics use
    monkeypatch.setattr(grpo_trainer.GRPOTrainer, "__init__", lambda self, *a, **k: built.append(1))
    with pytest.raises(guard.TRLInternalsError) as err:
        MicrocoderGRPOTrainer(model=None, reward_funcs=[CodeReward()], args=args,
                              train_dataset=Dataset.from_list([{"prompt": "p"}]), processing_class=tokenizer)
    assert "GRPOTrainer.log averages and clears self._metrics[mode]" in str(err.value)
    assert "GRPOTrainer.__init__ keeps temperature" in str(err.value)
    assert built == []  # refused before TRL's __init__ ran


@pytest.mark.parametrize("version", ["1.17.0", "1.14.2"])
def test_unsupported_version(monkeypatch, version):
    monkeypatch.setattr(compat, "installed_version", lambda dist: version)
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedVersionError, match=rf"supports trl>=1.15,<1.17, found trl=={version}"):
        guard.check_trl()
