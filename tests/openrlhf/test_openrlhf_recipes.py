"""openrlhf_recipes/train.sh: every MODEL x ALGO cell dry-runs through OpenRLHF 0.11.2's own train_ppo_ray
(``DRY_RUN=1`` -> ``--mc.dry_run``) in a subprocess, with the OpenRLHF venv's ``python3`` first on PATH (the script runs
``python3 -m microcoder_ext.openrlhf.train``, like verl_recipes/train.sh runs ``python3 -m verl.trainer.main_ppo``).

One dry run imports OpenRLHF (~10 s on CPU), so the cells run two at a time and every failure is reported together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "openrlhf_recipes" / "train.sh"
MODELS = {  # MODEL -> (model path, response length, vLLM tensor parallel size), as verl_recipes/train.sh
    "qwen3_1.7b": ("Qwen/Qwen3-1.7B", 4096, 1),
    "qwen3_4b_instruct": ("Qwen/Qwen3-4B-Instruct-2507", 4096, 1),
    "ds_8b": ("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", 16384, 2),
}
ALGOS = ["microcoder", "mask_only", "dapo_baseline", "grpo_baseline"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Tiny TRAIN / VAL files in the script's format (the dry run does not read them)."""
    root = tmp_path_factory.mktemp("data")
    row = {"prompt": [{"role": "user", "content": "Print the sum of two integers read from stdin."}],
           "label": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}
    for name in ("train.jsonl", "val.jsonl"):
        (root / name).write_text(json.dumps(row) + "\n")
    return root


def recipe(data: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.pop("WANDB_API_KEY", None)
    full.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{full.get('PATH', '')}",
                TRAIN=str(data / "train.jsonl"), VAL=str(data / "val.jsonl"), DRY_RUN="1",
                CKPT_DIR=str(data / "ckpt"), **env)
    return subprocess.run(["bash", str(SCRIPT), *extra], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=600)


def _line(out: str, key: str) -> list[str]:
    """The value column of ``key``'s row in the dry-run table."""
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == key:
            return parts[1:]
    raise AssertionError(f"no {key} row in:\n{out}")


def check_cell(data: Path, model: str, algo: str) -> str | None:
    """None if the cell's dry run passes and shows the cell's settings, else what went wrong."""
    proc = recipe(data, MODEL=model, ALGO=algo)
    path, resp, tp = MODELS[model]
    try:
        assert proc.returncode == 0, f"exit {proc.returncode}"
        out = proc.stdout
        assert f"train_ppo_ray with --mc.preset {algo}" in out
        assert _line(out, "--actor.model_name_or_path")[0] == path
        assert _line(out, "--rollout.max_new_tokens")[0] == str(resp)
        assert _line(out, "--data.max_len")[0] == str(2048 + resp)
        assert _line(out, "--vllm.num_engines")[0] == str(8 // tp)
        assert _line(out, "--vllm.tensor_parallel_size")[0] == str(tp)
        assert _line(out, "--rollout.batch_size")[0] == "64" and _line(out, "--train.batch_size")[0] == "256"
        assert _line(out, "--rollout.n_samples_per_prompt")[0] == "8"
        assert _line(out, "--data.prompt_dataset")[0] == str(data / "train.jsonl")
        assert _line(out, "--eval.dataset")[0] == str(data / "val.jsonl")
        assert _line(out, "--reward.remote_url")[0].endswith("microcoder_ext/openrlhf/openrlhf_reward.py")
        assert "OK: OpenRLHF's argument validation passed" in out
    except AssertionError as e:
        return f"MODEL={model} ALGO={algo}: {e}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    return None


def test_every_model_x_algo_cell_dry_runs(data):
    cells = [(model, algo) for model in MODELS for algo in ALGOS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(lambda cell: check_cell(data, *cell), cells) if f]
    assert not failures, "\n\n".join(failures)


def test_unknown_model_or_algo_exits_2(data):
    for env, message in (({"MODEL": "llama"}, "unknown MODEL 'llama'"), ({"ALGO": "ppo"}, "unknown ALGO 'ppo'")):
        proc = recipe(data, **env)
        assert proc.returncode == 2 and message in proc.stderr


def test_extra_args_pass_through(data):
    proc = recipe(data, "--actor.eps_clip_low_high", "0.2", "0.2", ALGO="microcoder", MODEL="qwen3_1.7b")
    assert proc.returncode == 1, proc.stderr
    assert "error: --actor.eps_clip_low_high 0.2 0.2 contradicts --mc.preset microcoder" in proc.stderr
