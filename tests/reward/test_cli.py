import json
import subprocess
import sys

from microcoder_ext.cli import main

GT = {"inputs": ["1 2\n"], "outputs": ["3\n"]}


def test_eval_code_prints_verdict_table(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    rows = [{"id": "a", "response": "```python\nprint(3)\n```", "ground_truth": GT},
            {"id": "b", "response": "```python\nprint(4)\n```", "ground_truth": json.dumps(GT)},
            {"id": "c", "response": "no code", "tests": GT}]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    out = tmp_path / "out.jsonl"
    assert main(["eval-code", str(src), "-o", str(out), "--no-progress", "--workers", "1"]) == 0
    table = capsys.readouterr().out
    assert "correct" in table and "total" in table
    res = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["verdict"] for r in res] == ["correct", "wrong_answer", "no_answer", "sandbox_error"]
    assert res[0]["id"] == "a"


def test_eval_code_subcommand_via_console(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "```python\nprint(3)\n```", "ground_truth": GT}) + "\n")
    p = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "eval-code", str(src)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "correct" in p.stdout and "100.0%" in p.stdout
