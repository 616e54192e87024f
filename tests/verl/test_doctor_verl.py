"""``microcoder doctor verl`` on verl 0.9.1's real composed main_ppo configs (the shipped recipes + overrides).

Per finding: one config that triggers it and one that does not. The configs are composed under one Hydra
initialisation (:func:`microcoder_ext.verl.recipes.compose_many`); a few real command lines run in subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from host_load import hang_guard

pytestmark = pytest.mark.verl

import verl  # noqa: F401,E402  (a missing framework fails, never skips)
import hydra  # noqa: F401,E402

from microcoder_ext.core.doctor import diagnose, exit_status  # noqa: E402
from microcoder_ext.verl.doctor import plan_from_verl, recipe_from_overrides  # noqa: E402
from microcoder_ext.verl.recipes import compose_many  # noqa: E402

A = "actor_rollout_ref"
#: per-model launch settings the recipes leave to the command line (docs/paper.md#training-settings): batch 64 / 32, G 8, 4K
LAUNCH = [
    "data.train_batch_size=64", f"{A}.actor.ppo_mini_batch_size=32", f"{A}.rollout.n=8",
    "data.max_response_length=4096",
]
OTHER_REWARD = [  # a user's own scorer: a custom function that is not microcoder_ext.reward
    f"reward.custom_reward_function.path={Path(verl.__file__).parent / 'utils/reward_score/gsm8k.py'}",
    "reward.custom_reward_function.name=compute_score",
]

#: name -> (recipe, overrides)
CONFIGS: dict[str, tuple[str | None, list[str]]] = {
    "microcoder": ("microcoder", LAUNCH),
    "mask_only": ("microcoder_mask_only", LAUNCH),
    "dapo": ("dapo_baseline", LAUNCH),
    "grpo": ("grpo_baseline", LAUNCH),
    "low_t": ("microcoder", LAUNCH + ["microcoder.temperature.value=0.6"]),
    "low_t_rollout_key": ("microcoder", LAUNCH + [f"{A}.rollout.temperature=0.6"]),
    "low_t_dapo": ("dapo_baseline", LAUNCH + [f"{A}.rollout.temperature=0.6"]),
    "t_0.8": ("microcoder", LAUNCH + ["microcoder.temperature.value=0.8"]),
    "staged_ramp": ("microcoder", LAUNCH + ["microcoder.temperature.mode=staged",
                                            "microcoder.temperature.stages=[[0,0.6],[5,0.65]]"]),
    "staged_paper": ("microcoder", LAUNCH + ["microcoder.temperature.mode=staged",
                                             "microcoder.temperature.stages=[[0,0.6],[140,1.8]]"]),
    "auto_fine": ("microcoder", LAUNCH + ["microcoder.temperature.mode=auto",
                                          "microcoder.temperature.candidates=[1.2,1.25,1.3]"]),
    "auto": ("microcoder", LAUNCH + ["microcoder.temperature.mode=auto"]),
    "kl_loss": ("microcoder", LAUNCH + [f"{A}.actor.use_kl_loss=true"]),
    "kl_reward": ("microcoder", LAUNCH + ["algorithm.use_kl_in_reward=true"]),
    "sym_clip": ("microcoder", LAUNCH + [f"{A}.actor.clip_ratio_high=0.2"]),
    "rho_1": ("microcoder", LAUNCH + ["microcoder.mask.rho=1.0"]),
    "rho_0.3": ("microcoder", LAUNCH + ["microcoder.mask.rho=0.3"]),
    "rho_0.5": ("microcoder", LAUNCH + ["microcoder.mask.rho=0.5"]),
    "rho_0": ("microcoder", LAUNCH + ["microcoder.mask.rho=0"]),
    "short": ("microcoder", LAUNCH + ["data.max_response_length=2048"]),
    "on_policy": ("microcoder", LAUNCH + [f"{A}.actor.ppo_mini_batch_size=64", "data.train_batch_size=64"]),
    "big_batch": ("microcoder", LAUNCH + ["data.train_batch_size=1024", f"{A}.actor.ppo_mini_batch_size=256"]),
    "mask_only_other_reward": ("microcoder_mask_only", LAUNCH + OTHER_REWARD),
    "mask_only_no_reward": ("microcoder_mask_only", LAUNCH + ["reward.custom_reward_function.path=null"]),
    "mask_only_no_reward_error": ("microcoder_mask_only", LAUNCH + ["reward.custom_reward_function.path=null",
                                                                    "microcoder.mask.missing_verdict=error"]),
    "dapo_other_reward": ("dapo_baseline", LAUNCH + OTHER_REWARD),
    "n1": ("microcoder", LAUNCH + [f"{A}.rollout.n=1"]),
    "n1_gae": ("dapo_baseline", LAUNCH + [f"{A}.rollout.n=1", "algorithm.adv_estimator=gae"]),
    "staged_single_turn": ("microcoder", LAUNCH + ["microcoder.temperature.mode=staged",
                                                   "microcoder.temperature.stages=[[0,0.6],[140,1.2]]",
                                                   f"{A}.rollout.agent.default_agent_loop=single_turn_agent"]),
    "async": ("microcoder", LAUNCH + ["trainer.v1.trainer_mode=colocate_async"]),
    "async_dapo": ("dapo_baseline", LAUNCH + ["trainer.v1.trainer_mode=colocate_async"]),
    "plus_recipe": (None, ["+recipe=microcoder", *LAUNCH, "data.max_response_length=2048"]),
    # Ray's CPUs fixed for one 8-GPU node (verl's yaml: "use a fixed number ... when using SLURM")
    "ray_cpus_16": ("microcoder", LAUNCH + ["trainer.n_gpus_per_node=8", "ray_kwargs.ray_init.num_cpus=16"]),
    "ray_cpus_34": ("microcoder", LAUNCH + ["trainer.n_gpus_per_node=8", "ray_kwargs.ray_init.num_cpus=34"]),
    "ray_cpus_one_unit": ("microcoder", LAUNCH + ["trainer.n_gpus_per_node=8", "ray_kwargs.ray_init.num_cpus=27",
                                                  "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]),
}


@pytest.fixture(scope="module")
def plans():
    names = list(CONFIGS)
    cfgs = compose_many([CONFIGS[n] for n in names])
    return {
        n: plan_from_verl(c, recipe=CONFIGS[n][0] or recipe_from_overrides(CONFIGS[n][1])) for n, c in zip(names, cfgs)
    }


def found(plans, name):
    return {(f.code, f.severity) for f in diagnose(plans[name])}


def codes(plans, name):
    return {f.code for f in diagnose(plans[name])}


def test_shipped_recipes(plans):
    # MicroCoder-GRPO with the paper's launch sizes: clean, not even an info
    assert diagnose(plans["microcoder"]) == []
    assert exit_status(diagnose(plans["microcoder"]), strict=True) == 0
    p = plans["microcoder"]
    assert (p.estimator, p.group_estimator, p.group_size, p.train_batch_size, p.mini_batch_size) == \
           ("grpo", True, 8, 64, 32)
    assert (p.max_response_length, p.kl_loss, p.kl_coef, p.kl_in_reward) == (4096, False, 0.0, False)
    assert (p.clip_low, p.clip_high, p.loss_agg) == (0.2, 0.28, "token-mean")
    assert (p.rollout_temperature, p.logprob_temperature, p.temperature_synced) == (1.2, 1.2, True)
    assert p.mask is not None and p.mask.rho == 0.2 and p.temperature.mode == "constant"
    assert p.reward_verdicts is True and p.async_rollout is False and p.config_errors == []
    # the baselines train without the mask: the mask rules stay quiet, grpo_baseline's KL/symmetric clip included
    for name in ("dapo", "grpo"):
        assert diagnose(plans[name]) == [], name
        assert plans[name].mask is None and plans[name].temperature is None
    assert plans["grpo"].kl_loss is True and plans["grpo"].kl_coef == 0.001
    # mask only: verl's rollout.temperature (1.0 by default) drives a constant controller, the recipe's reward is
    # verl's default (none): mask-without-verdicts, see below
    assert plans["mask_only"].temperature.value == 1.0


def test_low_temperature(plans):
    assert ("low-temperature", "warning") in found(plans, "low_t")
    assert plans["low_t"].rollout_temperature == 0.6
    assert ("low-temperature", "warning") in found(plans, "low_t_dapo")
    assert "low-temperature" not in codes(plans, "t_0.8")
    assert "low-temperature" not in codes(plans, "dapo")
    # the recipe's own rule refuses the rollout key (one source of truth): the run would not start, the doctor
    # reports that, and the message names microcoder.temperature.value=0.6 (the "low_t" config above)
    assert found(plans, "low_t_rollout_key") == {("invalid-config", "error")}
    (err,) = plans["low_t_rollout_key"].config_errors
    assert "microcoder.temperature.value=0.6" in err
    # the paper's 0.6 -> 1.8 switch starts low on purpose: an info
    assert ("low-temperature", "info") in found(plans, "staged_paper")


def test_continuous_temperature(plans):
    assert ("continuous-temperature", "error") in found(plans, "staged_ramp")
    assert ("continuous-temperature", "error") in found(plans, "auto_fine")
    # reported once: the recipe checks' ConfigError on the same stages is not repeated as invalid-config
    assert "invalid-config" not in codes(plans, "staged_ramp")
    for name in ("staged_paper", "auto", "microcoder"):
        assert "continuous-temperature" not in codes(plans, name), name
    assert plans["staged_paper"].rollout_temperature == 0.6  # the controller's step-0 value reaches the key


def test_kl_with_microcoder(plans):
    (f,) = [f for f in diagnose(plans["kl_loss"]) if f.code == "kl-with-microcoder"]
    assert f.severity == "warning" and f.fix.startswith(f"{A}.actor.use_kl_loss=false")
    assert "kl-with-microcoder" in codes(plans, "kl_reward")
    assert "kl-with-microcoder" not in codes(plans, "microcoder")
    assert "kl-with-microcoder" not in codes(plans, "grpo")  # KL without the mask: the paper's GRPO baseline


def test_symmetric_clip(plans):
    (f,) = [f for f in diagnose(plans["sym_clip"]) if f.code == "symmetric-clip"]
    assert f.fix == f"{A}.actor.clip_ratio_low=0.2 {A}.actor.clip_ratio_high=0.28"
    assert "symmetric-clip" not in codes(plans, "microcoder")


def test_mask_all_and_rho_range(plans):
    assert found(plans, "rho_1") == {("mask-all", "warning")}
    assert [f.fix for f in diagnose(plans["rho_1"])] == ["microcoder.mask.rho=0.2"]
    assert found(plans, "rho_0.5") == {("rho-range", "warning")}
    assert found(plans, "rho_0") == {("rho-range", "info")}
    assert diagnose(plans["rho_0.3"]) == []


def test_short_response(plans):
    (f,) = diagnose(plans["short"])
    assert (f.code, f.severity, f.fix) == ("short-response", "warning", "data.max_response_length=4096")
    assert plans["short"].max_response_length == 2048  # rollout.response_length follows data.max_response_length


def test_on_policy_batch(plans):
    assert found(plans, "on_policy") == {("on-policy-batch", "warning")}
    assert [f.fix for f in diagnose(plans["on_policy"])] == [f"{A}.actor.ppo_mini_batch_size=32"]
    assert found(plans, "big_batch") == {("on-policy-batch", "info")}
    assert "on-policy-batch" not in codes(plans, "microcoder")


def test_mask_without_verdicts(plans):
    assert plans["mask_only_other_reward"].reward_verdicts is None
    assert ("mask-without-verdicts", "info") in found(plans, "mask_only_other_reward")
    assert plans["mask_only_no_reward"].reward_verdicts is False
    assert ("mask-without-verdicts", "warning") in found(plans, "mask_only_no_reward")
    assert ("mask-without-verdicts", "error") in found(plans, "mask_only_no_reward_error")
    f = next(f for f in diagnose(plans["mask_only_no_reward"]) if f.code == "mask-without-verdicts")
    assert f.fix == ("reward.custom_reward_function.path=pkg://microcoder_ext.reward "
                     "reward.custom_reward_function.name=compute_score")
    assert "mask-without-verdicts" not in codes(plans, "microcoder")
    assert "mask-without-verdicts" not in codes(plans, "dapo_other_reward")  # no mask, nothing reads verdicts


def test_temperature_mismatch_only_without_our_agent_loop(plans):
    """verl 0.9.1 has one key, actor_rollout_ref.rollout.temperature, for sampling and for the log-probs (the v1
    trainer passes it as meta_info temperature to every log-prob pass), so the two only part when microcoder_sync
    changes the temperature and the sampler is not our agent loop (the agent-loop workers keep a static copy of the
    config): then the samplers stay at the first temperature while the log-probs follow the controller."""
    src = (Path(verl.__file__).parent / "trainer/ppo/v1/trainer_base.py").read_text()
    assert src.count('"temperature": self.config.actor_rollout_ref.rollout.temperature') >= 3
    for name, plan in plans.items():
        if name == "staged_single_turn":
            continue
        assert plan.rollout_temperature == plan.logprob_temperature and plan.temperature_synced, name
        assert "temperature-mismatch" not in codes(plans, name), name
    plan = plans["staged_single_turn"]
    assert plan.temperature_synced is False
    (f,) = [f for f in diagnose(plan) if f.code == "temperature-mismatch"]
    assert f.severity == "error" and f.fix == f"{A}.rollout.agent.default_agent_loop=microcoder_single_turn"
    # the trainer's own refusal of this config is reported once, by the rule, not again as invalid-config
    assert "invalid-config" not in codes(plans, "staged_single_turn")
    assert "temperature-mismatch" not in codes(plans, "staged_paper")  # our agent loop: synced


def test_group_size_1(plans):
    (f,) = [f for f in diagnose(plans["n1"]) if f.code == "group-size-1"]
    assert f.severity == "error" and f.fix == f"{A}.rollout.n=8"
    assert "group-size-1" not in codes(plans, "n1_gae")  # GAE has no groups
    assert "group-size-1" not in codes(plans, "microcoder")


def test_async(plans):
    assert ("async", "error") in found(plans, "async")
    assert "invalid-config" not in codes(plans, "async")  # recipe show's async refusal is the same problem
    assert "async" not in codes(plans, "async_dapo")  # no mask, no controller: verl's own async trainer


def test_ray_cpus_short_of_what_main_ppo_holds(plans):
    """verl's resource pool (3 CPUs and a GPU per rank) and transfer queue (its controller and 8 storage units, 1 CPU
    each) hold 34 CPUs of an 8-GPU node, one more must be free to place the actors that hold none, and verl waits for
    its placement with no time limit: 16 CPUs would hang main_ppo's set-up (tests/verl/test_cpu_backend.py places
    verl's own pool that way). The finding names the knob and the value that fixes it."""
    (f,) = [f for f in diagnose(plans["ray_cpus_16"]) if f.code == "invalid-config"]
    assert f.severity == "error"
    assert "ray_kwargs.ray_init.num_cpus=16 is short of the 34 CPUs main_ppo needs" in f.message
    assert "Set ray_kwargs.ray_init.num_cpus=34" in f.message
    assert diagnose(plans["ray_cpus_34"]) == []
    assert diagnose(plans["ray_cpus_one_unit"]) == []  # 24 + 1 unit + the controller + 1 free = 27
    assert diagnose(plans["microcoder"]) == []  # null: Ray counts the node's cores


