"""The five-dimension difficulty (`microcoder_ext.data.difficulty`), its LLM judge (`llm_judge`, against a stand-in
OpenAI-compatible server on 127.0.0.1) and `microcoder data difficulty` (`difficulty_rows`, the CLI), on hand-written
solutions and on the real problems of bench/data (LeetCodeDataset, CodeContests + our reference solutions)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from microcoder_ext.cli import main
from microcoder_ext.data import difficulty as D
from microcoder_ext.data import difficulty_rows as R
from microcoder_ext.data import llm_judge as J
from microcoder_ext.data.problem import Problem
from host_load import hang_guard

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("MICROCODER_DATA_DIR") or ROOT / "bench" / "data")


# ----------------------------------------------------------------------------------------------- real data
def _leetcode_rows() -> list[dict]:
    with gzip.open(DATA / "leetcode-v0.2.0-train.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def _lc_problem(d: dict) -> Problem:
    return Problem(id=f"leetcode/{d['task_id']}", source="leetcodedataset", statement=d["query"], tests={},
                   difficulty=d["meta"]["difficulty"].lower(), solutions=[d["completion"]])


def _code_contests() -> list[Problem]:
    refs = {}
    with open(DATA / "code_contests_refs.jsonl") as f:
        for line in f:
            r = json.loads(line)
            refs[str(r["id"])] = r["solution"]
    out = []
    with gzip.open(DATA / "code_contests-20-stdin.jsonl.gz", "rt") as f:
        for line in f:
            d = json.loads(line)
            key = str(d["id"])
            tests = json.loads(d["test"])[:2]
            out.append(Problem(id=f"code_contests/{d['id']}", source="code_contests", statement=d["content"],
                               tests={"inputs": [t["input"]["stdin"] for t in tests],
                                      "outputs": [t["output"]["stdout"] for t in tests]},
                               difficulty=json.loads(d["labels"])["difficulty"].lower(),
                               solutions=[refs[key]] if key in refs else []))
    return out


@pytest.fixture(scope="module")
def leetcode():
    return _leetcode_rows()


@pytest.fixture(scope="module")
def contests():
    return {p.id.split("/")[1]: p for p in _code_contests()}


# ----------------------------------------------------------------------------------------------- static dimensions
FLAT = """
def f(nums):
    s = 0
    for x in nums:
        s += x
    return s
"""
TRIPLE = """
def f(nums):
    n = len(nums)
    best = 0
    for i in range(n):
        for j in range(i + 1, n):
            for k in range(j + 1, n):
                if nums[i] + nums[j] + nums[k] == 0 and i < j:
                    best += 1
    return best
"""
RECURSIVE = """
class Solution:
    def count(self, n: int) -> int:
        @cache
        def dfs(i):
            if i <= 1:
                return 1
            return dfs(i - 1) + dfs(i - 2)
        return dfs(n)
