"""A bad setting stops the run; a bad sample is scored.

An unknown mode or backend, a ``MICROCODER_*`` value that does not parse, or a sandbox that cannot start on this host
would give every sample ``sandbox_error``: training on zero rewards that looks healthy. ``compute_score`` (verl's and
OpenRLHF's entry point) raises :class:`RewardSetupError` for them at the first call; a malformed sample still gets its
verdict. The CLIs, which hold their own engine, keep reporting an unusable sandbox as their exit status.
"""

from __future__ import annotations

import json

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import Engine, EngineConfig, RewardSetupError, compute_score, evaluate_response, reset_engine
from microcoder_ext.reward import engine as engine_module
from microcoder_ext.reward.engine import CALL_PROCESSES

GT = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


@pytest.fixture(autouse=True)
def fresh_process_engine():
    """No process-wide engine before or after (each case configures its own through the environment)."""
    reset_engine()
    yield
    reset_engine()


@pytest.mark.parametrize("var, value, message", [
    ("MICROCODER_REWARD_CALL_PROCESS", "bogus",
     f"call_process \\(MICROCODER_REWARD_CALL_PROCESS\\) must be one of {', '.join(CALL_PROCESSES)}; got 'bogus'"),
    ("MICROCODER_REWARD_TIMEOUT", "5s", "MICROCODER_REWARD_TIMEOUT='5s': not a valid float"),
    ("MICROCODER_REWARD_WORKERS", "two", "MICROCODER_REWARD_WORKERS='two': not a valid int"),
    ("MICROCODER_SANDBOX_REQUIRE_SECCOMP", "maybe", "MICROCODER_SANDBOX_REQUIRE_SECCOMP='maybe': expected one of 1, "),
    ("MICROCODER_REWARD_BACKEND", "docker", "unknown reward backend 'docker'"),
])
def test_a_bad_setting_raises_at_the_first_call(monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(RewardSetupError, match=message):
        compute_score("code", GOOD, GT)


def test_bad_reward_kwargs_raise():
    with pytest.raises(RewardSetupError, match="unknown reward backend 'nope'"):
        compute_score("code", GOOD, GT, backend="nope")
    with pytest.raises(RewardSetupError, match="needs sandbox_fusion_url"):
        compute_score("code", GOOD, GT, backend="sandbox_fusion")


@pytest.mark.parametrize("var, value, expected", [("MICROCODER_SANDBOX_REQUIRE_SECCOMP", " Off ", False),
                                                  ("MICROCODER_SANDBOX_REQUIRE_SECCOMP", "yes", True),
                                                  ("MICROCODER_REWARD_TIMEOUT", "", 5.0)])
def test_good_spellings_still_parse(monkeypatch, var, value, expected):
    monkeypatch.setenv(var, value)
    cfg = EngineConfig.from_env()
    got = cfg.require_seccomp if var.endswith("SECCOMP") else cfg.timeout
    assert got == expected


class _NoFork:
    def __init__(self, *a, **k):
        raise OSError(11, "Resource temporarily unavailable")


def test_a_sandbox_that_cannot_start_stops_training_but_not_the_cli(monkeypatch):
    """Training's process-wide engine: the run stops with the reason. An engine the caller holds (the CLIs): verdict
    ``sandbox_error`` and ``engine.fatal``, which the CLIs turn into exit status 1."""
    monkeypatch.setattr(engine_module, "WorkerProcess", _NoFork)
    with pytest.raises(RewardSetupError, match="sandbox cannot run on this host: cannot start a sandbox worker: "
                                               ".*Resource temporarily unavailable"):
        compute_score("code", GOOD, GT)
    own = Engine(EngineConfig(workers=1, node_slots=0))
    try:
        res = evaluate_response(GOOD, GT, engine=own)
        assert res.verdict == V.SANDBOX_ERROR and "sandbox unavailable" in res.detail and own.fatal
    finally:
        own.close()


def test_a_bad_sample_is_still_a_verdict(monkeypatch):
    """Malformed tests are the sample's problem: scored ``sandbox_error``, never raised (no engine is even needed)."""
    monkeypatch.setattr(engine_module, "WorkerProcess", _NoFork)
    for gt in ("{broken", json.dumps({"inputs": [1]}), None):
        out = compute_score("code", GOOD, gt)
        assert out["verdict"] == V.SANDBOX_ERROR and out["score"] == 0.0 and "malformed ground truth" in out["detail"]