def test_reported_once_by_code_not_by_text(monkeypatch):
    """The recipe checks' failures that a rule reports itself are kept out of invalid-config by their code
    (``CheckReport.failure_codes``), not by their text: rewording the refusals changes no finding."""
    from microcoder_ext.core.config import ConfigError
    from microcoder_ext.verl import temperature as mc_temp

    names = ["staged_single_turn", "async", "staged_ramp", "auto_fine", "low_t_rollout_key"]
    cfgs = compose_many([CONFIGS[n] for n in names])
    before = [[f.to_dict() for f in diagnose(plan_from_verl(c))] for c in cfgs]
    assert "invalid-config" in {f["code"] for f in before[-1]}  # a refusal no rule reports stays invalid-config
    check, refusal = mc_temp.check_temperature_config, mc_temp.async_refusal

    def reworded_check(config, mc_config):
        try:
            return check(config, mc_config)
        except ConfigError as e:
            raise ConfigError(f"reworded refusal ({e.code})", e.code) from None

    monkeypatch.setattr(mc_temp, "check_temperature_config", reworded_check)
    monkeypatch.setattr(mc_temp, "async_refusal", lambda config: refusal(config) and "reworded async refusal")
    after = [[f.to_dict() for f in diagnose(plan_from_verl(c))] for c in cfgs]
    assert after[:-1] == before[:-1]
    (err,) = plan_from_verl(cfgs[-1]).config_errors  # the reworded text reaches the user where it is reported
    assert "reworded refusal (rollout-temperature-disagrees)" in err


