"""``microcoder eval`` end to end on real problems: six LeetCodeDataset problems (the shared copy in bench/data),
their reference ``completion`` as correct responses and mutants as wrong ones, scored by the training reward in
the sandbox. Three of them are tagged platform ``atcoder`` (synthetic: the table needs two platforms)."""

import gzip
import json
import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import microcoder_ext.reward as reward
from microcoder_ext.cli import main
from microcoder_ext.data.problem import Problem
from microcoder_ext.eval import report
from microcoder_ext.eval.generate import GenerationSettings, generate_vllm
from microcoder_ext.reward.leetcode import ground_truth_from_row

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "data",
                    "leetcode-v0.2.0-train.jsonl.gz")
#: task id -> (platform tag, difficulty as in the dataset); c = correct responses of the 4 in run 1
PICK = {"two-sum": ("atcoder", 4), "longest-substring-without-repeating-characters": ("atcoder", 2),
        "substring-with-concatenation-of-all-words": ("atcoder", 0), "palindrome-number": ("leetcode", 3),
        "zigzag-conversion": ("leetcode", 1), "longest-valid-parentheses": ("leetcode", 1)}
#: sandbox uids of these tests (below tests/reward's 60700.. range, above the default 60600 + cores)
UID_BASE = 60640 + 2 * (os.getpid() % 30)

EXPECTED_PASS1 = """\
platform       Easy     Medium      Hard        All
---------------------------------------------------
AtCoder   100.0 (1)   50.0 (1)   0.0 (1)   50.0 (3)
LeetCode   75.0 (1)   25.0 (1)  25.0 (1)   41.7 (3)
All        87.5 (2)   37.5 (2)  12.5 (2)   45.8 (6)"""
EXPECTED_PASS4 = """\
platform       Easy     Medium      Hard        All
---------------------------------------------------
AtCoder   100.0 (1)  100.0 (1)   0.0 (1)   66.7 (3)
LeetCode  100.0 (1)  100.0 (1)  100.0 (1)  100.0 (3)
All       100.0 (2)  100.0 (2)  50.0 (2)   83.3 (6)"""


def fence(code: str) -> str:
    return f"Here is the solution.\n\n```python\n{code.rstrip()}\n```\n"


def mutants(fn: str) -> list[str]:
    """Wrong responses: a wrong value (None), a crash, a syntax error, no code block."""
    return [fence(f"class Solution:\n    def {fn}(self, *args, **kwargs):\n        return None\n"),
            fence(f"class Solution:\n    def {fn}(self, *args, **kwargs):\n        return [][0]\n"),
            fence(f"class Solution:\n    def {fn}(self, *args:\n        return 1\n"),
            "I would use a hash map here, but I ran out of time."]


def load_rows() -> list[dict]:
    rows = {}
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["task_id"] in PICK:
                rows[row["task_id"]] = row
    assert set(rows) == set(PICK)
    return [rows[t] for t in PICK]


def problems() -> list[Problem]:
    out = []
    for i, row in enumerate(load_rows()):
        out.append(Problem(id=f"leetcode/{row['task_id']}", source="leetcodedataset", statement=row["query"],
                           tests=ground_truth_from_row(row), title=row["task_id"],
                           difficulty=row["meta"]["difficulty"].lower(), platform=PICK[row["task_id"]][0],
                           date=f"2025-0{2 + i % 3}-1{i}", solutions=[row["completion"]]))
    return out


def responses_run1(probs) -> list[dict]:
    out = []
    for p in probs:
        c = PICK[p.title][1]
        wrong = mutants(p.fn_name)
        out.append({"id": p.id, "responses": [fence(p.solutions[0])] * c + wrong[:4 - c]})
    return out


