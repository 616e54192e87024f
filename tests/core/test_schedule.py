"""The temperature-schedule rules (:mod:`microcoder_ext.core.schedule`) raise :class:`ScheduleError` with a stable
``code`` and a short ``reason``; the configuration passes both on in its :class:`ConfigError`."""

import pytest

from microcoder_ext.core import schedule as S
from microcoder_ext.core.config import ConfigError, parse_config, parse_temperature_config

# (code, stages or (candidates, min_interval), reason)
STAGES = [
    (S.STAGES_MALFORMED, "0.6", "stages must be a list of [step, temperature] pairs, got '0.6'"),
    (S.STAGES_MALFORMED, [[0, -1.0]], "stages[0] temperature must be a positive number, got -1.0"),
    (S.STAGES_EMPTY, [], "stages must list at least one [step, temperature] stage for mode=staged"),
    (S.FIRST_STAGE_NOT_AT_0, [[5, 0.6]], "the first stage must start at step 0, got step 5"),
    (S.STAGES_NOT_INCREASING, [[0, 0.6], [0, 0.8]],
     "stage steps must increase: stage 1 starts at 0, after stage 0 at 0"),
    (S.STAGE_TOO_SHORT, [[0, 0.6], [5, 1.2]], "stage 0 (0.6) lasts 5 step(s), fewer than MIN_STAGE_STEPS=20"),
    (S.STAGE_CHANGE_TOO_SMALL, [[0, 0.6], [140, 0.65]],
     "stage 1 changes the temperature by 0.05 (0.6 -> 0.65), less than MIN_TEMPERATURE_STEP=0.1"),
]
CANDIDATES = [
    (S.CANDIDATES_EMPTY, ((), 50), "candidates must list at least one temperature"),
    (S.CANDIDATE_NOT_POSITIVE, ((0.6, 0.0), 50), "candidates[1] must be a positive number, got 0.0"),
    (S.CANDIDATES_TOO_CLOSE, ((1.2, 1.25), 50),
     "candidates must increase by >= MIN_TEMPERATURE_STEP=0.1 (1.2 -> 1.25)"),
    (S.INTERVAL_TOO_SHORT, ((0.6, 0.8), 5), "min_interval=5 is below MIN_STAGE_STEPS=20"),
]


def test_every_code_has_a_case():
    assert {c for c, _, _ in STAGES + CANDIDATES} == S.CODES
    assert S.CONTINUOUS <= S.CODES


@pytest.mark.parametrize("code, stages, reason", STAGES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(STAGES)])
def test_stage_rules(code, stages, reason):
    with pytest.raises(S.ScheduleError) as e:
        S.validate_stages(S.normalize_stages(stages))
    assert (e.value.code, e.value.reason) == (code, reason)
    assert str(e.value).startswith(reason)  # the message says more (the paper's finding, advice) after the reason
    # the config carries the same code and reason (the message adds the key)
    with pytest.raises(ConfigError) as c:
        parse_temperature_config({"mode": "staged", "stages": stages})
    assert (c.value.code, c.value.reason) == (code, reason)
    assert str(c.value).startswith("microcoder.temperature.stages")


@pytest.mark.parametrize("code, args, reason", CANDIDATES, ids=[c for c, _, _ in CANDIDATES])
def test_candidate_rules(code, args, reason):
    with pytest.raises(S.ScheduleError) as e:
        S.validate_candidates(*args)
    assert (e.value.code, e.value.reason) == (code, reason)
    if code in S.CONTINUOUS:
        candidates, min_interval = args
        with pytest.raises(ConfigError) as c:
            parse_temperature_config({"mode": "auto", "candidates": list(candidates), "value": candidates[0],
                                      "min_interval": min_interval})
        assert (c.value.code, c.value.reason) == (code, reason)
        assert str(c.value).startswith("microcoder.temperature.candidates/min_interval: " + reason)


def test_other_config_errors_have_codes():
    with pytest.raises(ConfigError) as e:
        parse_config({"mask": {"rhoo": 0.1}})
    assert e.value.code == "unknown-key"
    with pytest.raises(ConfigError) as e:
        parse_config({"nope": {}})
    assert e.value.code == "unknown-section"
    with pytest.raises(ConfigError) as e:
        parse_config({"mask": {"rho": 2.0}})
    assert e.value.code == "invalid-value" and e.value.reason == str(e.value)
