"""``microcoder plot``: run logs written by verl's own loggers (``verl.utils.tracking.Tracking`` with the console,
file and tensorboard backends), by torch's SummaryWriter under OpenRLHF's names, a flat JSONL and wandb CSV exports,
read back exactly; the figure's panels and lines; the CLI end to end."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from microcoder_ext.eval import curves, runlogs
from microcoder_ext.eval.runlogs import RunLogError, parse_console_line, read_run
from host_load import hang_guard

STEPS = range(1, 7)
VAL_STEPS = (2, 4, 6)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def verl_step(step: int) -> dict:
    """One step of metrics under verl 0.9.1's names (metric_utils, ray_trainer) and ours; every value is exact in
    float32 (TensorBoard stores float32) and one is a numpy float, as verl's reductions return."""
    m = {
        "critic/score/mean": np.float64(0.25 + step / 64),
        "critic/rewards/mean": 0.25 + step / 64,
        "response_length/mean": 500.0 + 100 * step,
        "response_length/clip_ratio": step / 32,
        "microcoder/truncated_frac": step / 32,
        "microcoder/masked_frac": step / 128,
        "microcoder/diversity/distinct4": 0.75 - step / 256,
        "microcoder/temperature": 1.25 if step > 3 else 0.5,
        "training/global_step": step,
        "response_length_non_aborted/clip_ratio": float("nan") if step == 3 else 0.0,
    }
    if step in VAL_STEPS:
        m["val-core/lcb_v6/acc/mean@4"] = 0.375 + step / 128
        m["val-aux/lcb_v6/reward/mean@4"] = 0.375 + step / 128
    return m


def expected_verl() -> dict:
    out: dict[str, list] = {}
    for s in STEPS:
        for k, v in verl_step(s).items():
            if not math.isnan(float(v)):
                out.setdefault(k, []).append((s, float(v)))
    return dict(sorted(out.items()))


# OpenRLHF 0.11.2: PPOTrainer._compute_rollout_stats keys + our trainer's microcoder/*; TensorboardLogger.log_train
# writes every key as "train/<key>", log_eval as "eval/<key>" (compute_eval_metrics: eval_<source>_pass1)
def openrlhf_step(step: int) -> dict:
    return {
        "train/rollout/reward_mean": 0.125 + step / 32,
        "train/rollout/response_length_mean": 2000.0 + 50 * step,
        "train/rollout/truncated_rate": step / 16,
        "train/microcoder/truncated_frac": step / 16,
        "train/microcoder/masked_frac": step / 64,
        "train/microcoder/diversity/distinct4": 0.5 + step / 64,
        "train/microcoder/temperature": 1.25,
        "train/policy_loss": -step / 8,
    }


OPENRLHF_EVAL = {2: 0.25, 4: 0.3125, 6: 0.375}


