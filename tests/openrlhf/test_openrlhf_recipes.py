"""openrlhf_recipes/train.sh: every MODEL x ALGO cell dry-runs through OpenRLHF 0.11.2's own train_ppo_ray
(``DRY_RUN=1`` -> ``--mc.dry_run``): argparse, ``hierarchize`` and its validation, stopped where ``train()`` starts.

The script ends with ``exec python3 -m microcoder_ext.openrlhf.train ARGS``. One cell runs exactly that in a
subprocess (with the OpenRLHF venv's ``python3`` first on PATH). For the twelve cells, the script runs with a
``python3`` first on PATH that records ARGS for ``-m microcoder_ext.openrlhf.train`` and passes every other call
(the ``-c`` of ``mask_only``) to the real interpreter; each recorded ARGS then goes through the same
``microcoder_ext.openrlhf.launcher.launch`` in this process (OpenRLHF is imported once, not twelve times: ~12
CPU-seconds each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from host_load import hang_guard

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


def recipe(data: Path, *extra: str, python3_dir: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.pop("WANDB_API_KEY", None)
    path = [str(python3_dir)] if python3_dir else []
    full.update(PATH=os.pathsep.join([*path, str(Path(sys.executable).parent), full.get("PATH", "")]),
                TRAIN=str(data / "train.jsonl"), VAL=str(data / "val.jsonl"), DRY_RUN="1",
                CKPT_DIR=str(data / "ckpt"), **env)
    return subprocess.run(["bash", str(SCRIPT), *extra], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=hang_guard(600))


RECORDER = """#!/usr/bin/env bash
# python3 for openrlhf_recipes/train.sh: records the arguments of `-m microcoder_ext.openrlhf.train`, runs the rest
if [ "${1:-}" = -m ] && [ "${2:-}" = microcoder_ext.openrlhf.train ]; then
  shift 2
  printf '%s\\0' "$@" > "$MC_RECORD"
  exit 0
fi
exec "$MC_REAL_PYTHON" "$@"
"""


@pytest.fixture(scope="module")
def recorder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("recorder")
    (folder / "python3").write_text(RECORDER)
    (folder / "python3").chmod(0o755)
    return folder


def recorded_args(data: Path, recorder: Path, model: str, algo: str) -> list[str]:
    """What train.sh execs ``python3 -m microcoder_ext.openrlhf.train`` with, for one cell."""
    record = data / f"args-{model}-{algo}"
    proc = recipe(data, python3_dir=recorder, MODEL=model, ALGO=algo, MC_RECORD=str(record),
                  MC_REAL_PYTHON=str(Path(sys.executable).parent / "python3"))
    assert proc.returncode == 0, proc.stderr
    return record.read_text().split("\0")[:-1]


def _line(out: str, key: str) -> list[str]:
    """The value column of ``key``'s row in the dry-run table."""
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == key:
            return parts[1:]
    raise AssertionError(f"no {key} row in:\n{out}")


def check_cell(data: Path, model: str, algo: str, out: str) -> None:
    """Assert that a cell's dry-run output shows a passed validation and the cell's settings."""
    path, resp, tp = MODELS[model]
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


def test_the_script_execs_the_launcher(data):
    """One cell end to end: the script's own ``exec python3 -m microcoder_ext.openrlhf.train`` in a subprocess."""
    proc = recipe(data, MODEL="ds_8b", ALGO="mask_only")
    assert proc.returncode == 0, proc.stderr
    check_cell(data, "ds_8b", "mask_only", proc.stdout)


def test_every_model_x_algo_cell_dry_runs(data, recorder, capsys):
    from microcoder_ext.openrlhf import launcher

    failures = []
    for model in MODELS:
        for algo in ALGOS:
            args = recorded_args(data, recorder, model, algo)
            assert args[-1] == "--mc.dry_run", args  # DRY_RUN=1
            capsys.readouterr()
            code = launcher.launch(args).code
            out, err = capsys.readouterr()
            try:
                assert code == 0, f"exit {code}"
                check_cell(data, model, algo, out)
            except AssertionError as e:
                failures.append(f"MODEL={model} ALGO={algo}: {e}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}")
    assert not failures, "\n\n".join(failures)


def test_unknown_model_or_algo_exits_2(data):
    for env, message in (({"MODEL": "llama"}, "unknown MODEL 'llama'"), ({"ALGO": "ppo"}, "unknown ALGO 'ppo'")):
        proc = recipe(data, **env)
        assert proc.returncode == 2 and message in proc.stderr


def test_extra_args_pass_through(data):
    proc = recipe(data, "--actor.eps_clip_low_high", "0.2", "0.2", ALGO="microcoder", MODEL="qwen3_1.7b")
    assert proc.returncode == 1, proc.stderr
    assert "error: --actor.eps_clip_low_high 0.2 0.2 contradicts --mc.preset microcoder" in proc.stderr
