import json
import os
import subprocess
import sys

import pytest

import microcoder_ext.reward as reward
from microcoder_ext.cli import build_parser, main
from host_load import hang_guard

GT = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
GOOD = {"response": "```python\nprint(3)\n```", "ground_truth": GT}


@pytest.fixture
def no_scoring(monkeypatch):
    """Fails the test if the CLI starts an engine (the input must be rejected before scoring)."""
    class Boom:
        def __init__(self, *a, **k):
            raise AssertionError("the CLI started scoring")
    monkeypatch.setattr(reward, "Engine", Boom)


def _count(table: str, row: str) -> int:
    """The count column of a row of the verdict table."""
    rows = [line.split() for line in table.splitlines() if line.split()[:1] == [row]]
    assert len(rows) == 1, table
    return int(rows[0][1])


def _write(path, lines):
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


def test_eval_code_prints_verdict_table(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    rows = [{"id": "a", "response": "```python\nprint(3)\n```", "ground_truth": GT},
            {"id": "b", "response": "```python\nprint(4)\n```", "ground_truth": json.dumps(GT)},
            {"id": "c", "response": "no code", "tests": GT},
            {"id": "d", "solution_str": "```python\nprint(3)\n```", "ground_truth": {"inputs": ["1\n"]}}]
    _write(src, [json.dumps(r) for r in rows] + [""])
    out = tmp_path / "out.jsonl"
    assert main(["eval-code", str(src), "-o", str(out), "--no-progress", "--workers", "1"]) == 0
    cap = capsys.readouterr()
    assert "correct" in cap.out and "total" in cap.out and "skipped" not in cap.out
    res = [json.loads(x) for x in out.read_text().splitlines()]
    # a malformed ground truth is a per-record verdict (as in training), not a bad line
    assert [r["verdict"] for r in res] == ["correct", "wrong_answer", "no_answer", "sandbox_error"]
    assert "malformed ground truth" in res[3]["detail"]
    assert [r["id"] for r in res] == ["a", "b", "c", "d"] and [r["line"] for r in res] == [1, 2, 3, 4]


def test_eval_code_reports_records_with_weak_tests(tmp_path, capsys):
    """Fewer than --min-tests tests, or flagged ``weak_tests`` by ``microcoder data prepare``: counted, with how many
    of them passed."""
    many = {"inputs": [f"{k}\n" for k in range(6)], "outputs": [f"{k}\n" for k in range(6)]}
    echo = "```python\nprint(input())\n```"
    rows = [{"response": echo, "ground_truth": {"inputs": ["1\n"], "outputs": ["1\n"]}},
            {"response": echo, "ground_truth": many},
            {"response": echo, "ground_truth": many, "extra_info": {"weak_tests": "examples only"}}]
    src = _write(tmp_path / "in.jsonl", [json.dumps(r) for r in rows])
    out = tmp_path / "out.jsonl"
    assert main(["eval-code", str(src), "-o", str(out), "--no-progress", "--workers", "1"]) == 0
    table = capsys.readouterr().out
    assert _count(table, "weak_tests") == 2 and "2 of them correct" in table, table
    assert [r.get("weak_tests") for r in map(json.loads, out.read_text().splitlines())] == [None, None,
                                                                                             "examples only"]
    assert main(["eval-code", str(src), "--no-progress", "--workers", "1", "--min-tests", "0"]) == 0
    assert _count(capsys.readouterr().out, "weak_tests") == 1


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_input_is_one_line_and_exit_2(tmp_path, capsys, no_scoring, kind):
    path = tmp_path / "missing.jsonl"
    if kind == "directory":
        path.mkdir()
    assert main(["eval-code", str(path)]) == 2
    cap = capsys.readouterr()
    why = "No such file or directory" if kind == "missing" else "Is a directory"
    assert cap.err == f"microcoder eval-code: cannot read {path}: {why}\n"
    assert cap.out == ""


def test_read_error_after_open(capsys, no_scoring):
    # opens fine, then reading fails (EIO at address 0): same one-line report
    assert main(["eval-code", "/proc/self/mem"]) == 2
    assert capsys.readouterr().err == "microcoder eval-code: cannot read /proc/self/mem: Input/output error\n"


def test_missing_file_via_console_has_no_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "eval-code", "missing.jsonl"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=hang_guard(120))
    assert p.returncode == 2
    assert p.stderr == "microcoder eval-code: cannot read missing.jsonl: No such file or directory\n"
    assert p.stdout == ""


