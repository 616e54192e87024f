"""The execution-backend interface and the process-wide registry of backends.

A backend runs a program against a test suite and returns an :class:`~microcoder_ext.reward.result.EvalResult`;
it judges every test with :func:`microcoder_ext.reward.judge.judge`, so all backends give the same verdicts:

  local           :class:`microcoder_ext.reward.engine.Engine` (sandboxed worker pool on this node; default)
  sandbox_fusion  :class:`microcoder_ext.reward.sandbox_fusion.SandboxFusionEngine` (remote service)

Layering (checked by ``tests/reward/test_import_structure.py``): ``judge`` <- each backend module <- this
module. The backend modules never import each other or this module; a backend is a class with the
members of :class:`Backend` (structural typing: no base class to inherit).
"""

from __future__ import annotations

import os
import threading
from typing import Protocol, runtime_checkable

from .ground_truth import TestSuite
from .result import EvalResult
from .setup_error import RewardSetupError


@runtime_checkable
class Backend(Protocol):
    """What the reward (``evaluate_response``, the CLI, the framework adapters) needs from a backend."""

    #: registry name of the backend (``local``, ``sandbox_fusion``)
    backend: str

    def evaluate(self, code: str, suite: TestSuite, *, timeout: float | None = None, memory_mb: int | None = None,
                 stop_on_first_failure: bool | None = None) -> EvalResult:
        """Run ``code`` against every test of ``suite`` and judge it. ``timeout`` (CPU s per test) and
        ``memory_mb`` apply when the suite sets no limit of its own; ``None`` means the backend's default.
        Infrastructure failures give verdict ``sandbox_error``, never a program verdict."""
        ...

    def close(self) -> None:
        """Release the backend's resources (workers, connections); ``evaluate`` afterwards gives
        ``sandbox_error``."""
        ...


def _local():
    from .engine import Engine, EngineConfig
    return Engine(EngineConfig.from_env())


def _sandbox_fusion(url: str):
    from .sandbox_fusion import SandboxFusionConfig, SandboxFusionEngine
    return SandboxFusionEngine(SandboxFusionConfig.from_env(url=url))


BACKENDS = ("local", "sandbox_fusion")
#: (backend, url) -> (pid of the creating process, backend instance)
_engines: dict = {}
_engine_lock = threading.Lock()


def get_engine(backend: str | None = None, sandbox_fusion_url: str | None = None) -> Backend:
    """The process-wide engine of a backend (configured from the environment; recreated after a fork of
    the host). ``backend``: ``local`` (default, or MICROCODER_REWARD_BACKEND) or ``sandbox_fusion``
    (URL from the argument or MICROCODER_SANDBOX_FUSION_URL)."""
    backend = (backend or os.environ.get("MICROCODER_REWARD_BACKEND") or "local").strip().lower()
    if backend not in BACKENDS:
        raise RewardSetupError(f"unknown reward backend {backend!r} (one of {', '.join(BACKENDS)})")
    if backend == "sandbox_fusion":
        sandbox_fusion_url = sandbox_fusion_url or os.environ.get("MICROCODER_SANDBOX_FUSION_URL")
        if not sandbox_fusion_url:
            raise RewardSetupError("backend sandbox_fusion needs sandbox_fusion_url= or MICROCODER_SANDBOX_FUSION_URL")
    key = (backend, sandbox_fusion_url if backend == "sandbox_fusion" else None)
    pid = os.getpid()
    with _engine_lock:
        entry = _engines.get(key)
        if entry is None or entry[0] != pid:  # none yet, or inherited through a fork: not ours to use
            eng = _local() if backend == "local" else _sandbox_fusion(sandbox_fusion_url)
            _engines[key] = entry = (pid, eng)
        return entry[1]


def is_process_wide(engine) -> bool:
    """Whether ``engine`` is one of this process's :func:`get_engine` backends (training's), not one a caller made."""
    with _engine_lock:
        return any(pid == os.getpid() and eng is engine for pid, eng in _engines.values())


def reset_engine() -> None:
    """Close the process-wide engines (tests)."""
    with _engine_lock:
        for pid, eng in _engines.values():
            if pid == os.getpid():
                eng.close()
        _engines.clear()


__all__ = ["BACKENDS", "Backend", "get_engine", "is_process_wide", "reset_engine"]
