"""Which verdict each row gets before the mask reads it: the reward's own, or -- when the reward gave none --
the ``microcoder.mask.missing_verdict`` policy (``score``: correct if the score reaches ``correct_score``;
``keep``: never masked; ``error``: stop). Shared by the verl and OpenRLHF adapters; framework-free.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.config import MaskConfig

logger = logging.getLogger("microcoder_ext.mask")


def resolve_verdicts(
    reward_infos: Sequence[Mapping[str, Any] | None],
    scores: Sequence[float],
    cfg: MaskConfig,
    *,
    hint: str = "return a verdict from the reward, or set microcoder.mask.missing_verdict=score|keep",
) -> tuple[list[str], dict[str, float]]:
    """Verdict per row from the reward's extra info, following ``cfg.missing_verdict`` (framework-free; each
    adapter passes ``hint``, how its users get a verdict to the mask, for the ``error`` policy).

    A row whose verdict is not in the vocabulary is treated as ``wrong_answer`` (never masked) and counted
    in ``microcoder/verdict_unknown_frac``; it never crashes the step.

    Returns:
        (verdicts, metrics) with one verdict string per row.
    """
    out: list[str] = []
    missing = unknown = 0
    bad_examples: list[object] = []
    for info, score in zip(reward_infos, scores, strict=True):
        value = (info or {}).get(cfg.verdict_key)
        if value is None:
            missing += 1
            if cfg.missing_verdict == "error":
                raise RuntimeError(
                    f"microcoder mask: the reward returned no '{cfg.verdict_key}' in its extra info. {hint}")
            if cfg.missing_verdict == "score":
                out.append(V.CORRECT if float(score) >= cfg.correct_score else V.WRONG_ANSWER)
            else:  # keep: never mask
                out.append(V.WRONG_ANSWER)
            continue
        if isinstance(value, bytes):
            value = value.decode()
        try:
            out.append(V.validate(value))
        except V.UnknownVerdictError:
            unknown += 1
            if len(bad_examples) < 3:
                bad_examples.append(value)
            out.append(V.WRONG_ANSWER)
    if unknown:
        logger.error(
            "microcoder mask: %d row(s) had verdicts outside the vocabulary (e.g. %r); they are not masked", unknown,
            bad_examples,
        )
    n = max(len(out), 1)
    metrics = {"microcoder/verdict_missing_frac": missing / n, "microcoder/verdict_unknown_frac": unknown / n}
    for v in V.ALL:
        metrics[f"microcoder/verdict/{v}"] = sum(x == v for x in out) / n
    return out, metrics
