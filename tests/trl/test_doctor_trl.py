"""``microcoder doctor trl``: :func:`microcoder_ext.trl.doctor.plan_from_argv` on ``microcoder train``'s real parser,
its settings resolution (``train_settings.plan``) and TRL 1.16's real ``GRPOConfig``, then
:func:`microcoder_ext.core.doctor.diagnose`. For each rule ``microcoder train`` flags can raise: one argv that
triggers it and one that does not; the rules these flags cannot raise are pinned as such.
"""

from __future__ import annotations

import pytest

import trl  # noqa: F401  (a missing framework fails, never skips)

from microcoder_ext.core.doctor import diagnose
from microcoder_ext.trl import doctor

BASE = ["--model_name_or_path", "fake/model", "--dataset", "data/", "--max_completion_length", "4096"]


def check(*argv: str):
    plan = doctor.plan_from_argv([*BASE, *argv])
    findings = diagnose(plan)
    return plan, findings, {(f.code, f.severity) for f in findings}


def codes(findings, severity=None):
    return {f.code for f in findings if severity is None or f.severity == severity}


def only(findings, code, severity="warning"):
    [f] = [f for f in findings if f.code == code and f.severity == severity]
    return f


def test_default_microcoder_preset_mapping_and_findings():
    plan, findings, _ = check()
    assert plan.framework == "trl" and plan.recipe == "microcoder"
    assert (plan.estimator, plan.group_estimator, plan.group_size) == ("grpo", True, 8)
    # 4 per device x 8 accumulation x 1 process = 32 completions = 4 prompts, per update and per generation
    assert (plan.train_batch_size, plan.mini_batch_size, plan.max_response_length) == (4, 4, 4096)
    assert (plan.kl_loss, plan.kl_coef, plan.kl_in_reward) == (False, 0.0, False)
    assert (plan.clip_low, plan.clip_high, plan.loss_agg) == (0.2, 0.28, "dapo")
    assert (plan.rollout_temperature, plan.logprob_temperature, plan.temperature_synced) == (1.2, 1.2, True)
    assert plan.temperature.mode == "constant" and plan.mask.rho == 0.2 and plan.mask_all_truncated is False
    assert plan.reward_verdicts is True and plan.async_rollout is False and plan.config_errors == []
    # the only warning of a default run: microcoder train updates once per generation batch (see test below)
    assert codes(findings, "warning") == {"on-policy-batch"} and codes(findings, "error") == set()


def test_no_model_or_dataset_needed():
    plan = doctor.plan_from_argv(["--max_completion_length", "4096"])
    assert plan.group_size == 8


def test_processes_enter_the_batch():
    plan = check("--num_processes", "2", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps",
                 "16")[0]
    assert (plan.train_batch_size, plan.mini_batch_size) == (64, 64)  # 16 x 16 x 2 / 8
    assert "on-policy-batch" not in codes(diagnose(plan), "info")  # 64 prompts: the paper's size


def test_low_temperature():
    plan, findings, found = check("--temperature", "0.6")
    assert ("low-temperature", "warning") in found and plan.rollout_temperature == plan.logprob_temperature == 0.6
    assert only(findings, "low-temperature").fix == "--temperature 1.2"
    assert "low-temperature" not in codes(check("--temperature", "1.0")[1])
    # a baseline without the controller: the constant GRPOConfig.temperature
    plan, findings, found = check("--preset", "dapo_baseline", "--temperature", "0.6")
    assert plan.temperature is None and ("low-temperature", "warning") in found


def test_continuous_temperature():
    # microcoder train refuses this schedule (exit 2); the doctor keeps it unvalidated to explain why
    plan, findings, found = check("--temperature_mode", "staged", "--mc.temperature.stages", "[[0,0.6],[5,0.65]]")
    assert ("continuous-temperature", "error") in found
    assert plan.temperature.mode == "staged" and plan.rollout_temperature == 0.6
    assert only(findings, "continuous-temperature", "error").fix == \
        "--temperature_mode staged --mc.temperature.stages '[[0,0.6],[140,1.2]]'"
    plan, findings, found = check("--temperature_mode", "staged", "--mc.temperature.stages", "[[0,0.6],[140,1.2]]")
    assert "continuous-temperature" not in codes(findings) and ("low-temperature", "info") in found
    assert plan.rollout_temperature == 0.6  # the trainer sets stage 0 before the first generation


def test_kl_with_microcoder():
    plan, findings, found = check("--remove_kl_loss", "False")
    assert ("kl-with-microcoder", "warning") in found and (plan.kl_loss, plan.kl_coef) == (True, 0.001)
    assert only(findings, "kl-with-microcoder").fix == "--remove_kl_loss True"
    assert "kl-with-microcoder" not in codes(check("--remove_kl_loss", "True")[1])
    # the GRPO baseline has KL but no mask: not MicroCoder-GRPO, no finding
    plan, findings, _ = check("--preset", "grpo_baseline")
    assert plan.kl_loss is True and "kl-with-microcoder" not in codes(findings)


