"""No CPU pooled across the tests of one sample, and no state that tells a program which test it is on, where the
format's own judge gives each test a fresh process: stdin programs always, call-based programs with
``call_process="test"``. Call-based programs by default run as LeetCode's judge runs them: every test of a sample in
one process, module state kept, a fresh ``Solution()`` per test, the per-test CPU budget per call; they see their
own earlier calls, as on LeetCode, and nothing else. Reward-hacking programs against the real engine (``hostile``: a
program verdict, nothing left behind, the host unharmed); the CPU-pooling program against an engine with a 1 s CPU
budget and a lenient wall clock (the default 5 s budget would make it a minute-long test; only the CPU budget can
stop it)."""

from __future__ import annotations

import json
import math

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import EngineConfig, RewardSetupError

# A "table" that takes WORK CPU seconds to build (a loop that a program runs in slices). Too slow for one test's
# budget, so the large test times out when run alone; a program that keeps the partial table between tests (in
# sys.modules, a file, a module attribute) and spends each small test's spare budget on it finishes it by the
# large test when the tests share state.
POOL = """
import sys, time, os, json
t0 = time.process_time()
state = sys.modules.setdefault('_mc_table', {{'done': 0.0}})
if os.path.exists('table.json'):
    state = json.load(open('table.json'))
def build(until):
    while state['done'] < {work} and time.process_time() - t0 < until:
        t = time.process_time()
        while time.process_time() - t < 0.05:
            pass
        state['done'] += 0.05
    json.dump(state, open('table.json', 'w'))
n = int(input())
if n == 0:
    build({slice_s})
    print('small')
else:
    build(1e9)
    print('large')
"""


def pooled_program(budget: float, work_tests: int) -> str:
    """The pooling program for a per-test CPU budget: the table costs ~``work_tests`` budgets; each small test
    spends 80 % of its budget on it."""
    return POOL.format(work=round(budget * work_tests, 2), slice_s=round(0.8 * budget, 2))


def stdin_gt(inputs, outputs):
    return json.dumps({"inputs": inputs, "outputs": outputs})


@pytest.fixture(scope="module")
def budget() -> float:
    return EngineConfig().timeout  # the default per-test CPU budget


@pytest.fixture(scope="module")
def one_second(engine_factory):
    return engine_factory(timeout=1.0, wall_timeout=60.0)


def test_pooled_cpu_times_out_as_the_large_test_does_alone(hostile, one_second):
    code = pooled_program(1.0, 3)
    alone = hostile(code, stdin_gt(["1\n"], ["large\n"]), engine=one_second)
    assert alone.verdict == V.TIMEOUT and "CPU time limit" in alone.detail, alone
    # four small tests would each have built 0.8 s of the table: 3.2 s > 3 s, and the large test would be fast
    pooled = hostile(code, stdin_gt(["0\n"] * 4 + ["1\n"], ["small\n"] * 4 + ["large\n"]), engine=one_second,
                     stop_on_first_failure=False)
    assert pooled.verdict == V.TIMEOUT and pooled.detail.startswith("test 5/5: CPU time limit"), pooled


COUNTERS = {
    # each stores a count in a place a shared process (or a shared temp dir) would keep, and answers with it
    "sys.modules": "import sys\nc = sys.modules.setdefault('_mc_count', [0])\nc[0] += 1\nk = c[0]\n",
    "builtins": "import builtins\nbuiltins._mc_count = getattr(builtins, '_mc_count', 0) + 1\nk = builtins._mc_count\n",
    "stdlib module": "import json\njson._mc_count = getattr(json, '_mc_count', 0) + 1\nk = json._mc_count\n",
    "environment": "import os\nos.environ['MC'] = str(int(os.environ.get('MC', '0')) + 1)\nk = int(os.environ['MC'])\n",
    "file in cwd": "import os\nk = len(os.listdir('.')) + 1\nopen(f'run{k}', 'w').close()\n",
    "file in $HOME": ("import os\np = os.path.join(os.environ.get('HOME', '.'), '.mc_count')\n"
                      "k = (int(open(p).read()) if os.path.exists(p) else 0) + 1\nopen(p, 'w').write(str(k))\n"),
    "rlimit": ("import resource\ns, h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
               "resource.setrlimit(resource.RLIMIT_NOFILE, (s - 1, h - 1))\nk = 64 - s + 1\n"),
    "nice": "import os\nk = os.nice(0) + 1\nos.nice(1)\n",
    "a thread left running": ("import threading, time, sys\nts = [t for t in threading.enumerate() if t.name == 'mc']\n"
                              "k = len(ts) + 1\nthreading.Thread(target=time.sleep, args=(30,), name='mc', "
                              "daemon=True).start()\n"),
}


@pytest.mark.parametrize("where", sorted(COUNTERS))
def test_a_stdin_program_cannot_count_its_runs(hostile, where):
    n = 5
    # a cheat: answer test k with the k-th expected output (the outputs differ, the inputs do not tell them apart)
    code = COUNTERS[where] + "print(['a', 'b', 'c', 'd', 'e'][min(k, 5) - 1])\n"
    obs = hostile(code, stdin_gt(["x\n"] * n, ["a\n", "b\n", "c\n", "d\n", "e\n"]))
    assert obs.verdict == V.WRONG_ANSWER and "test 2/5" in obs.detail, obs  # every run sees itself as the first
    honest = COUNTERS[where] + "print(k)\n"
    obs = hostile(honest, stdin_gt(["x\n"] * n, ["1\n"] * n))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs


def counting_function(where: str) -> str:
    """A Solution whose method returns how many times it has been called, kept ``where``."""
    body = "".join("        " + line + "\n" for line in COUNTERS[where].splitlines())
    return "class Solution:\n    def f(self, x):\n" + body + "        return k\n"


