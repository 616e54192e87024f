"""Per-test CPU budget of a sandboxed child, enforced from outside the child.

A soft RLIMIT_CPU set by the child itself is no limit (a program may raise its own soft limit up to the hard one),
and the hard limit can only go down, so one child cannot get a fresh hard limit per test. Instead the job process
reads the child's process CPU clock (``clock_gettime`` of ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``:
user + system time of every thread of the process, living and exited, in ns; nothing the child can change) and
kills the child when a test has used its budget. A test process cannot fork (seccomp): the process is the whole tree.
With a process per test its clock counts that test alone; with one process per submission (call-based tests) each
test's budget counts from the end of the one before (:meth:`CpuBudget.start`).

The check needs no timer and no signal: a process cannot use CPU faster than ``cpus`` seconds per wall second, so
after each look the next one is due when the rest of the budget could be used up at that rate at the earliest
(``remaining / cpus``, at least ``min_step`` s). A test that ends early costs no look at all; one that runs to its
limit costs a few (``log(budget / min_step)`` on 2 cores). Overrun: at most ``min_step x cpus`` CPU seconds plus the
job process's scheduling delay. RLIMIT_CPU stays on as the whole job's backstop (``limits.planned_rlimits``).
"""

from __future__ import annotations

import os
import time

CPUCLOCK_SCHED = 2
_CPUS = max(1, os.cpu_count() or 1)  # read once (a call costs tens of microseconds; a budget is made per test)


def process_clock(pid: int) -> int:
    """The clock id of process ``pid``'s CPU time (all its threads)."""
    return ((~pid) << 3) | CPUCLOCK_SCHED


class CpuBudget:
    """``budget_s`` CPU seconds per test for process ``pid``; :meth:`start` at the start of each test."""

    def __init__(self, pid: int, budget_s: float, cpus: int | None = None, min_step: float = 0.005,
                 base: float | None = None):
        """``base``: the CPU seconds the budget counts from (default: the process's clock now; 0.0 for a process
        whose every CPU second is the test's, from its birth)."""
        self.clock = process_clock(pid)
        self.budget = float(budget_s)
        self.cpus = max(1, cpus or _CPUS)
        self.min_step = min_step
        self.base = self.now() if base is None else float(base)

    def now(self) -> float:
        """The child's CPU seconds so far (the last value read once the process is gone)."""
        try:
            self._last = time.clock_gettime(self.clock)
        except OSError:
            pass
        return getattr(self, "_last", 0.0)

    def start(self, claimed: float | None = None, budget_s: float | None = None) -> None:
        """A new test starts now. ``claimed``: the CPU time the child says it had when its previous test ended (it
        is already running the next one); used only within [previous start, now], so a lie can only shorten the
        next test's budget. ``budget_s``: the new test's budget (default: unchanged)."""
        if budget_s is not None:
            self.budget = float(budget_s)
        now = self.now()
        if isinstance(claimed, (int, float)) and not isinstance(claimed, bool):
            now = min(now, max(self.base, float(claimed)))
        self.base = now

    def used(self) -> float:
        return self.now() - self.base

    def exceeded(self) -> bool:
        return self.used() >= self.budget

    def next_check(self, mono_now: float) -> float:
        """``time.monotonic()`` instant at which the budget could be used up at the earliest."""
        return mono_now + max(self.min_step, (self.budget - self.used()) / self.cpus)