BAD_LINES = [json.dumps(GOOD),                                    # 1 good
             "not json",                                          # 2
             "[1, 2]",                                            # 3 not an object
             "",                                                  # 4 empty: ignored
             json.dumps({"ground_truth": GT}),                    # 5 no response
             json.dumps({"response": "x"}),                       # 6 no ground truth
             json.dumps({"response": None, "tests": GT}),         # 7 response not a string
             b"\xff\xfe{}",                                       # 8 not UTF-8
             json.dumps({"response": "x", "ground_truth": 42})]   # 9 good line, malformed ground truth
BAD = {2: "invalid JSON", 3: "expected a JSON object, got list", 5: "missing 'response'",
       6: "missing 'ground_truth'", 7: "the response must be a string", 8: "not UTF-8"}


def test_bad_lines_are_reported_and_nothing_is_scored(tmp_path, capsys, no_scoring):
    src = _write(tmp_path / "in.jsonl", BAD_LINES)
    out = tmp_path / "out.jsonl"
    assert main(["eval-code", str(src), "-o", str(out), "--no-progress"]) == 2
    cap = capsys.readouterr()
    err = cap.err.splitlines()
    for n, why in BAD.items():
        assert any(line.startswith(f"microcoder eval-code: {src}:{n}: {why}") for line in err), (n, err)
    assert len(err) == len(BAD) + 1 and "6 bad lines" in err[-1] and "--skip-bad" in err[-1]
    assert "Traceback" not in cap.err and cap.out == "" and not out.exists()


def test_skip_bad_scores_the_rest(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", BAD_LINES)
    out = tmp_path / "out.jsonl"
    assert main(["eval-code", str(src), "-o", str(out), "--no-progress", "--workers", "1", "--skip-bad"]) == 0
    cap = capsys.readouterr()
    for n, why in BAD.items():
        assert f"{src}:{n}: {why}" in cap.err
    res = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["line"], r["verdict"]) for r in res] == [(1, "correct"), (9, "sandbox_error")]
    assert _count(cap.out, "skipped") == 6 and "bad input lines: 2, 3, 5, 6, 7, 8" in cap.out
    assert _count(cap.out, "total") == 2 and _count(cap.out, "correct") == 1  # only scored records count
    assert "50.0%" in cap.out


def test_skip_bad_with_nothing_left_is_an_error(tmp_path, capsys, no_scoring):
    src = _write(tmp_path / "in.jsonl", ["not json", "", "{}"])
    assert main(["eval-code", str(src), "--skip-bad"]) == 2
    err = capsys.readouterr().err
    assert f"{src}:1: invalid JSON" in err and f"{src}:3: missing" in err and "no record to score" in err


def test_utf8_bom_and_stdin(tmp_path, capsys, monkeypatch):
    src = tmp_path / "bom.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    assert main(["eval-code", str(src), "--no-progress", "--workers", "1"]) == 0
    assert _count(capsys.readouterr().out, "correct") == 1

    import io
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"oops\n")))
    assert main(["eval-code", "-"]) == 2
    assert "<stdin>:1: invalid JSON" in capsys.readouterr().err


def test_sandbox_unavailable_exits_1(tmp_path, capsys, monkeypatch):
    from microcoder_ext.reward import EvalResult

    class DeadEngine:  # what Engine looks like when no sandbox worker can start
        backend, size, fatal = "local", 1, "cannot start a sandbox worker: test"

        def __init__(self, *a, **k):
            pass

        def warmup(self):
            return {}

        def evaluate(self, code, suite, **kw):
            return EvalResult("sandbox_error", len(suite.tests), 0, f"sandbox unavailable: {self.fatal}")

        def close(self):
            pass

    monkeypatch.setattr(reward, "Engine", DeadEngine)
    src = _write(tmp_path / "in.jsonl", [json.dumps(GOOD)])
    assert main(["eval-code", str(src), "--no-progress"]) == 1
    cap = capsys.readouterr()
    assert "sandbox unavailable: cannot start a sandbox worker" in cap.err
    assert _count(cap.out, "sandbox_error") == 1


def test_unwritable_output_fails_before_scoring(tmp_path, capsys, no_scoring):
    src = _write(tmp_path / "in.jsonl", [json.dumps(GOOD)])
    assert main(["eval-code", str(src), "-o", str(tmp_path / "no" / "such" / "dir.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("microcoder eval-code: cannot write ") and "No such file or directory" in err


def test_help_documents_skip_bad_and_exit_status():
    sub = build_parser()._subparsers._group_actions[0].choices["eval-code"]
    text = sub.format_help()
    assert "--skip-bad" in text and "exit status" in text
    for code in ("0 ", "1 ", "2 "):
        assert f"\n  {code}" in text


def test_eval_code_subcommand_via_console(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + "\n")
    p = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "eval-code", str(src)], capture_output=True,
                       text=True, timeout=hang_guard(120))
    assert p.returncode == 0, p.stderr
    assert "correct" in p.stdout and "100.0%" in p.stdout
