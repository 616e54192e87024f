"""``microcoder doctor`` rules (framework-free): each rule fires on a plan with the problem and not without it."""

import dataclasses
import json

import pytest

from microcoder_ext.core.config import ConfigError, MaskConfig, TemperatureConfig
from microcoder_ext.core.doctor import (
    CODES,
    SEVERITIES,
    Finding,
    TrainingPlan,
    diagnose,
    exit_status,
    format_findings,
    lenient_temperature_config,
)


def good(**changes) -> TrainingPlan:
    """The paper's MicroCoder-GRPO plan: no rule fires on it."""
    plan = TrainingPlan(
        framework="verl", recipe="microcoder", estimator="grpo", group_estimator=True, group_size=8,
        train_batch_size=64, mini_batch_size=32, max_response_length=4096, kl_loss=False, kl_coef=0.0,
        kl_in_reward=False, clip_low=0.2, clip_high=0.28, loss_agg="token-mean", rollout_temperature=1.2,
        logprob_temperature=1.2, temperature_synced=True, temperature=TemperatureConfig(), mask=MaskConfig(),
        reward_verdicts=True,
    )
    return dataclasses.replace(plan, **changes)


def codes(plan: TrainingPlan, severity: str | None = None) -> list[str]:
    return [f.code for f in diagnose(plan) if severity is None or f.severity == severity]


def test_paper_plan_is_clean():
    assert diagnose(good()) == []
    assert exit_status(diagnose(good()), strict=True) == 0


def test_unknown_fields_fire_nothing():
    assert diagnose(TrainingPlan(framework="trl")) == []


# (code, severity, plan with the problem, plan without it)
CASES = [
    ("group-size-1", "error", good(group_size=1), good(group_size=1, group_estimator=False)),
    ("async", "error", good(async_rollout=True), good(async_rollout=True, mask=None)),
    ("continuous-temperature", "error",
     good(temperature=lenient_temperature_config({"mode": "staged", "stages": [[0, 0.6], [5, 0.65]]})),
     good(temperature=TemperatureConfig(mode="staged", stages=((0, 0.6), (140, 1.2))))),
    ("continuous-temperature", "error",
     good(temperature=lenient_temperature_config({"mode": "auto", "candidates": [1.2, 1.25, 1.3], "value": 1.2})),
     good(temperature=TemperatureConfig(mode="auto", value=1.2))),
    ("temperature-mismatch", "warning", good(logprob_temperature=1.0), good(temperature=None)),
    ("temperature-mismatch", "error",
     good(temperature_synced=False, temperature=TemperatureConfig(mode="staged", stages=((0, 0.6), (140, 1.2)))),
     good(temperature_synced=False)),  # a constant controller has nothing to get out of sync
    ("mask-without-verdicts", "warning", good(reward_verdicts=False), good(reward_verdicts=False, mask=None)),
    ("mask-without-verdicts", "error", good(reward_verdicts=False, mask=MaskConfig(missing_verdict="error")),
     good(mask=MaskConfig(missing_verdict="error"))),
    ("mask-without-verdicts", "info", good(reward_verdicts=None), good()),
    ("low-temperature", "warning",
     good(temperature=TemperatureConfig(value=0.6), rollout_temperature=0.6, logprob_temperature=0.6),
     good(temperature=TemperatureConfig(value=0.8), rollout_temperature=0.8, logprob_temperature=0.8)),
    ("low-temperature", "warning", good(temperature=None, rollout_temperature=0.5, logprob_temperature=0.5),
     good(temperature=None)),
    ("low-temperature", "info",
     good(temperature=TemperatureConfig(mode="staged", stages=((0, 0.6), (140, 1.8))), rollout_temperature=0.6,
          logprob_temperature=0.6),
     good(temperature=TemperatureConfig(mode="staged", stages=((0, 1.0), (140, 1.8))))),
    ("kl-with-microcoder", "warning", good(kl_loss=True, kl_coef=0.001), good(kl_loss=True, kl_coef=0.001, mask=None)),
    ("kl-with-microcoder", "warning", good(kl_in_reward=True), good()),
    ("kl-with-microcoder", "warning", good(kl_loss=None, kl_coef=0.04), good(kl_loss=None, kl_coef=0.0)),
    ("symmetric-clip", "warning", good(clip_high=0.2), good(clip_high=0.2, mask=None)),
    ("mask-all", "warning", good(mask=MaskConfig(rho=1.0)), good(mask=MaskConfig(rho=0.3))),
    ("mask-all", "warning", good(mask=None, mask_all_truncated=True), good(mask=None, mask_all_truncated=False)),
    ("rho-range", "warning", good(mask=MaskConfig(rho=0.5)), good(mask=MaskConfig(rho=0.1))),
    ("rho-range", "warning", good(mask=MaskConfig(rho=0.05)), good(mask=MaskConfig(rho=0.3))),
    ("rho-range", "info", good(mask=MaskConfig(rho=0.0)), good(mask=MaskConfig(rho=0.0, enable=False))),
    ("short-response", "warning", good(max_response_length=2048), good(max_response_length=8192)),
    ("on-policy-batch", "warning", good(mini_batch_size=64), good(mini_batch_size=16)),
    ("on-policy-batch", "info", good(train_batch_size=1024, mini_batch_size=256), good(train_batch_size=128)),
    ("invalid-config", "error", good(config_errors=["verl validate_config: boom"]), good()),
]


