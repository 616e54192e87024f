"""The tests' Ray workers run at normal priority (tests/conftest.py sets ``RAY_worker_niceness=0``).

Ray starts every worker at nice 15 by default, and all the work of a launch (trainer workers, vLLM's engine) runs in
Ray workers; beside `make test`'s other lanes (nice 0) they starved: on CI a Ray actor needing 8 s of CPU did not
finish in 300 s."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from host_load import hang_guard

NICENESS_ENV = "RAY_worker_niceness"  # Ray's config override (tests/conftest.py sets it to 0)
WORKER_NICENESS = """
import os, ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
print('NICE', ray.get(ray.remote(lambda: os.nice(0)).remote()))
ray.shutdown()
"""


def _worker_niceness(env: dict) -> int:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(WORKER_NICENESS)], capture_output=True, text=True,
                       timeout=hang_guard(300), env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return int(next(line for line in r.stdout.splitlines() if line.startswith("NICE")).split()[1])


@pytest.mark.slow
def test_ray_workers_started_by_a_test_run_at_the_tests_priority():
    assert os.environ.get(NICENESS_ENV) == "0"
    here = os.nice(0)
    assert _worker_niceness(dict(os.environ)) == here
    # without the setting, Ray's default: its workers 15 steps nicer than the process that started the cluster
    plain = {k: v for k, v in os.environ.items() if k != NICENESS_ENV}
    assert _worker_niceness(plain) == min(here + 15, 19)