@pytest.fixture(scope="module")
def env():
    """Hermetic sandbox settings for the CLI's engine (its own slot dir, temp root and uid range)."""
    dirs = [tempfile.mkdtemp(prefix="mc-eval-sbx-"), tempfile.mkdtemp(prefix="mc-eval-slots-")]
    os.chmod(dirs[0], 0o711)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"MICROCODER_REWARD_NODE_SLOTS": "2", "MICROCODER_REWARD_SLOTS_DIR": dirs[1],
                     "MICROCODER_SANDBOX_TMPDIR": dirs[0], "MICROCODER_SANDBOX_UID": str(UID_BASE),
                     "MICROCODER_REWARD_TIMEOUT": "2"}.items():
            mp.setenv(k, v)
        yield
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def files(env, tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    probs = problems()
    pq.write_table(pa.Table.from_pylist([p.to_verl_row(i, "test") for i, p in enumerate(probs)]),
                   d / "problems.parquet")
    with open(d / "problems.jsonl", "w") as f:
        f.writelines(json.dumps(p.to_openrlhf_row()) + "\n" for p in probs)
    with open(d / "run1.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in responses_run1(probs))
    with open(d / "run2.jsonl", "w") as f:  # one line per response, n = 2, all references
        f.writelines(json.dumps({"id": p.id, "response": fence(p.solutions[0])}) + "\n" for p in probs for _ in "ab")
    return d, probs


@pytest.fixture(scope="module")
def run1(files):
    d, _ = files
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(d / "run1.jsonl"),
                   "--k", "1,4", "--workers", "2", "--label", "run1", "--json", str(d / "run1.json"),
                   "--png", str(d / "run1.png"), "--compare", "paper:4b-4k"])
    return rc, out.getvalue(), err.getvalue(), d


def block(text: str, k: int) -> str:
    """The table block of pass@k (without its caption)."""
    lines = text.split(f"pass@{k} (%), cell")[1].split("\n\n")[0].splitlines()[1:]
    return "\n".join(lines)


def test_table_json_and_png(run1):
    rc, out, err, d = run1
    assert rc == 0, err
    assert "scoring" in err  # the tqdm bar
    # side by side with the paper: one row block per run
    p1 = block(out, 1).splitlines()
    assert p1[0].split() == ["run", "platform", "Easy", "Medium", "Hard", "All"]
    mine = [line[len(p1[2].split("AtCoder")[0]):] for line in p1[2:5]]
    assert p1[2].startswith("run1 ") and "paper 4b-4k MicroCoder-GRPO" in p1[6]
    assert [m.split() for m in mine] == [line.split() for line in EXPECTED_PASS1.splitlines()[2:]]
    assert p1[6].split()[-8:] == ["100.0", "(26)", "49.0", "(26)", "9.6", "(60)", "39.7", "(112)"]
    p4 = block(out, 4).splitlines()
    assert [line.split()[-8:] for line in p4[2:5]] == [line.split()[1:] for line in EXPECTED_PASS4.splitlines()[2:]]
    assert p4[6].split()[-4:] == ["-", "-", "-", "-"]  # the paper has no pass@4
    assert "verdicts of run1: correct 45.8% (11), wrong_answer 20.8% (5), runtime_error 16.7% (4), " \
           "compile_error 12.5% (3), no_answer 4.2% (1)" in out

    doc = json.loads((d / "run1.json").read_text())
    assert doc["format"] == "microcoder-eval/1" and doc["label"] == "run1"
    by_id = {p["id"]: p for p in doc["problems"]}
    assert {pid[len("leetcode/"):]: (p["n"], p["c"]) for pid, p in by_id.items()} == \
           {t: (4, c) for t, (_, c) in PICK.items()}
    assert by_id["leetcode/zigzag-conversion"]["verdicts"] == {"correct": 1, "wrong_answer": 1, "runtime_error": 1,
                                                               "compile_error": 1}
    assert by_id["leetcode/longest-substring-without-repeating-characters"]["pass_at"] == {"1": 0.5, "4": 1.0}
    cells = doc["table"]["cells"]
    assert cells["all"]["all"] == {"problems": 6, "samples": 24, "correct": 11,
                                   "pass_at": {"1": pytest.approx(100 * 11 / 24), "4": pytest.approx(500 / 6)}}
    assert cells["atcoder"]["easy"]["pass_at"]["1"] == 100.0 and doc["table"]["k"] == [1, 4]
    assert doc["verdict_rates"]["correct"] == {"count": 11, "rate": pytest.approx(11 / 24)}
    assert doc["verdict_rates"]["timeout"]["count"] == 0
    s = doc["settings"]
    assert s["n_samples"] == 4 and s["k"] == [1, 4] and s["responses"].endswith("run1.jsonl")
    assert s["scoring"]["timeout"] == 2.0 and s["scoring"]["sandbox_layers"]["seccomp"] == "active"
    assert [c["label"] for c in doc["compare"]] == ["paper 4b-4k MicroCoder-GRPO"]
    assert doc["compare"][0]["paper"]["model"] == "Qwen/Qwen3-4B-Instruct-2507"

    png = (d / "run1.png").read_bytes()
    assert b"run1, n=4, pass@1" in png  # the title, saved as PNG metadata
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_png_figure_bars(run1):
    *_, d = run1
    runs = [report.load_run(str(d / "run1.json"), (1,))] + report.paper_runs("paper:4b-4k:all")
    fig = report.plot(runs, 1, "t")
    assert [ax.get_title() for ax in fig.axes] == ["AtCoder", "LeetCode", "All"]
    for ax in fig.axes:
        assert len(ax.containers) == 5  # one bar series per run: ours + 4 paper rows
        assert all(len(c.patches) == 4 for c in ax.containers)  # Easy, Medium, Hard, All
        assert [t.get_text() for t in ax.get_xticklabels()] == ["Easy", "Medium", "Hard", "All"]
    heights = [p.get_height() for p in fig.axes[2].containers[0].patches]
    assert heights == pytest.approx([87.5, 37.5, 12.5, 100 * 11 / 24])
    assert fig.axes[1].containers[4].patches[2].get_height() == pytest.approx(3.7)  # paper 4B MicroCoder Lc Hard
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [r.label for r in runs]