def test_plus_recipe_override(plans):
    assert plans["plus_recipe"].recipe == "microcoder"
    assert {f.code for f in diagnose(plans["plus_recipe"])} == {"short-response"}


# ------------------------------------------------------------------------------------------------ command line


def doctor(*args: str) -> subprocess.CompletedProcess:
    """``microcoder doctor ARGS`` as a process (its real exit status)."""
    return subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "doctor", *args],
                          capture_output=True, text=True, timeout=hang_guard(180))


@pytest.fixture
def cli(capsys):
    """``cli(*args) -> CompletedProcess``: ``microcoder doctor ARGS`` through the CLI's ``main`` in this process (the
    same parser and code path as the console script; one import of verl instead of one per command)."""
    from microcoder_ext.cli import main

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        try:
            code = main(["doctor", *args])
        except SystemExit as e:  # argparse's usage errors and --help
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["microcoder", "doctor", *args], code, out, err)

    return run


def test_cli_exit_codes_and_json(cli):
    clean = doctor("verl", "microcoder", *LAUNCH, "--strict")  # one real process: its exit status
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.splitlines()[-1] == "0 error(s), 0 warning(s), 0 info(s): clean"

    warn = cli("verl", "none", "+recipe=microcoder", *LAUNCH, "data.max_response_length=2048")
    assert warn.returncode == 0, warn.stderr
    assert any(l.startswith("WARNING  short-response") for l in warn.stdout.splitlines())
    strict = cli("--strict", "verl", "microcoder", *LAUNCH, "data.max_response_length=2048", "--json")
    assert strict.returncode == 1
    data = json.loads(strict.stdout)
    assert data["exit_status"] == 1 and data["strict"] is True
    assert [f["code"] for f in data["findings"]] == ["short-response"]
    assert data["plan"]["framework"] == "verl" and data["plan"]["max_response_length"] == 2048
    assert data["plan"]["mask"]["rho"] == 0.2

    error = cli("verl", "microcoder", *LAUNCH, f"{A}.rollout.n=1")
    assert error.returncode == 2 and "ERROR    group-size-1" in error.stdout


def test_cli_usage_errors_and_help(cli):
    bad = doctor("verl", "no_such_recipe", "--json")  # one real process
    assert bad.returncode == 2 and bad.stdout == "" and "unknown recipe 'no_such_recipe'" in bad.stderr
    bad = cli("verl", "microcoder", "not.a.key=1")
    assert bad.returncode == 2 and bad.stdout == "" and "not.a.key" in bad.stderr
    bad = cli("verl", "microcoder", "stray")
    assert bad.returncode == 2 and "key=value" in bad.stderr
    bad = cli("tensorflow")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    for args in (("--help",), ("verl", "--help")):
        h = cli(*args)
        assert h.returncode == 0 and "Exit status: 0 clean" in h.stdout and "--strict" in h.stdout
