"""The CPU quickstart: its bundled problems, and a ``--quick`` run (short warm start, 2 real MicroCoder-GRPO steps
through TRL with the sandboxed reward) that writes report.json and curves.png."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from microcoder_ext.reward import evaluate_response
from microcoder_ext.trl import quickstart as qs
from microcoder_ext.bundled import generate
from host_load import hang_guard


def test_bundle_is_the_generators_output_and_every_reference_passes():
    rows = [json.loads(line) for line in qs.DATA.read_text().splitlines() if line.strip()]
    assert rows == json.loads(json.dumps(generate.problems(), sort_keys=True))
    problems = qs.load_problems()
    train, held = qs.split_problems(problems)
    assert (len(train), len(held)) == (60, 20)
    assert len({p.id for p in problems}) == 80
    # held-back problems are unseen instances of trained families: same family, a K the family is never trained on
    trained = {(p.extra["family"], p.extra["k"]) for p in train}
    assert {p.extra["family"] for p in held} == {p.extra["family"] for p in train}
    assert not trained & {(p.extra["family"], p.extra["k"]) for p in held}
    for p in problems:
        res = evaluate_response(qs.answer(p), p.tests)
        assert res.verdict == "correct", (p.id, res)
        wrong = qs.answer(p).replace(str(p.extra["k"]), str(p.extra["k"] + 1))
        assert evaluate_response(wrong, p.tests).verdict == "wrong_answer", p.id  # the tests pin K down


def test_model_is_the_demos_built_locally_and_deterministic(tmp_path, monkeypatch):
    """The quickstart trains the model ``microcoder demo`` trains (the same builder, cache and warm start)."""
    monkeypatch.setenv("MICROCODER_CACHE", str(tmp_path / "cache"))
    s = qs.Settings(seed=3, warm_steps=0)
    a, tok, rec = qs.build_model(s)
    b, _, rec_b = qs.build_model(s)
    assert rec.architecture == "Qwen3ForCausalLM" and rec_b.cached and rec_b.path == rec.path
    assert rec.path.startswith(str(tmp_path / "cache" / "smoke-models"))
    assert all((x == y).all() for x, y in zip(a.parameters(), b.parameters()))
    assert 0.3e6 < qs.n_params(a) < 5e6
    train, _ = qs.split_problems(qs.load_problems())
    ids = tok(qs.answer(train[0]))["input_ids"]
    assert tok.decode(ids) == qs.answer(train[0])
    digits = [tok.decode([i]) for i in tok("x + 1234")["input_ids"]]
    assert digits[-4:] == ["1", "2", "3", "4"]  # one token per digit


def test_quick_run_writes_report_and_curves(tmp_path, capsys):
    out = tmp_path / "qs"
    assert qs.main(["--quick", "--output-dir", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    for key in ("settings", "model", "data", "warm_start_loss", "steps", "eval", "pass_rate_heldout", "timings",
                "wall_time_s", "environment"):
        assert key in report, key
    assert report["settings"]["quick"] and report["settings"]["steps"] == 2
    assert set(report["eval"]) == {"after_warm_start", "after_grpo"}
    for name in ("after_warm_start", "after_grpo"):
        ev = report["eval"][name]
        assert 0.0 <= ev["pass_rate"] <= 1.0 and 0.0 <= ev["truncated_frac"] <= 1.0
        assert ev["num_problems"] == 5 and ev["samples_per_problem"] == 2
        assert sum(ev["verdicts"].values()) == 10
    p = report["pass_rate_heldout"]
    assert p["before_grpo"] == report["eval"]["after_warm_start"]["pass_rate"]
    assert p["change"] == pytest.approx(p["after_grpo"] - p["before_grpo"])
    steps = report["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        for key in ("reward", "pass_rate", "microcoder/masked_frac", "microcoder/truncated_frac",
                    "microcoder/diversity/distinct4", "microcoder/temperature"):
            assert key in s, key
        assert 0.0 <= s["pass_rate"] <= 1.0 and s["microcoder/temperature"] == report["settings"]["temperature"] == 1.2
    assert report["eval"]["after_grpo"]["temperature"] == report["settings"]["eval_temperature"] == 1.0
    assert report["model"]["architecture"] == "Qwen3ForCausalLM" and report["model"]["demonstrations"] == "mixed"
    assert "step   1/2  reward" in text and "step   2/2" in text and "held-back pass rate" in text
    assert report["curves"] == str(out / "curves.png")
    png = (out / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_curves_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(qs.MatplotlibMissing, match="matplotlib is not installed"):
        qs.plot_curves({"steps": [], "eval": {}}, tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


def test_cli_help_and_bad_options():
    r = subprocess.run([sys.executable, "-m", "microcoder_ext.trl.quickstart", "--help"], capture_output=True,
                       text=True, timeout=hang_guard(60))
    assert r.returncode == 0 and "--quick" in r.stdout and "--steps" in r.stdout and "--seed" in r.stdout
    r = subprocess.run([sys.executable, "-m", "microcoder_ext.trl.quickstart", "--steps", "0"], capture_output=True,
                       text=True, timeout=hang_guard(60))
    assert r.returncode == 2 and "--steps must be >= 1" in r.stderr
