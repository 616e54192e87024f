"""The machine's load, for tests that wait on a child: a hang guard that the suite's own load cannot break, and the
line that a failure report adds (tests/conftest.py).

`make test` runs several lanes side by side on few cores (a load of 10-17 on 2 cores was seen on CI), so a child
process or a Ray call that takes 20 s on a quiet machine can take minutes. A test never bounds such a wait by what
it takes on a quiet machine: it passes that time to :func:`hang_guard`, which returns a bound far above any loaded
run, and only stops a child that hangs. When the guard does stop one, the failure report says how loaded the machine
was and prints what the child had written (tests/conftest.py). A test that checks that something is quick (a refusal
before any model loads, a linear-time filter) bounds the CPU seconds it took (:func:`cpu_seconds`), which waiting for
a CPU does not add to, never its wall time.
"""

from __future__ import annotations

import os
import resource

#: more runnable tasks per core than this and a process waits for a CPU most of the time (tests/run_all.sh too)
OVERLOADED_PER_CORE = 2.0
#: a child may take HANG_FACTOR times its quiet-machine time before it is taken for hung: at a load of 17 on 2 cores
#: (8.5 runnable tasks per core) a busy process gets about an eighth of a core; on fewer than 2 cores, more
HANG_FACTOR = 10.0 * max(1.0, 2.0 / (os.cpu_count() or 1))
#: the shortest and the longest hang guard, seconds (the longest stays well inside CI's 90 minutes, so a hung child
#: is reported by its test rather than by CI's time-out)
HANG_FLOOR_S = 600.0
HANG_CAP_S = 3600.0


def hang_guard(quiet_s: float) -> float:
    """Seconds to wait for a child that needs at most ``quiet_s`` seconds on a quiet machine before it is taken for
    hung: ``HANG_FACTOR * quiet_s`` within [HANG_FLOOR_S, HANG_CAP_S] (20 min for a 2-minute child on 2 cores)."""
    return min(HANG_CAP_S, max(HANG_FLOOR_S, HANG_FACTOR * quiet_s))


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and by its children that ended and were waited for
    (``subprocess.run``'s, and theirs): the difference of two calls is the CPU a piece of work took, which a loaded
    machine does not lengthen (unlike its wall time)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def load_average() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages (runnable and uninterruptible tasks) of /proc/loadavg."""
    with open("/proc/loadavg") as f:
        one, five, fifteen = f.read().split()[:3]
    return float(one), float(five), float(fifteen)


def memory_gb() -> tuple[float, float]:
    """(available, total) memory in GB, from /proc/meminfo."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info.get("MemAvailable", 0) / 2**30, info.get("MemTotal", 0) / 2**30


def describe() -> str:
    """One line: the load averages per core, "overloaded" above OVERLOADED_PER_CORE, and the memory available, e.g.
    ``load 12.40 / 10.10 / 8.00 (1 / 5 / 15 min) on 2 cores: 6.2 per core, overloaded; memory 3.1 of 23.4 GB
    available``."""
    cores = os.cpu_count() or 1
    one, five, fifteen = load_average()
    available, total = memory_gb()
    per_core = one / cores
    flag = ", overloaded" if per_core > OVERLOADED_PER_CORE else ""
    return (f"load {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {cores} cores: {per_core:.1f} per "
            f"core{flag}; memory {available:.1f} of {total:.1f} GB available")


#: what Ray raises when its raylet has not registered within the 30 s that ``ray/_private/node.py`` (2.x) gives it,
#: a fixed wait that make test's own load (25 runnable tasks per core seen) can exceed
RAY_STARTUP_TIMEOUT = "The current node timed out during startup"


def ray_init(**kwargs):
    """``ray.init(**kwargs)``, once more after ``ray.shutdown()`` when Ray's fixed raylet start-up wait ran out on a
    loaded host (:data:`RAY_STARTUP_TIMEOUT`); any other error is raised as it is."""
    import ray

    try:
        return ray.init(**kwargs)
    except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception here
        if RAY_STARTUP_TIMEOUT not in str(e):
            raise
        ray.shutdown()
        return ray.init(**kwargs)
