"""The sandbox's wall-clock limit does not count the time a test process waits for a CPU (sandbox/wall_clock.py):
under an artificial load of several busy processes per core, a correct CPU-bound program whose wall time passes the
plain limit (2 x timeout + 1 s) is still judged correct, while a program that sleeps still times out at the plain
limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import evaluate_response
from microcoder_ext.reward.sandbox.wall_clock import MAX_STRETCH, WallClock, runqueue_wait

TIMEOUT = 3.0  # CPU seconds per test; the plain wall limit is 2 x 3 + 1 = 7 s
WALL = 2 * TIMEOUT + 1
BUSY_PER_CORE = 8  # the test process gets at most a ninth of a core: 1.5 CPU s take >= 13 s of wall time
GT = '{"inputs": ["7\\n"], "outputs": ["49\\n"]}'


def busy_loop(n: int) -> str:
    """A program's module-level loop of ``n`` iterations (its names are module globals, as in the judged program)."""
    return f"x = 0\nfor _ in range({n}):\n    x = (x * 31 + 7) % 1000003\n"


def busy_loop_size(cpu_s: float) -> int:
    """Iterations of :func:`busy_loop` that take about ``cpu_s`` CPU seconds here (process time, which this machine's
    load does not lengthen), timed the way the program runs it: module-level code exec'd in a fresh namespace (a
    loop in a function, on fast locals, ran ~1.6x faster and made a "1.5 s" program hit the 3 s CPU limit)."""
    n = 400_000
    code = compile(busy_loop(n), "<calibration>", "exec")
    t0 = time.process_time()
    exec(code, {})
    return int(n * cpu_s / max(time.process_time() - t0, 1e-3))


@pytest.fixture
def loaded_machine():
    """BUSY_PER_CORE busy processes per core for the duration of the test (started and running when it begins)."""
    # each in a session of its own: with autogroup scheduling (a group per session) a shared session would get one
    # share of the CPUs for all of them
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(BUSY_PER_CORE * os.cpu_count())]
    try:
        for p in procs:  # each has used CPU: the load is on
            while True:
                with open(f"/proc/{p.pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[11]) > 0:  # utime, clock ticks
                        break
                time.sleep(0.05)
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def test_the_kernel_reports_run_queue_waits():
    assert runqueue_wait(os.getpid()) is not None  # /proc/<pid>/schedstat: a kernel with CONFIG_SCHED_INFO


def test_a_gone_process_extends_nothing_and_the_extension_is_capped():
    clock = WallClock(2.0, 100.0, pid=2**22 + 7)  # no such process (above the default pid_max)
    assert clock.deadline() == 102.0 and clock.max_extra == 2.0 * MAX_STRETCH
    clock.banked = 1e6  # a process that waited (or made itself wait) far longer
    assert clock.deadline() == 100.0 + 2.0 + 2.0 * MAX_STRETCH


def test_a_correct_cpu_bound_program_on_a_loaded_host_is_correct(engine_factory, loaded_machine):
    n = busy_loop_size(1.5)
    code = busy_loop(n) + "k = int(input())\nprint(k * k)"
    eng = engine_factory(workers=1, timeout=TIMEOUT)
    res = evaluate_response(f"```python\n{code}\n```", GT, engine=eng, timeout=TIMEOUT)
    assert res.verdict == V.CORRECT, res
    # the discriminating case: its wall time passed the plain limit, which judged it `timeout` before
    assert res.time_s > WALL, (res.time_s, loaded_machine)


def test_a_sleeping_program_still_times_out_on_a_loaded_host(engine_factory, loaded_machine):
    eng = engine_factory(workers=1, timeout=TIMEOUT)
    res = evaluate_response("```python\nimport time\ntime.sleep(300)\n```", GT, engine=eng, timeout=TIMEOUT)
    assert res.verdict == V.TIMEOUT and "wall-clock limit 7.0 s" in res.detail, res
    # asleep it waits for no CPU: the limit is not stretched (a bound far above the 7 s it takes)
    assert res.time_s < WALL * (1 + MAX_STRETCH), res
