"""Conditional truncation mask (MicroCoder-GRPO, paper-spec §3). Pure functions, no framework imports.

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
    """Like :func:`conditional_truncation_mask` but also returns each condition (for metrics).

    One ``U(0, 1)`` is drawn for every row, masked or not, so the random stream does not depend on the data.
    """
    validate_mask_args(rho, m, mode, repeat_check)
    if responses.dim() != 2:
        raise ValueError(f"responses must be (batch, max_len) token ids, got shape {tuple(responses.shape)}")
    batch = responses.shape[0]
    lengths = torch.as_tensor(response_lengths, dtype=torch.long, device=responses.device).reshape(-1)
    if lengths.numel() != batch or len(verdicts) != batch:
        raise ValueError(
            f"batch mismatch: responses {batch}, response_lengths {lengths.numel()}, verdicts {len(verdicts)}"
        )
    if batch and (lengths.min() < 0 or lengths.max() > responses.shape[1]):
        raise ValueError(f"response_lengths must lie in [0, {responses.shape[1]}] (responses.shape[1])")

    if stop_token_ids is None:  # the responses carry no stop tokens: length alone decides
        truncated = lengths >= int(max_response_length)
    else:
        truncated = is_truncated(lengths, int(max_response_length), last_tokens(responses, lengths), stop_token_ids)
    repeating = tail_repeats(responses, lengths, m, repeat_check, candidates=truncated)
    return combine_conditions(truncated, verdicts, repeating, rho, mode, generator)


def combine_conditions(
    truncated: torch.Tensor,
    verdicts: Sequence[object],
    repeating: torch.Tensor,
    rho: float,
    mode: str = "non_incorrect",
    generator: torch.Generator | None = None,
) -> TruncationMask:
    """Conditions 2 and 4 on top of precomputed ``truncated`` / ``repeating`` ``(batch,)`` bools.

    For callers that hold only response tails (see :mod:`microcoder_ext.verl.advantage_mask`).
    One ``U(0, 1)`` is drawn per row whatever the data.
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
