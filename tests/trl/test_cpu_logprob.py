"""The fused log-prob head on a CPU: ``microcoder_ext.trl.cpu_logprob`` (TRL 1.15.0 has no kernel without Triton).

Checked against a plain ``log_softmax`` reference and, where the installed TRL has its own torch path (1.16), against
TRL's kernel itself; then the slot logic on the installed TRL's real module."""

from __future__ import annotations

from importlib import metadata

import pytest
import torch
import trl.trainer.utils as tu

from microcoder_ext.trl import cpu_logprob
from microcoder_ext.trl.cpu_logprob import OPTIONAL_OUTPUTS, TorchChunkedLogProb

TRL = metadata.version("trl")


def _reference(h, w, b, t, temperature, softcap, scale):
    z = h.float() @ w.float().t() + (0 if b is None else b.float())
    z = z * scale
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    z = z / temperature
    logp = torch.log_softmax(z, -1)
    first_max = z.argmax(-1)
    return (logp.gather(-1, t[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1),
            torch.log((logp.exp() ** 2).sum(-1)), z.mean(-1), first_max == t)


@pytest.mark.parametrize("softcap", [None, 4.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_a_plain_log_softmax(softcap, with_bias, monkeypatch):
    monkeypatch.setattr(cpu_logprob, "TOKEN_BLOCK", 7)  # several token blocks
    g = torch.Generator().manual_seed(0)
    n, hdim, vocab = 23, 8, 40
    h = torch.randn(n, hdim, generator=g, requires_grad=True)
    w = torch.randn(vocab, hdim, generator=g, requires_grad=True)
    b = torch.randn(vocab, generator=g) if with_bias else None
    t = torch.randint(0, vocab, (n,), generator=g)
    got = TorchChunkedLogProb.apply(h, w, b, t, 0.7, 16, softcap, 1.3, OPTIONAL_OUTPUTS)
    want = _reference(h, w, b, t, 0.7, softcap, 1.3)
    for name, x, y in zip(("log_probs", *OPTIONAL_OUTPUTS), got, want):
        assert x.shape == (n,), name
        if name == "is_top1":
            assert torch.equal(x, y)
        else:
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5, msg=name)
    # gradients of the log-probs and the entropy (entropy_coef), through both inputs
    g1 = torch.autograd.grad(got[0].sum() + 0.3 * got[1].sum(), (h, w))
    g2 = torch.autograd.grad(want[0].sum() + 0.3 * want[1].sum(), (h, w))
    for a, c in zip(g1, g2):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    assert not got[2].requires_grad and not got[3].requires_grad  # detached, as in TRL


def test_only_the_requested_outputs_and_no_token():
    h = torch.randn(5, 4, requires_grad=True)
    w = torch.randn(9, 4)
    out = TorchChunkedLogProb.apply(h, w, None, torch.zeros(5, dtype=torch.long), 1.0, 16, None, 1.0, ("entropy",))
    assert out[1] is not None and out[2:] == (None, None, None)
    empty = TorchChunkedLogProb.apply(h[:0], w, None, torch.zeros(0, dtype=torch.long), 1.0, 16, None, 1.0, ())
    assert empty[0].shape == (0,) and empty[0].requires_grad and empty[1:] == (None,) * 4


def test_matches_trls_own_torch_kernel():
    """TRL 1.16's kernel has a torch path on the CPU: the stand-in computes the same numbers. TRL 1.15.0 has none
    here: its kernel module needs Triton."""
    if TRL.startswith("1.15."):
        with pytest.raises(ImportError, match="triton"):
            import trl.kernels  # noqa: F401
        return
    g = torch.Generator().manual_seed(1)
    h, w = torch.randn(31, 16, generator=g), torch.randn(50, 16, generator=g)
    b, t = torch.randn(50, generator=g), torch.randint(0, 50, (31,), generator=g)
    ours = TorchChunkedLogProb.apply(h, w, b, t, 1.2, 16, 3.0, 0.9, OPTIONAL_OUTPUTS)
    trls = tu._ChunkedLogProbFunction.apply(h, w, b, t, 1.2, 16, 3.0, 0.9, OPTIONAL_OUTPUTS)
    for x, y in zip(ours, trls):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5, check_dtype=False)


def test_the_slot_is_filled_only_where_trl_left_it_empty(monkeypatch):
    before = tu._ChunkedLogProbFunction
    if TRL.startswith("1.15."):  # TRL 1.15.0 on CPU torch (no Triton) has no kernel (a trainer built before fills it)
        assert before in (None, TorchChunkedLogProb)
    else:
        assert before is not None
        assert cpu_logprob.ensure_fused_head("cpu") is False and tu._ChunkedLogProbFunction is before
    monkeypatch.setattr(tu, "_ChunkedLogProbFunction", None)
    with pytest.raises(RuntimeError, match="TRL 1.15 needs Triton"):
        cpu_logprob.ensure_fused_head("cuda")
    assert tu._ChunkedLogProbFunction is None  # never on an accelerator
    assert cpu_logprob.ensure_fused_head("cpu") is True
    assert tu._ChunkedLogProbFunction is TorchChunkedLogProb
