"""The documentation's shell examples that run in the TRL venv (TRL suite; tests/docs/docblocks.py)."""

from __future__ import annotations

from docblocks import run_and_check


def test_doctor_trl(tmp_path):
    run_and_check(["microcoder doctor trl --model_name_or_path Qwen/Qwen3-1.7B --dataset data/ --temperature 0.6 "
                   "--clipping_ratio 0.2 --max_completion_length 1024 --strict",
                   "echo $?"], tmp_path)