@pytest.mark.parametrize("code, severity, bad, ok", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires_on_the_problem_only(code, severity, bad, ok):
    found = diagnose(bad)
    assert (code, severity) in [(f.code, f.severity) for f in found], format_findings(found, bad)
    assert code not in codes(ok, severity), format_findings(diagnose(ok), ok)
    for f in found:
        assert f.severity in SEVERITIES and f.code in CODES
        assert f.insight and f.message


def test_every_code_is_exercised():
    assert {c[0] for c in CASES} == set(CODES)


def test_insights_cite_a_section_of_the_paper_page():
    for code, _, bad, _ in CASES:
        for f in diagnose(bad):
            if f.code != "invalid-config":
                assert f.insight.startswith("docs/paper.md#"), f
    f = next(f for f in diagnose(good(temperature=TemperatureConfig(value=0.6))) if f.code == "low-temperature")
    assert "Insights B" in f.insight
    assert "Insights D" in next(f for f in diagnose(good(max_response_length=1024))).insight
    assert "Insights F" in next(f for f in diagnose(good(mini_batch_size=64))).insight
    assert "Insights G" in next(f for f in diagnose(good(clip_high=0.2))).insight
    assert "Insights E" in next(f for f in diagnose(good(mask=MaskConfig(rho=1.0)))).insight


def test_fixes_use_the_adapter_overrides_else_prose():
    fixes = {"mask_rho": "microcoder.mask.rho={}", "clip_low": "clip_low={}", "clip_high": "clip_high={}",
             "kl_loss": "use_kl_loss={}", "kl_coef": "--beta {}"}
    (f,) = diagnose(good(mask=MaskConfig(rho=0.5), fixes=fixes))
    assert f.fix == "microcoder.mask.rho=0.2"
    (f,) = diagnose(good(clip_high=0.2, fixes=fixes))
    assert f.fix == "clip_low=0.2 clip_high=0.28"
    (f,) = diagnose(good(kl_loss=True, fixes=fixes))
    assert f.fix == "use_kl_loss=false"
    (f,) = diagnose(good(kl_loss=None, kl_coef=0.04, fixes=fixes))
    assert f.fix == "--beta 0"
    (f,) = diagnose(good(mask=MaskConfig(rho=0.5)))  # no override known: prose
    assert f.fix and "0.2" in f.fix and "=" not in f.fix


def test_one_finding_per_problem():
    # rho = 1 is Mask All, not also "outside the studied range"
    assert codes(good(mask=MaskConfig(rho=1.0))) == ["mask-all"]
    # the staged ramp 0.6 -> 0.65: continuous (error) and starts low (info)
    plan = good(temperature=lenient_temperature_config({"mode": "staged", "stages": [[0, 0.6], [5, 0.65]]}))
    assert codes(plan) == ["continuous-temperature", "low-temperature"]


def test_lenient_temperature_config():
    with pytest.raises(ConfigError):
        TemperatureConfig(mode="staged", stages=((0, 0.6), (5, 0.65)))
    cfg = lenient_temperature_config({"mode": "staged", "stages": [[0, 0.6], [5, 0.65]]})
    assert cfg.mode == "staged" and cfg.stages == ((0, 0.6), (5, 0.65))
    with pytest.raises(ConfigError):  # other errors still raise
        lenient_temperature_config({"mode": "staged", "stages": [[0, 0.6]], "value": -1})
    with pytest.raises(ConfigError):
        lenient_temperature_config({"mode": "nope"})


def test_findings_sorted_by_severity():
    plan = good(group_size=1, max_response_length=1024, train_batch_size=1024, mini_batch_size=256)
    sev = [f.severity for f in diagnose(plan)]
    assert sev == sorted(sev, key=SEVERITIES.index) and sev[0] == "error" and sev[-1] == "info"


def test_exit_status():
    err, warn, info = (Finding("x", s, "m", "i") for s in SEVERITIES)
    assert exit_status([], strict=False) == exit_status([], strict=True) == 0
    assert exit_status([info], strict=True) == 0
    assert exit_status([warn, info], strict=False) == 0
    assert exit_status([warn, info], strict=True) == 1
    assert exit_status([err], strict=False) == exit_status([err, warn], strict=True) == 2
    with pytest.raises(ValueError):
        Finding("x", "fatal", "m", "i")


def test_json_round_trip():
    plan = good(mask=MaskConfig(rho=0.5), group_size=1,
                temperature=TemperatureConfig(mode="staged", stages=((0, 0.6), (140, 1.2))))
    findings = diagnose(plan)
    data = json.loads(json.dumps({"plan": plan.to_dict(), "findings": [f.to_dict() for f in findings]}))
    assert [Finding(**d) for d in data["findings"]] == findings
    p = data["plan"]
    assert p["mask"]["rho"] == 0.5 and p["temperature"]["stages"] == [[0, 0.6], [140, 1.2]]
    rebuilt = TrainingPlan(**{**p, "mask": MaskConfig(**p["mask"]),
                              "temperature": TemperatureConfig(**p["temperature"])})
    assert rebuilt == plan


def test_format_findings():
    plan = good(group_size=1, mask=MaskConfig(rho=0.5), fixes={"group_size": "actor_rollout_ref.rollout.n={}"})
    text = format_findings(diagnose(plan), plan)
    lines = text.splitlines()
    assert lines[0].startswith("plan: framework=verl recipe=microcoder estimator=grpo G=1")
    assert any(l.startswith("ERROR    group-size-1") and "fix: actor_rollout_ref.rollout.n=8" in l for l in lines)
    assert any(l.startswith("WARNING  rho-range") and "[docs/paper.md#masking-probability;" in l for l in lines)
    assert lines[-1] == "1 error(s), 1 warning(s), 0 info(s)"
    assert format_findings([], good()).splitlines()[-1] == "0 error(s), 0 warning(s), 0 info(s): clean"


@pytest.mark.parametrize("values, validator", [
    ({"mode": "staged", "stages": [[0, 0.6], [5, 0.65]]}, "validate_stages"),
    ({"mode": "auto", "candidates": [1.2, 1.25, 1.3], "value": 1.2}, "validate_candidates"),
    ({"mode": "auto", "min_interval": 5}, "validate_candidates"),
])
def test_continuous_rule_reads_the_reason_not_the_message(monkeypatch, values, validator):
    """The rule quotes ``ScheduleError.reason``: a validator whose message is reworded (here: phrases the old text
    was split on moved around) gives the same findings."""
    from microcoder_ext.core import doctor
    from microcoder_ext.core.schedule import ScheduleError

    plan = good(temperature=lenient_temperature_config(values))
    before = [f.to_dict() for f in diagnose(plan)]
    assert "continuous-temperature" in [f["code"] for f in before]
    real = getattr(doctor, validator)

    def reworded(*args, **kwargs):
        try:
            real(*args, **kwargs)
        except ScheduleError as e:
            raise ScheduleError(f"refused: this is a reworded message: tiny changes, the paper ({e.code})", e.code,
                                e.reason) from None

    monkeypatch.setattr(doctor, validator, reworded)
    assert [f.to_dict() for f in diagnose(plan)] == before
