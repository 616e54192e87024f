"""Per-test wall-clock limit of a sandboxed child that does not count the time the child waited for a CPU.

The CPU budget (``cpu_clock.CpuBudget``) decides whether a program is too slow; the wall clock exists only to stop a
program that sleeps or blocks (reads a pipe nobody writes, waits on a lock), which uses no CPU. On a loaded host a
CPU-bound program also spends wall time waiting on a run queue for a CPU, and a plain wall limit would judge a
correct program ``timeout`` for the host's load. So the deadline moves later by the time the followed process
spent runnable but not running, which Linux reports as the second field of ``/proc/<pid>/schedstat`` (ns, the
thread's run-queue wait; a test process cannot create threads, so its leader is the whole process). A sleeping or
blocked program is not runnable: it gets no extension and ends at the plain limit.

The extension is at most ``max_stretch`` times the limit (a program that lowered its own priority could otherwise
wait on a run queue at little CPU cost), so every test still ends within ``limit x (1 + max_stretch)`` wall
seconds. Where schedstat cannot be read (a kernel without CONFIG_SCHED_INFO) the limit is the plain one.
"""

from __future__ import annotations

import os

MAX_STRETCH = 10.0  # the run-queue wait counted is at most this many times the wall limit


def runqueue_wait(pid: int) -> float | None:
    """Seconds thread ``pid`` has spent runnable on a run queue, not running, so far; None if unreadable."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class WallClock:
    """The wall-clock limit of one test: ``limit_s`` seconds from ``start`` (a ``time.monotonic()`` instant), plus
    the run-queue wait of the processes it follows (the launcher until the test's process starts, then that
    process), at most ``max_stretch * limit_s``. One clock serves every test of a child (:meth:`restart`); it keeps
    the followed process's ``schedstat`` open, so a look is one ``pread`` (~1 us, an ``open`` costs ~10)."""

    def __init__(self, limit_s: float, start: float, pid: int, max_stretch: float = MAX_STRETCH):
        self.limit = float(limit_s)
        self.max_extra = max_stretch * self.limit
        self.pid: int | None = None
        self._fd: int | None = None
        self.restart(start, pid)

    def restart(self, start: float, pid: int | None = None) -> None:
        """A new test from ``start``, following ``pid`` (default: the process followed now)."""
        self.start = start
        self.banked = 0.0  # the run-queue wait of processes followed before the current one
        self._follow(self.pid if pid is None else pid)

    def _follow(self, pid: int) -> None:
        if pid != self.pid:
            self.close()
            self.pid = pid
            try:
                self._fd = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._fd = None
        self.base = self.last = self._read()

    def _read(self) -> float | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):  # the process is gone (ESRCH)
            return None

    def follow(self, pid: int) -> None:
        """From now on count the run-queue wait of ``pid`` (the test's own process, once it started)."""
        self.banked = self.waited()
        self._follow(pid)

    def waited(self) -> float:
        """Seconds the followed processes waited for a CPU since ``start`` (capped; a process that is gone keeps
        the last value read)."""
        if self.base is not None:
            now = self._read()
            if now is not None:
                self.last = max(self.last, now)
        current = self.last - self.base if self.base is not None else 0.0
        return min(self.max_extra, self.banked + current)

    def deadline(self) -> float:
        """The ``time.monotonic()`` instant at which the test is out of wall time, as far as is known now (it only
        moves later, while the process waits for a CPU)."""
        return self.start + self.limit + self.waited()

    def close(self) -> None:
        """Close the followed process's ``schedstat`` (the clock then reads nothing more)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        self.close()
