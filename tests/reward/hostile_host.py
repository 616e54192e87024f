"""What a hostile program does to the host that judges it: the measurement harness of the hostile suites.

:func:`observe` runs one call of the real engine (``Engine.evaluate`` on the real sandbox) and records, besides the
score and verdict, what the *host process* suffered during the call:

* ``wall_s``: the call's wall time;
* ``rss_growth_mb``: the largest resident-set size seen during the call minus the size before it (MiB), sampled by a
  ticker thread every 10 ms (plus once at the end);
* ``max_stall_ms``: the longest gap between two ticks of that thread. A judge that holds the GIL (a backtracking
  regex, a quadratic loop in pure Python) freezes every other thread of a training process, and shows up here;
* ``leftovers``: what the call left behind: files under the engine's temp root, processes of the engine's sandbox
  uid range, and shared memory those uids still own (``/dev/shm`` entries, System V segments). Ownership, not
  host-wide counters (``/dev/shm`` listings, ``Shmem`` of ``/proc/meminfo``): ``make test`` runs other suites at
  the same time (Ray's object store, vLLM's message queues), and only a sandbox uid runs the hostile program.

:func:`assert_still_judges` then checks that the same engine still scores a correct and a wrong program right.
Imported by plain name from the test modules of this folder (``conftest.py`` puts the folder on ``sys.path``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def sysv_rows(kind: str, uid_min: int, uid_max: int) -> list[dict[str, str]]:
    """Rows of ``/proc/sysvipc/<kind>`` (``shm``, ``msg``, ``sem``) owned by the uids ``[uid_min, uid_max]``, by
    column name."""
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            header, *rows = f.read().splitlines()
    except OSError:
        return []
    cols = header.split()
    out = [dict(zip(cols, row.split())) for row in rows]
    return [r for r in out if uid_min <= int(r["uid"]) <= uid_max]


def sandbox_shm(uid_min: int, uid_max: int) -> dict[str, int]:
    """Shared memory owned by the uids ``[uid_min, uid_max]``: ``{"/dev/shm/NAME" | "sysv:ID": bytes}``."""
    owned: dict[str, int] = {}
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        names = []
    for name in names:
        try:
            st = os.lstat(os.path.join("/dev/shm", name))
        except OSError:
            continue
        if uid_min <= st.st_uid <= uid_max:
            owned["/dev/shm/" + name] = st.st_size
    for r in sysv_rows("shm", uid_min, uid_max):
        owned["sysv:" + r["shmid"]] = int(r["size"])
    return owned


class Ticker:
    """A thread that wakes every ``interval`` s and records the longest stall of the host's threads between two of its
    wake-ups (``max_gap``, s) and the peak RSS.

    A stall is what the ticker could not run for because another thread of this process held the interpreter: the
    late part of a wake-up, counted only as far as the process's other threads used CPU meanwhile. On a quiet machine
    that is the wall-clock lateness; on a loaded one the ticker also waits on a run queue for a CPU, which is the
    host's load and not the judge's doing, and is not counted (a judge that holds the interpreter for 1 s of CPU still
    stalls 1 s at any load)."""

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.max_gap = 0.0
        self.peak_rss = rss_bytes()
        self._stop = threading.Event()
        self._ticking = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hostile-ticker", daemon=True)

    @staticmethod
    def _others_cpu() -> float:
        """CPU seconds of this process's threads other than the calling one."""
        return time.process_time() - time.thread_time()

    def _run(self) -> None:
        last, last_cpu = time.perf_counter(), self._others_cpu()
        while not self._stop.is_set():
            time.sleep(self.interval)
            now, cpu = time.perf_counter(), self._others_cpu()
            self.max_gap = max(self.max_gap, min(now - last - self.interval, cpu - last_cpu))
            last, last_cpu = now, cpu
            self.peak_rss = max(self.peak_rss, rss_bytes())
            self._ticking.set()

    def __enter__(self) -> "Ticker":
        self._thread.start()
        # the thread has ticked before the call starts (a fixed sleep is not enough on a loaded host: a thread that
        # first runs after the call grabbed the interpreter would start its clock after the stall)
        if not self._ticking.wait(60):
            raise RuntimeError("the ticker thread did not run within 60 s")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_rss = max(self.peak_rss, rss_bytes())