def expected_openrlhf() -> dict:
    out: dict[str, list] = {}
    for s in STEPS:
        for k, v in openrlhf_step(s).items():
            out.setdefault(k, []).append((s, float(v)))
    out["eval/eval_lcb_pass1"] = sorted(OPENRLHF_EVAL.items())
    return dict(sorted(out.items()))


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Every log format, written once for the module."""
    from torch.utils.tensorboard import SummaryWriter
    from verl.utils.tracking import Tracking

    root = tmp_path_factory.mktemp("runlogs")
    paths = {}

    # verl: its own Tracking with console + file + tensorboard backends, as trainer.logger=[console,file,tensorboard]
    tb_dir, jsonl = root / "verl_tb" / "microcoder" / "grpo", root / "verl_file.jsonl"
    env = {"TENSORBOARD_DIR": str(tb_dir), "VERL_FILE_LOGGER_PATH": str(jsonl)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            tracker = Tracking("microcoder", "grpo", default_backend=["console", "file", "tensorboard"])
            for s in STEPS:
                tracker.log(data=verl_step(s), step=s)
            tracker.finish()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    console = out.getvalue()
    assert "step:1 - critic/score/mean:" in console  # verl's own format, not ours
    # as a driver's stdout looks: Ray's actor prefix on the metric lines, other output around them
    lines = ["(TaskRunner pid=4242) " + ln if ln.startswith("step:") else ln for ln in console.splitlines()]
    (root / "verl_console.log").write_text("Training Progress:   0%|  | 0/6\n" + "\n".join(lines) + "\n")
    paths.update(verl_tb=root / "verl_tb", verl_jsonl=jsonl, verl_console=root / "verl_console.log",
                 verl_console_text=console)

    # OpenRLHF names through torch's SummaryWriter, as openrlhf.utils.logging_utils.TensorboardLogger writes them
    ort = root / "openrlhf_tb" / "openrlhf_microcoder_qwen3_4b_instruct"
    w = SummaryWriter(log_dir=str(ort))
    for s in STEPS:
        for k, v in openrlhf_step(s).items():
            w.add_scalar(k, v, s)
        if s in OPENRLHF_EVAL:
            w.add_scalar("eval/eval_lcb_pass1", OPENRLHF_EVAL[s], s)
    w.close()
    paths["openrlhf_tb"] = ort

    # a flat JSONL of {step, metrics...}, a run without diversity/temperature/mask metrics (e.g. plain verl GRPO)
    flat = root / "flat.jsonl"
    with flat.open("w") as f:
        for s in STEPS:
            f.write(json.dumps({"step": s, "critic/score/mean": 0.5 + s / 64, "response_length/mean": 900.0 + s,
                                "response_length/clip_ratio": s / 64}) + "\n")
    paths["flat_jsonl"] = flat

    # wandb UI panel export: Step + "RUN - metric" (+ __MIN/__MAX); empty cells where a metric was not logged
    ui = root / "wandb_ui.csv"
    with ui.open("w", newline="") as f:
        cw = csv.writer(f)
        cw.writerow(["Step", "dapo-4b - critic/score/mean", "dapo-4b - critic/score/mean__MIN",
                     "dapo-4b - critic/score/mean__MAX", "dapo-4b - val-core/lcb_v6/acc/mean@4"])
        for s in STEPS:
            cw.writerow([s, 0.25 + s / 64, 0.0, 1.0, (0.375 + s / 128) if s in VAL_STEPS else ""])
    paths["wandb_ui"] = ui
    # wandb API export (run.history().to_csv()): _step, _runtime, _timestamp + metric columns
    api = root / "wandb_api.csv"
    with api.open("w", newline="") as f:
        cw = csv.writer(f)
        cw.writerow(["", "_step", "_runtime", "_timestamp", "response_length/mean", "microcoder/temperature"])
        for i, s in enumerate(STEPS):
            cw.writerow([i, s, 10.5 * s, 1.7e9 + s, 500.0 + 100 * s, 1.25])
    paths["wandb_api"] = api
    # two runs in one UI export
    multi = root / "wandb_two_runs.csv"
    multi.write_text("Step,run a - critic/score/mean,run b - critic/score/mean\n1,0.5,0.25\n2,0.75,0.5\n")
    paths["wandb_multi"] = multi
    return paths


# ------------------------------------------------------------------------------------------------------ readers
def test_verl_tracking_backends_read_back_exactly(logs):
    want = expected_verl()
    for key, fmt in (("verl_tb", "tensorboard"), ("verl_jsonl", "jsonl"), ("verl_console", "console")):
        run = read_run(logs[key])
        assert run.fmt == fmt, key
        assert run.metrics == want, key
    # NaN (logged at step 3) is dropped the same way in all three
    assert [s for s, _ in want["response_length_non_aborted/clip_ratio"]] == [1, 2, 4, 5, 6]
    # the directory given was searched for the one run's event files
    assert read_run(logs["verl_tb"]).source.endswith(os.path.join("microcoder", "grpo"))


def test_openrlhf_tensorboard_names_read_back_exactly(logs):
    run = read_run(logs["openrlhf_tb"])
    assert run.metrics == expected_openrlhf()
    resolved = {p: curves.resolve_metric(curves.PANELS[p], run.metrics) for p in curves.PANELS}
    assert resolved == {
        "reward": "train/rollout/reward_mean",
        "accuracy": "eval/eval_lcb_pass1",
        "length": "train/rollout/response_length_mean",
        "truncation": "train/microcoder/truncated_frac",
        "masked": "train/microcoder/masked_frac",
        "diversity": "train/microcoder/diversity/distinct4",
        "temperature": "train/microcoder/temperature",
    }


def test_verl_names_map_to_panels(logs):
    metrics = read_run(logs["verl_jsonl"]).metrics
    resolved = {p: curves.resolve_metric(curves.PANELS[p], metrics) for p in curves.PANELS}
    assert resolved == {
        "reward": "critic/score/mean", "accuracy": "val-core/lcb_v6/acc/mean@4", "length": "response_length/mean",
        "truncation": "microcoder/truncated_frac", "masked": "microcoder/masked_frac",
        "diversity": "microcoder/diversity/distinct4", "temperature": "microcoder/temperature",
    }
    # verl's own clip ratio when our metric is absent
    flat = read_run(logs["flat_jsonl"]).metrics
    assert curves.resolve_metric(curves.PANELS["truncation"], flat) == "response_length/clip_ratio"
    assert curves.resolve_metric(curves.PANELS["diversity"], flat) is None


def test_wandb_csv_exports(logs):
    ui = read_run(logs["wandb_ui"])
    assert ui.fmt == "wandb-csv"
    assert ui.metrics == {
        "critic/score/mean": [(s, 0.25 + s / 64) for s in STEPS],
        "val-core/lcb_v6/acc/mean@4": [(s, 0.375 + s / 128) for s in VAL_STEPS],
    }
    api = read_run(logs["wandb_api"])
    assert api.metrics == {"microcoder/temperature": [(s, 1.25) for s in STEPS],
                           "response_length/mean": [(s, 500.0 + 100 * s) for s in STEPS]}
    with pytest.raises(RunLogError, match="several runs.*run a, run b"):
        read_run(logs["wandb_multi"])
    assert read_run(f"{logs['wandb_multi']}#run b").metrics == {"critic/score/mean": [(1, 0.25), (2, 0.5)]}
    with pytest.raises(RunLogError, match="no run named 'run c'"):
        read_run(f"{logs['wandb_multi']}#run c")


def test_console_lines_and_resumed_runs(tmp_path):
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    line = concat_dict_to_str({"a/b": np.float32(0.5), "c": -2, "d": float("nan"), "e": True, "s": "text"}, step=7)
    assert parse_console_line("\x1b[36m(TaskRunner pid=1)\x1b[0m " + line) == (7, {"a/b": 0.5, "c": -2.0, "e": 1.0})
    assert parse_console_line("epoch 1 done") is None
    # a resumed run logs steps 3..4 again: the later value wins, series stay sorted
    log = tmp_path / "resumed.log"
    log.write_text("step:3 - x:1.0\nstep:4 - x:2.0\nstep:1 - x:0.5\nrestarting\nstep:3 - x:9.0\n")
    assert read_run(log).metrics == {"x": [(1, 0.5), (3, 9.0), (4, 2.0)]}


def test_unreadable_runs_raise(tmp_path, logs):
    with pytest.raises(RunLogError, match="no such file"):
        read_run(tmp_path / "missing")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(RunLogError, match="no TensorBoard event files"):
        read_run(tmp_path / "empty_dir")
    with pytest.raises(RunLogError, match="several runs"):  # verl_tb/.. + openrlhf_tb under one root
        read_run(logs["verl_tb"].parent)
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nworld\n")
    with pytest.raises(RunLogError, match="no verl console metric lines"):
        read_run(junk)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "x": 1}\nnot json\n')
    with pytest.raises(RunLogError, match=r"bad.jsonl:2: not JSON"):
        read_run(bad)


def test_ema_matches_tensorboard_smoothing():
    assert curves.ema([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
    out = curves.ema([2.0, 2.0, 4.0], 0.5)  # debiased: constant start stays constant
    assert out[:2] == [2.0, 2.0] and out[2] == pytest.approx((0.5 * 1.5 + 2.0) / (1 - 0.125))
    with pytest.raises(ValueError):
        curves.ema([1.0], 1.0)


# ------------------------------------------------------------------------------------------------------- figure
def test_figure_panels_and_lines(logs, tmp_path):
    runs = [("verl", read_run(logs["verl_console"])), ("openrlhf", read_run(logs["openrlhf_tb"])),
            ("plain", read_run(logs["flat_jsonl"]))]
    plot = curves.plot_runs(runs)
    fig = plot.figure
    assert plot.panels == list(curves.DEFAULT_PANELS)
    assert [ax.get_title() for ax in fig.axes] == [curves.PANELS[p].title for p in curves.DEFAULT_PANELS]
    verl_want, orl_want = expected_verl(), expected_openrlhf()
    for panel in curves.DEFAULT_PANELS:
        ax = plot.axes(panel)
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for label, want in (("verl", verl_want), ("openrlhf", orl_want)):
            name = plot.resolved[(label, panel)]
            xs, ys = lines[label].get_data()
            assert (list(xs), list(ys)) == ([s for s, _ in want[name]], [v for _, v in want[name]]), (panel, label)
            assert lines[label].get_gid() == name
        has_plain = panel in ("reward", "length", "truncation")
        assert sorted(lines) == sorted(["verl", "openrlhf"] + (["plain"] if has_plain else [])), panel
        texts = [t.get_text() for t in ax.texts]
        assert texts == ([] if has_plain else ["no data: plain"]), panel
    # colours are per run, the same in every panel
    assert {ln.get_color() for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "verl"} == {"C0"}
    assert len(plot.warnings) == 4 and all(w.startswith("plain: no data for panel") for w in plot.warnings)

    # panel selection/order, smoothing and an explicit metric
    sub = curves.plot_runs(runs[:1], panels=["temperature", "reward"], smooth=0.5,
                           overrides={"reward": "critic/rewards/mean"})
    assert [ax.get_title() for ax in sub.figure.axes] == [curves.PANELS["temperature"].title,
                                                          curves.PANELS["reward"].title]
    (ln,) = sub.axes("reward").get_lines()
    assert ln.get_gid() == "critic/rewards/mean"
    assert list(ln.get_ydata()) == curves.ema([v for _, v in verl_want["critic/rewards/mean"]], 0.5)

    out = tmp_path / "fig.png"
    curves.save_png(plot, str(out))
    assert out.read_bytes()[:8] == PNG_SIGNATURE and out.stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------------------- CLI
def cli(*args):
    """``microcoder plot ARGS`` in a subprocess (``python -m microcoder_ext.cli plot ARGS``)."""
    mod = ["microcoder_ext.cli", "plot"]
    return subprocess.run([sys.executable, "-m", *mod, *map(str, args)], capture_output=True, text=True, timeout=hang_guard(120))


def test_cli_end_to_end(logs, tmp_path):
    out = tmp_path / "curves.png"
    r = cli(logs["verl_tb"], logs["openrlhf_tb"], logs["flat_jsonl"], "-o", out,
            "--label", "MicroCoder (verl)", "--label", "MicroCoder (OpenRLHF)", "--label", "GRPO", "--smooth", "0.3")
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}: 7 panels x 3 runs, 17 curves" in r.stdout
    assert "warning: GRPO: no data for panel 'diversity'" in r.stderr
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 10_000

    r = cli(logs["verl_console"], logs["wandb_ui"], "--list", "--panels", "reward,accuracy,diversity")
    assert r.returncode == 0, r.stderr
    assert f"== {logs['verl_console']}: {logs['verl_console']} [console], 12 metrics" in r.stdout
    assert "critic/score/mean" in r.stdout and "6 pts  steps 1..6  last 0.34375" in r.stdout
    assert "    accuracy     val-core/lcb_v6/acc/mean@4" in r.stdout
    assert "    diversity    (no data)" in r.stdout  # the wandb export has no diversity column

    r = cli(tmp_path / "nope", "-o", out)
    assert r.returncode == 2 and "cannot read run" in r.stderr and "no such file" in r.stderr
    r = cli(logs["flat_jsonl"], "-o", out, "--panels", "diversity,temperature")
    assert r.returncode == 1 and "no run has any metric" in r.stderr
    r = cli(logs["flat_jsonl"], "-o", out, "--panels", "reward,loss")
    assert r.returncode == 2 and "unknown panel(s) loss" in r.stderr
    r = cli("--help")
    assert r.returncode == 0 and "--panels" in r.stdout and "wandb CSV" in r.stdout
