"""microcoder_ext.openrlhf.guard: the one check of every OpenRLHF internal the adapter relies on.

It passes on the installed OpenRLHF 0.11.2; each simulated change (an internal removed, a signature changed, an
``Experience`` field gone, another version) is named, all of them at once; and the launcher stops with the guard's
message (exit 1) before it patches anything.
"""

from __future__ import annotations

import dataclasses
import runpy
import sys

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import openrlhf.trainer.ppo_trainer as ppo_trainer
import openrlhf.trainer.ppo_utils.experience as experience
import openrlhf.utils.config as openrlhf_config
import ray
from openrlhf.trainer.ppo_trainer import BasePPOTrainer
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

import microcoder_ext.compat as compat
from microcoder_ext.compat import UnsupportedVersionError
from microcoder_ext.openrlhf import guard, launcher


@pytest.fixture(autouse=True)
def _supported_only(monkeypatch):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)


def test_passes_on_the_installed_openrlhf():
    assert guard.check_openrlhf() == "0.11.2"
    assert guard.problems() == []


def test_a_removed_method_is_named(monkeypatch):
    monkeypatch.delattr(BasePPOTrainer, "train_step")
    with pytest.raises(guard.OpenRLHFInternalsError) as info:
        guard.check_openrlhf()
    assert "openrlhf.trainer.ppo_trainer.BasePPOTrainer.train_step(self, rollout_samples, global_step): " \
           "AttributeError" in str(info.value)
    assert "openrlhf 0.11.2" in str(info.value)


def test_a_changed_signature_is_named(monkeypatch):
    def compute_advantages_and_returns(self, experiences, group_size):
        return experiences

    monkeypatch.setattr(RemoteExperienceMaker, "compute_advantages_and_returns", compute_advantages_and_returns)
    [problem] = guard.problems()
    assert problem.startswith("openrlhf.trainer.ppo_utils.experience_maker.RemoteExperienceMaker."
                              "compute_advantages_and_returns(self, experiences): parameters ")
    assert "group_size" in problem


def test_a_missing_experience_field_is_named(monkeypatch):
    fields = [(f.name, f.type, dataclasses.field(default=None)) for f in dataclasses.fields(experience.Experience)
              if f.name != "truncated"]
    monkeypatch.setattr(experience, "Experience", dataclasses.make_dataclass("Experience", fields))
    [problem] = guard.problems()
    assert "openrlhf.trainer.ppo_utils.experience.Experience dataclass fields" in problem
    assert "missing fields ['truncated']" in problem


def test_every_problem_is_listed_at_once(monkeypatch):
    monkeypatch.delattr(BasePPOTrainer, "train_step")
    monkeypatch.setattr(RemoteExperienceMaker, "compute_advantages_and_returns", lambda self: [])
    monkeypatch.delattr(openrlhf_config, "hierarchize")
    with pytest.raises(guard.OpenRLHFInternalsError) as info:
        guard.check_openrlhf()
    listed = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    assert any("BasePPOTrainer.train_step" in line for line in listed)
    assert any("compute_advantages_and_returns" in line for line in listed)
    assert any("openrlhf.utils.config.hierarchize" in line for line in listed)


def test_another_version_is_refused_naming_both(monkeypatch):
    real = compat.installed_version
    monkeypatch.setattr(compat, "installed_version", lambda dist: "0.11.3" if dist == "openrlhf" else real(dist))
    with pytest.raises(UnsupportedVersionError) as info:
        guard.check_openrlhf()
    assert "openrlhf>=0.11.2,<0.11.3" in str(info.value) and "found openrlhf==0.11.3" in str(info.value)
    assert not isinstance(info.value, guard.OpenRLHFInternalsError)


def test_the_launcher_stops_on_the_guard_before_patching_anything(monkeypatch, capsys):
    monkeypatch.delattr(BasePPOTrainer, "train_step")
    monkeypatch.setattr(runpy, "run_module", lambda *a, **k: pytest.fail("runpy must not run"))
    before = (ppo_trainer.PPOTrainer, openrlhf_config.hierarchize, ray.is_initialized, list(sys.argv))
    assert launcher.main(["--actor.model_name_or_path", "fake/model", "--rollout.n_samples_per_prompt", "8",
                          "--mc.dry_run"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: microcoder-ext's OpenRLHF adapter relies on OpenRLHF internals")
    assert "BasePPOTrainer.train_step" in err
    assert (ppo_trainer.PPOTrainer, openrlhf_config.hierarchize, ray.is_initialized, sys.argv) == before


def test_the_launcher_stops_on_an_unsupported_version(monkeypatch, capsys):
    monkeypatch.setattr(compat, "installed_version", lambda dist: "0.12.0")
    monkeypatch.setattr(runpy, "run_module", lambda *a, **k: pytest.fail("runpy must not run"))
    assert launcher.main(["--mc.dry_run"]) == 1
    assert "found openrlhf==0.12.0" in capsys.readouterr().err
