"""``microcoder smoke trl``: real ``microcoder train`` steps (TRL's GRPOTrainer + MicrocoderGRPOTrainer) of a launch
on the CPU, read back from TRL's own log history."""

import json
import subprocess
import sys

import pytest
from host_load import hang_guard

pytestmark = pytest.mark.slow


def test_smoke_trl_runs_the_launch_and_reports_trl_logs(tmp_path):
    from microcoder_ext.data.writers import write_verl_parquet
    from microcoder_ext.smoke.data import bundled_problems

    data = write_verl_parquet(bundled_problems("train")[:20], tmp_path / "train.parquet")
    work = tmp_path / "work"
    cmd = [sys.executable, "-m", "microcoder_ext.cli", "smoke", "--steps", "2", "--prompts", "2", "--max-samples", "4",
           "--workdir", str(work), "--json",
           str(tmp_path / "r.json"), "trl", "--model_name_or_path", "Qwen/Qwen3-1.7B", "--dataset", str(data),
           "--preset", "microcoder", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "8",
           "--num_generations", "8", "--max_completion_length", "1024", "--use_vllm", "--report_to", "wandb",
           "--mc.temperature.mode", "staged", "--mc.temperature.stages", "[[0, 1.2], [140, 0.8]]"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=hang_guard(900))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] and [s["step"] for s in report["steps"]] == [1, 2]
    subs = {s["what"]: s for s in report["substitutions"]}
    assert subs["model"]["launch"] == "Qwen/Qwen3-1.7B" and report["model"]["family"] == "qwen3"
    assert subs["generation"]["smoke"] == "transformers generate" and subs["report to"]["smoke"] == "none"
    assert subs["completion budget (tokens)"]["smoke"] == "32" and "temperature stages" in subs
    assert json.loads(subs["temperature stages"]["smoke"]) == [[0, 1.2], [1, 0.8]]
    settings = json.loads((work / "out" / "microcoder_train.json").read_text())
    assert settings["model"] == report["model"]["path"]  # the real entry point trained the tiny model
    history = [r for r in settings["log_history"] if "loss" in r]
    assert len(history) == 2 and all("microcoder/masked_frac" in r for r in history)
    # TRL's logged temperature follows the compressed schedule: step 1 at 1.2, then 0.8
    assert [r["microcoder/temperature"] for r in history] == [1.2, 0.8]
    assert [s["sampler_temperature"] for s in report["steps"]] == [[1.2], [0.8]]
    assert report["steps"][-1]["weights_changed"] is True
    assert sum(report["steps"][0]["verdicts"].values()) == report["steps"][0]["responses"]
    assert "training step(s) ran of 2 (ok" in proc.stdout