"""


def test_mccabe_known_numbers():
    assert D.mccabe("def f(x):\n    return x + 1\n") == {"cc": 1, "module_cc": 1, "functions": 1, "max_cc": 1,
                                                         "mean_cc": 1.0}
    # if +1, elif +1, for +1, `and` +1 -> 5; g: 1; whole solution 1 + 4 + 0 = 5
    code = ("def f(x, ys):\n    if x > 0:\n        return 1\n    elif x < 0 and ys:\n        return -1\n"
            "    for y in ys:\n        x += y\n    return x\n\ndef g():\n    return 0\n")
    m = D.mccabe(code)
    assert (m["max_cc"], m["cc"], m["functions"], m["mean_cc"]) == (5, 5, 2, 3.0)
    # a stdin script: the module body counts (for +1, if +1), plus the method and its closure: 1 + 2 + 1 + 1
    script = ("n = int(input())\nfor i in range(n):\n    if i % 2:\n        print(i)\n"
              "class S:\n    def m(self, a):\n        def h(b):\n            return b if b else 0\n"
              "        return a or h(a)\n")
    m = D.mccabe(script)
    assert (m["module_cc"], m["functions"], m["cc"]) == (3, 2, 5)
    assert D.structural_scale(1) == 0.0 and D.structural_scale(500) == 1.0
    assert D.structural_scale(5) < D.structural_scale(10) < D.structural_scale(20)


def test_loop_depth_recursion_techniques():
    t = D._parse
    assert D.loop_depth(t(FLAT)) == 1 and D.loop_depth(t(TRIPLE)) == 3
    assert D.loop_depth(t("x = 1\n")) == 0
    assert D.loop_depth(t("for i in a:\n    r = [x * y for x in b for y in c]\n")) == 3  # comprehension generators
    assert D.loop_depth(t("for i in a:\n    def g():\n        for j in b:\n            pass\n")) == 1  # def restarts
    assert D.loop_depth(t("while q:\n    for v in adj[q.pop()]:\n        q.append(v)\n")) == 2
    assert D.recursive_functions(t(RECURSIVE)) == ["dfs"]
    assert D.recursive_functions(t("class S:\n    def go(self, n):\n        return self.go(n - 1) if n else 0\n")) \
        == ["go"]
    assert D.recursive_functions(t(TRIPLE)) == []
    assert D.techniques(t(RECURSIVE)) == ["memoisation"]
    heap = "import heapq\nfrom bisect import bisect_left\nfrom collections import deque\nheapq.heappush(h, 1)\n"
    assert D.techniques(t(heap)) == ["heap", "bisection", "deque"]
    assert D.techniques(t(FLAT)) == []


def test_code_dimensions_order_hand_written():
    flat, triple, rec = (D.code_metrics(c) for c in (FLAT, TRIPLE, RECURSIVE))
    assert triple["algorithmic_code_score"] > flat["algorithmic_code_score"]  # depth 3 vs 1
    assert flat["algorithmic_code_score"] == 0.5 * 0.25
    assert triple["algorithmic_code_score"] == 0.5 * 0.75
    assert rec["algorithmic_code_score"] == 0.25 + 0.25 / 3  # no loop, recursion, memoisation
    assert triple["structural_score"] > flat["structural_score"]
    assert triple["halstead_score"] > flat["halstead_score"]
    assert D.code_metrics("def f(:\n") is None  # does not parse -> no metrics, no crash
    assert D.code_metrics("print 'python 2'\n") is None


# ----------------------------------------------------------------------------------------------- constraints
def test_constraint_parser_leetcode_style():
    st = ("Constraints:\n\n2 <= nums.length <= 10^4\n-10^9 <= nums[i] <= 10^9\n-10^9 <= target <= 10^9\n"
          "1 <= s.length <= 2 * 10^5\n1 <= k <= 1e5\nsum(nums) <= 100,000")
    cs = D.parse_constraints(st)
    by = {c["text"].split("<")[0].strip(): c for c in cs}
    assert by["nums.length"]["bound"] == 1e4 and by["nums.length"]["kind"] == "size"
    assert by["nums[i]"]["kind"] == "value" and by["nums[i]"]["bound"] == 1e9
    assert by["target"]["kind"] == "other"
    assert by["s.length"]["bound"] == 2e5 and by["k"]["bound"] == 1e5
    assert by["sum(nums)"]["bound"] == 1e5 and by["sum(nums)"]["kind"] == "size"
    assert D.size_bound(cs) == (2e5, "size")
    assert D.parse_constraints("answer modulo 10^9 + 7, error at most 10^{-6}") == []
    assert D.size_bound(D.parse_constraints("1 \\le a, b \\le 10^{18}")) == (1e18, "other")  # a, b: plain names
    assert D.size_bound([]) == (None, None)
    latex = "$\\left(1 \\leq n \\lt 10^{5}\\right)$, $m \\leqslant 300$"
    assert D.size_bound(D.parse_constraints(latex)) == (1e5, "size")


def test_constraint_parser_leetcode_dataset(leetcode):
    rows = {d["task_id"]: d for d in leetcode}
    # LeetCodeDataset v0.2.0 statements mostly lack their Constraints section: two-sum states no bound
    assert D.parse_constraints(rows["two-sum"]["query"]) == []
    cs = D.parse_constraints(rows["minimum-operations-to-convert-number"]["query"])
    assert D.size_bound(cs) == (1000.0, "other") and any(c["names"] == ["x"] for c in cs)
    cs = D.parse_constraints(rows["validate-ip-address"]["query"])
    assert {(c["text"], c["bound"]) for c in cs} >= {("xi <= 255", 255.0), ("xi.length <= 4", 4.0)}


def test_constraint_parser_code_contests(contests):
    def n_of(i):
        return D.size_bound(D.parse_constraints(contests[i].statement))

    assert n_of("3") == (100, "size")  # 1 ≤ n ≤ 100
    assert n_of("10") == (2e5, "size")  # 1 ≤ n ≤ 2 ⋅ 10^5 (and a value bound a_i ≤ 2 ⋅ 10^5)
    assert n_of("4") == (150_000, "size")  # 1 ≤ n ≤ 150 000; a_i, b_i ≤ 2 ⋅ 10^9 is a value
    assert n_of("8") == (2e5, "size")  # 1 ≤ n ⋅ m ≤ 2 ⋅ 10^5
    assert n_of("1") == (1e5, "size")  # 1 ≤ n, m, p ≤ 10 ^ 5
    assert n_of("6") == (1e5, "size")  # 2 ≤ n ≤ 10^{5}
    assert n_of("13") == (200_000, "size")  # 2 ≤ k ≤ n ≤ 200 000
    assert n_of("19") == (500, "size")  # 1 ≤ q ≤ 500; l_i ≤ r_i ≤ 10^18 are values
    cs = D.parse_constraints(contests["17"].statement)  # "0 ≤ n ≤ 109": the exponent was lost in extraction
    assert D.size_bound(cs) == (1e9, "size") and all(c["repaired"] for c in cs)
    kinds = {c["names"][0]: c["kind"] for c in D.parse_constraints(contests["4"].statement)}
    assert kinds["a_i"] == "value" and kinds["n"] == "size"


def test_complexity_classes():
    assert D.complexity_class(20) == ("exponential", 0.10)
    assert D.complexity_class(21) == ("n^3", 0.35) and D.complexity_class(500) == ("n^3", 0.35)
    assert D.complexity_class(5000) == ("n^2", 0.55)
    assert D.complexity_class(2e5) == ("n log n", 0.80) and D.complexity_class(1e6) == ("n log n", 0.80)
    assert D.complexity_class(1e9) == ("n or sublinear", 1.0)
    scores = [s for _, _, s in D.COMPLEXITY_CLASSES]
    assert scores == sorted(scores)


# ----------------------------------------------------------------------------------------------- score_problem
DIMS = ("structural", "halstead", "algorithmic", "cognitive", "domain")


def test_score_problem_real_code_contests(contests):
    for p in contests.values():
        s = D.score_problem(p)
        json.dumps(s)  # serialisable as stored
        assert s["judge"] is None and s["cognitive"] is None and s["domain"] is None
        for d in ("structural", "halstead", "algorithmic", "score"):
            if s[d] is not None:
                assert 0.0 <= s[d] <= 1.0, (p.id, d, s[d])
        avail = [s[d] for d in DIMS if s[d] is not None]
        assert s["score"] == pytest.approx(sum(avail) / len(avail), abs=1e-5)  # renormalised over 3 dims
    no_ref = contests["11"]  # the interactive problem: no reference solution
    s = D.score_problem(no_ref)
    assert s["structural"] is None and s["halstead"] is None and s["raw"]["code"]["solutions"] == 0
    assert s["algorithmic"] == 0.55 and s["score"] == 0.55  # statement only: n ≤ 1000 -> O(n^2)
    s = D.score_problem(contests["8"])
    assert s["raw"]["constraints"]["required_class"] == "n log n" and s["raw"]["code"]["cc"][0] > 1
    assert D.score_problem(Problem(id="x", source="t", statement="Print hello.", tests={}))["score"] is None


def test_score_problem_weights_and_median():
    p = Problem(id="x", source="t", statement="1 <= n <= 10^5", tests={}, solutions=[FLAT, TRIPLE, RECURSIVE, "("])
    s = D.score_problem(p)
    assert s["raw"]["code"]["solutions"] == 4 and s["raw"]["code"]["unparsable"] == 1
    per = [D.code_metrics(c)["structural_score"] for c in (FLAT, TRIPLE, RECURSIVE)]
    assert s["structural"] == pytest.approx(sorted(per)[1], abs=1e-6)
    only = D.score_problem(p, weights={"structural": 1, "halstead": 0, "algorithmic": 0})
    assert only["score"] == only["structural"] and only["weights"]["halstead"] == 0


def test_hard_scores_higher_than_easy_on_leetcode(leetcode):
    by = {"Easy": [], "Hard": []}
    for d in leetcode:
        level = d["meta"]["difficulty"]
        if level in by and len(by[level]) < 100:
            by[level].append(D.score_problem(_lc_problem(d)))
    mean = {k: {dim: sum(s[dim] for s in v) / len(v) for dim in ("structural", "halstead", "algorithmic", "score")}
            for k, v in by.items()}
    for dim in ("structural", "halstead", "algorithmic", "score"):
        assert mean["Hard"][dim] > mean["Easy"][dim], (dim, mean)
    assert mean["Hard"]["score"] - mean["Easy"]["score"] > 0.1, mean  # measured: about 0.17 apart


# ----------------------------------------------------------------------------------------------- judge server
class StandIn:
    """An OpenAI-compatible chat-completions stand-in on 127.0.0.1: answers from a script, records requests."""

    def __init__(self):
        self.script: list[tuple[int, str]] = []  # (HTTP status, message content); the last one repeats
        self.requests: list[dict] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                status, content = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                if status == 200:
                    payload = {"id": "x", "object": "chat.completion", "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": content}}]}
                else:
                    payload = {"error": {"message": content}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def server():
    s = StandIn()
    yield s
    s.server.shutdown()
    s.server.server_close()


GOOD = '{"cognitive_level": 5, "domain_knowledge": 2, "reason": "needs a segment tree"}'


def test_judge_request_retry_and_score(server, monkeypatch):
    monkeypatch.setenv(J.API_KEY_ENV, "sk-test")
    server.script = [(200, "I think it is hard."), (200, f"```json\n{GOOD}\n```")]
    judge = J.LLMJudge(server.url, "judge-7b", backoff=0)
    p = Problem(id="x", source="t", statement="1 <= n <= 2 * 10^5. Count pairs.", tests={}, solutions=[TRIPLE])
    r = judge.judge(p)
    assert r == {"ok": True, "cognitive_level": 5, "domain_knowledge": 2, "reason": "needs a segment tree",
                 "attempts": 2}
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    body = req["body"]
    assert body["model"] == "judge-7b" and body["temperature"] == 0
    assert body["messages"] == J.build_messages(p.statement, TRIPLE)
    assert body["messages"][0]["content"] == J.JUDGE_SYSTEM_PROMPT
    user = body["messages"][1]["content"]
    assert "Bloom's taxonomy" in user and '"cognitive_level": <1-6>' in user and p.statement in user
    assert TRIPLE.strip() in user
    assert server.requests[1]["body"] == body  # the retry sends the same request

    server.script = [(200, GOOD)]
    s = D.score_problem(p, judge)
    assert s["judge"] == "judge-7b" and s["cognitive"] == 0.8 and s["domain"] == pytest.approx(2 / 3, abs=1e-6)
    assert s["raw"]["judge"]["ok"] and s["raw"]["judge"]["reason"] == "needs a segment tree"
    avail = [s[d] for d in DIMS]
    assert s["score"] == pytest.approx(sum(avail) / 5, abs=1e-5)


def test_judge_failures_are_recorded(server, monkeypatch):
    monkeypatch.delenv(J.API_KEY_ENV, raising=False)
    p = Problem(id="x", source="t", statement="Sum two numbers.", tests={}, solutions=[FLAT])
    server.script = [(500, "overloaded")]
    judge = J.LLMJudge(server.url, "m", retries=2, backoff=0)
    r = judge.judge(p)
    assert r["ok"] is False and r["attempts"] == 3 and "HTTP 500" in r["error"] and len(server.requests) == 3
    assert server.requests[0]["auth"] is None
    s = D.score_problem(p, judge)  # a failed judge: the two dimensions are None, the score covers the other three
    assert s["cognitive"] is None and s["domain"] is None and s["raw"]["judge"]["ok"] is False
    assert s["judge"] == "m" and s["score"] is not None
    server.requests.clear()
    server.script = [(404, "model not found")]
    r = judge.judge(p)
    assert r["ok"] is False and r["attempts"] == 1 and "HTTP 404" in r["error"]  # not retried
    server.script = [(200, '{"cognitive_level": 9, "domain_knowledge": 1}')]
    r = judge.judge(p)
    assert r["ok"] is False and "out of range" in r["error"] and r["attempts"] == 3
    dead = J.LLMJudge("http://127.0.0.1:9/v1", "m", retries=1, backoff=0, timeout=2)  # nothing listens
    r = dead.judge(p)
    assert r["ok"] is False and r["attempts"] == 2


def test_parse_answer():
    assert J.parse_answer('Sure! {"cognitive_level": 3, "domain_knowledge": 0, "reason": "r"} done')[
        "cognitive_level"] == 3
    assert J.parse_answer('{"cognitive_level": 2.0, "domain_knowledge": 1}')["domain_knowledge"] == 1
    for bad in ("", "no json", '{"cognitive_level": 0, "domain_knowledge": 1}', '{"cognitive_level": "high", '
                '"domain_knowledge": 1}', '{"cognitive_level": 3}', '{"cognitive_level": 2.5, "domain_knowledge": 1}'):
        with pytest.raises(J.JudgeAnswerError):
            J.parse_answer(bad)


# ----------------------------------------------------------------------------------------------- CLI
def _cli(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "data", "difficulty", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=hang_guard(120))


def _problems(contests, n=5) -> list[Problem]:
    return [contests[i] for i in ("3", "8", "11", "13", "17")][:n]


def _write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_cli_verl_parquet_round_trip(tmp_path, contests):
    import pyarrow as pa

    probs = _problems(contests)
    rows = []
    for i, p in enumerate(probs):
        q = Problem(**{**p.to_dict(), "extra": {"solutions": p.solutions}})  # prepare may keep the solutions
        rows.append(q.to_verl_row(i))
    src, out = tmp_path / "train.parquet", tmp_path / "scored.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    r = _cli(src, "-o", out, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "difficulty: 5 rows" in r.stdout and "score histogram" in r.stdout and "structural" in r.stdout
    back = pq.read_table(out).to_pylist()
    assert [b["extra_info"]["id"] for b in back] == [p.id for p in probs]
    for b, p in zip(back, probs):
        got = b["extra_info"]["difficulty_scores"]
        want = D.score_problem(Problem(id=p.id, source=p.source, statement=p.prompt_text(), tests={},
                                       solutions=p.solutions))
        assert got["score"] == pytest.approx(want["score"]) and got["structural"] == want["structural"]
        orig = rows[probs.index(p)]
        assert b["prompt"] == orig["prompt"] and b["reward_model"] == orig["reward_model"]
    # the output is valid input: scoring it again gives the same scores
    again = tmp_path / "again.parquet"
    assert main(["data", "difficulty", str(out), "-o", str(again), "--no-progress"]) == 0
    assert [a["extra_info"]["difficulty_scores"]["score"] for a in pq.read_table(again).to_pylist()] == \
        [b["extra_info"]["difficulty_scores"]["score"] for b in back]


def test_cli_jsonl_kinds_round_trip(tmp_path, contests, capsys):
    probs = _problems(contests, 3)
    src, out = tmp_path / "problems.jsonl", tmp_path / "scored.jsonl.gz"
    _write_jsonl(src, [p.to_dict() for p in probs])
    assert main(["data", "difficulty", str(src), "-o", str(out), "--no-progress",
                 "--summary-json", str(tmp_path / "s.json")]) == 0
    with gzip.open(out, "rt") as f:
        back = [json.loads(line) for line in f]
    for b, p in zip(back, probs):
        assert b["extra"]["difficulty_scores"]["score"] == D.score_problem(p)["score"]
        assert Problem(**b).solutions == p.solutions  # still a Problem dict
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["rows"] == 3 and summary["kind"] == "problem" and summary["with_solutions"] == 2  # 11 has none
    assert sum(summary["histogram"].values()) == 3 and summary["no_score"] == 0

    src2, out2 = tmp_path / "openrlhf.jsonl", tmp_path / "openrlhf-scored.jsonl"
    _write_jsonl(src2, [p.to_openrlhf_row() for p in probs])
    assert main(["data", "difficulty", str(src2), "-o", str(out2), "--no-progress"]) == 0
    back2 = [json.loads(line) for line in open(out2)]
    assert all(b["meta_difficulty_scores"]["algorithmic"] is not None for b in back2)
    assert all(b["meta_difficulty_scores"]["structural"] is None for b in back2)  # no solutions in these rows
    assert [b["label"] for b in back2] == [p.to_openrlhf_row()["label"] for p in probs]
    assert [R.stored_scores(b) for b in back2] == [b["meta_difficulty_scores"] for b in back2]


def test_cli_judge_and_exit_codes(tmp_path, contests, server):
    probs = _problems(contests, 2)
    src = tmp_path / "p.jsonl"
    _write_jsonl(src, [p.to_dict() for p in probs])
    server.script = [(200, GOOD)]
    out = tmp_path / "judged.jsonl"
    r = _cli(src, "-o", out, "--judge-url", server.url, "--judge-model", "stand-in", "--judge-concurrency", "2",
             "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "judge: stand-in" in r.stdout
    for line in open(out):
        s = json.loads(line)["extra"]["difficulty_scores"]
        assert s["cognitive"] == 0.8 and s["judge"] == "stand-in"
    assert len(server.requests) == 2

    server.script = [(500, "down")]  # scores still written, the failure reported, exit 1
    r = _cli(src, "-o", out, "--judge-url", server.url, "--judge-model", "stand-in", "--judge-retries", "0")
    assert r.returncode == 1, r.stderr
    assert "judge failures: 2" in r.stdout and "HTTP 500" in r.stdout
    assert all(json.loads(line)["extra"]["difficulty_scores"]["cognitive"] is None for line in open(out))

    r = _cli(tmp_path / "missing.jsonl", "-o", tmp_path / "x.jsonl")
    assert r.returncode == 2 and "no such file" in r.stderr
    bad = tmp_path / "bad.jsonl"
    _write_jsonl(bad, [{"question": "?"}])
    assert main(["data", "difficulty", str(bad), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert main(["data", "difficulty", str(src), "-o", str(tmp_path / "x.csv")]) == 2
    assert main(["data", "difficulty", str(src), "-o", str(tmp_path / "x.jsonl"), "--judge-url", server.url]) == 2
    assert main(["data", "difficulty", str(src), "-o", str(tmp_path / "x.jsonl"), "--weights", "beauty=1"]) == 2
    mixed = tmp_path / "mixed.jsonl"
    _write_jsonl(mixed, [probs[0].to_dict(), probs[1].to_openrlhf_row()])
    assert main(["data", "difficulty", str(mixed), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()