@dataclass
class Observation:
    score: float
    verdict: str
    detail: str
    wall_s: float
    rss_growth_mb: float
    max_stall_ms: float
    leftovers: dict = field(default_factory=dict)
    num_passed: int = 0

    def __str__(self) -> str:
        return (f"verdict={self.verdict} score={self.score} wall={self.wall_s:.2f}s rss+={self.rss_growth_mb:.1f}MiB "
                f"stall={self.max_stall_ms:.0f}ms leftovers={self.leftovers} detail={self.detail[:160]!r}")


def sandbox_processes(uid_min: int, uid_max: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if uid_min <= int(line.split()[1]) <= uid_max:
                            pids.append(int(name))
                        break
        except (OSError, ValueError):
            pass
    return pids


def _files_under(root: str) -> list[str]:
    """What a job left under the engine's temp root: everything inside a worker's base dir except the empty dirs
    a worker prepares ahead for its next job (``next-*``)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        if depth == 1:  # a worker's base dir
            out += [os.path.join(dirpath, n) for n in dirnames + filenames
                    if not (n.startswith("next-") and n in dirnames and not os.listdir(os.path.join(dirpath, n)))]
        elif depth >= 2:
            out += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return out


def observe(engine, code: str, ground_truth, *, uid_range: tuple[int, int], tmp_root: str, settle_s: float = 5.0,
            **options) -> Observation:
    """One real ``evaluate`` call of ``code`` against ``ground_truth`` (any encoding the reward accepts)."""
    from microcoder_ext.reward import evaluate_response

    shm_before = sandbox_shm(*uid_range)
    rss0 = rss_bytes()
    response = f"```python\n{code}\n```"
    with Ticker() as tick:
        t0 = time.monotonic()
        res = evaluate_response(response, ground_truth, engine=engine, **options)
        wall = time.monotonic() - t0
    leftovers: dict = {}
    deadline = time.monotonic() + settle_s  # a killed process group needs a moment to disappear
    while True:
        procs = sandbox_processes(*uid_range)
        files = _files_under(tmp_root)
        shm = {k: n for k, n in sandbox_shm(*uid_range).items() if k not in shm_before}
        if not (procs or files or shm) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if procs:
        leftovers["processes"] = procs
    if files:
        leftovers["files"] = files[:10]
    if shm:
        leftovers["shm"] = {k: round(n / (1 << 20), 2) for k, n in sorted(shm.items())[:10]}  # MiB each
    return Observation(float(res.score), res.verdict, str(res.detail), wall,
                       (tick.peak_rss - rss0) / (1 << 20), tick.max_gap * 1e3, leftovers, int(res.num_passed))


CORRECT = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
WRONG = "class Solution:\n    def add(self, a, b):\n        return a - b\n"
ADD_TESTS = {"fn_name": "add", "inputs": [[1, 2], [5, 7], [-3, 3]], "outputs": [3, 12, 0]}


def assert_still_judges(engine) -> None:
    """The engine scores a correct program 1.0 (``correct``) and a wrong one 0.0 (``wrong_answer``) right after."""
    from microcoder_ext.reward import evaluate_response

    good = evaluate_response(f"```python\n{CORRECT}```", ADD_TESTS, engine=engine)
    bad = evaluate_response(f"```python\n{WRONG}```", ADD_TESTS, engine=engine)
    assert (good.verdict, good.score) == ("correct", 1.0), good
    assert (bad.verdict, bad.score) == ("wrong_answer", 0.0), bad
