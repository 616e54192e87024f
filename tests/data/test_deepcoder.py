"""DeepCoder / rLLM rows (agentica-org/DeepCoder-Preview-Dataset shape: ``problem``, ``tests`` as a JSON string in
the encodings rLLM's ``code_reward.py`` judges, optional ``starter_code`` / ``metadata``) through
``microcoder data prepare``'s loader into verl rows, and one solution per row scored by the reward."""

import json

from microcoder_ext.data.sources import Drop, iter_source
from microcoder_ext.reward import compute_score

ADD = "def add(a, b):\n    return a + b"
ADD_CLASS = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b"
ECHO_SUM = "print(sum(map(int, input().split())))"

ROWS = [
    {  # LiveCodeBench-derived (lcbv5): per-test metadata.func_name, JSON-lines inputs, JSON outputs
        "problem": "Return the sum of a and b.", "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n",
        "tests": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional", "metadata": {"func_name": "add"}},
                             {"input": "-5\n5", "output": "0", "testtype": "functional", "metadata": {"func_name": "add"}}]),
        "metadata": json.dumps({"question_id": "lcb-add", "difficulty": "easy", "platform": "leetcode",
                                "contest_date": "2024-09-01T00:00:00"}),
        "solution": ADD_CLASS,
    },
    {  # stdin (codeforces / lcb stdin)
        "problem": "Read two integers and print their sum.",
        "tests": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin", "metadata": {"func_name": None}},
                             {"input": "10 20\n", "output": "30\n", "testtype": "stdin", "metadata": {"func_name": None}}]),
        "metadata": json.dumps({"question_id": "stdin-sum", "difficulty": "medium"}),
        "solution": ECHO_SUM,
    },
    {  # PrimeIntellect: per-test fn_name, native argument lists
        "problem": "Write add(a, b).",
        "tests": json.dumps([{"type": "function_call", "fn_name": "add", "input": [2, 3], "output": [5]},
                             {"type": "function_call", "fn_name": "add", "input": [0, 0], "output": [0]}]),
        "id": "pi-add", "solution": ADD,
    },
    {"problem": "No tests here.", "tests": "", "id": "empty"},
    {"problem": "Broken tests.", "tests": "[{not json", "id": "broken"},
]


def test_deepcoder_rows_convert_and_score(tmp_path):
    path = tmp_path / "deepcoder.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    items = list(iter_source(str(path), "deepcoder"))
    drops = {d.id: d.reason for d in items if isinstance(d, Drop)}
    assert set(drops) == {"empty", "broken"}, drops
    problems = {p.id: p for p in items if not isinstance(p, Drop)}
    assert set(problems) == {"deepcoder/lcb-add", "deepcoder/stdin-sum", "deepcoder/pi-add"}
    lcb = problems["deepcoder/lcb-add"]
    assert (lcb.difficulty, lcb.platform, lcb.date) == ("easy", "leetcode", "2024-09-01")
    assert lcb.starter_code.startswith("class Solution")
    for i, (pid, solution) in enumerate((("deepcoder/lcb-add", ADD_CLASS), ("deepcoder/stdin-sum", ECHO_SUM),
                                         ("deepcoder/pi-add", ADD))):
        row = problems[pid].to_verl_row(i)
        info = {k: v for k, v in row["extra_info"].items() if v is not None}
        good = compute_score(row["data_source"], f"```python\n{solution}\n```", row["reward_model"]["ground_truth"], info)
        assert good["score"] == 1.0, (pid, good)
        wrong = solution.replace("a + b", "a - b").replace("sum(", "max(")
        bad = compute_score(row["data_source"], f"```python\n{wrong}\n```", row["reward_model"]["ground_truth"], info)
        assert bad["score"] == 0.0, (pid, bad)


def test_deepcoder_shape_is_sniffed(tmp_path):
    path = tmp_path / "dc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:3]))
    items = list(iter_source(str(path)))
    assert all(not isinstance(p, Drop) and p.source == "deepcoder" for p in items), items
