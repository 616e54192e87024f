"""Every suite's tests: the memory budget that `make test` shares between its lanes, and what each test held.

`make test` (tests/run_all.sh) runs several pytest processes side by side. A real training launch (Ray, a trainer's
workers, vLLM's engine and its workers) holds several GB of RAM for minutes (verl's ``main_ppo``: ~8 GB, ~10 GB on
two FSDP ranks; OpenRLHF's ``train_ppo_ray``: ~5 GB, measured as the machine's used memory), and a few at once would
pass CI's 24 GB: Ray's memory monitor then kills workers and the run fails for want of memory, not for a bug.

* A test marked ``@pytest.mark.memory(gb)`` first reserves ``gb`` of the run's budget
  (``$MICROCODER_TEST_MEMORY_GB``, shared through ``$MICROCODER_TEST_MEMORY_DIR``; run_all.sh sets both) and holds it
  through its setup, call and teardown (a module's launch fixture runs in its first test's setup). The first waiter,
  in the order they asked, whose share fits takes it (a smaller launch does not wait behind a larger one that does
  not fit yet); a test alone may take more than the budget. Without run_all (plain pytest) nothing waits.
* A test marked ``slow`` without ``memory`` (it starts Ray, TransferQueue or a Ray actor: 1-3 GB for a minute)
  reserves ``SLOW_GB``.
* Ray's workers run at normal priority (``RAY_worker_niceness=0``, set here for every test and every process a test
  starts). Ray starts each worker at nice 15 by default, and every process of a launch that does work (the trainer's
  workers, vLLM's engine) is a Ray worker; beside ``make test``'s other lanes, all at nice 0, such a worker gets about
  a thirtieth of the CPU share of each busy process. On CI a Ray actor that needs 8 s of CPU did not finish, twice
  (in 600 s, then in 300 s at a load of 17 on 2 cores); at nice 0 it finishes in 200 s under 14 busy processes.
* The peak resident memory of every test marked ``memory`` or ``slow`` (the tests that start launches, Ray or
  TransferQueue), summed over its own process and every process it started (Ray's and vLLM's included; shared pages
  count once per process), is sampled every second; the session ends with the tests that held the most and the time
  spent waiting for the budget. (A sample walks all of /proc, ~15-50 ms: every test at twice a second cost six lanes
  about half a core.)
* A failed test's report ends with a section "host at failure": the load average per core (flagged "overloaded"
  above 2 runnable tasks per core) and the memory available when it failed (tests/host_load.py), and, when a child
  process outlived its hang guard (``subprocess.TimeoutExpired``), the command and the last lines it had written.
  Tests wait for children with ``host_load.hang_guard`` (a bound far above any loaded run), never with a bound that
  the suite's own load can break.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# support modules of this folder (host_load.py) are imported by their plain names
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

import host_load  # noqa: E402

from microcoder_ext import process_tree  # noqa: E402
from microcoder_ext.cli.smoke import TIMEOUT_ENV as SMOKE_TIMEOUT_ENV  # noqa: E402

DIR_ENV = "MICROCODER_TEST_MEMORY_DIR"
BUDGET_ENV = "MICROCODER_TEST_MEMORY_GB"
SAMPLE_S = 1.0
SLOW_GB = 2.0
RAY_NICENESS_ENV = "RAY_worker_niceness"  # Ray's config override, read by the raylet when a cluster starts

os.environ[RAY_NICENESS_ENV] = "0"
# `microcoder smoke`'s own bound (default 1200 + 120 s per step) stops a launch, cleanly, just before the test's hang
# guard would kill the CLI alone: the suite's load never ends a smoke earlier than it ends any other child
os.environ[SMOKE_TIMEOUT_ENV] = str(host_load.HANG_CAP_S - 120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked(directory: Path):
    """The shared state file, read and written under an exclusive lock; dead holders and waiters are dropped."""
    with open(directory / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = directory / "state.json"
        try:
            state = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            state = {}
        state.setdefault("held", {})
        state.setdefault("queue", [])
        state["held"] = {t: h for t, h in state["held"].items() if _alive(h["pid"])}
        state["queue"] = [q for q in state["queue"] if _alive(q["pid"])]
        yield state
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)


@contextlib.contextmanager
def reserve(directory: Path, budget: float, gb: float, what: str):
    """Hold ``gb`` of ``budget`` for the duration: taken when it fits and no earlier waiter's share fits (alone, any
    amount). Yields the seconds waited."""
    token = f"{os.getpid()}:{time.monotonic_ns()}"
    mine = {"token": token, "pid": os.getpid(), "gb": gb, "test": what}
    t0 = time.monotonic()
    with _locked(directory) as state:
        state["queue"].append(mine)
    try:
        while True:
            with _locked(directory) as state:
                used = sum(h["gb"] for h in state["held"].values())

                def fits(w):
                    return not state["held"] or used + w["gb"] <= budget

                first = next((w for w in state["queue"] if fits(w)), None)
                if first is not None and first["token"] == token:
                    state["queue"] = [w for w in state["queue"] if w["token"] != token]
                    state["held"][token] = mine
                    break
            time.sleep(1.0)
        waited = time.monotonic() - t0
        yield waited
    finally:
        with _locked(directory) as state:
            state["held"].pop(token, None)
            state["queue"] = [q for q in state["queue"] if q["token"] != token]


def tree_rss() -> int:
    """Bytes resident in this process and all its descendants."""
    return sum(process_tree.rss_bytes(pid) for pid in process_tree.tree(os.getpid()))


#: the peak of :func:`tree_rss` over the current test; sampled only in tests that start launches, Ray or
#: TransferQueue (markers ``memory``, ``slow``)
_sampler: process_tree.PeakSampler | None = None
_report: list[tuple[float, str, float | None]] = []  # (peak GB, node id, reserved GB)
_waits: list[tuple[float, str]] = []


def pytest_configure(config):
    global _sampler
    if _sampler is None and not hasattr(config, "workerinput"):
        _sampler = process_tree.PeakSampler(tree_rss, SAMPLE_S, paused=True)


def pytest_unconfigure(config):
    if _sampler is not None:
        _sampler.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    marker = item.get_closest_marker("memory")
    slow = item.get_closest_marker("slow") is not None
    gb = float(marker.args[0]) if marker is not None else SLOW_GB if slow else None
    directory = os.environ.get(DIR_ENV)
    sampled = marker is not None or slow
    if _sampler is not None:
        _sampler.take()  # what ran before this test is not its own
        _sampler.paused = not sampled
    try:
        if gb is not None and directory:
            budget = float(os.environ.get(BUDGET_ENV) or 0)
            with reserve(Path(directory), budget, gb, item.nodeid) as waited:
                if waited >= 1:
                    _waits.append((waited, item.nodeid))
                return (yield)
        return (yield)
    finally:
        if _sampler is not None and sampled:
            _report.append(((_sampler.take() or 0) / 2**30, item.nodeid, gb))
            _sampler.paused = True


def _tail(text, lines: int = 40) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:]) or "(nothing)"


def host_at_failure(excinfo) -> str:
    """The report section of a failed test: the host's load and memory now and, for a child that outlived its hang
    guard, the command and the tails of what it wrote."""
    out = [host_load.describe()]
    error = excinfo.value if excinfo is not None else None
    if isinstance(error, subprocess.TimeoutExpired):
        out += [f"a child outlived its hang guard of {error.timeout:g} s: {error.cmd!r}",
                "its stdout (last lines):", _tail(error.output), "its stderr (last lines):", _tail(error.stderr)]
    return "\n".join(out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.sections.append(("host at failure", host_at_failure(call.excinfo)))
    return report


def pytest_terminal_summary(terminalreporter):
    if _report:
        tr = terminalreporter
        tr.section("peak memory per test marked memory or slow (its process tree, GB; [reserved])")
        for peak, nodeid, gb in sorted(_report, reverse=True)[:15]:
            tr.write_line(f"{peak:6.2f}  {'[%g]' % gb if gb is not None else '    '}  {nodeid}")
    if _waits:
        terminalreporter.write_line(f"waited for the memory budget: {sum(w for w, _ in _waits):.0f} s in "
                                    f"{len(_waits)} test(s) (budget {os.environ.get(BUDGET_ENV)} GB)")
