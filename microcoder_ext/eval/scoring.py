"""Scoring ``microcoder eval``'s responses with the training reward: :func:`microcoder_ext.reward.evaluate_response`
on one sandboxed :class:`~microcoder_ext.reward.Engine` (configured from the ``MICROCODER_REWARD_*`` /
``MICROCODER_SANDBOX_*`` environment as in training); a response counts as correct when its verdict is
``correct`` (every test passed).
"""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from microcoder_ext.eval.problems import EvalProblem


def score(problems: list[EvalProblem], responses: dict[str, list[str]], *, workers: int = 0,
          timeout: float | None = None, memory_mb: int | None = None,
          progress: Callable[[int], Any] | None = None) -> tuple[list, str | None, dict]:
    """Score every response: ``([ProblemResult], fatal engine error or None, engine settings)``. The engine is
    configured from the environment (``EngineConfig.from_env``), ``workers`` (0: the environment's), ``timeout``
    (CPU s per test) and ``memory_mb`` on top; ``progress(total)`` returns a bar (``update(n)``, ``close()``),
    made once the sandbox is up."""
    from dataclasses import asdict

    from microcoder_ext.reward import Engine, EngineConfig, evaluate_response

    from microcoder_ext.eval.breakdown import ProblemResult

    overrides = {"workers": workers or EngineConfig.from_env().workers}
    if timeout is not None:
        overrides["timeout"] = timeout
    if memory_mb is not None:
        overrides["memory_mb"] = memory_mb
    engine = Engine(EngineConfig.from_env(), **overrides)
    cfg = {k: v for k, v in asdict(engine.config).items() if k in ("timeout", "memory_mb", "stop_on_first_failure")}
    jobs = [(p, r) for p in problems for r in responses[p.id]]
    bar = None
    try:
        layers = engine.warmup()
        if engine.fatal:
            return [], engine.fatal, cfg
        cfg["sandbox_layers"] = {k: layers.get(k) for k in ("uid_drop", "seccomp", "landlock")}
        bar = progress(len(jobs)) if progress is not None else None

        def one(job):
            p, resp = job
            v = evaluate_response(resp, p.ground_truth, p.extra_info, engine=engine).verdict
            if bar is not None:
                bar.update(1)
            return v

        with ThreadPoolExecutor(max_workers=max(1, engine.size)) as pool:
            verdicts = list(pool.map(one, jobs))
    finally:
        if bar is not None:
            bar.close()
        engine.close()
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for (p, _), v in zip(jobs, verdicts):
        per[p.id][str(v)] += 1
    results = [ProblemResult(p.id, p.platform, p.difficulty, sum(per[p.id].values()), per[p.id].get("correct", 0),
                             dict(per[p.id]), p.date, p.title) for p in problems]
    return results, engine.fatal, cfg
