"""Turns the per-trajectory rows verl 0.9 keeps in TransferQueue into the inputs of the core mask.

Framework-light on purpose (torch only): :class:`~microcoder_ext.verl.trainer.MicrocoderSyncTrainer` does the
TransferQueue I/O and calls :func:`compute_row_mask`.

Rows and sessions: a v1 trajectory key is ``"{uid}_{session_id}_{index}"``. verl computes GRPO on each
session's *final* trajectory (highest index) and broadcasts that advantage to the session's other rows
(``verl/trainer/ppo/v1/utils.py:compute_advantage_for_multi_trajectories``); the mask follows the same rule:
decided on the final row, applied to every row of the session. Rows tagged ``is_padding`` (added by batch
balancing) are never masked and not counted in the metrics.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import torch

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.config import MaskConfig
from microcoder_ext.core.masking import combine_conditions, mask_metrics, tail_repeats

logger = logging.getLogger(__name__)


def session_of(key: str) -> tuple[str, int]:
    """``"{uid}_{session}_{index}"`` -> (``"{uid}_{session}"``, index)."""
    head, sep, index = key.rpartition("_")
    if not sep or not head or not index.lstrip("-").isdigit():
        raise ValueError(f"unexpected TransferQueue key {key!r}; expected '{{uid}}_{{session_id}}_{{index}}'")
    return head, int(index)


def resolve_verdicts(
    reward_infos: Sequence[Mapping[str, Any] | None],
    scores: Sequence[float],
    cfg: MaskConfig,
) -> tuple[list[str], dict[str, float]]:
    """Verdict per row from the reward's extra info, following ``cfg.missing_verdict``.

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
                    f"microcoder mask: the reward returned no '{cfg.verdict_key}' in its extra info. Use the "
                    "microcoder reward (reward.custom_reward_function.path=pkg://microcoder_ext.reward), return a "
                    "verdict from yours, or set microcoder.mask.missing_verdict=score|keep"
                )
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


def compute_row_mask(
    keys: Sequence[str],
    is_padding: Sequence[bool],
    responses: Sequence[torch.Tensor],
    reward_infos: Sequence[Mapping[str, Any] | None],
    scores: Sequence[float],
    max_response_length: int,
    cfg: MaskConfig,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Which rows get their advantages zeroed.

    Args:
        keys: TransferQueue keys, one per row.
        is_padding: True for balancing padding rows.
        responses: 1-D token-id tensors (unpadded), one per row.
        reward_infos: the reward function's extra-info dict per row (``extra_fields["reward_extra_info"]``).
        scores: scalar reward per row (used only by ``missing_verdict=score``).
        max_response_length: ``actor_rollout_ref.rollout.response_length`` in tokens.
        cfg: validated mask settings.
        generator: coins for this step (``cfg.generator(step)``).

    Returns:
        (``(rows,)`` bool mask, metrics dict with ``microcoder/*`` batch fractions over the decided rows).
    """
    n = len(keys)
    if not (len(is_padding) == len(responses) == len(reward_infos) == len(scores) == n):
        raise ValueError("keys, is_padding, responses, reward_infos and scores must have the same length")
    # the final (highest index) non-padding row of each session decides for the whole session
    final: dict[str, tuple[int, int]] = {}
    row_session: list[str | None] = []
    for i, key in enumerate(keys):
        if is_padding[i]:
            row_session.append(None)
            continue
        session, index = session_of(key)
        row_session.append(session)
        if session not in final or final[session][0] < index:
            final[session] = (index, i)
    deciders = [i for _, i in final.values()]
    row_mask = torch.zeros(n, dtype=torch.bool)
    if not deciders:
        return row_mask, {}

    verdicts, metrics = resolve_verdicts([reward_infos[i] for i in deciders], [scores[i] for i in deciders], cfg)
    # only each response's last 2m tokens matter for the repeat check: never pad whole responses
    window = 2 * cfg.m
    lengths = torch.tensor([int(responses[i].numel()) for i in deciders], dtype=torch.long)
    tails = torch.nn.utils.rnn.pad_sequence(
        [responses[i].reshape(-1)[-window:].to(torch.long) for i in deciders], batch_first=True, padding_value=0
    )
    truncated = lengths >= int(max_response_length)
    repeating = tail_repeats(tails, lengths.clamp(max=window), cfg.m, cfg.repeat_check, candidates=truncated)
    result = combine_conditions(truncated, verdicts, repeating, cfg.rho, cfg.mode, generator)
    masked_sessions = {row_session[i] for i, hit in zip(deciders, result.masked.tolist()) if hit}
    for i, session in enumerate(row_session):
        row_mask[i] = session is not None and session in masked_sessions
    metrics.update(mask_metrics(result))
    return row_mask, metrics
