"""The sandboxed code reward (:mod:`microcoder_ext.reward`) as a TRL reward function.

``GRPOTrainer._calculate_rewards`` calls each reward function with the completions of **this process** (in the order
of its local rows), ``prompts=``, ``completions=``, ``completion_ids=`` and every other dataset column as a keyword
argument holding one value per completion (plus ``trainer_state``, ``log_extra``, ``log_metric``). :class:`CodeReward`
reads the tests from the column ``tests_key``, scores all completions of the call concurrently on the reward engine,
returns the scores (1.0 only when every test passed) and keeps each completion's verdict in :attr:`last_verdicts`,
which :class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer` reads for the conditional truncation mask. A bad sample
never raises: a bad test spec or an engine failure gives 0.0 and verdict ``sandbox_error``. A bad setting does
(:class:`~microcoder_ext.reward.RewardSetupError`: no ``tests_key`` column, an unknown backend, a sandbox that cannot
start on this host), so training stops at its first step instead of learning from zeros.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from microcoder_ext.core import verdicts as V

logger = logging.getLogger("microcoder_ext.trl.reward")

#: name TRL logs the reward under (``rewards/microcoder_code_reward/mean``)
REWARD_NAME = "microcoder_code_reward"


def completion_text(completion: Any) -> str:
    """The generated text of one TRL completion: a string (standard format), or a list of messages
    (conversational: the content of the last assistant message; content blocks are joined)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        if not assistant:
            return ""
        content = assistant[-1].get("content", "")
        if isinstance(content, (list, tuple)):  # [{"type": "text", "text": ...}, ...]
            return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        return "" if content is None else str(content)
    return str(completion)


def _extra_info(value: Any) -> dict | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, bytes)):
        try:
            decoded = json.loads(value)
        except ValueError:
            return None
        return decoded if isinstance(decoded, dict) else None
    return None


class CodeReward:
    """TRL reward function: run each completion's last complete fenced code block against the row's tests.

    Args:
        tests_key: dataset column with the tests (our ground truth: a JSON string or the decoded dict/list; every
            format of :func:`microcoder_ext.reward.parse_ground_truth`).
        data_source_key: optional column with the data source name (passed to the reward as verl does;
            informational).
        extra_info_key: optional column with per-row extra info (e.g. ``fn_name``), used when present.
        backend, sandbox_fusion_url, timeout, memory_mb: reward engine options (:func:`microcoder_ext.reward.
            compute_score`); default: the local sandbox, configured from the environment.
        max_workers: threads submitting to the engine (default: the engine's size).

    After each call, :attr:`last_verdicts` holds the verdict of every completion (same order) and
    :attr:`last_results` the full result dicts (``score``, ``verdict``, ``pass_rate``, ``num_tests``, ``detail``...).
    """

    def __init__(self, tests_key: str = "tests", data_source_key: str | None = None, *,
                 extra_info_key: str | None = "extra_info", backend: str | None = None,
                 sandbox_fusion_url: str | None = None, timeout: float | None = None, memory_mb: int | None = None,
                 max_workers: int | None = None):
        self.__name__ = REWARD_NAME
        self.tests_key = tests_key
        self.data_source_key = data_source_key
        self.extra_info_key = extra_info_key
        self.backend = backend
        self.sandbox_fusion_url = sandbox_fusion_url
        self.options = {k: v for k, v in (("timeout", timeout), ("memory_mb", memory_mb)) if v is not None}
        self.max_workers = max_workers
        self.last_verdicts: list[str] = []
        self.last_results: list[dict] = []

    def __repr__(self) -> str:
        return f"CodeReward(tests_key={self.tests_key!r})"

    # -- helpers

    def _column(self, kwargs: dict, key: str | None, n: int) -> list:
        if key is None or key not in kwargs or kwargs[key] is None:
            return [None] * n
        values = kwargs[key]
        if isinstance(values, (str, bytes, dict)):
            values = [values]
        values = list(values)
        return values if len(values) == n else (values + [None] * n)[:n]

    def _engine(self):
        from microcoder_ext.reward import get_engine

        return get_engine(self.backend, self.sandbox_fusion_url)

    def _error(self, detail: str) -> dict:
        return {"score": 0.0, "acc": 0.0, "pass_rate": 0.0, "verdict": V.SANDBOX_ERROR, "num_tests": 0,
                "num_passed": 0, "time_s": 0.0, "detail": detail[:300]}

    # -- the reward function

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None,
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        from microcoder_ext.reward import RewardSetupError

        try:
            results = self._score(list(completions or []), kwargs)
        except RewardSetupError:  # a setting no sample can be judged with: stop, do not train on zeros
            raise
        except Exception as e:  # noqa: BLE001 - one bad sample must never take the trainer down
            logger.exception("microcoder reward: scoring failed")
            results = [self._error(f"reward failure: {type(e).__name__}: {e}") for _ in (completions or [])]
        self.last_results = results
        self.last_verdicts = [r["verdict"] for r in results]
        log_extra = kwargs.get("log_extra")
        if callable(log_extra) and results:
            try:
                log_extra("verdict", list(self.last_verdicts))
            except Exception:  # noqa: BLE001 - logging only
                logger.debug("microcoder reward: log_extra failed", exc_info=True)
        return [float(r["score"]) for r in results]

    def _score(self, completions: list, kwargs: dict) -> list[dict]:
        from microcoder_ext.reward import RewardSetupError, evaluate_response

        n = len(completions)
        if n == 0:
            return []
        if self.tests_key not in kwargs:
            columns = ", ".join(sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric")))
            raise RewardSetupError(f"microcoder reward: the dataset has no column {self.tests_key!r} with the tests "
                                   f"(columns passed: {columns or 'none'}); set CodeReward(tests_key=...)")
        tests = self._column(kwargs, self.tests_key, n)
        infos = [_extra_info(x) for x in self._column(kwargs, self.extra_info_key, n)]
        sources = self._column(kwargs, self.data_source_key, n)
        texts = [completion_text(c) for c in completions]
        engine = self._engine()

        def one(i: int) -> dict:
            info = dict(infos[i] or {})
            if sources[i] is not None:
                info.setdefault("data_source", sources[i])
            try:
                return evaluate_response(texts[i], tests[i], info or None, engine=engine, **self.options).to_dict()
            except RewardSetupError:
                raise
            except Exception as e:  # noqa: BLE001 - evaluate_response never raises for a sample; belt and braces
                return self._error(f"reward failure: {type(e).__name__}: {e}")

        workers = self.max_workers or max(1, int(getattr(engine, "size", 0) or 8))
        if n == 1 or workers == 1:
            return [one(i) for i in range(n)]
        with ThreadPoolExecutor(max_workers=min(workers, n)) as pool:
            return list(pool.map(one, range(n)))
