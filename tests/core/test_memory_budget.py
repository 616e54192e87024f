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

_spec = importlib.util.spec_from_file_location("microcoder_tests_memory", Path(__file__).parents[1] / "conftest.py")
budget = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(budget)


def hold(directory, total, gb, seconds, events, name):
    with budget.reserve(directory, total, gb, name):
        events.append(("in", name, time.monotonic()))
        time.sleep(seconds)
        events.append(("out", name, time.monotonic()))


def test_a_launch_waits_until_its_share_fits_and_a_smaller_one_goes_ahead(tmp_path):
    events = []
    first = threading.Thread(target=hold, args=(tmp_path, 10, 6, 2.5, events, "first"))
    first.start()
    while not events:
        time.sleep(0.05)
    second = threading.Thread(target=hold, args=(tmp_path, 10, 6, 0.1, events, "second"))
    second.start()
    time.sleep(0.3)
    third = threading.Thread(target=hold, args=(tmp_path, 10, 3, 0.1, events, "third"))  # fits now, asked later
    third.start()
    for t in (first, second, third):
        t.join(30)
    order = [(kind, name) for kind, name, _ in events]
    assert order.index(("in", "second")) > order.index(("out", "first")), order  # 6 + 6 > 10
    assert order.index(("in", "third")) < order.index(("out", "first")), order  # 6 + 3 fits: it does not wait


def test_when_both_fit_the_earlier_waiter_goes_first(tmp_path):
    events = []
    first = threading.Thread(target=hold, args=(tmp_path, 10, 9, 2.0, events, "first"))
    first.start()
    while not events:
        time.sleep(0.05)
    second = threading.Thread(target=hold, args=(tmp_path, 10, 8, 1.5, events, "second"))
    second.start()
    time.sleep(0.3)
    third = threading.Thread(target=hold, args=(tmp_path, 10, 2, 0.1, events, "third"))  # fits beside second only
    third.start()
    for t in (first, second, third):
        t.join(30)
    order = [(kind, name) for kind, name, _ in events]
    assert order.index(("in", "second")) > order.index(("out", "first")), order
    assert order.index(("in", "third")) > order.index(("in", "second")), order
    state = json.loads((tmp_path / "state.json").read_text())
    assert state == {"held": {}, "queue": []}


def test_a_dead_holder_frees_its_share(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / "state.json").write_text(json.dumps(
        {"held": {"x": {"token": "x", "pid": pid, "gb": 9, "test": "crashed"}}, "queue": []}))
    t0 = time.monotonic()
    with budget.reserve(tmp_path, 10, 8, "next") as waited:
        assert waited < 1.0
    assert time.monotonic() - t0 < 5


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