def test_second_run_from_openrlhf_jsonl_and_compare_two_runs(run1, capsys):
    d = run1[3]
    rc = main(["eval", "--problems", str(d / "problems.jsonl"), "--responses", str(d / "run2.jsonl"),
               "--workers", "2", "--label", "run2", "--json", str(d / "run2.json"), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in block(out, 1).splitlines()[2:]}
    assert rows["All"] == ["100.0", "(2)", "100.0", "(2)", "100.0", "(2)", "100.0", "(6)"]
    doc2 = json.loads((d / "run2.json").read_text())
    assert {p["n"] for p in doc2["problems"]} == {2} and doc2["settings"]["n_samples"] == 2

    # compare only: two run JSONs and the paper, no scoring
    rc = main(["eval", "--compare", str(d / "run1.json"), str(d / "run2.json"), "paper:4b-4k",
               "--k", "1", "--png", str(d / "cmp.png"), "--json", str(d / "cmp.json")])
    assert rc == 0
    lines = block(capsys.readouterr().out, 1).splitlines()
    starts = [line.split("  ")[0] for line in lines[2:] if line[:1] not in (" ", "-")]
    assert starts == ["run1", "run2", "paper 4b-4k MicroCoder-GRPO"]
    cmp = json.loads((d / "cmp.json").read_text())
    assert [r["label"] for r in cmp["runs"]] == ["run1", "run2", "paper 4b-4k MicroCoder-GRPO"]
    assert cmp["runs"][1]["table"]["cells"]["all"]["all"]["pass_at"]["1"] == 100.0
    assert (d / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # k = 4 > n = 2 of run2: '-' for that run, not an error
    main(["eval", "--compare", str(d / "run1.json"), str(d / "run2.json"), "--k", "4"])
    lines = block(capsys.readouterr().out, 4).splitlines()
    assert lines[2].split()[-1] == "(3)" and lines[6].split()[-4:] == ["-", "-", "-", "-"]


@pytest.fixture
def no_scoring(monkeypatch):
    class Boom:
        def __init__(self, *a, **k):
            raise AssertionError("the CLI started scoring")
    monkeypatch.setattr(reward, "Engine", Boom)


def test_unknown_ids_and_missing_responses_exit_2(files, tmp_path, capsys, no_scoring):
    d, probs = files
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"id": i, "response": "x"}) + "\n"
                           for i in [p.id for p in probs] + ["lcb/abc999_a", "lcb/abc999_b"]))
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "responses for 2 unknown problem ids: lcb/abc999_a, lcb/abc999_b (not in the 6 problems)" in err
    part = tmp_path / "part.jsonl"
    part.write_text(json.dumps({"id": probs[0].id, "responses": ["x"]}) + "\n")
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(part)]) == 2
    assert "no response for 5 of 6 problems: leetcode/longest-substring" in capsys.readouterr().err
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(d / "run2.jsonl"),
                 "--k", "4"]) == 2
    assert "--k 4 exceeds the number of responses" in capsys.readouterr().err
    for argv, msg in [(["--problems", str(tmp_path / "nope.parquet"), "--responses", str(part)], "does not exist"),
                      (["--problems", str(d / "problems.parquet")], "exactly one of --responses"),
                      ([], "nothing to do"), (["--compare", "paper:5b-4k"], "unknown setting"),
                      (["--compare", str(part)], "not a run written by microcoder eval"),
                      (["--problems", str(d / "problems.parquet"), "--responses", str(part), "--k", "0"], ">= 1")]:
        assert main(["eval", *argv]) == 2, argv
        assert msg in capsys.readouterr().err, argv


