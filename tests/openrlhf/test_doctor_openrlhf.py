"""``microcoder doctor openrlhf``: :func:`microcoder_ext.openrlhf.doctor.plan_from_argv` on the real launcher path.

Every argv goes through ``python -m microcoder_ext.openrlhf.train``'s own parsing (``launcher.launch`` with
``--mc.dry_run``: OpenRLHF 0.11.2's argparse, ``hierarchize``, the preset's checks, OpenRLHF's validation) and the
plan through :func:`microcoder_ext.core.doctor.diagnose`. For each rule that OpenRLHF flags can raise: one argv that
triggers it and one that does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)

from microcoder_ext.core.doctor import diagnose
from microcoder_ext.openrlhf import doctor
from microcoder_ext.openrlhf.launcher import reward_file

ROOT = Path(__file__).resolve().parents[2]
#: a clean MicroCoder-GRPO launch: G 8, 64 prompts per step, mini-batch 32 prompts (256 samples), 4K responses
BASE = ["--actor.model_name_or_path", "fake/model", "--rollout.n_samples_per_prompt", "8", "--rollout.batch_size", "64",
        "--train.batch_size", "256", "--rollout.max_new_tokens", "4096", "--vllm.num_engines", "8"]


def check(*argv: str):
    plan = doctor.plan_from_argv([*BASE, *argv])
    findings = diagnose(plan)
    return plan, findings, {(f.code, f.severity) for f in findings}


def codes(findings, severity=None):
    return {f.code for f in findings if severity is None or f.severity == severity}


def only(findings, code):
    [f] = [f for f in findings if f.code == code]
    return f


def test_clean_microcoder_preset_has_no_warnings():
    plan, findings, _ = check("--mc.preset", "microcoder")
    assert [f for f in findings if f.severity != "info"] == []
    # the mapping, as OpenRLHF parsed it
    assert plan.framework == "openrlhf" and plan.recipe == "microcoder"
    assert (plan.estimator, plan.group_estimator, plan.group_size) == ("group_norm", True, 8)
    assert (plan.train_batch_size, plan.mini_batch_size, plan.max_response_length) == (64, 32, 4096)
    assert (plan.kl_loss, plan.kl_coef, plan.kl_in_reward) == (False, 0.0, False)
    assert (plan.clip_low, plan.clip_high, plan.loss_agg) == (0.2, 0.28, "token-mean")
    assert (plan.rollout_temperature, plan.logprob_temperature, plan.temperature_synced) == (1.2, 1.2, True)
    assert plan.temperature.mode == "constant" and plan.mask.rho == 0.2
    assert plan.reward_verdicts is True and plan.async_rollout is False and plan.config_errors == []


def test_the_launchers_defaults_are_diagnosed_too():
    # OpenRLHF's own defaults: rollout.batch_size 1024, train.batch_size 128 samples, no --rollout.max_new_tokens
    plan = doctor.plan_from_argv(["--actor.model_name_or_path", "m", "--rollout.n_samples_per_prompt", "8"])
    assert (plan.train_batch_size, plan.mini_batch_size) == (1024, 16)
    assert plan.max_response_length == 2048  # --data.max_len: the upper bound when max_new_tokens is unset
    found = codes(diagnose(plan))
    assert {"short-response", "on-policy-batch"} <= found


def test_low_temperature():
    plan, findings, found = check("--mc.temperature.value", "0.6")
    assert ("low-temperature", "warning") in found
    assert plan.rollout_temperature == plan.logprob_temperature == 0.6
    assert only(findings, "low-temperature").fix == "--mc.temperature.value 1.2"
    assert "low-temperature" not in codes(check("--mc.temperature.value", "1.0")[1])


def test_low_temperature_constant_baseline_and_mask_only():
    found = check("--mc.preset", "dapo_baseline", "--rollout.temperature", "0.6", "--mc.allow_override")[2]
    assert ("low-temperature", "warning") in found
    plan, findings, found = check("--mc.preset", "mask_only", "--algo.advantage.estimator", "group_norm",
                                  "--reward.remote_url", reward_file(), "--rollout.temperature", "0.5")
    assert ("low-temperature", "warning") in found and plan.temperature is None
    assert only(findings, "low-temperature").fix == "--rollout.temperature 1.2"


def test_continuous_temperature():
    # the launcher itself refuses this schedule (exit 2); the doctor keeps it unvalidated to explain why
    plan, findings, found = check("--mc.temperature.mode", "staged", "--mc.temperature.stages", "[[0,0.6],[5,0.65]]")
    assert ("continuous-temperature", "error") in found
    assert plan.temperature.mode == "staged" and plan.rollout_temperature == 0.6
    assert "--mc.temperature.stages '[[0,0.6],[140,1.2]]'" in only(findings, "continuous-temperature").fix
    plan, findings, found = check("--mc.temperature.mode", "staged", "--mc.temperature.stages", "[[0,0.6],[140,1.2]]")
    assert "continuous-temperature" not in codes(findings)
    assert ("low-temperature", "info") in found  # the paper's low-to-high switch


def test_kl_with_microcoder():
    plan, findings, found = check("--algo.kl.init_coef", "0.01", "--mc.allow_override")
    assert ("kl-with-microcoder", "warning") in found and "invalid-config" not in codes(findings)
    assert (plan.kl_in_reward, plan.kl_loss, plan.kl_coef) == (True, False, 0.01)
    assert only(findings, "kl-with-microcoder").fix == "--algo.kl.init_coef 0"
    plan, findings, _ = check("--algo.kl.init_coef", "0.01", "--algo.kl.use_loss", "--mc.allow_override")
    assert plan.kl_loss is True and plan.kl_in_reward is False
    assert "drop --algo.kl.use_loss" in only(findings, "kl-with-microcoder").fix
    assert "kl-with-microcoder" not in codes(check()[1])


def test_a_refused_launch_is_still_diagnosed():
    # without --mc.allow_override the launcher refuses (exit 1): the refusal is an error, the rules still run
    plan, findings, found = check("--algo.kl.init_coef", "0.01")
    assert ("invalid-config", "error") in found and ("kl-with-microcoder", "warning") in found
    [message] = plan.config_errors
    assert "--algo.kl.init_coef 0.01 contradicts --mc.preset microcoder" in message


def test_symmetric_clip():
    plan, findings, found = check("--actor.eps_clip_low_high", "0.2", "0.2", "--mc.allow_override")
    assert ("symmetric-clip", "warning") in found and (plan.clip_low, plan.clip_high) == (0.2, 0.2)
    assert only(findings, "symmetric-clip").fix == "--actor.eps_clip_low_high 0.2 0.28"
    assert "symmetric-clip" not in codes(check()[1])
    # mask_only keeps OpenRLHF's clip: eps_clip_low_high defaults to (eps_clip, eps_clip)
    plan, _, found = check("--mc.preset", "mask_only", "--algo.advantage.estimator", "group_norm",
                           "--reward.remote_url", reward_file(), "--actor.eps_clip", "0.1")
    assert (plan.clip_low, plan.clip_high) == (0.1, 0.1) and ("symmetric-clip", "warning") in found


def test_mask_all():
    plan, findings, found = check("--mc.mask.rho", "1.0")
    assert ("mask-all", "warning") in found and only(findings, "mask-all").fix == "--mc.mask.rho 0.2"
    assert "mask-all" not in codes(check("--mc.mask.rho", "0.2")[1])
    # no mask, no mask-all: the baselines and --mc.mask.enable false
    assert check("--mc.mask.rho", "1.0", "--mc.mask.enable", "false")[0].mask is None


def test_rho_range():
    _, findings, found = check("--mc.mask.rho", "0.5")
    assert ("rho-range", "warning") in found and only(findings, "rho-range").fix == "--mc.mask.rho 0.2"
    assert "rho-range" not in codes(check("--mc.mask.rho", "0.1")[1])


def test_short_response():
    _, findings, found = check("--rollout.max_new_tokens", "2048")
    assert ("short-response", "warning") in found
    assert only(findings, "short-response").fix == "--rollout.max_new_tokens 4096"
    assert "short-response" not in codes(check("--rollout.max_new_tokens", "8192")[1])


def test_on_policy_batch():
    # 8 prompts x 8 samples = 64 samples = --train.batch_size: one optimizer update per step
    plan, findings, found = check("--rollout.batch_size", "8", "--train.batch_size", "64",
                                  "--rollout.n_samples_per_prompt", "8")
    assert (plan.train_batch_size, plan.mini_batch_size) == (8, 8)
    assert ("on-policy-batch", "warning") in found and ("on-policy-batch", "info") in found  # 8 prompts < 32
    assert only([f for f in findings if f.severity == "warning"], "on-policy-batch").fix == "--train.batch_size 32"
    assert "on-policy-batch" not in codes(check()[1])  # 64 prompts, 32 per update


def test_mask_without_verdicts():
    plan, findings, found = check("--mc.preset", "mask_only", "--algo.advantage.estimator", "group_norm",
                                  "--reward.model_name_or_path", "X")
    assert plan.reward_verdicts is False and ("mask-without-verdicts", "warning") in found
    assert only(findings, "mask-without-verdicts").fix == f"--reward.remote_url {reward_file()}"
    # a reward model with missing_verdict=error: every step would fail
    found = check("--mc.preset", "mask_only", "--algo.advantage.estimator", "group_norm",
                  "--reward.model_name_or_path", "X", "--mc.mask.missing_verdict", "error")[2]
    assert ("mask-without-verdicts", "error") in found
    # our reward file (the packaged one, or reward_fns/'s copy): verdicts; another file: unknown (info)
    for ours in (reward_file(), str(ROOT / "reward_fns" / "openrlhf_reward.py")):
        plan, findings, _ = check("--mc.preset", "mask_only", "--algo.advantage.estimator", "group_norm",
                                  "--reward.remote_url", ours)
        assert plan.reward_verdicts is True and "mask-without-verdicts" not in codes(findings)
    plan, _, found = check("--mc.preset", "mask_only", "--algo.advantage.estimator", "group_norm",
                           "--reward.remote_url", "/my/reward.py")
    assert plan.reward_verdicts is None and ("mask-without-verdicts", "info") in found
    # no mask: no finding even with a reward model
    found = check("--mc.preset", "dapo_baseline", "--reward.model_name_or_path", "X")[2]
    assert not any(c == "mask-without-verdicts" for c, _ in found)


def test_group_size_1():
    # OpenRLHF itself refuses group_norm with n = 1 (its assert): an invalid-config error plus the rule's error
    plan, findings, found = check("--rollout.n_samples_per_prompt", "1")
    assert ("group-size-1", "error") in found and ("invalid-config", "error") in found
    assert "group_norm requires n_samples_per_prompt > 1" in plan.config_errors[0]
    assert only(findings, "group-size-1").fix == "--rollout.n_samples_per_prompt 8"
    # a non-group estimator with n = 1 is accepted by OpenRLHF and is no group-size-1 finding
    plan, findings, _ = check("--rollout.n_samples_per_prompt", "1", "--algo.advantage.estimator", "reinforce",
                              "--mc.allow_override")
    assert (plan.group_estimator, plan.group_size) == (False, 1) and plan.config_errors == []
    assert "group-size-1" not in codes(findings)
    assert "group-size-1" not in codes(check()[1])


def test_async():
    plan, findings, found = check("--train.async_enable")
    assert plan.async_rollout is True
    assert ("async", "error") in found and ("invalid-config", "error") in found  # the launcher refuses it too
    # a baseline without mask and controller runs OpenRLHF's own async trainer: no async finding
    plan, findings, _ = check("--mc.preset", "dapo_baseline", "--train.async_enable")
    assert plan.async_rollout is True and "async" not in codes(findings) and plan.config_errors == []
    assert "async" not in codes(check()[1])


def test_temperature_mismatch_cannot_arise():
    # OpenRLHF builds the Actor with --rollout.temperature: sampling and log-probs share it in every preset
    for extra in ([], ["--mc.preset", "grpo_baseline"], ["--mc.temperature.value", "0.8"]):
        plan, findings, _ = check(*extra)
        assert plan.rollout_temperature == plan.logprob_temperature and plan.temperature_synced is True
        assert "temperature-mismatch" not in codes(findings)


def test_the_microcoder_preset_refuses_a_rollout_temperature_of_yours():
    plan, findings, found = check("--rollout.temperature", "0.6")
    assert ("invalid-config", "error") in found
    assert "--rollout.temperature" in plan.config_errors[0] and "--mc.allow_override does not apply" in plan.config_errors[0]
    assert plan.rollout_temperature == 1.2  # what the controller would use


def test_unparseable_arguments_raise():
    with pytest.raises(doctor.ArgvError) as e:
        doctor.plan_from_argv([*BASE, "--mc.mask.rhoo", "0.1"])
    assert "unknown flag --mc.mask.rhoo" in e.value.errors[0]
    with pytest.raises(doctor.ArgvError) as e:
        doctor.plan_from_argv([*BASE, "--no.such.flag"])
    assert "unrecognized arguments: --no.such.flag" in "\n".join(e.value.errors)
    with pytest.raises(doctor.ArgvError):  # a bad value that is not a temperature ramp
        doctor.plan_from_argv([*BASE, "--mc.mask.rho", "2"])


def test_a_launch_without_vllm_engines_is_diagnosed():
    assert BASE[-2:] == ["--vllm.num_engines", "8"]
    plan = doctor.plan_from_argv([*BASE[:-2], "--mc.preset", "microcoder"])
    [error] = [f for f in diagnose(plan) if f.severity == "error"]
    assert error.code == "invalid-config" and "--vllm.num_engines is missing" in error.message
