"""The version guard of ``microcoder_sync`` (``microcoder_ext.verl.guard``): every verl internal the trainer overrides
or relies on holds in the installed verl; a changed one is named, and the trainer refuses to start on it."""

from __future__ import annotations

import pytest

from microcoder_ext import compat
from microcoder_ext.verl import guard

pytestmark = pytest.mark.verl


def test_every_internal_holds_in_the_installed_verl():
    assert guard.trainer_internal_problems() == []
    from importlib import metadata

    installed = metadata.version("verl")
    assert installed in compat.TESTED["verl"]  # a release of the supported range that make test runs (0.9.0 or 0.9.1)
    assert guard.check_trainer_internals() == installed


def test_a_changed_override_point_is_named(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    def _compute_advantage(self, batch, metrics, extra):  # a release that added a parameter
        return batch

    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", _compute_advantage)
    with pytest.raises(guard.VerlTrainerInternalsChanged) as e:
        guard.check_trainer_internals()
    assert "PPOTrainerSync._compute_advantage(self, batch, metrics)" in str(e.value)
    assert "parameters ['self', 'batch', 'metrics', 'extra']" in str(e.value)


def test_a_changed_temperature_hand_off_is_named(monkeypatch):
    import inspect

    from verl.trainer.ppo.v1 import trainer_base

    src = inspect.getsource(trainer_base.PPOTrainer._step_once)
    monkeypatch.setattr(inspect, "getsource", lambda obj, _real=inspect.getsource: (
        src.replace("self.config.actor_rollout_ref.rollout.temperature", "self.sampling_temperature")
        if obj is trainer_base.PPOTrainer._step_once else _real(obj)))
    problems = guard.trainer_internal_problems()
    assert len(problems) == 1 and "takes the step's log-prob temperature" in problems[0], problems


def test_the_trainer_checks_before_anything_else(monkeypatch):
    from microcoder_ext.verl import trainer

    def changed():
        raise guard.VerlTrainerInternalsChanged("changed")

    monkeypatch.setattr(trainer, "check_trainer_internals", changed)
    with pytest.raises(guard.VerlTrainerInternalsChanged):
        trainer.MicrocoderSyncTrainer(config=None)  # no config read, no worker: the guard comes first
