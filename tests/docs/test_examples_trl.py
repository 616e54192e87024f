"""The documentation's shell examples that run in the TRL venv (TRL suite; tests/docs/docblocks.py)."""

from __future__ import annotations

import json

from docblocks import ROOT, blocks_running, check_block, run_and_check

#: what `make demo` runs (quickstart page): the Makefile's demo recipe, line by line
DEMO = ["bash compat/in_venv.sh trl python -m microcoder_ext.trl.quickstart --output-dir quickstart-out",
        "bash compat/in_venv.sh verl microcoder recipe show microcoder"]


def test_make_demo(tmp_path):
    """``make demo`` (README, quickstart page), run once with the quickstart page's portable numerics
    (``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE make demo``, whose block shows seed 0's exact pass rates: the
    same on any x86-64 machine, the page claims); the plain ``make demo`` blocks elide the numbers and are compared
    with the same run."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.strip() for line in recipe.splitlines()] == DEMO
    ran = run_and_check(["ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE make demo"], tmp_path, timeout=1800)
    assert ran[0].returncode == 0
    for block in blocks_running(["make demo"]):
        check_block(block, ran)
    report = json.loads((tmp_path / "quickstart-out" / "report.json").read_text())
    assert report["settings"]["steps"] == 40 and report["settings"]["seed"] == 0
    assert (tmp_path / "quickstart-out" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_doctor_trl(tmp_path):
    run_and_check(["microcoder doctor trl --model_name_or_path Qwen/Qwen3-1.7B --dataset data/ --temperature 0.6 "
                   "--clipping_ratio 0.2 --max_completion_length 1024 --strict",
                   "echo $?"], tmp_path)
