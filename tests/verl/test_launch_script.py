"""verl_recipes/train.sh composes and validates (DRY_RUN=1) the paper's launch configs on CPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from host_load import hang_guard

pytestmark = pytest.mark.verl

SCRIPT = Path(__file__).resolve().parents[2] / "verl_recipes" / "train.sh"


def _dry_run(**env):
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]  # the venv's `microcoder`
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=hang_guard(300),
        env={**os.environ, "PATH": path, "DRY_RUN": "1", **env},
    )


@pytest.mark.parametrize(
    "algo, model, expect",
    [
        ("microcoder", "qwen3_4b_instruct",
         ["Qwen/Qwen3-4B-Instruct-2507", "microcoder_sync", "0.28", "4096"]),
        ("grpo_baseline", "ds_8b", ["deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", "16384", "low_var_kl"]),
    ],
)
def test_paper_launch_configs_validate(algo, model, expect):
    r = _dry_run(ALGO=algo, MODEL=model)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ok    verl validate_config" in r.stdout and "FAIL" not in r.stdout
    for text in expect:
        assert text in r.stdout, text
    assert "train_batch_size" not in r.stderr


def test_unknown_model_is_rejected():
    r = _dry_run(MODEL="llama")
    assert r.returncode == 2 and "unknown MODEL" in r.stderr
