"""Weight checksums (both ends of a sync) and the engine-side rebuild of vLLM's merged parameters in the trainer's
names (:mod:`microcoder_ext.smoke.weights`, :func:`microcoder_ext.smoke.vllm_cpu.hf_layout`). The real engine is
exercised end to end in tests/verl/test_smoke_e2e.py and tests/openrlhf/test_smoke_e2e.py."""

import torch
from torch import nn

from microcoder_ext.smoke.vllm_cpu import hf_layout, packed_kernel_error
from microcoder_ext.smoke.weights import combine, tensor_checksum, weights_checksum


def test_checksum_is_order_free_and_exact():
    a = {"x": torch.ones(3), "y": torch.arange(4.0)}
    assert weights_checksum(a.items()) == weights_checksum(reversed(list(a.items())))
    b = dict(a, y=torch.arange(4.0) + 1e-7)
    assert weights_checksum(a.items()) != weights_checksum(b.items())
    assert weights_checksum({"x": torch.ones(3, dtype=torch.bfloat16)}.items()) != weights_checksum(
        {"x": torch.ones(3)}.items())
    assert tensor_checksum(torch.ones(2, 3)) != tensor_checksum(torch.ones(3, 2))  # shape counts
    assert combine({"x": tensor_checksum(a["x"]), "y": tensor_checksum(a["y"])}) == weights_checksum(a.items())


class _Merged(nn.Module):
    """The shape of a vLLM merged linear layer (what hf_layout reads: weight/bias, output_partition_sizes)."""

    def __init__(self, sizes, k, bias=False):
        super().__init__()
        self.output_partition_sizes = list(sizes)
        self.weight = nn.Parameter(torch.randn(sum(sizes), k))
        self.bias = nn.Parameter(torch.randn(sum(sizes))) if bias else None


class _Embedding(nn.Module):
    def __init__(self, vocab, padded, dim):
        super().__init__()
        self.org_vocab_size = vocab
        self.weight = nn.Parameter(torch.randn(padded, dim))


class _Model(nn.Module):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = _Embedding(10, 16, 8)
        layer = nn.Module()
        layer.self_attn = nn.Module()
        layer.self_attn.qkv_proj = _Merged([8, 4, 4], 8, bias=True)
        layer.mlp = nn.Module()
        layer.mlp.gate_up_proj = _Merged([6, 6], 8)
        layer.mlp.down_proj = _Merged([8], 6)
        self.model.layers = nn.ModuleList([layer])
        self.lm_head = self.model.embed_tokens  # tied


def test_hf_layout_splits_merged_layers_and_drops_vocab_padding():
    m = _Model()
    out, unmapped = hf_layout(m)
    assert unmapped == []
    qkv = m.model.layers[0].self_attn.qkv_proj
    p = "model.layers.0."
    assert torch.equal(out[p + "self_attn.q_proj.weight"], qkv.weight[:8])
    assert torch.equal(out[p + "self_attn.k_proj.weight"], qkv.weight[8:12])
    assert torch.equal(out[p + "self_attn.v_proj.bias"], qkv.bias[12:])
    assert out[p + "mlp.gate_proj.weight"].shape == (6, 8) and out[p + "mlp.up_proj.weight"].shape == (6, 8)
    assert out[p + "mlp.down_proj.weight"].shape == (8, 6)  # one partition: kept as is
    assert out["model.embed_tokens.weight"].shape == (10, 8)  # padding rows dropped
    assert torch.equal(out["lm_head.weight"], out["model.embed_tokens.weight"])  # the tied head is there too
    assert hf_layout(m, torch.bfloat16)[0]["lm_head.weight"].dtype == torch.bfloat16


def test_hf_layout_reports_what_it_cannot_map():
    m = _Model()
    m.model.layers[0].mlp.down_proj.weight = nn.Parameter(torch.empty(0))  # packed without its weight
    _, unmapped = hf_layout(m)
    assert unmapped == ["model.layers.0.mlp.down_proj.weight (empty: packed without its weight)"]


def test_packed_kernel_error_sees_a_stale_packed_copy():
    layer = _Merged([8], 8)
    stale = layer.weight.detach().clone()
    layer.cpu_linear = lambda x, w, b: torch.nn.functional.linear(x, stale, b)  # packed from these weights
    assert packed_kernel_error(layer) < 1e-6
    with torch.no_grad():
        layer.weight.add_(1.0)  # loaded new weights, not re-packed
    assert packed_kernel_error(layer) > 0.1
