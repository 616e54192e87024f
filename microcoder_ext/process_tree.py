"""This machine's processes as Linux ``/proc`` shows them: a process's descendants, their memory and CPU time, and a
thread that keeps the peak of a measure (the memory benchmarks and the test suite's per-test memory report).

Standard library only; every reader returns 0 / [] for a process that is gone (processes come and go while read).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """Fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, is item 0)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def children_map() -> dict[int, list[int]]:
    """Parent pid -> the pids of its children, for every process of the machine."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                kids.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def descendants(root: int) -> list[int]:
    """The pids of ``root``'s descendants (children, their children, ...), ``root`` excluded."""
    kids, out, todo = children_map(), [], [root]
    while todo:
        for child in kids.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def tree(root: int) -> list[int]:
    """``root`` and its descendants."""
    return [root, *descendants(root)]


def rss_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` (``/proc/<pid>/statm``: cheap; pages shared between processes count in each)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def pss_bytes(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (``smaps_rollup``: each shared page split between its sharers, so
    a tree's sum is what it holds); its RSS where ``smaps_rollup`` cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return rss_bytes(pid)


def cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and of the children it has reaped (user + system; ``/proc/<pid>/stat`` 14-17)."""
    try:
        return sum(int(x) for x in _stat_fields(pid)[11:15]) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def command_line(pid: int) -> str:
    """``pid``'s command line, arguments joined by spaces ("" when gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def processes_naming(text: str) -> list[int]:
    """Pids of this user's processes (this one excluded) whose command line contains ``text``."""
    me, uid, out = os.getpid(), os.getuid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return out


class PeakSampler:
    """Calls ``measure()`` every ``interval_s`` seconds in a daemon thread and keeps the largest result.

    ``measure`` returns an int (bytes, say) or a tuple whose first item is the number compared (the rest: what to
    keep about that sample, e.g. a breakdown). While :attr:`paused` nothing is sampled. :meth:`take` returns the
    peak so far (one last sample included unless paused) and starts a new one; also a context manager.
    """

    def __init__(self, measure: Callable[[], int | tuple], interval_s: float = 1.0, paused: bool = False):
        self.measure, self.interval_s, self.paused = measure, interval_s, paused
        self.peak: int | tuple | None = None
        self._final = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)
        self._thread.start()

    @staticmethod
    def _key(sample) -> float:
        return sample[0] if isinstance(sample, tuple) else sample

    def _keep(self, sample) -> None:
        with self._lock:
            if self.peak is None or self._key(sample) > self._key(self.peak):
                self.peak = sample

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.paused:
                self._keep(self.measure())
            self._stop.wait(self.interval_s)

    def take(self):
        """The peak since the last ``take`` (None if nothing was sampled), then forget it."""
        if not self.paused:
            self._keep(self.measure())
        with self._lock:
            peak, self.peak = self.peak, None
        return peak

    def stop(self):
        """Stop sampling (one last sample unless paused) and return the peak; later calls return the same peak."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._final = self.take()
        return self._final

    def __enter__(self) -> "PeakSampler":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
