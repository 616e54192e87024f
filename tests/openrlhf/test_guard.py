"""microcoder_ext.openrlhf.guard: the one check of every OpenRLHF internal the adapter relies on.

It passes on the installed OpenRLHF (0.11.0, 0.11.1 or 0.11.2); each simulated change (an internal removed, a
signature changed, an ``Experience`` field gone, another version) is named, all of them at once; and the launcher stops with the guard's
message (exit 1) before it patches anything.
"""

from __future__ import annotations

import dataclasses
import runpy
import sys
from importlib import metadata

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

INSTALLED = metadata.version("openrlhf")


@pytest.fixture(autouse=True)
def _supported_only(monkeypatch):
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)


def test_passes_on_the_installed_openrlhf():
    assert guard.check_openrlhf() == INSTALLED
    assert guard.problems() == []


def test_a_removed_method_is_named(monkeypatch):
    monkeypatch.delattr(BasePPOTrainer, "train_step")
    with pytest.raises(guard.OpenRLHFInternalsError) as info:
        guard.check_openrlhf()
    assert "openrlhf.trainer.ppo_trainer.BasePPOTrainer.train_step(self, rollout_samples, global_step): " \
           "AttributeError" in str(info.value)
    assert f"openrlhf {INSTALLED}" in str(info.value)


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
    assert "openrlhf>=0.11.0,<0.11.3" in str(info.value) and "found openrlhf==0.11.3" in str(info.value)
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


# ------------------------------------------------------------------------------------------------ the CPU backend


def test_cpu_backend_checks_pass_on_the_installed_openrlhf_and_deepspeed():
    assert guard.problems(guard.CPU_BACKEND_CHECKS) == []
    assert guard.check_cpu_backend() == INSTALLED


def test_a_changed_weight_sync_is_named_and_only_the_cpu_backend_refuses(monkeypatch):
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer
    from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

    def broadcast_to_vllm(self):  # e.g. a release that sends all weights in one bucket
        return None

    def update_weight(self, name, dtype, shape, packed=False):
        return None

    monkeypatch.setattr(ActorPPOTrainer, "broadcast_to_vllm", broadcast_to_vllm)
    monkeypatch.setattr(WorkerWrap, "update_weight", update_weight)
    found = guard.problems(guard.CPU_BACKEND_CHECKS)
    assert len(found) == 3, found
    assert found[0].startswith("openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap.update_weight(self, name, dtype, "
                               "shape, empty_cache): parameters ")
    assert found[1].startswith("openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap.update_weight receives each tensor "
                               "on cuda")
    assert found[2].startswith("openrlhf.trainer.ray.ppo_actor.ActorPPOTrainer.broadcast_to_vllm sends each parameter "
                               "with update_weight + broadcast from rank 0")
    assert guard.problems(guard.VLLM_ROUTING_CHECKS) == found[:2]  # what vLLM's worker checks before routing
    with pytest.raises(guard.OpenRLHFInternalsError) as info:
        guard.check_cpu_backend()
    assert "WorkerWrap.update_weight" in str(info.value) and "broadcast_to_vllm" in str(info.value)
    assert guard.check_openrlhf() == INSTALLED  # a GPU run does not depend on what the CPU backend mirrors


def test_a_changed_torch_cuda_call_site_and_deepspeed_are_named(monkeypatch):
    import openrlhf.utils.distributed_util as distributed_util

    real = compat.installed_version

    def barrier():
        import torch

        torch.distributed.barrier()
        torch.cuda.current_stream().synchronize()

    monkeypatch.setattr(distributed_util, "torch_dist_barrier_and_cuda_sync", barrier)
    monkeypatch.setattr(compat, "installed_version", lambda dist: "0.20.0" if dist == "deepspeed" else real(dist))
    with pytest.raises(guard.OpenRLHFInternalsError) as info:
        guard.check_cpu_backend()
    listed = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    assert any("torch_dist_barrier_and_cuda_sync calls torch.cuda.synchronize" in line for line in listed)
    tested = guard.DEEPSPEED_TESTED[INSTALLED]
    assert any(f"deepspeed 0.20.0 (the CPU backend is tested with deepspeed=={tested}" in line for line in listed)


def test_a_changed_vllm_is_named_with_the_openrlhf_internals(monkeypatch):
    """vLLM's CPU build is part of the CPU backend's guard: its version and every vLLM internal the routing uses
    (the sync group's store, the model runner, the plugin hook) are listed with OpenRLHF's, at once."""
    from vllm.distributed.utils import StatelessProcessGroup
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from microcoder_ext.smoke import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "vllm_version", lambda: "0.30.1")
    monkeypatch.setattr(StatelessProcessGroup, "create", staticmethod(lambda host, port, rank: None))
    monkeypatch.setattr(CPUModelRunner, "load_model", None)
    with pytest.raises(guard.OpenRLHFInternalsError) as info:
        guard.check_cpu_backend()
    text = str(info.value)
    for what in ("vLLM 0.30.1 (the CPU routing is tested with 0.29.0)",
                 "vllm.distributed.utils.StatelessProcessGroup.create takes host, port, rank, world_size",
                 "vllm.v1.worker.cpu_model_runner.CPUModelRunner.load_model"):
        assert what in text, what
    assert guard.check_openrlhf() == INSTALLED


def test_the_smoke_plan_stops_on_the_cpu_guard(monkeypatch, tmp_path):
    from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

    from microcoder_ext.openrlhf import smoke
    from microcoder_ext.smoke import model as smoke_model
    from microcoder_ext.smoke.runner import SmokeOptions

    monkeypatch.setattr(WorkerWrap, "init_process_group", lambda self, address, port: None)
    monkeypatch.setattr(smoke_model, "prepare_model", lambda *a, **k: pytest.fail("no model before the guard"))
    with pytest.raises(guard.OpenRLHFInternalsError, match="WorkerWrap.init_process_group"):
        smoke.plan(["--mc.preset", "microcoder", "--rollout.n_samples_per_prompt", "4", "--vllm.num_engines", "1"],
                   SmokeOptions(), tmp_path)
