"""The documentation's shell examples that run in the OpenRLHF venv (OpenRLHF suite; tests/docs/docblocks.py)."""

from __future__ import annotations

from docblocks import run_and_check


def test_contradicting_flags(tmp_path):
    run_and_check(["python -m microcoder_ext.openrlhf.train --mc.dry_run --actor.model_name_or_path "
                   "Qwen/Qwen3-4B-Instruct-2507 --rollout.n_samples_per_prompt 8 --vllm.num_engines 8 "
                   "--algo.kl.init_coef 0.01 --actor.eps_clip_low_high 0.2 0.2 --rollout.temperature 1.0",
                   "echo $?"], tmp_path)


def test_train_sh_dry_run(tmp_path):
    ran = run_and_check(["ALGO=microcoder MODEL=qwen3_4b_instruct DRY_RUN=1 bash openrlhf_recipes/train.sh"], tmp_path)
    assert ran[0].returncode == 0


def test_doctor_openrlhf(tmp_path):
    ran = run_and_check([
        "microcoder doctor openrlhf --actor.model_name_or_path Qwen/Qwen3-4B-Instruct-2507 "
        "--rollout.n_samples_per_prompt 8 --rollout.batch_size 64 --train.batch_size 256 --rollout.max_new_tokens 4096 "
        "--vllm.num_engines 8 --mc.preset microcoder",
        "microcoder doctor openrlhf --actor.model_name_or_path Qwen/Qwen3-4B-Instruct-2507 "
        "--rollout.n_samples_per_prompt 8 --rollout.batch_size 64 --train.batch_size 256 --rollout.max_new_tokens 2048 "
        "--vllm.num_engines 8 --mc.temperature.value 0.6 --algo.kl.init_coef 0.01 --strict",
        "echo $?",
    ], tmp_path)
    assert ran[0].returncode == 0