def test_symmetric_clip():
    plan, findings, found = check("--clipping_ratio", "0.2")
    assert ("symmetric-clip", "warning") in found and (plan.clip_low, plan.clip_high) == (0.2, 0.2)
    assert only(findings, "symmetric-clip").fix == "--epsilon 0.2 --clipping_ratio 0.28"
    assert "symmetric-clip" not in codes(check("--clipping_ratio", "0.3")[1])


def test_mask_all():
    _, findings, found = check("--mc.mask.rho", "1.0")
    assert ("mask-all", "warning") in found and only(findings, "mask-all").fix == "--mc.mask.rho 0.2"
    assert "mask-all" not in codes(check("--mc.mask.rho", "0.2")[1])
    # TRL's own "mask all" filter is switched off whenever the conditional mask runs, and no flag turns it on
    for extra in ([], ["--preset", "mask_only"], ["--use_conditional_mask", "False"]):
        assert check(*extra)[0].mask_all_truncated is False


def test_rho_range():
    _, findings, found = check("--mc.mask.rho", "0.5")
    assert ("rho-range", "warning") in found and only(findings, "rho-range").fix == "--mc.mask.rho 0.2"
    assert "rho-range" not in codes(check("--mc.mask.rho", "0.3")[1])


def test_short_response():
    _, findings, found = check("--max_completion_length", "1024")
    assert ("short-response", "warning") in found
    assert only(findings, "short-response").fix == "--max_completion_length 4096"
    assert "short-response" not in codes(check("--max_completion_length", "8192")[1])


def test_on_policy_batch_and_steps_per_generation():
    # by default microcoder train leaves GRPOConfig.steps_per_generation = gradient_accumulation_steps: each
    # generation batch feeds exactly one optimizer update (fully on-policy); the fix names --steps_per_generation
    for extra in ([], ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "32"],
                  ["--num_generations", "16", "--per_device_train_batch_size", "16"]):
        plan, findings, _ = check(*extra)
        assert plan.train_batch_size == plan.mini_batch_size
        assert only(findings, "on-policy-batch").fix.startswith("--steps_per_generation ")
    # two updates per generation batch: no on-policy warning, batch = 2 x mini-batch
    plan, findings, _ = check("--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "16",
                              "--steps_per_generation", "32")
    assert (plan.train_batch_size, plan.mini_batch_size) == (32, 16)
    assert "on-policy-batch" not in codes(findings, "warning")
    # the size info: 4 prompts is outside 32..128, 8 x 32 / 8 = 32 is not
    assert "on-policy-batch" in codes(check()[1], "info")
    assert "on-policy-batch" not in codes(
        check("--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "32")[1], "info")


def test_group_size_1_is_refused_by_microcoder_train():
    # --num_generations must be >= 2 in microcoder train's parser: group-size-1 cannot arise from its flags
    with pytest.raises(doctor.ArgvError) as e:
        check("--num_generations", "1")
    assert e.value.errors == ["argument --num_generations: must be >= 2, got '1'"]
    plan, findings, _ = check("--num_generations", "2", "--per_device_train_batch_size", "2",
                              "--gradient_accumulation_steps", "1")
    assert plan.group_size == 2 and "group-size-1" not in codes(findings)


@pytest.mark.parametrize("extra", [[], ["--preset", "mask_only"], ["--preset", "dapo_baseline"],
                                   ["--diversity_driven_temp", "True", "--temperature", "0.8"]])
def test_rules_microcoder_train_cannot_raise(extra):
    # CodeReward always (verdicts), TRL's synchronous GRPOTrainer, one temperature for sampling and log-probs
    plan, findings, _ = check(*extra)
    assert plan.reward_verdicts is True and plan.async_rollout is False and plan.temperature_synced is True
    assert plan.rollout_temperature == plan.logprob_temperature
    assert not codes(findings) & {"mask-without-verdicts", "async", "temperature-mismatch", "group-size-1"}


def test_microcoder_train_refusals_raise():
    with pytest.raises(doctor.ArgvError) as e:  # conflicting flags: microcoder train's own UsageError
        check("--remove_kl_loss", "True", "--beta", "0.01")
    assert "--remove_kl_loss True contradicts --beta 0.01" in e.value.errors[0]
    with pytest.raises(doctor.ArgvError) as e:  # batch arithmetic
        check("--per_device_train_batch_size", "3", "--gradient_accumulation_steps", "1")
    assert "not a multiple of --num_generations 8" in e.value.errors[0]
    with pytest.raises(doctor.ArgvError):
        check("--no_such_flag")
