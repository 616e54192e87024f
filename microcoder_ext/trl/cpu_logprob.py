"""The fused log-prob head of TRL 1.15 on a CPU.

TRL's ``GRPOTrainer`` computes per-token log-probs through ``add_fused_lm_head``, whose forward calls
``trl.trainer.utils._ChunkedLogProbFunction.apply(...)``. TRL 1.16 ships a torch path for devices without Triton;
TRL 1.15.0 does not: its kernel module imports ``triton`` unconditionally, so on CPU torch (no Triton)
``_ChunkedLogProbFunction`` is ``None`` and every training step fails with ``'NoneType' object has no attribute
'apply'``. :func:`ensure_fused_head` puts :class:`TorchChunkedLogProb` (the same computation in plain torch, with
autograd) in that slot, **only** when it is empty and the trainer runs on the CPU; on an accelerator it raises a
clear error instead (TRL 1.15 there needs Triton, as TRL itself does).
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

#: the optional outputs TRL's kernel computes, in the order it returns them (after the log-probs)
OPTIONAL_OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
#: tokens per block: the logits of one block (tokens x vocab, float32) are the largest tensor held
TOKEN_BLOCK = 1024


class TorchChunkedLogProb:
    """Drop-in for TRL's ``ChunkedLogProbFunction`` (same ``apply`` arguments and 5-tuple result), in torch.

    For ``hidden`` (N, H), ``weight`` (V, H), ``bias`` (V,) or None and ``targets`` (N,) it returns float32 tensors of
    shape (N,): the log-prob of each target under ``softcap * tanh(logit_scale * z / softcap) / temperature`` (the
    cap only when ``final_logit_softcapping`` is set), and, if named in ``outputs``, the entropy, log(sum p^2), the
    mean transformed logit and whether the target is the first arg-max; the others are None. The log-probs and the
    entropy carry gradients; the rest are detached, as in TRL. ``chunk_size`` (TRL's vocabulary chunk) is accepted
    and unused: this path works on blocks of tokens instead.
    """

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
              logit_scale=1.0, outputs=OPTIONAL_OUTPUTS):
        del chunk_size
        parts: list[list] = [[] for _ in range(5)]
        for start in range(0, hidden.shape[0], TOKEN_BLOCK):
            h = hidden[start:start + TOKEN_BLOCK].float()
            z = h @ weight.float().t()
            if bias is not None:
                z = z + bias.float()
            z = z * logit_scale
            if final_logit_softcapping is not None:
                z = final_logit_softcapping * torch.tanh(z / final_logit_softcapping)
            z = z / temperature
            logp_all = torch.log_softmax(z, dim=-1)
            t = targets[start:start + TOKEN_BLOCK].long().unsqueeze(-1)
            parts[0].append(logp_all.gather(-1, t).squeeze(-1))
            if "entropy" in outputs:
                parts[1].append(-(logp_all.exp() * logp_all).sum(-1))
            if "log_sum_sq_probs" in outputs:
                parts[2].append(torch.logsumexp(2 * logp_all, dim=-1).detach())
            if "mean_logits" in outputs:
                parts[3].append(z.mean(-1).detach())
            if "is_top1" in outputs:
                parts[4].append(z.argmax(-1) == t.squeeze(-1))
        if not parts[0]:  # no valid token: empty (0,) outputs, the log-probs still connected to the graph
            zero = (hidden.float() @ weight.float().t()).sum(-1)
            want = [True, *(name in outputs for name in OPTIONAL_OUTPUTS)]
            made = [zero, zero, zero.detach(), zero.detach(), zero.detach().bool()]
            return tuple(m if w else None for m, w in zip(made, want))
        return tuple(torch.cat(p) if p else None for p in parts)


def ensure_fused_head(device_type: str) -> bool:
    """Fill TRL's empty fused-head slot with :class:`TorchChunkedLogProb` for a run on ``device_type`` "cpu".

    Returns whether it did (False: TRL has its own kernel, as TRL 1.16 always does). Raises RuntimeError when the
    slot is empty on another device (TRL 1.15 without Triton on an accelerator)."""
    import trl.trainer.utils as tu

    if not hasattr(tu, "_ChunkedLogProbFunction"):
        raise RuntimeError("microcoder-ext: trl.trainer.utils has no _ChunkedLogProbFunction (the fused log-prob "
                           "head's kernel); this TRL release is not supported")
    if tu._ChunkedLogProbFunction is not None:
        return False
    if device_type != "cpu":
        raise RuntimeError(f"microcoder-ext: this TRL has no fused log-prob kernel on {device_type!r}: TRL 1.15 "
                           "needs Triton for it (`pip install triton`), or use TRL 1.16, which has a torch path")
    tu._ChunkedLogProbFunction = TorchChunkedLogProb
    logger.info("microcoder: TRL has no fused log-prob kernel without Triton; using microcoder_ext.trl.cpu_logprob "
                "on the CPU")
    return True
