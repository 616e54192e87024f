"""Every suite: the CPU time of each test, when ``MC_TEST_CPU`` names a file (``tests/run_all.sh`` sets it per lane).

One JSON line per test: ``nodeid``, ``cpu_s`` (user + system seconds of the pytest process and of the child
processes it waited for during the test: subprocesses, and through them a launch's Ray and vLLM processes) and
``wall_s`` (setup + call + teardown). On a machine that the lanes keep busy, wall time says little about what a
test costs; CPU time is what the whole run is bounded by.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

_LOG = os.environ.get("MC_TEST_CPU")


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if _LOG:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu0, wall0 = _cpu(), time.monotonic()
        yield
        row = {"nodeid": item.nodeid, "cpu_s": round(_cpu() - cpu0, 2), "wall_s": round(time.monotonic() - wall0, 2)}
        with open(_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
