"""Turns the per-trajectory rows verl 0.9 keeps in TransferQueue into the inputs of the core mask.

Framework-light on purpose (torch only): :class:`~microcoder_ext.verl.trainer.MicrocoderSyncTrainer` does the
TransferQueue I/O and calls :func:`compute_row_mask`, which picks the rows that decide and calls the core's
:func:`~microcoder_ext.core.masking.compute_truncation_mask` on them.

Rows and sessions: a v1 trajectory key is ``"{uid}_{session_id}_{index}"``. verl computes GRPO on each
session's *final* trajectory (highest index) and broadcasts that advantage to the session's other rows
(``verl/trainer/ppo/v1/utils.py:compute_advantage_for_multi_trajectories``); the mask follows the same rule:
decided on the final row, applied to every row of the session. Rows tagged ``is_padding`` (added by batch
balancing) are never masked and not counted in the metrics.

Verdicts: :func:`reward_infos_from_rows` reads them from ``extra_fields["reward_extra_info"]`` (reward computed
in the agent loop, verl's default) or from the top-level field ``verdict_key`` (colocated reward model); the
top-level field wins where both exist.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from microcoder_ext.core.config import MaskConfig
from microcoder_ext.core.masking import compute_truncation_mask, response_tails
from microcoder_ext.core.verdict_policy import resolve_verdicts as _resolve_verdicts


def session_of(key: str) -> tuple[str, int]:
    """``"{uid}_{session}_{index}"`` -> (``"{uid}_{session}"``, index)."""
    head, sep, index = key.rpartition("_")
    if not sep or not head or not index.lstrip("-").isdigit():
        raise ValueError(f"unexpected TransferQueue key {key!r}; expected '{{uid}}_{{session_id}}_{{index}}'")
    return head, int(index)


def _plain(value: Any) -> Any:
    """numpy scalars (``np.str_`` from verl's stacked arrays) -> Python objects; bytes -> str."""
    if isinstance(value, bytes):
        return value.decode()
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return item()
    return value


def reward_infos_from_rows(
    extra_fields: Sequence[Mapping[str, Any] | None],
    top_level: Sequence[Any] | None,
    verdict_key: str,
) -> list[dict[str, Any] | None]:
    """The reward's extra info per row, from either place verl 0.9.1 stores it in TransferQueue.

    * ``extra_fields[i]["reward_extra_info"]``: the reward computed in the agent loop while rolling out
      (verl's default, also with ``reward_model.enable_resource_pool=True``;
      ``verl/experimental/agent_loop/agent_loop.py:1026-1028``, ``verl/trainer/ppo/v1/agent_loop_tq.py:160-227``).
    * the top-level field named ``verdict_key``: with a colocated reward model (``reward.reward_model.enable=True``
      without ``enable_resource_pool``) verl scores after sampling and writes one top-level field per
      extra-info key (``verl/trainer/ppo/v1/trainer_base.py:1572-1579``, ``PPOTrainer._compute_reward_colocate``).

    Precedence, per row: a non-null top-level value wins (the colocated step also wrote the ``rm_scores`` the
    advantage is computed from); otherwise the ``reward_extra_info`` value; otherwise the verdict is missing and
    ``microcoder.mask.missing_verdict`` applies. Numpy scalars (verl stacks the values with ``np.array``) become
    Python values.

    Args:
        extra_fields: the TQ field ``extra_fields`` per row (None where absent).
        top_level: the TQ field ``verdict_key`` per row, or None when no row has it.
        verdict_key: ``microcoder.mask.verdict_key``.

    Returns:
        one dict (or None: no extra info at all) per row, holding the verdict under ``verdict_key``.
    """
    n = len(extra_fields)
    if top_level is not None and len(top_level) != n:
        raise ValueError(f"{len(top_level)} top-level '{verdict_key}' values for {n} rows")
    infos: list[dict[str, Any] | None] = []
    for i, extra in enumerate(extra_fields):
        nested = extra.get("reward_extra_info") if isinstance(extra, Mapping) else None
        info = dict(nested) if isinstance(nested, Mapping) else None
        value = _plain(top_level[i]) if top_level is not None else None
        if value is not None:
            info = info if info is not None else {}
            info[verdict_key] = value
        elif info is not None and info.get(verdict_key) is not None:
            info[verdict_key] = _plain(info[verdict_key])
        infos.append(info)
    return infos


#: how a verl user gets verdicts to the mask (the error of ``missing_verdict=error``)
VERL_HINT = ("Use the microcoder reward (reward.custom_reward_function.path=pkg://microcoder_ext.reward), return a "
             "verdict from yours, or set microcoder.mask.missing_verdict=score|keep")


def resolve_verdicts(reward_infos, scores, cfg: MaskConfig) -> tuple[list[str], dict[str, float]]:
    """:func:`microcoder_ext.core.verdict_policy.resolve_verdicts` with the verl hint."""
    return _resolve_verdicts(reward_infos, scores, cfg, hint=VERL_HINT)


def compute_row_mask(
    keys: Sequence[str],
    is_padding: Sequence[bool],
    responses: Sequence[torch.Tensor],
    reward_infos: Sequence[Mapping[str, Any] | None],
    scores: Sequence[float],
    max_response_length: int,
    cfg: MaskConfig,
    generator: torch.Generator | None = None,
    stop_token_ids: Sequence[int] = (),
) -> tuple[torch.Tensor, dict[str, float]]:
    """Which rows get their advantages zeroed.

    Args:
        keys: TransferQueue keys, one per row.
        is_padding: True for balancing padding rows.
        responses: 1-D token-id tensors (unpadded), one per row.
        reward_infos: the reward function's extra-info dict per row (:func:`reward_infos_from_rows`).
        scores: scalar reward per row (used only by ``missing_verdict=score``).
        max_response_length: ``actor_rollout_ref.rollout.response_length`` in tokens.
        cfg: validated mask settings.
        generator: coins for this step (``cfg.generator(step)``).
        stop_token_ids: EOS / stop ids (verl's responses keep the EOS the engine stopped at): a row that ends with
            one at the budget finished and is not truncated (:func:`microcoder_ext.core.truncation.is_truncated`).
            Empty: length alone decides (responses without stop tokens).

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
    tails, lengths = response_tails([responses[i] for i in deciders], 2 * cfg.m)
    result, mask_metrics = compute_truncation_mask(
        tails, lengths, int(max_response_length), verdicts, cfg.rho, cfg.m, cfg.mode, cfg.repeat_check, generator,
        stop_token_ids=tuple(stop_token_ids) or None)
    masked_sessions = {row_session[i] for i, hit in zip(deciders, result.masked.tolist()) if hit}
    for i, session in enumerate(row_session):
        row_mask[i] = session is not None and session in masked_sessions
    metrics.update(mask_metrics)
    return row_mask, metrics