def test_date_window_on_prepared_file(files, tmp_path, capsys, no_scoring):
    d, probs = files
    # dates 2025-02-10, 03-11, 04-12, 02-13, 03-14, 04-15; windows are half-open [start, end) as in data.lcb
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(d / "run2.jsonl"),
                 "--start-date", "2025-04-01", "--end-date", "2025-04-15"]) == 2
    err = capsys.readouterr().err  # 04-12 kept, 04-15 not: the other five ids are unknown in the window
    assert "responses for 5 unknown problem ids" in err and "leetcode/longest-valid-parentheses" in err
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(d / "run2.jsonl"),
                 "--release", "v5"]) == 2
    assert "no problem dated in [2024-10-01, 2025-02-01)" in capsys.readouterr().err
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(d / "run2.jsonl"),
                 "--release", "v99"]) == 2
    assert "unknown LiveCodeBench release 'v99'" in capsys.readouterr().err


def test_lcb_file_release_v6(env, tmp_path, capsys):
    """--lcb with --release v6: LiveCodeBench rows (AtCoder stdin, LeetCode functional with private tests
    in LCB's base64/zlib/pickle encoding) read by data.lcb.read_lcb, the one dated before v6 left out."""
    from microcoder_ext.data import lcb

    def row(qid, platform, difficulty, date, tests, meta):
        return {"question_title": qid, "question_content": f"Problem {qid}.", "platform": platform,
                "question_id": qid, "contest_id": "c", "contest_date": date, "starter_code": "",
                "difficulty": difficulty, "public_test_cases": json.dumps(tests[:1]),
                "private_test_cases": lcb.encode_private_tests(tests[1:]), "metadata": json.dumps(meta)}

    stdin = [{"input": f"{a} {b}\n", "output": f"{a * b}\n", "testtype": "stdin"} for a, b in [(2, 3), (10, 10), (0, 7)]]
    func = [{"input": f"{json.dumps(x)}\n{k}", "output": json.dumps([v + k for v in x]), "testtype": "functional"}
            for x, k in [([1, 2], 3), ([], 1), ([-5, 10], -1)]]
    rows = [row("abc400_a", "atcoder", "easy", "2025-04-05T12:00:00", stdin, {}),
            row("3500", "leetcode", "medium", "2025-03-09T02:30:00", func, {"func_name": "addPairs"}),
            row("abc390_a", "atcoder", "easy", "2025-01-25T12:00:00", stdin, {})]
    src = tmp_path / "lcb.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mult = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
    add = ("```python\nclass Solution:\n    def addPairs(self, nums, k):\n        return [v + k for v in nums]\n```")
    resp = tmp_path / "resp.jsonl"
    resp.write_text(json.dumps({"id": "lcb/abc400_a", "responses": [mult, "```python\nprint(0)\n```"]}) + "\n"
                    + json.dumps({"id": "lcb/3500", "responses": [add, add]}) + "\n")
    out_json = tmp_path / "lcb.json"
    assert main(["eval", "--lcb", str(src), "--release", "v6", "--responses", str(resp), "--k", "1,2",
                 "--workers", "2", "--no-progress", "--json", str(out_json)]) == 0
    rows_out = {line.split()[0]: line.split()[1:] for line in block(capsys.readouterr().out, 1).splitlines()[2:]}
    assert rows_out["AtCoder"] == ["50.0", "(1)", "-", "-", "50.0", "(1)"]
    assert rows_out["LeetCode"] == ["-", "100.0", "(1)", "-", "100.0", "(1)"]
    assert rows_out["All"] == ["50.0", "(1)", "100.0", "(1)", "-", "75.0", "(2)"]
    doc = json.loads(out_json.read_text())
    assert doc["settings"]["problems"] == {"source": str(src), "start_date": "2025-02-01",
                                           "end_date": "2025-05-01", "release": "v6"}
    assert doc["table"]["cells"]["all"]["all"]["pass_at"] == {"1": 75.0, "2": 100.0}


