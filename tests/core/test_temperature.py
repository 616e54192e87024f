"""Temperature controller (framework-free): decisions on synthetic diversity traces, resume, probe."""

import json
import logging
import math

import numpy as np
import pytest
import torch

from microcoder_ext.core.config import ConfigError, TemperatureConfig
from microcoder_ext.core.schedule import MIN_STAGE_STEPS, MIN_TEMPERATURE_STEP
from microcoder_ext.core.temperature import (
    ProbeResult,
    TemperatureController,
    probe,
    recommend,
)

AUTO = {"mode": "auto", "value": 0.6, "target": 0.5, "window": 5, "min_interval": 30, "smoothing": 0.0}


def run(ctl, trace, steps, start=0):
    """Closed loop: ``trace(step, T)`` is the diversity measured at step ``step`` sampled at ``T``."""
    temps, updates = [], []
    for step in range(start, steps):
        t = ctl.temperature(step)
        temps.append(t)
        updates.append(ctl.observe(step, trace(step, t)))
    return temps, updates


def noisy_decline(seed=0):
    """Diversity rises with T, falls over training at a fixed T (docs/paper.md#diversity-determined-temperature), plus noise."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 0.02, 10_000)
    state = {"t": None, "since": 0}

    def trace(step, t):
        if t != state["t"]:
            state["t"], state["since"] = t, 0
        state["since"] += 1
        return 0.35 + 0.3 * t - 0.002 * state["since"] + noise[step]

    return trace


# ----------------------------------------------------------------------------------------------- constant


def test_constant_default_is_the_paper_setting():
    ctl = TemperatureController()
    assert ctl.mode == "constant" and ctl.temperature(0) == 1.2
    temps, updates = run(ctl, lambda s, t: 0.1, 100)  # even collapsing diversity changes nothing
    assert set(temps) == {1.2} and not any(u.changed for u in updates)
    m = updates[-1].metrics
    assert m["microcoder/temperature"] == 1.2 and m["microcoder/temperature_stage"] == 0.0
    assert m["microcoder/temperature_next"] == 1.2 and m["microcoder/diversity/distinct4"] == 0.1


# ----------------------------------------------------------------------------------------------- staged


def test_staged_low_then_high(caplog):
    ctl = TemperatureController({"mode": "staged", "stages": [[0, 0.6], [140, 1.8]]})
    with caplog.at_level(logging.INFO, logger="microcoder_ext.core.temperature"):
        temps, updates = run(ctl, lambda s, t: 0.5, 300)
    assert temps[:140] == [0.6] * 140 and temps[140:] == [1.8] * 160
    changed = [u.step for u in updates if u.changed]
    assert changed == [139] and updates[139].next_temperature == 1.8 and updates[139].next_stage == 1
    assert "staged schedule: stage 1 starts at step 140" in caplog.text
    assert updates[140].metrics["microcoder/temperature_stage"] == 1.0


@pytest.mark.parametrize(
    "stages, match",
    [
        ([[s, 0.6 + 0.01 * s] for s in range(100)], "continuous schedule"),  # changes every step
        ([[0, 1.0], [50, 1.05], [100, 1.1]], "tiny increments"),  # small increments
        ([[0, 0.6], [MIN_STAGE_STEPS - 1, 1.2]], f"fewer than MIN_STAGE_STEPS={MIN_STAGE_STEPS}"),
        ([[0, 0.6], [100, 0.6]], "tiny increments"),
        ([[10, 0.6], [100, 1.2]], "first stage must start at step 0"),
        ([[0, 0.6], [100, 1.2], [100, 1.8]], "stage steps must increase"),
        ([], "at least one"),
        ([[0, 0.0]], "positive"),
        ([[0, 0.6, 1]], r"\[step, temperature\] pair"),
        ([[0.5, 0.6]], "non-negative integer"),
    ],
)
def test_continuous_or_malformed_schedules_are_rejected(stages, match):
    with pytest.raises(ConfigError, match=match) as e:
        TemperatureController({"mode": "staged", "stages": stages})
    assert "microcoder.temperature." in str(e.value)


def test_rejection_cites_the_paper():
    with pytest.raises(ConfigError) as e:
        TemperatureConfig(mode="staged", stages=[[s, 1.0 + 0.001 * s] for s in range(500)])
    msg = str(e.value)
    assert "continuous temperature changes destabilise training" in msg and "Insights" in msg
    assert MIN_TEMPERATURE_STEP == 0.1 and MIN_STAGE_STEPS == 20


def test_staged_accepts_mapping_stages():
    stages = [{"step": 0, "temperature": 0.6}, {"step": 20, "temperature": 1}]
    ctl = TemperatureController({"mode": "staged", "stages": stages})
    assert ctl.temperature(19) == 0.6 and ctl.temperature(20) == 1.0


# ----------------------------------------------------------------------------------------------- auto


def test_auto_moves_one_candidate_per_min_interval_up_to_the_max(caplog):
    # diversity 0.4 < target 0.5 always: below for window=5 steps at step 4, but the first change is allowed
    # min_interval=30 steps after the stage start -> new stages at 30, 60, 90, ...; max_temperature 1.4 stops it
    ctl = TemperatureController({**AUTO, "max_temperature": 1.4})
    with caplog.at_level(logging.INFO, logger="microcoder_ext.core.temperature"):
        temps, updates = run(ctl, lambda s, t: 0.4, 200)
    expected = [0.6] * 30 + [0.8] * 30 + [1.0] * 30 + [1.2] * 30 + [1.4] * 80
    assert temps == expected
    assert [u.step for u in updates if u.changed] == [29, 59, 89, 119]
    assert [p["step"] for p in ctl.plan()] == [0, 30, 60, 90, 120]
    assert "T 0.6 -> 0.8 from step 30" in updates[29].reason and "for 30 steps (window 5)" in updates[29].reason
    assert "min_interval 30" in updates[10].reason and not updates[10].changed
    assert "highest candidate" in updates[199].reason and updates[199].next_temperature == 1.4
    # every decision logged once with its reason (not every step)
    assert caplog.text.count("-> 0.8 from step 30") == 1
    assert caplog.text.count("highest candidate") == 1
    assert caplog.text.count("min_interval 30") == 4


def test_auto_keeps_temperature_while_diversity_holds():
    ctl = TemperatureController({**AUTO, "value": 1.2, "target": 0.65, "smoothing": 0.9})
    trace = lambda s, t: 0.7 + 0.03 * math.sin(s / 7)  # noisy but above target, like T=1.2 in the paper
    temps, updates = run(ctl, trace, 300)
    assert set(temps) == {1.2} and not any(u.changed for u in updates)


def test_auto_needs_a_full_window_below_target():
    # below target for 4 steps, then above: the count restarts, no change ever
    ctl = TemperatureController({**AUTO, "min_interval": 20})
    trace = lambda s, t: 0.4 if s % 5 != 4 else 0.6
    temps, _ = run(ctl, trace, 200)
    assert set(temps) == {0.6}


def test_auto_smoothing_delays_the_decision():
    raw = TemperatureController({**AUTO, "min_interval": 20})
    smooth = TemperatureController({**AUTO, "min_interval": 20, "smoothing": 0.9})
    trace = lambda s, t: 0.8 if s < 40 else 0.4  # drop at step 40
    t_raw, _ = run(raw, trace, 120)
    t_smooth, _ = run(smooth, trace, 120)
    assert t_raw.index(0.8) == 45  # below from 40, window 5 -> decided at 44, effective 45
    ema, k = 0.8, 40
    while True:  # EMA crosses 0.5 at step k, then 5 steps below
        ema = 0.9 * ema + 0.1 * 0.4
        if ema < 0.5:
            break
        k += 1
    assert t_smooth.index(0.8) == k + 5


def test_auto_estimates_the_target_from_the_first_steps(caplog):
    cfg = {**AUTO, "target": None, "target_steps": 5, "target_margin": 0.05}
    ctl = TemperatureController(cfg)
    trace = lambda s, t: 0.7 if s < 5 else 0.6  # target = 0.7 - 0.05 = 0.65 > 0.6
    with caplog.at_level(logging.INFO, logger="microcoder_ext.core.temperature"):
        temps, updates = run(ctl, trace, 40)
    assert ctl.target == pytest.approx(0.65)
    assert math.isnan(updates[3].metrics["microcoder/diversity/target"])
    assert updates[4].metrics["microcoder/diversity/target"] == pytest.approx(0.65)
    assert temps.index(0.8) == 30 and "mean of the first 5 steps" in caplog.text


def test_auto_ignores_non_finite_diversity():
    ctl = TemperatureController({**AUTO, "min_interval": 20})
    trace = lambda s, t: math.nan if s % 2 else 0.4
    temps, updates = run(ctl, trace, 40)
    # five finite below-target steps by step 8; decisions are taken on finite steps only: step 19 is NaN,
    # so the change is decided at step 20 and starts at 21
    assert temps.index(0.8) == 21
    assert math.isnan(updates[1].diversity) and updates[1].smoothed == 0.4


def test_auto_closed_loop_properties_on_a_noisy_declining_trace():
    cfg = {"mode": "auto", "value": 0.6, "target": 0.62, "window": 10, "min_interval": 40, "smoothing": 0.8}
    ctl = TemperatureController(cfg)
    temps, updates = run(ctl, noisy_decline(), 600)
    changes = [i for i in range(1, len(temps)) if temps[i] != temps[i - 1]]
    assert changes, "the declining trace must trigger at least one stage"
    assert all(b - a >= 40 for a, b in zip([0] + changes, changes))  # never more often than min_interval
    cands = list(TemperatureConfig().candidates)
    assert all(cands.index(temps[i]) == cands.index(temps[i - 1]) + 1 for i in changes)  # one stage at a time
    assert max(temps) <= 1.8 and temps == sorted(temps)
    for i in changes:  # each change follows `window` steps of smoothed diversity below the target
        assert all(u.smoothed < 0.62 for u in updates[i - 10 : i])
        assert updates[i - 1].metrics["microcoder/diversity/smoothed"] == updates[i - 1].smoothed


def test_auto_value_must_be_a_candidate():
    with pytest.raises(ConfigError, match=r"microcoder.temperature.value .*candidates"):
        TemperatureController({"mode": "auto", "value": 1.3})
    with pytest.raises(ConfigError, match="max_temperature"):
        TemperatureController({"mode": "auto", "value": 1.2, "max_temperature": 0.5})


@pytest.mark.parametrize(
    "values, match",
    [
        ({"candidates": [0.6, 0.65, 0.7]}, "continuous"),
        ({"candidates": [1.2, 0.6]}, "increase"),
        ({"min_interval": MIN_STAGE_STEPS - 1}, "min_interval"),
    ],
)
def test_auto_rejects_continuous_control(values, match):
    with pytest.raises(ConfigError, match=match):
        TemperatureController({"mode": "auto", "value": 0.6, **values})


# ----------------------------------------------------------------------------------------------- state


def test_temperature_is_a_pure_function_of_the_state():
    ctl = TemperatureController(AUTO)
    run(ctl, lambda s, t: 0.4, 100)
    first = [ctl.temperature(s) for s in range(100)]
    assert first == [ctl.temperature(s) for s in range(100)]  # asking again (rollout, actor, ...) changes nothing
    clone = TemperatureController(AUTO)
    clone.load_state_dict(json.loads(json.dumps(ctl.state_dict())))
    assert [clone.temperature(s) for s in range(101)] == [ctl.temperature(s) for s in range(101)]
    assert ctl.temperature(10) == 0.6 and ctl.temperature(99) == 1.2  # past stages stay in the history


def test_replayed_step_changes_nothing(caplog):
    ctl = TemperatureController(AUTO)
    run(ctl, lambda s, t: 0.4, 29)
    before = ctl.state_dict()
    with caplog.at_level(logging.WARNING, logger="microcoder_ext.core.temperature"):
        upd = ctl.observe(28, 0.0)
    assert ctl.state_dict() == before and not upd.changed and "already observed" in caplog.text


CONFIGS = {
    "constant": {},
    "staged": {"mode": "staged", "stages": [[0, 0.6], [140, 1.2], [260, 1.8]]},
    "auto": {"mode": "auto", "value": 0.6, "target": 0.62, "window": 10, "min_interval": 40, "smoothing": 0.8},
    "auto_estimated": {"mode": "auto", "value": 0.6, "window": 8, "min_interval": 30, "target_steps": 12,
                       "target_margin": 0.0, "smoothing": 0.7},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("stop", [0, 5, 137, 299])
def test_resume_gives_identical_decisions(name, stop):
    cfg = CONFIGS[name]
    straight = TemperatureController(cfg)
    temps_a, ups_a = run(straight, noisy_decline(), 400)

    first = TemperatureController(cfg)
    trace = noisy_decline()
    temps_b, ups_b = run(first, trace, stop)
    saved = json.dumps(first.state_dict())  # checkpoint: plain JSON
    resumed = TemperatureController(cfg)
    resumed.load_state_dict(json.loads(saved))
    more_t, more_u = run(resumed, trace, 400, start=stop)
    temps_b += more_t
    ups_b += more_u

    assert temps_b == temps_a
    def decisions(ups):
        return [(u.changed, u.reason, u.next_temperature, u.smoothed) for u in ups]

    assert decisions(ups_b) == decisions(ups_a)
    assert resumed.state_dict() == straight.state_dict()
    if name.startswith("auto"):
        assert len(set(temps_a)) > 1  # the trace exercises at least one decision


def test_state_of_another_mode_is_refused():
    ctl = TemperatureController(CONFIGS["auto"])
    with pytest.raises(ValueError, match="mode='auto'"):
        TemperatureController().load_state_dict(ctl.state_dict())


# ----------------------------------------------------------------------------------------------- update()


def test_update_measures_the_responses():
    ctl = TemperatureController({**AUTO, "target": 0.9, "window": 1, "min_interval": 20})
    x = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 0], [5, 6, 7, 8, 9, 0, 0, 0, 0]])
    upd = ctl.update(0, x, ["a", "a"], mask=(x != 0).long())
    assert upd.diversity == pytest.approx((0.8 + 1.0) / 2)  # distinct-4 per response, batch mean
    for key in ("microcoder/diversity/distinct4", "microcoder/diversity/group_pooled", "microcoder/diversity/pairwise",
                "microcoder/temperature", "microcoder/temperature_stage", "microcoder/diversity/smoothed"):
        assert key in upd.metrics
    assert upd.result.group_pairwise.tolist() == [1.0]


def test_metric_and_n_are_configurable():
    ctl = TemperatureController({"metric": "pairwise", "n": 2})
    upd = ctl.update(0, [[1, 2, 3], [1, 2, 3]], [0, 0])
    assert upd.diversity == 0.0 and "microcoder/diversity/distinct2" in upd.metrics


# ----------------------------------------------------------------------------------------------- probe


def fake_sampler(calls):
    """Responses loop over a 4-token motif; each token is replaced by a random one with probability 0.15 T."""

    def sample(prompts, temperature, n):
        calls.append(temperature)
        out = []
        for p, prompt in enumerate(prompts):
            rng = np.random.default_rng([p, int(round(temperature * 100))])
            group = []
            for _ in range(n):
                r = np.array([prompt, prompt + 1, prompt + 2, prompt + 3] * 30)
                flip = rng.random(r.size) < 0.15 * temperature
                r[flip] = rng.integers(1000, 50_000, int(flip.sum()))
                group.append(r.tolist())
            out.append(group)
        return out

    return sample


def test_probe_recommends_the_lowest_candidate_reaching_the_target():
    calls = []
    res = probe(fake_sampler(calls), [10, 20, 30], target=0.6, samples=4)
    temps = [r.temperature for r in res.rows]
    divs = [r.diversity for r in res.rows]
    assert temps == [0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8] and calls == temps
    assert divs == sorted(divs) and divs[0] < 0.6 < divs[-1]
    rec = next(t for t, d in zip(temps, divs) if d >= 0.6)
    assert res.recommended == rec and "lowest candidate" in res.reason
    assert all(d < 0.6 for t, d in zip(temps, divs) if t < rec)
    assert "microcoder/diversity/pairwise" in res.rows[0].metrics and "0.6" in res.format()
    assert json.loads(json.dumps(res.to_dict()))["recommended"] == rec


def test_probe_edge_cases():
    calls = []
    res = probe(fake_sampler(calls), [10], candidates=[0.4, 1.2, 2.0], target=0.99, max_temperature=1.2)
    assert calls == [0.4, 1.2]  # above max_temperature: never sampled
    assert res.recommended == 1.2 and "no candidate reaches" in res.reason
    assert probe(fake_sampler([]), [10], candidates=[1.0]).recommended is None  # no target: table only
    with pytest.raises(ValueError, match="groups"):
        probe(lambda p, t, n: [], [1, 2], candidates=[1.0])
    assert recommend({0.6: 0.5, 1.0: math.nan}, 0.4) == (0.6, recommend({0.6: 0.5}, 0.4)[1])


def test_calibrate_starts_auto_at_the_probe_recommendation():
    cfg = {"mode": "auto", "start": "probe", "target": 0.6, "value": 0.6}
    ctl = TemperatureController(cfg)
    with pytest.raises(RuntimeError, match="calibrate"):
        ctl.temperature(0)
    res = probe(fake_sampler([]), [10, 20, 30], target=0.6, samples=4)
    assert ctl.calibrate(res) == res.recommended == ctl.temperature(0)
    assert ctl.plan()[0]["reason"].startswith("probe: lowest candidate")
    # restored state keeps the calibrated start
    clone = TemperatureController(cfg)
    clone.load_state_dict(json.loads(json.dumps(ctl.state_dict())))
    assert clone.temperature(0) == res.recommended
    ctl.observe(0, 0.7)
    with pytest.raises(ValueError, match="before the first step"):
        ctl.calibrate(res)


def test_calibrate_uses_only_candidates_and_needs_a_target():
    ctl = TemperatureController({"mode": "auto", "value": 0.6})
    with pytest.raises(ValueError, match="target"):
        ctl.calibrate({0.6: 0.9})
    assert ctl.calibrate({0.7: 0.9, 1.0: 0.65, 1.2: 0.7}, target=0.6) == 1.0  # 0.7 is no candidate
    assert isinstance(ProbeResult((), "distinct", 4, None, None, "").table(), dict)
    with pytest.raises(ValueError, match="mode=auto"):
        TemperatureController().calibrate({1.2: 0.7}, target=0.5)


def test_step_numbers():
    ctl = TemperatureController({"mode": "staged", "stages": [[0, 0.6], [140, 1.2]]})
    assert ctl.temperature(np.int64(140)) == 1.2  # numpy / torch integer steps are fine
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="step"):
            ctl.temperature(bad)
