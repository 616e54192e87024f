"""What "stopped by the length limit" means: the one definition every adapter uses
(docs/paper.md#conditional-truncation-mask, condition 1).

A response is **truncated** iff it used its whole token budget *and* its last token is not a stop token (EOS or
another id the sampler stops at). A response that ends with EOS exactly at the budget finished on its own: it is
not truncated. This is what the engines themselves report (vLLM's ``finish_reason == "length"``, OpenRLHF's
``Experience.truncated``, TRL's "no EOS in the completion"), computed from the tokens so that verl, whose vLLM
server maps both "stop" and "length" to one ``stop_reason``, gets the same answer.

Shapes: ``lengths`` ``(batch,)`` valid response tokens per row; ``budget`` an int or ``(batch,)`` tokens (a
per-row budget where the engine shortens it for long prompts); ``last_tokens`` ``(batch,)`` the id of each row's
last valid token (any value where ``lengths == 0``).
"""

from __future__ import annotations

from typing import Iterable

import torch


def stop_token_ids(*sources: object) -> tuple[int, ...]:
    """The distinct stop ids from any mix of ints, lists of ints and ``None`` (e.g. a tokenizer's
    ``eos_token_id`` and a generation config's ``eos_token_id``, which may be a list)."""
    out: list[int] = []
    for src in sources:
        if src is None:
            continue
        items: Iterable = src if isinstance(src, (list, tuple, set, frozenset)) else (src,)
        for item in items:
            if item is None or isinstance(item, bool):
                continue
            value = int(item)
            if value not in out:
                out.append(value)
    return tuple(out)


def last_tokens(responses: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``(batch,)`` the last valid token of each right-padded row of ``responses`` ``(batch, width)`` (0 if empty)."""
    lengths = lengths.to(torch.long)
    if responses.shape[1] == 0:
        return torch.zeros(responses.shape[0], dtype=responses.dtype, device=responses.device)
    idx = (lengths - 1).clamp(min=0, max=responses.shape[1] - 1).unsqueeze(1)
    return responses.gather(1, idx).squeeze(1)


def is_truncated(lengths: torch.Tensor, budget: int | torch.Tensor, last: torch.Tensor,
                 stop_ids: Iterable[int]) -> torch.Tensor:
    """``(batch,)`` bool: the row hit its budget (``length >= budget``) and did not end with a stop token.

    Raises ``ValueError`` if no stop id is given (then "ended with EOS" cannot be decided) or a budget is < 1.
    """
    stop = torch.tensor(list(stop_ids), dtype=torch.long, device=lengths.device)
    if stop.numel() == 0:
        raise ValueError("is_truncated needs the stop (EOS) token ids: without them a response that ended with EOS "
                         "at the budget cannot be told from one that was cut there")
    lengths = lengths.to(torch.long)
    budget_t = torch.as_tensor(budget, dtype=torch.long, device=lengths.device)
    if bool((budget_t < 1).any()):
        raise ValueError(f"the response budget must be >= 1 token, got {budget}")
    at_budget = (lengths >= budget_t) & (lengths > 0)
    ended = torch.isin(last.to(torch.long), stop)
    return at_budget & ~ended


def truncated_rows(responses: Iterable[torch.Tensor], budget: int | torch.Tensor,
                   stop_ids: Iterable[int]) -> torch.Tensor:
    """:func:`is_truncated` for a list of unpadded 1-D response token tensors."""
    rows = list(responses)
    lengths = torch.tensor([int(r.numel()) for r in rows], dtype=torch.long)
    last = torch.tensor([int(r.reshape(-1)[-1]) if r.numel() else -1 for r in rows], dtype=torch.long)
    return is_truncated(lengths, budget, last, stop_ids)
