"""The memory budget `make test` shares between its lanes (tests/conftest.py): a launch waits until its share fits,
in the order the launches asked; a holder that died frees its share; a launch alone may exceed the budget."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from host_load import hang_guard

_spec = importlib.util.spec_from_file_location("microcoder_tests_memory", Path(__file__).parents[1] / "conftest.py")
budget = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(budget)


def hold(directory, total, gb, seconds, events, name):
    with budget.reserve(directory, total, gb, name):
        events.append(("in", name, time.monotonic()))
        time.sleep(seconds)
        events.append(("out", name, time.monotonic()))


def run_three(directory, budget_gb, first, second, third) -> list[tuple[str, str]]:
    """``first`` takes its share; then ``second`` and, 0.3 s later, ``third`` ask (each a ``(gb, seconds held)``).
    Returns the ("in" | "out", name) events in order; the state file is empty at the end."""
    events = []
    threads = []
    for name, (gb, seconds) in zip(("first", "second", "third"), (first, second, third)):
        t = threading.Thread(target=hold, args=(directory, budget_gb, gb, seconds, events, name))
        t.start()
        threads.append(t)
        while name == "first" and not events:
            time.sleep(0.05)
        if name == "second":
            time.sleep(0.3)
    for t in threads:
        t.join(300)  # far above a loaded machine's
    assert json.loads((directory / "state.json").read_text()) == {"held": {}, "queue": []}
    return [(kind, name) for kind, name, _ in events]


def test_a_launch_waits_until_its_share_fits_and_a_smaller_one_goes_ahead(tmp_path):
    order = run_three(tmp_path, 10, (6, 2.5), (6, 0.1), (3, 0.1))  # third: fits now, asked later
    assert order.index(("in", "second")) > order.index(("out", "first")), order  # 6 + 6 > 10
    assert order.index(("in", "third")) < order.index(("out", "first")), order  # 6 + 3 fits: it does not wait


def test_when_both_fit_the_earlier_waiter_goes_first(tmp_path):
    order = run_three(tmp_path, 10, (9, 2.0), (8, 1.5), (2, 0.1))  # third: fits beside second only
    assert order.index(("in", "second")) > order.index(("out", "first")), order
    assert order.index(("in", "third")) > order.index(("in", "second")), order


def test_a_dead_holder_frees_its_share(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / "state.json").write_text(json.dumps(
        {"held": {"x": {"token": "x", "pid": pid, "gb": 9, "test": "crashed"}}, "queue": []}))
    with budget.reserve(tmp_path, 10, 8, "next") as waited:  # a dead holder kept would make it wait forever
        assert waited < 60  # its first look (bounded far above a loaded machine's; the next looks are 1 s apart)


def test_alone_a_launch_may_exceed_the_budget(tmp_path):
    with budget.reserve(tmp_path, 4, 10, "big") as waited:
        assert waited < 1.0


def test_tree_rss_counts_the_children(tmp_path):
    before = budget.tree_rss()
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(200 * 2**20); import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while budget.tree_rss() - before < 150 * 2**20:
            assert time.monotonic() < deadline, "the child's 200 MiB never showed in tree_rss"
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()


def test_what_each_kind_of_test_reserves(tmp_path):
    """Through pytest itself: a ``memory(gb)`` test holds gb, a ``slow`` one (it starts Ray) SLOW_GB, others nothing."""
    for name in ("conftest.py", "host_load.py"):  # the conftest and the support module it imports
        (tmp_path / name).write_text((Path(__file__).parents[1] / name).read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: x\n    memory(gb): x\n")
    (tmp_path / "test_shares.py").write_text(
        "import json, os, pytest\n"
        "def held():\n"
        "    state = json.load(open(os.path.join(os.environ['MICROCODER_TEST_MEMORY_DIR'], 'state.json')))\n"
        "    return sorted(h['gb'] for h in state['held'].values())\n"
        "@pytest.mark.memory(3)\n"
        "def test_launch(): assert held() == [3.0]\n"
        "@pytest.mark.slow\n"
        f"def test_ray(): assert held() == [{budget.SLOW_GB}]\n"
        "@pytest.mark.slow\n"
        "@pytest.mark.memory(5)\n"
        "def test_slow_launch(): assert held() == [5.0]\n"
        "def test_plain(): assert held() == []\n"
    )
    (tmp_path / "budget").mkdir()
    env = {"MICROCODER_TEST_MEMORY_DIR": str(tmp_path / "budget"), "MICROCODER_TEST_MEMORY_GB": "16", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shares.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=hang_guard(120))
    assert r.returncode == 0 and "4 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
