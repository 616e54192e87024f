"""Shared fixtures for the code-reward tests: one sandbox engine per session (short time limits)."""

import json
import os

import pytest

from microcoder_ext.reward import Engine, EngineConfig, evaluate_response


@pytest.fixture(scope="session")
def engine():
    eng = Engine(EngineConfig(workers=2, timeout=1.0, memory_mb=512))
    report = eng.warmup()
    assert eng.fatal is None, eng.fatal
    assert report.get("seccomp") == "active", report
    yield eng
    eng.close()


@pytest.fixture
def run(engine):
    """run(code, ground_truth, **opts) -> EvalResult; ``code`` is wrapped in a ```python fence."""

    def _run(code, gt, **opts):
        if not isinstance(gt, str):
            gt = json.dumps(gt)
        return evaluate_response(f"```python\n{code}\n```", gt, engine=engine, **opts)

    return _run


SUM_GT = {"inputs": ["1 2\n", "10 20\n", "5 5\n"], "outputs": ["3\n", "30\n", "10\n"]}
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.fixture
def sandbox_pids():
    return sandbox_processes


def sandbox_processes():
    """pids of live processes owned by the sandbox uid 65534 (leftover children)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("Uid:") and line.split()[1] == "65534":
                            out.append(int(pid))
            except OSError:
                pass
    return out