def test_model_without_vllm_exits_2(files, capsys, no_scoring):
    from microcoder_ext.sampling.samplers import vllm_usable

    assert vllm_usable()[0] is False  # the test venv has vLLM's CPU build, and no CUDA
    d, _ = files
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--model", "Qwen/Qwen3-4B-Instruct-2507"]) == 2
    err = capsys.readouterr().err
    assert "--model needs vLLM with CUDA" in err and "--responses FILE.jsonl" in err


def test_sandbox_unavailable_exits_1(files, monkeypatch, capsys):
    d, _ = files

    class Dead:
        size = 1
        fatal = None

        def __init__(self, *a, **k):
            self.config = reward.EngineConfig()

        def warmup(self):
            self.fatal = "cannot start a sandbox worker: test"
            return {}

        def close(self):
            pass
    monkeypatch.setattr(reward, "Engine", Dead)
    assert main(["eval", "--problems", str(d / "problems.parquet"), "--responses", str(d / "run2.jsonl")]) == 1
    assert "scoring failed: sandbox unavailable: cannot start a sandbox worker: test" in capsys.readouterr().err


def test_vllm_generation_path_with_stand_ins():
    """generate_vllm as vLLM is called: chat template, token ids in, n texts out. Stand-ins for ``LLM`` and
    ``SamplingParams``: ``microcoder eval --model`` generates only where CUDA is (``vllm_usable``), never in these CPU
    venvs, so only the glue is checked here (listed in docs/tests.md, "What is ours in a test run")."""
    calls = {}

    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "<|user|>" + messages[0]["content"] + "<|assistant|>"

        def __call__(self, text, add_special_tokens=True):
            calls.setdefault("special", []).append(add_special_tokens)
            return {"input_ids": [ord(ch) for ch in text]}

    class Out:
        def __init__(self, text, reason):
            self.text, self.finish_reason, self.token_ids = text, reason, [1] * len(text)

    class Req:
        def __init__(self, n, ids):
            self.outputs = [Out(f"r{i}-{len(ids)}", "length" if i == 0 else "stop") for i in range(n)]

    class LLM:
        def get_tokenizer(self):
            return Tok()

        def generate(self, prompts, params, use_tqdm):
            calls["params"] = params
            return [Req(params["n"], p["prompt_token_ids"]) for p in prompts]

    s = GenerationSettings("m", n=3, temperature=1.2, top_p=0.9, max_tokens=64, seed=7)
    out = generate_vllm([("a", [{"role": "user", "content": "hi"}]), ("b", [{"role": "user", "content": "hey"}])],
                        s, llm=LLM(), sampling_params=dict)
    assert calls["params"] == {"n": 3, "temperature": 1.2, "top_p": 0.9, "max_tokens": 64, "seed": 7}
    assert calls["special"] == [False, False]
    assert out == {"a": ["r0-23", "r1-23", "r2-23"], "b": ["r0-24", "r1-24", "r2-24"]}  # len("<|user|>hi<|assistant|>")
    assert s.stats["truncated"] == 2 and s.stats["responses"] == 6


def test_help():
    with pytest.raises(SystemExit) as e:
        main(["eval", "--help"])
    assert e.value.code == 0