@pytest.fixture(scope="module")
def per_test_calls(engine_factory):
    """The default engine's limits, call-based tests in a fresh process each."""
    return engine_factory(timeout=EngineConfig().timeout, memory_mb=EngineConfig().memory_mb, call_process="test")


@pytest.mark.parametrize("where", sorted(COUNTERS))
def test_a_function_cannot_count_its_calls_with_a_process_per_test(hostile, per_test_calls, where):
    code = counting_function(where)
    gt = json.dumps({"fn_name": "f", "inputs": [[0]] * 4, "outputs": [1, 2, 3, 4]})
    obs = hostile(code, gt, engine=per_test_calls)
    assert obs.verdict == V.WRONG_ANSWER and "test 2/4" in obs.detail, obs
    obs = hostile(code, json.dumps({"fn_name": "f", "inputs": [[0]] * 4, "outputs": [1] * 4}), engine=per_test_calls)
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs


def test_module_level_state_is_fresh_for_every_call_with_a_process_per_test(hostile, per_test_calls):
    code = "calls = []\nclass Solution:\n    def f(self, x):\n        calls.append(x)\n        return len(calls)\n"
    obs = hostile(code, json.dumps({"fn_name": "f", "inputs": [[1], [2], [3]], "outputs": [1, 1, 1]}),
                  engine=per_test_calls)
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs


@pytest.mark.parametrize("where", sorted(COUNTERS))
def test_a_submission_sees_its_own_earlier_calls_as_on_leetcode(hostile, where):
    """By default (LeetCode's judge) one process runs every call of a sample: a count kept anywhere the process can
    keep one goes on from call to call. It tells the program which call it is on, never what to answer."""
    code = counting_function(where)
    obs = hostile(code, json.dumps({"fn_name": "f", "inputs": [[0]] * 4, "outputs": [1, 2, 3, 4]}))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs
    obs = hostile(code, json.dumps({"fn_name": "f", "inputs": [[0]] * 4, "outputs": [1] * 4}))
    assert obs.verdict == V.WRONG_ANSWER and "test 2/4: expected 1, got 2" in obs.detail, obs


def test_a_submission_keeps_module_state_and_gets_a_fresh_solution_per_test(hostile):
    code = ("calls = []\nclass Solution:\n    def __init__(self):\n        self.mine = 0\n"
            "    def f(self, x):\n        calls.append(x)\n        self.mine += 1\n        return [len(calls), self.mine]\n")
    obs = hostile(code, json.dumps({"fn_name": "f", "inputs": [[1], [2], [3]], "outputs": [[1, 1], [2, 1], [3, 1]]}))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs


def test_a_submission_has_the_per_test_cpu_budget_per_call_and_restarts_after_a_timeout(hostile, one_second):
    """The format's time limit: ``timeout`` CPU seconds per call (the module's own run counts for the first call);
    a call that uses it up is ``timeout``, and the calls after it (``stop_on_first_failure=False``) run in a fresh
    process, whose module state starts again."""
    code = ("import time\ncalls = []\nt0 = time.process_time()\nwhile time.process_time() - t0 < 0.6:\n    pass\n"
            "class Solution:\n    def f(self, x):\n        calls.append(x)\n        t = time.process_time()\n"
            "        while time.process_time() - t < (5 if x == 2 else 0.6):\n            pass\n"
            "        return len(calls)\n")
    # 0.6 s of module time + 0.6 s of the first call is over the 1 s budget of the first test
    obs = hostile(code, json.dumps({"fn_name": "f", "inputs": [[0]], "outputs": [1]}), engine=one_second)
    assert obs.verdict == V.TIMEOUT and obs.detail.startswith("test 1/1: CPU time limit"), obs
    fast = code.replace("< 0.6:\n    pass", "< 0.0:\n    pass")
    # 0.6 s per call never adds up across calls; the third call (x == 2) runs out of its own 1 s
    obs = hostile(fast, json.dumps({"fn_name": "f", "inputs": [[0], [1], [2], [3], [4]], "outputs": [1, 2, 3, 1, 2]}),
                  engine=one_second, stop_on_first_failure=False)
    assert (obs.verdict, obs.num_passed) == (V.TIMEOUT, 4) and obs.detail.startswith("test 3/5: CPU time limit"), obs


def test_call_process_is_checked():
    from microcoder_ext.reward import Engine

    with pytest.raises(RewardSetupError, match="call_process .* must be one of submission, test; got 'fork'"):
        Engine(EngineConfig(call_process="fork"))


# one token: the CPU limit and a digest of every resource limit and the scheduling the program sees
LIMITS = ("import hashlib, os, resource\nseen = [resource.getrlimit(r) for r in range(16)] + [os.nice(0), "
          "os.sched_getscheduler(0)]\n"
          "print(str(resource.getrlimit(resource.RLIMIT_CPU)[0]) + '-' + hashlib.sha256(repr(seen).encode())"
          ".hexdigest()[:12])\n")


def test_limits_do_not_tell_how_many_tests_remain(default_engine, hostile, budget):
    from microcoder_ext.reward import evaluate_response

    # what the program sees in a job of one test (one token, read back from the judge's detail) ...
    one = evaluate_response(f"```python\n{LIMITS}```", stdin_gt(["\n"], ["?\n"]), engine=default_engine)
    assert one.verdict == V.WRONG_ANSWER and "got '" in one.detail, one
    seen = one.detail.split("got '", 1)[1].rstrip("'")
    assert int(seen.split("-")[0]) == math.ceil(budget) + 1  # the test's own CPU limit, nothing of the job's
    # ... is what every test of a longer job sees, first or last
    n = 6
    obs = hostile(LIMITS, stdin_gt(["\n"] * n, [seen + "\n"] * n))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs
