"""The documentation's shell examples that run in the TRL venv (TRL suite; tests/docs/docblocks.py)."""

from __future__ import annotations

import json

from docblocks import run_and_check

#: the held-back gain the TRL quickstart's seed 0 must show (bench/demo_learning.py --trl: every seed's is above it)
MIN_HELDOUT_GAIN = 0.10


def test_trl_quickstart(tmp_path):
    """The TRL quickstart (quickstart page): the same task as ``make demo`` through MicrocoderGRPOTrainer; the
    held-back pass rate is up by the bar's margin, and the report and the curves are written."""
    ran = run_and_check(["python -m microcoder_ext.trl.quickstart --output-dir quickstart-out --no-progress"], tmp_path,
                        timeout=1800)
    assert ran[0].returncode == 0, ran[0].output[-4000:]
    report = json.loads((tmp_path / "quickstart-out" / "report.json").read_text())
    assert report["settings"]["seed"] == 0 and report["settings"]["demonstrations"] == "mixed"
    assert len(report["steps"]) == report["settings"]["steps"]
    assert report["summary"]["heldout_change"] >= MIN_HELDOUT_GAIN, report["summary"]
    assert (tmp_path / "quickstart-out" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_doctor_trl(tmp_path):
    run_and_check(["microcoder doctor trl --model_name_or_path Qwen/Qwen3-1.7B --dataset data/ --temperature 0.6 "
                   "--clipping_ratio 0.2 --max_completion_length 1024 --strict",
                   "echo $?"], tmp_path)
