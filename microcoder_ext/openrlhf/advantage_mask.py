"""The conditional truncation mask on OpenRLHF 0.11.2 ``Experience`` batches (torch + ``microcoder_ext.core`` only).

Call :func:`apply_truncation_mask` on the list that ``RemoteExperienceMaker.compute_advantages_and_returns``
returns (GRPO: ``--algo.advantage.estimator group_norm``), i.e. after the group statistics. Per row it reads:

* truncation, by the one definition of :mod:`microcoder_ext.core.truncation`: the response used its whole budget
  and its last token is not a stop (EOS) token; the budget is ``--rollout.max_new_tokens``, or where that is unset
  what OpenRLHF gives the engine, ``max(1, --data.max_len - prompt length)`` (``openrlhf/utils/agent.py``). Without
  stop ids or a budget, OpenRLHF's own ``exp.truncated`` (vLLM ``finish_reason == "length"``) decides; where both
  exist and disagree, a WARNING is logged once (they agree unless the engine stops at other ids);
* the verdict: the one-hot ``exp.info["mc_verdict_<verdict>"]`` floats that
  :func:`microcoder_ext.openrlhf.reward.reward_func` returns in ``extra_logs`` (exactly one 1.0 per row). A row with
  none follows ``cfg.missing_verdict`` (``score``: ``info["score"]`` (else ``exp.scores``, else ``exp.rewards``)
  ``>= cfg.correct_score`` is ``correct``, else ``wrong_answer``; ``keep``: never masked; ``error``: raise); a row
  with several, or with an unknown ``mc_verdict_*`` key set, is never masked and counted in
  ``microcoder/verdict_unknown_frac`` (as in the verl adapter: both use :func:`~microcoder_ext.core.verdict_policy.resolve_verdicts`);
* the response tokens ``exp.sequences[j, 1:][exp.action_mask[j].bool()]`` (``action_mask`` is shifted by one
  against ``sequences``; rows are right-padded) for the repeat check.

The decision is the same core function as verl's and TRL's
(:func:`microcoder_ext.core.masking.compute_truncation_mask`), with the coins of ``cfg.generator(step)``: one
``U(0, 1)`` per row in the order of ``exp.index`` (the sample's place in the step's rollout batch), so the same sample
gets the same coin after a resume and whatever order the experiences arrived in.

Masked rows get ``advantages[j]`` and ``returns[j]`` zeroed in place; ``action_mask`` is untouched, so they stay in
the token-mean denominator, and the group mean/std were computed before (they count there too). Each experience
gets ``info["mc_trunc_masked"]`` (float, 1.0 = masked), which OpenRLHF logs as a rate.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from microcoder_ext.core.config import MaskConfig
from microcoder_ext.core.masking import compute_truncation_mask, response_tails
from microcoder_ext.core.verdict_policy import resolve_verdicts

logger = logging.getLogger(__name__)

VERDICT_PREFIX = "mc_verdict_"
MASKED_KEY = "mc_trunc_masked"


def response_tokens(exp: Any, j: int) -> torch.Tensor:
    """Row ``j``'s response token ids (``action_mask[t]`` flags ``sequences[t + 1]``)."""
    return exp.sequences[j, 1:][exp.action_mask[j].bool()]


def _row_verdicts(info: dict, batch: int) -> list[str | None]:
    """The one-hot ``mc_verdict_*`` floats -> one verdict string per row (None: no key set)."""
    keys = [k for k in info if isinstance(k, str) and k.startswith(VERDICT_PREFIX)]
    cols = {}
    for k in keys:
        col = torch.as_tensor(info[k]).reshape(-1)
        if col.numel() != batch:
            raise ValueError(f"info[{k!r}] has {col.numel()} values for {batch} rows (the reward must return the "
                             "same extra_logs keys for every sample)")
        cols[k[len(VERDICT_PREFIX):]] = col.float()
    out: list[str | None] = []
    for j in range(batch):
        hits = sorted(v for v, col in cols.items() if float(col[j]) > 0.5)
        # several hits -> a string outside the vocabulary: resolve_verdicts counts it unknown, never masked
        out.append(None if not hits else hits[0] if len(hits) == 1 else "+".join(hits))
    return out


def _row_scores(exp: Any, batch: int) -> list[float]:
    for value in (exp.info.get("score"), getattr(exp, "scores", None), getattr(exp, "rewards", None)):
        if value is not None:
            return [float(x) for x in torch.as_tensor(value).reshape(-1)[:batch]]
    return [0.0] * batch


_WARNED_DISAGREE = False


def _flags_and_budgets(experiences, rows, lengths, max_response_length, max_len):
    """OpenRLHF's ``truncated`` flag per row (None where absent) and the ``(rows,)`` budgets in tokens (None where
    neither ``max_response_length`` nor ``max_len`` with every row's ``total_length`` is known): see the module doc."""
    flags = []
    for _, e, j in rows:
        value = getattr(experiences[e], "truncated", None)
        flags.append(None if value is None else bool(value[j]))
    budgets = None
    if max_response_length is not None:
        budgets = torch.full((len(rows),), int(max_response_length), dtype=torch.long)
    elif max_len is not None:
        totals = []
        for _, e, j in rows:
            total = getattr(experiences[e], "total_length", None)
            totals.append(None if total is None else int(total[j]))
        if all(t is not None for t in totals):
            prompt = torch.tensor(totals, dtype=torch.long) - lengths
            budgets = (int(max_len) - prompt).clamp(min=1)
    return flags, budgets


