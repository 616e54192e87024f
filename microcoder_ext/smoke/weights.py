"""Content checksums of model weights, computed the same way on both ends of a weight sync (torch only).

The trainer side checksums the tensors it sends; the engine side (:mod:`microcoder_ext.smoke.vllm_cpu`) checksums
what it holds after loading them, in the trainer's (Hugging Face) names and dtype, so equal checksums mean the engine
serves exactly the trainer's weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def tensor_checksum(tensor: torch.Tensor) -> str:
    """SHA-256 (first 16 hex digits) of one tensor's dtype, shape and exact bytes."""
    t = tensor.detach().to("cpu").contiguous()
    h = hashlib.sha256()
    h.update(str(t.dtype).encode())
    h.update(str(tuple(t.shape)).encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def combine(per_tensor: dict[str, str]) -> str:
    """One checksum over ``name -> tensor_checksum`` (order-independent: names sorted)."""
    h = hashlib.sha256()
    for name in sorted(per_tensor):
        h.update(name.encode())
        h.update(per_tensor[name].encode())
    return h.hexdigest()[:16]


def weights_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """:func:`combine` over :func:`tensor_checksum` of each named tensor (a later duplicate name wins)."""
    return combine({name: tensor_checksum(t) for name, t in named_tensors})
