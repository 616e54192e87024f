"""Exact-name ``flash_attn`` stand-ins: what OpenRLHF 0.11.2 imports at module level, nothing more.

``openrlhf/models/ring_attn_utils.py`` imports ``flash_attn.bert_padding`` (``index_first_axis``, ``pad_input``,
``rearrange``, ``unpad_input``) and ``flash_attn.utils.distributed.all_gather``; they are only *called* on the packed
path (``--ds.packing_samples``, which ``--train.dynamic_batch_enable`` and ``--ds.ring_attn_size > 1`` switch on),
which a CPU run cannot take: here each raises ``NotImplementedError`` naming the flag. ``flash_attn.ops.*`` stays
missing, so ``log_probs_from_logits`` uses its torch path.
"""

from __future__ import annotations

from microcoder_ext.openrlhf.cpu import modules

ROOT = "flash_attn"
_BERT_PADDING = ("index_first_axis", "pad_input", "rearrange", "unpad_input")


def _unavailable(qualname: str):
    def flash_attn_kernel(*args, **kwargs):
        raise NotImplementedError(
            f"{qualname}: flash-attention is a GPU kernel; microcoder-ext's CPU backend only stands in for its "
            "import. Drop --ds.packing_samples / --train.dynamic_batch_enable / --ds.ring_attn_size on the CPU")

    flash_attn_kernel.__name__ = flash_attn_kernel.__qualname__ = qualname.rsplit(".", 1)[-1]
    flash_attn_kernel.__module__ = qualname.rpartition(".")[0]
    return flash_attn_kernel


#: exact module name -> attributes
MODULES: dict[str, dict] = {
    "flash_attn": {},
    "flash_attn.bert_padding": {n: _unavailable(f"flash_attn.bert_padding.{n}") for n in _BERT_PADDING},
    "flash_attn.utils": {},
    "flash_attn.utils.distributed": {"all_gather": _unavailable("flash_attn.utils.distributed.all_gather")},
}


def install() -> list[str]:
    """Register :data:`MODULES` (refuses if a real flash_attn is importable)."""
    return modules.install(ROOT, MODULES, "microcoder-ext CPU stand-in for {name} (imports only; "
                                          "microcoder_ext/openrlhf/cpu/flash_attn_standin.py)")
