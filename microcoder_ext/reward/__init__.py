"""Code-execution reward (MicroCoder-Evaluator): extract the last complete fenced code block, run it in a
sandbox against every test, judge in the supervisor, return a verdict from ``microcoder_ext.core.verdicts``.

verl: ``reward.custom_reward_function.path=pkg://microcoder_ext.reward`` (name ``compute_score``, or
``compute_score_async``). Every call returns the same keys (``result.RESULT_KEYS``): ``score`` (float, 1.0
only when every test passed), ``acc``, ``pass_rate``, ``verdict`` (str), ``num_tests`` (int), ``num_passed``,
``time_s`` (wall seconds), ``detail`` (str). A bad sample never raises: malformed ground truth or an
infrastructure failure gives verdict ``sandbox_error`` with the reason in ``detail``. A bad setting does
(:class:`RewardSetupError`: an unknown backend or mode, an unparsable ``MICROCODER_*`` value, a sandbox that
cannot start on this host), so a launch stops at its first reward call instead of training on zero rewards.

Framework-free: imports only the standard library and ``microcoder_ext.core``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from microcoder_ext.core import verdicts as V
from microcoder_ext import evidence as _evidence

from .backends import Backend, get_engine, is_process_wide, reset_engine
from .engine import Engine, EngineConfig
from .extract import extract_code
from .ground_truth import GroundTruthError, TestSuite, parse_ground_truth
from .result import RESULT_KEYS, EvalResult
from .setup_error import RewardSetupError

__all__ = ["compute_score", "compute_score_async", "evaluate_response", "Backend", "Engine", "EngineConfig",
           "EvalResult", "GroundTruthError", "RESULT_KEYS", "RewardSetupError", "TestSuite", "extract_code", "get_engine",
           "parse_ground_truth", "reset_engine"]

log = logging.getLogger("microcoder_ext.reward")
_CALL_OPTIONS = ("timeout", "memory_mb", "stop_on_first_failure")


def evaluate_response(response: str, ground_truth, extra_info: dict | None = None, *, engine: Backend | None = None,
                      **options) -> EvalResult:
    """Score one response. A bad sample gives a verdict (``sandbox_error`` for malformed tests or a failed
    sandbox); only a bad setting raises (:class:`RewardSetupError`), and on the process-wide backend (``engine=None``
    or :func:`get_engine`'s: training) so does a sandbox that cannot start at all. Under ``microcoder smoke`` each call's wall
    time and verdict (and a ``sandbox_error``'s reason) are recorded as evidence (:mod:`microcoder_ext.evidence`)."""
    result = _evaluate(response, ground_truth, extra_info, engine, options)
    if _evidence.enabled():
        extra = {"detail": result.detail[:300]} if result.verdict == V.SANDBOX_ERROR else {}
        _evidence.record("reward", seconds=result.time_s, verdict=result.verdict, **extra)
    return result


def _evaluate(response: str, ground_truth, extra_info, engine, options) -> EvalResult:
    t0 = time.monotonic()
    try:
        suite = parse_ground_truth(ground_truth, extra_info)
    except GroundTruthError as e:
        return EvalResult(V.SANDBOX_ERROR, 0, 0, f"malformed ground truth: {e}", time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - must never escape into the trainer
        return EvalResult(V.SANDBOX_ERROR, 0, 0, f"malformed ground truth: {type(e).__name__}: {e}",
                          time.monotonic() - t0)
    code = extract_code(response)
    if code is None:
        return EvalResult(V.NO_ANSWER, len(suite.tests), 0, "no complete fenced code block", time.monotonic() - t0)
    if engine is None:  # a bad backend name or setting raises here
        engine = get_engine(options.get("backend"), options.get("sandbox_fusion_url"))
    try:
        opts = {k: options[k] for k in _CALL_OPTIONS if options.get(k) is not None}
        result = engine.evaluate(code, suite, **opts)
    except RewardSetupError:
        raise
    except Exception as e:  # noqa: BLE001
        log.exception("microcoder reward: engine failure")
        return EvalResult(V.SANDBOX_ERROR, len(suite.tests), 0, f"engine failure: {type(e).__name__}: {e}",
                          time.monotonic() - t0)
    fatal = getattr(engine, "fatal", None)
    if fatal and is_process_wide(engine):  # training's engine judges no sample on this host: stop, do not train on zeros
        raise RewardSetupError(f"the reward's sandbox cannot run on this host: {fatal}")
    return result


def compute_score(data_source=None, solution_str="", ground_truth=None, extra_info=None, **kwargs) -> dict:
    """verl reward function. Options (verl ``reward_kwargs``): ``timeout`` (CPU s per test), ``memory_mb``,
    ``stop_on_first_failure``, ``backend`` (``local`` default, or ``sandbox_fusion`` with
    ``sandbox_fusion_url``; env MICROCODER_REWARD_BACKEND / MICROCODER_SANDBOX_FUSION_URL). Returns a dict
    with the keys of ``RESULT_KEYS``. Raises :class:`RewardSetupError` only for a setting or a host the reward
    cannot run with."""
    try:
        return evaluate_response(solution_str, ground_truth, extra_info, **kwargs).to_dict()
    except RewardSetupError:
        raise
    except Exception as e:  # noqa: BLE001 - last line of defence
        return EvalResult(V.SANDBOX_ERROR, 0, 0, f"reward failure: {type(e).__name__}: {e}").to_dict()


async def compute_score_async(data_source=None, solution_str="", ground_truth=None, extra_info=None, **kwargs) -> dict:
    """Awaitable :func:`compute_score` (runs in a thread; the event loop is never blocked)."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info, **kwargs)
