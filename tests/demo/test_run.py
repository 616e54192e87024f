"""microcoder demo's reading of verl's own metrics (the keys verl 0.9.1's file logger writes, as a real demo run
logged them) and its learning summary. The run itself is the make-demo test's and bench/demo_learning.py's."""

from __future__ import annotations

import pytest

from microcoder_ext.demo.run import DemoSettings, heldout_pass_rates, launch, step_line, train_rows
from microcoder_ext.eval.learning import summarize

VAL = "val-core/microcoder/quickstart/acc/mean@8"


def _metrics():
    m = {0: {VAL: 0.394, "val-aux/microcoder/quickstart/acc/best@8/mean": 0.9,
             "val-core/microcoder/quickstart/acc_success_only/mean@8": 1.0}}
    for step in range(1, 21):
        m[step] = {"timing_s/step": 9.0, "critic/score/mean": 0.3 + 0.02 * step, "response_length/mean": 21.0,
                   "microcoder/truncated_frac": 0.0, "microcoder/masked_frac": 0.0, "microcoder/temperature": 1.2}
    m[10][VAL], m[20][VAL] = 0.57, 0.72
    return m


def test_heldout_pass_rate_is_verls_validation_acc():
    assert heldout_pass_rates(_metrics()) == [{"step": 0, "pass_rate": 0.394}, {"step": 10, "pass_rate": 0.57},
                                              {"step": 20, "pass_rate": 0.72}]


def test_summary_before_after_and_reward_windows():
    m = _metrics()
    s = summarize(train_rows(m), heldout_pass_rates(m))
    assert s["heldout_before"] == 0.394 and s["heldout_after"] == 0.72 and s["heldout_after_step"] == 20
    assert s["heldout_change"] == pytest.approx(0.326)
    assert s["reward_window"] == 10
    assert s["reward_first"] == pytest.approx(0.3 + 0.02 * 5.5) and s["reward_change"] == pytest.approx(0.2)


def test_a_recipe_without_microcoder_metrics_still_reports():
    rows = train_rows({1: {"timing_s/step": 1.0, "critic/score/mean": 0.5}})
    assert rows[0]["reward"] == 0.5 and rows[0]["masked_frac"] is None
    assert "masked -" in step_line(rows[0], 30, None)


def test_settings_and_launch():
    s = DemoSettings(recipe="grpo_baseline", seed=3)
    args = launch(s, "/m", "/t.parquet", "/v.parquet")
    assert args[0] == "+recipe=grpo_baseline" and "data.seed=3" in args and "trainer.val_before_train=true" in args
    assert "actor_rollout_ref.rollout.val_kwargs.n=8" in args
    with pytest.raises(ValueError, match="unknown recipe"):
        DemoSettings(recipe="ppo")
    with pytest.raises(ValueError, match="--steps"):
        DemoSettings(steps=0)