def _warn_if_flags_disagree(ours: torch.Tensor, flags: list, stop_token_ids) -> None:
    """Log once where the token definition of truncation and OpenRLHF's flags differ (module doc)."""
    global _WARNED_DISAGREE
    if _WARNED_DISAGREE or any(f is None for f in flags):
        return
    theirs = torch.tensor(flags, dtype=torch.bool)
    if bool((ours != theirs).any()):
        _WARNED_DISAGREE = True
        logger.warning(
            "microcoder mask: %d of %d responses are truncated by token count and EOS but not by OpenRLHF's "
            "'truncated' flag (or the reverse); the mask uses the token definition (stop ids %s). Logged once",
            int((ours != theirs).sum()), len(flags), list(stop_token_ids))


def apply_truncation_mask(
    experiences: Sequence[Any],
    cfg: MaskConfig,
    *,
    step: int,
    max_response_length: int | None = None,
    max_len: int | None = None,
    stop_token_ids: Sequence[int] = (),
) -> dict[str, float]:
    """Zero the advantages (and returns) of the rows MicroCoder-GRPO masks, in place; return step metrics.

    Args:
        experiences: the ``Experience`` objects of one step, after ``compute_advantages_and_returns``.
        cfg: validated mask settings (``microcoder_ext.core.config.MaskConfig``).
        step: the global step; the coins come from ``cfg.generator(step)`` (resume-safe).
        max_response_length: ``--rollout.max_new_tokens`` (the budget of every response), or None.
        max_len: ``--data.max_len``: the budget is ``max_len - prompt length`` where ``max_response_length`` is None.
        stop_token_ids: EOS / stop ids (the tokenizer's and the model's generation config's).

    Returns:
        ``microcoder/*`` metrics with the verl names: ``masked_frac``, ``truncated_frac``, ``eligible_frac``,
        ``repeat_frac``, ``verdict/<v>``, ``verdict_missing_frac``, ``verdict_unknown_frac``
        (fractions of the step's responses). Empty when the mask is disabled or there are no rows.
    """
    rows: list[tuple[int, int, int]] = []  # (order key, experience number, row)
    flat = 0
    for e, exp in enumerate(experiences):
        batch = int(exp.sequences.shape[0])
        index = list(exp.index) if exp.index is not None else None
        if index is not None and len(index) != batch:
            raise ValueError(f"experience {e}: {len(index)} index entries for {batch} rows")
        for j in range(batch):
            rows.append((index[j] if index is not None else flat, e, j))
            flat += 1
        exp.info[MASKED_KEY] = torch.zeros(batch, dtype=torch.float32)
    if not cfg.enable or not rows:
        return {}
    if len({key for key, _, _ in rows}) != len(rows):  # no usable sample order: fall back to arrival order
        rows = [(i, e, j) for i, (_, e, j) in enumerate(rows)]
    rows.sort()

    verdict_of: dict[tuple[int, int], str | None] = {}
    score_of: dict[tuple[int, int], float] = {}
    for e, exp in enumerate(experiences):
        batch = int(exp.sequences.shape[0])
        for j, (v, s) in enumerate(zip(_row_verdicts(exp.info, batch), _row_scores(exp, batch), strict=True)):
            verdict_of[e, j], score_of[e, j] = v, s
    if cfg.missing_verdict == "error" and any(verdict_of[e, j] is None for _, e, j in rows):
        raise RuntimeError(
            "microcoder mask: the reward returned no one-hot 'mc_verdict_<verdict>' in its extra_logs. Use the "
            "microcoder reward (--reward.remote_url pointing at microcoder_ext/openrlhf/openrlhf_reward.py), return "
            "the verdict from yours, or set --mc.mask.missing_verdict score|keep"
        )
    infos = [None if verdict_of[e, j] is None else {cfg.verdict_key: verdict_of[e, j]} for _, e, j in rows]
    verdicts, metrics = resolve_verdicts(infos, [score_of[e, j] for _, e, j in rows], cfg)

    # only the last 2m tokens matter for the repeat check
    tails, lengths = response_tails([response_tokens(experiences[e], j) for _, e, j in rows], 2 * cfg.m)
    flags, budgets = _flags_and_budgets(experiences, rows, lengths, max_response_length, max_len)
    by_tokens = budgets is not None and bool(stop_token_ids)
    if not by_tokens and any(f is None for f in flags):
        raise ValueError("microcoder mask: cannot tell truncated responses: the experiences have no 'truncated' "
                         "flag and no budget (--rollout.max_new_tokens / --data.max_len) or stop ids were given")
    result, mask_metrics = compute_truncation_mask(
        tails, lengths, budgets, verdicts, cfg.rho, cfg.m, cfg.mode, cfg.repeat_check, cfg.generator(step),
        stop_token_ids=list(stop_token_ids) if by_tokens else None,
        truncated=None if by_tokens else torch.tensor(flags, dtype=torch.bool))
    if by_tokens:
        _warn_if_flags_disagree(result.truncated, flags, stop_token_ids)

    for (_, e, j), hit in zip(rows, result.masked.tolist(), strict=True):
        if not hit:
            continue
        exp = experiences[e]
        exp.advantages[j].zero_()
        if exp.returns is not None:
            exp.returns[j].zero_()
        exp.info[MASKED_KEY][j] = 1.0
    metrics.update(mask_metrics)
    return metrics
