"""Conditional truncation mask (MicroCoder-GRPO, docs/paper.md#conditional-truncation-mask).
Pure functions, no framework imports.

After GRPO group normalisation the advantage of response ``i`` is zeroed iff all of

1. it was stopped by the length limit: ``len(o_i) >= max_response_length`` and its last token is not a stop
   token (:mod:`microcoder_ext.core.truncation`: one that ends with EOS exactly at the budget finished),
2. its verdict is allowed by ``mode``:
   ``"non_incorrect"`` (default, the paper's equation): any verdict outside
   :data:`~microcoder_ext.core.verdicts.INCORRECT` (correct, no_answer, sandbox_error);
   ``"correct_only"``: only ``correct``,
3. it does not end in a repetition loop (``repeat_check``):
   ``"block"`` (paper): ``o[-m:] != o[-2m:-m]`` token by token; responses shorter than ``2m`` never repeat;
   ``"periodic"``: additionally catches loops whose period ``p <= m`` does not divide ``m``: the last ``2m``
   tokens are periodic, ``w[j] == w[j + p]`` for all ``j``, for some ``1 <= p <= m``,
4. ``U_i < rho`` with a fresh ``U_i ~ Uniform(0, 1)``.

Masked rows keep their place in the group mean/std and in the token-mean denominator: only the
multiplier changes (``A_i * (1 - mask_i)``).

:func:`compute_truncation_mask` is the one entry point: the verl, OpenRLHF and TRL adapters gather their rows into
its tensors (:func:`response_tails`) and log the metrics it returns; :func:`conditional_truncation_mask` is the
same function on a whole padded batch, returning only the mask.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.truncation import is_truncated, last_tokens

MODES = ("non_incorrect", "correct_only")
REPEAT_CHECKS = ("block", "periodic")


class TruncationMask(NamedTuple):
    """Per-response booleans, each of shape ``(batch,)``."""

    masked: torch.Tensor  #: advantage must be zeroed
    truncated: torch.Tensor  #: condition 1
    verdict_ok: torch.Tensor  #: condition 2
    repeating: torch.Tensor  #: truncated and the tail repeats (condition 3 fails); False where not truncated
    eligible: torch.Tensor  #: conditions 1-3 (before the rho coin)
    no_answer: torch.Tensor | None = None  #: verdict ``no_answer`` (no complete code block: nothing was run)


def validate_mask_args(rho: float, m: int, mode: str, repeat_check: str) -> None:
    """Raise ``ValueError`` with a clear message for any invalid mask setting."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= float(rho) <= 1.0:
        raise ValueError(f"rho must be a probability in [0, 1], got {rho!r}")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m (repeat window, tokens) must be an integer >= 1, got {m!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if repeat_check not in REPEAT_CHECKS:
        raise ValueError(f"repeat_check must be one of {REPEAT_CHECKS}, got {repeat_check!r}")


def verdict_allows_mask(verdicts: Sequence[object], mode: str = "non_incorrect") -> torch.Tensor:
    """``(batch,)`` bool: condition 2. Unknown verdict strings raise :class:`~.verdicts.UnknownVerdictError`."""
    valid = V.validate_all(verdicts)
    if mode == "non_incorrect":
        return torch.tensor([v not in V.INCORRECT for v in valid], dtype=torch.bool)
    if mode == "correct_only":
        return torch.tensor([v == V.CORRECT for v in valid], dtype=torch.bool)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def tail_window(
    responses: torch.Tensor, response_lengths: torch.Tensor, width: int, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """The last ``width`` valid tokens of each selected row, shape ``(len(rows), width)``.

    Only ``rows x width`` elements are read (no copy of whole rows). Rows shorter than ``width`` are
    left-filled with their first token (callers must check the length).
    """
    if rows is None:
        rows = torch.arange(responses.shape[0], device=responses.device)
    lengths = response_lengths.to(torch.long)[rows]
    start = (lengths - width).clamp(min=0)
    idx = start.unsqueeze(1) + torch.arange(width, device=responses.device).unsqueeze(0)
    idx = idx.clamp(max=max(responses.shape[1] - 1, 0))
    return responses[rows.unsqueeze(1), idx]


def tail_repeats(
    responses: torch.Tensor,
    response_lengths: torch.Tensor,
    m: int = 128,
    repeat_check: str = "block",
    candidates: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(batch,)`` bool: the response ends in a repetition loop (see module doc). Never true below ``2m`` tokens.

    ``candidates`` (``(batch,)`` bool) restricts the check to those rows; the others are reported False.
    """
    if repeat_check not in REPEAT_CHECKS:
        raise ValueError(f"repeat_check must be one of {REPEAT_CHECKS}, got {repeat_check!r}")
    lengths = response_lengths.to(torch.long)
    check = lengths >= 2 * m
    if candidates is not None:
        check &= candidates
    rows = check.nonzero(as_tuple=True)[0]
    out = torch.zeros(responses.shape[0], dtype=torch.bool, device=responses.device)
    if rows.numel() == 0:
        return out
    w = tail_window(responses, lengths, 2 * m, rows)  # (k, 2m)
    if repeat_check == "block":
        rep = (w[:, m:] == w[:, :m]).all(dim=1)
    else:  # periodic
        rep = torch.zeros(rows.numel(), dtype=torch.bool, device=responses.device)
        for p in range(1, m + 1):  # loop over candidate periods, vectorised over rows and tokens
            rep |= (w[:, p:] == w[:, :-p]).all(dim=1)
    out[rows] = rep
    return out


def response_tails(
    responses: torch.Tensor | Sequence[torch.Tensor], width: int, lengths: torch.Tensor | Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each response's last ``width`` tokens: the compact input of :func:`compute_truncation_mask`.

    Args:
        responses: 1-D token-id tensors, one per response (unpadded; ``lengths`` None), or a ``(batch, T)``
            right-padded tensor with ``lengths``.
        width: columns of the result, in tokens (``2 * m`` is all the repeat check reads).
        lengths: ``(batch,)`` valid tokens per row of a padded ``responses``.

    Returns:
        ``(tails, lengths)``: ``tails`` ``(batch, width)`` int64, row ``i``'s last ``min(lengths[i], width)``
        tokens left-aligned and right-padded with 0; ``lengths`` ``(batch,)`` int64, each response's full length.
        From a padded tensor both stay on its device; from a list of tensors they are on the CPU.
    """
    if isinstance(responses, torch.Tensor):
        if responses.dim() != 2 or lengths is None:
            raise ValueError("response_tails: a tensor of responses must be (batch, T) and come with its lengths")
        lengths = torch.as_tensor(lengths, device=responses.device).to(torch.long).reshape(-1)
        cols = torch.arange(width, device=responses.device).unsqueeze(0)
        if responses.shape[1] == 0:
            return torch.zeros(responses.shape[0], width, dtype=torch.long, device=responses.device), lengths
        idx = ((lengths - width).clamp(min=0).unsqueeze(1) + cols).clamp(max=responses.shape[1] - 1)
        tails = responses.gather(1, idx).to(torch.long)
        return torch.where(cols < lengths.clamp(max=width).unsqueeze(1), tails, torch.zeros_like(tails)), lengths
    if lengths is not None:
        raise ValueError("response_tails: lengths go with a padded tensor; a list of tensors has its own")
    rows = [r.reshape(-1) for r in responses]
    tails = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        tail = row[-width:] if width else row[:0]
        tails[i, : tail.numel()] = tail.to(device="cpu", dtype=torch.long)
    return tails, torch.tensor([r.numel() for r in rows], dtype=torch.long)


def compute_truncation_mask(
    tails: torch.Tensor,
    response_lengths: torch.Tensor | Sequence[int],
    max_response_length: int | torch.Tensor | None,
    verdicts: Sequence[object],
    rho: float,
    m: int = 128,
    mode: str = "non_incorrect",
    repeat_check: str = "block",
    generator: torch.Generator | None = None,
    stop_token_ids: Sequence[int] | None = None,
    truncated: torch.Tensor | None = None,
) -> tuple[TruncationMask, dict[str, float]]:
    """The conditional truncation mask of one batch and its metrics: the entry point every adapter calls.

    Args:
        tails: ``(batch, width)`` response token ids: row ``i`` holds the last ``min(response_lengths[i], width)``
            tokens of response ``i``, left-aligned; later positions are padding and ignored. A whole right-padded
            batch (``width >= every length``) or the output of :func:`response_tails` (``width = 2 * m``: the
            repeat check reads no more). ``width < 2 * m`` is allowed only where no response is longer than it.
        response_lengths: ``(batch,)`` each response's full length in tokens.
        max_response_length: the response budget in tokens (``L_max``): an int, or ``(batch,)`` per-row budgets
            (an engine that shortens the budget of long prompts). Unused (may be None) where ``truncated`` is given.
        verdicts: ``batch`` verdict strings of :mod:`microcoder_ext.core.verdicts` (already resolved, e.g. by
            :func:`microcoder_ext.core.verdict_policy.resolve_verdicts`).
        rho: masking probability in ``[0, 1]`` (paper: 0.2).
        m: repeat window in tokens (paper: 128).
        mode: ``"non_incorrect"`` or ``"correct_only"``.
        repeat_check: ``"block"`` or ``"periodic"``.
        generator: seeded ``torch.Generator`` of the coins (e.g. ``MaskConfig.generator(step)``); one ``U(0, 1)`` is
            drawn per row, in row order, whatever the data.
        stop_token_ids: the EOS / stop ids: a response that ends with one at its budget finished and is not
            truncated (:func:`microcoder_ext.core.truncation.is_truncated`; an empty sequence raises there).
            None: the responses carry no stop tokens, ``length >= budget`` alone decides.
        truncated: ``(batch,)`` bool, condition 1 as the engine reported it, for a caller that has no budget or stop
            ids; it replaces the computation from lengths, budget and stop ids.

    Returns:
        ``(result, metrics)``: ``result.masked`` the ``(batch,)`` bool mask (True: zero this advantage) and each
        condition (:class:`TruncationMask`); ``metrics`` the ``microcoder/*`` batch fractions of :func:`mask_metrics`
        (``masked_frac``, ``truncated_frac``, ``eligible_frac``, ``repeat_frac``, ``truncated_no_answer_frac``,
        ``masked_no_answer_frac``).
    """
    validate_mask_args(rho, m, mode, repeat_check)
    if tails.dim() != 2:
        raise ValueError(f"tails must be (batch, width) token ids, got shape {tuple(tails.shape)}")
    batch, width = tails.shape
    lengths = torch.as_tensor(response_lengths, device=tails.device).to(torch.long).reshape(-1)
    if lengths.numel() != batch or len(verdicts) != batch or (truncated is not None and truncated.numel() != batch):
        raise ValueError(
            f"batch mismatch: tails {batch}, response_lengths {lengths.numel()}, verdicts {len(verdicts)}"
            + ("" if truncated is None else f", truncated {truncated.numel()}"))
    if batch and lengths.min() < 0:
        raise ValueError("response_lengths must be >= 0")
    if batch and width < 2 * m and bool((lengths > width).any()):
        raise ValueError(f"tails hold {width} tokens of responses up to {int(lengths.max())} long: the repeat check "
                         f"needs each response's last 2m = {2 * m} tokens (response_tails(..., 2 * m))")
    held = lengths.clamp(max=width)  # valid tokens in each row of tails
    if truncated is not None:
        truncated = truncated.to(device=tails.device, dtype=torch.bool).reshape(-1)
    elif max_response_length is None:
        raise ValueError("max_response_length is needed where truncated is not given")
    elif stop_token_ids is None:
        truncated = lengths >= torch.as_tensor(max_response_length, device=tails.device).to(torch.long)
    else:
        truncated = is_truncated(lengths, max_response_length, last_tokens(tails, held), stop_token_ids)
    repeating = tail_repeats(tails, held, m, repeat_check, candidates=truncated)
    result = combine_conditions(truncated, verdicts, repeating, rho, mode, generator)
    return result, mask_metrics(result)


def truncation_mask_components(
    responses: torch.Tensor,
    response_lengths: torch.Tensor | Sequence[int],
    max_response_length: int,
    verdicts: Sequence[object],
    rho: float,
    m: int = 128,
    mode: str = "non_incorrect",
    repeat_check: str = "block",
    generator: torch.Generator | None = None,
    stop_token_ids: Sequence[int] | None = None,
) -> TruncationMask:
    """:func:`compute_truncation_mask` on a whole right-padded batch ``responses`` ``(batch, max_len)``: each
    condition, without the metrics.

    One ``U(0, 1)`` is drawn for every row, masked or not, so the random stream does not depend on the data.
    """
    if responses.dim() != 2:
        raise ValueError(f"responses must be (batch, max_len) token ids, got shape {tuple(responses.shape)}")
    lengths = torch.as_tensor(response_lengths, dtype=torch.long, device=responses.device).reshape(-1)
    # the arguments and the batch sizes are checked by compute_truncation_mask; a whole batch holds every token
    if lengths.numel() and (lengths.min() < 0 or lengths.max() > responses.shape[1]):
        raise ValueError(f"response_lengths must lie in [0, {responses.shape[1]}] (responses.shape[1])")
    result, _ = compute_truncation_mask(responses, lengths, max_response_length, verdicts, rho, m, mode,
                                        repeat_check, generator, stop_token_ids)
    return result


def combine_conditions(
    truncated: torch.Tensor,
    verdicts: Sequence[object],
    repeating: torch.Tensor,
    rho: float,
    mode: str = "non_incorrect",
    generator: torch.Generator | None = None,
) -> TruncationMask:
    """Conditions 2 and 4 on top of precomputed ``truncated`` / ``repeating`` ``(batch,)`` bools.

    The last step of :func:`compute_truncation_mask`. One ``U(0, 1)`` is drawn per row whatever the data.
    """
    device = truncated.device
    verdict_ok = verdict_allows_mask(verdicts, mode).to(device)
    no_answer = torch.tensor([v == V.NO_ANSWER for v in V.validate_all(verdicts)], dtype=torch.bool, device=device)
    repeating = repeating & truncated
    eligible = truncated & verdict_ok & ~repeating
    u = torch.rand(truncated.shape[0], generator=generator, device=generator.device if generator is not None else "cpu")
    masked = eligible & (u.to(device) < float(rho))
    return TruncationMask(masked, truncated, verdict_ok, repeating, eligible, no_answer)


def conditional_truncation_mask(
    responses: torch.Tensor,
    response_lengths: torch.Tensor | Sequence[int],
    max_response_length: int,
    verdicts: Sequence[object],
    rho: float,
    m: int = 128,
    mode: str = "non_incorrect",
    repeat_check: str = "block",
    generator: torch.Generator | None = None,
    stop_token_ids: Sequence[int] | None = None,
) -> torch.Tensor:
    """Which advantages MicroCoder-GRPO zeroes.

    Args:
        responses: ``(batch, max_len)`` response token ids; tokens at positions ``>= response_lengths[i]``
            are padding and ignored.
        response_lengths: ``(batch,)`` number of valid response tokens per row.
        max_response_length: the rollout's response budget in tokens (``L_max``).
        verdicts: ``batch`` verdict strings from :mod:`microcoder_ext.core.verdicts`.
        rho: masking probability in ``[0, 1]`` (paper default 0.2).
        m: repeat window in tokens (paper: 128).
        mode: ``"non_incorrect"`` or ``"correct_only"``.
        repeat_check: ``"block"`` or ``"periodic"``.
        generator: optional seeded ``torch.Generator`` for reproducible coins.
        stop_token_ids: the EOS / stop ids; a row that ends with one at the budget finished and is not truncated
            (:func:`microcoder_ext.core.truncation.is_truncated`). ``None``: the responses carry no stop tokens
            (stripped by the caller), so ``length >= max_response_length`` alone decides.

    Returns:
        ``torch.BoolTensor`` of shape ``(batch,)``, True where the advantage must be zeroed.
    """
    return truncation_mask_components(
        responses, response_lengths, max_response_length, verdicts, rho, m, mode, repeat_check, generator,
        stop_token_ids,
    ).masked


def mask_metrics(result: TruncationMask, prefix: str = "microcoder/") -> dict[str, float]:
    """Batch fractions (denominator = number of responses) for logging.

    ``masked_no_answer_frac``: responses masked although they never closed a code block (verdict ``no_answer``,
    nothing run). The mask's known blind spot: under ``mode="non_incorrect"`` a response that rambles to the budget
    without an answer is spared the penalty of a wrong one. A rising value means the policy is learning to run out
    of tokens instead of answering; ``mode="correct_only"`` masks only correct responses and never these.
    ``truncated_no_answer_frac``: truncated responses with no answer, masked or not."""
    n = max(int(result.masked.numel()), 1)

    def frac(t: torch.Tensor) -> float:
        return float(t.sum().item()) / n

    no_answer = result.no_answer if result.no_answer is not None else torch.zeros_like(result.masked)
    return {
        f"{prefix}truncated_frac": frac(result.truncated),
        f"{prefix}eligible_frac": frac(result.eligible),
        f"{prefix}repeat_frac": frac(result.truncated & result.repeating),
        f"{prefix}masked_frac": frac(result.masked),
        f"{prefix}truncated_no_answer_frac": frac(result.truncated & no_answer),
        f"{prefix}masked_no_answer_frac": frac(result.masked & no_answer),
    }
