"""Exact-name CPU stand-ins for ``flash_attn`` and ``vllm`` so that OpenRLHF 0.11.2 imports without a GPU.

OpenRLHF imports these at module level (``openrlhf/models/ring_attn_utils.py:3-4``,
``openrlhf/trainer/ray/vllm_engine.py:7,11-12``, ``openrlhf/trainer/ppo_utils/samples_generator.py:7``), but neither
package installs on a CPU-only machine. ``install()`` registers one small module per name in ``STUBS`` (and nothing
else) with ``sys.modules.setdefault``:

* every stub has a real ``__spec__`` (``ModuleSpec(name, None)``), so ``importlib.util.find_spec`` and pickling
  behave, and ``__microcoder_cpu_stub__ = True``;
* a stub defines only the names OpenRLHF imports from it. ``SamplingParams``, ``TokensPrompt`` and ``random_uuid``
  work like their vLLM counterparts; the ``flash_attn`` kernels raise ``NotImplementedError`` when called;
* names outside ``STUBS`` stay unimportable. This matters: ``log_probs_from_logits`` tries
  ``from flash_attn.ops.triton.cross_entropy import cross_entropy_loss`` and falls back to torch on ``ImportError``
  (``openrlhf/models/utils.py:179-188``); a catch-all import finder (or ``MagicMock`` package) would make it return
  a mock instead of a tensor. Likewise ``vllm.distributed.*`` (``openrlhf/utils/distributed_util.py:21-22``, GPU
  weight sync only) is left missing on purpose.

A really installed ``flash_attn`` / ``vllm`` is never shadowed: if the top-level package can be found, none of its
stubs are installed.

``compat/`` is not a package: load this file by path, e.g. from a ``conftest.py``::

    spec = importlib.util.spec_from_file_location("microcoder_cpu_stubs", ROOT / "compat" / "cpu_stubs.py")
    ...; spec.loader.exec_module(mod); mod.install()
"""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import sys
import types
import uuid

__all__ = ["STUBS", "install", "installed", "is_stub"]


def _kernel(name: str):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"{name} is a CPU test stub (flash-attn is not installed)")

    unavailable.__name__ = unavailable.__qualname__ = name.rsplit(".", 1)[-1]
    return unavailable


class SamplingParams:
    """Keyword container standing in for ``vllm.SamplingParams`` (attributes = the keywords; copyable, picklable)."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    def __eq__(self, other):
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __repr__(self):
        return f"SamplingParams({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class TokensPrompt(dict):
    """``vllm.inputs.TokensPrompt`` is a ``TypedDict``: calling it builds a plain dict."""


def random_uuid() -> str:
    return uuid.uuid4().hex


_BERT_PADDING = ("index_first_axis", "pad_input", "rearrange", "unpad_input")

#: exact module name -> the attributes OpenRLHF 0.11.2 imports from it
STUBS: dict[str, dict] = {
    "flash_attn": {},
    "flash_attn.bert_padding": {n: _kernel(f"flash_attn.bert_padding.{n}") for n in _BERT_PADDING},
    "flash_attn.utils": {},
    "flash_attn.utils.distributed": {"all_gather": _kernel("flash_attn.utils.distributed.all_gather")},
    "vllm": {"SamplingParams": SamplingParams},
    "vllm.inputs": {"TokensPrompt": TokensPrompt},
    "vllm.utils": {"random_uuid": random_uuid},
}
_ROOTS = ("flash_attn", "vllm")


def _really_installed(root: str) -> bool:
    mod = sys.modules.get(root)
    if mod is not None:
        return not is_stub(mod)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


def is_stub(module) -> bool:
    return bool(getattr(module, "__microcoder_cpu_stub__", False))


def _make(name: str, attrs: dict) -> types.ModuleType:
    mod = types.ModuleType(name, f"microcoder-ext CPU test stub for {name} (compat/cpu_stubs.py)")
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__loader__ = None
    mod.__package__ = name.rpartition(".")[0]
    mod.__microcoder_cpu_stub__ = True
    for key, value in attrs.items():
        if isinstance(value, type) or callable(value):
            try:
                value.__module__ = name
            except (AttributeError, TypeError):
                pass
        setattr(mod, key, value)
    return mod


def install() -> list[str]:
    """Register the stubs (idempotent). Returns the names whose entry in ``sys.modules`` is a stub."""
    skip = {root for root in _ROOTS if _really_installed(root)}
    for name, attrs in STUBS.items():
        if name.split(".")[0] in skip:
            continue
        mod = sys.modules.setdefault(name, _make(name, attrs))
        parent, _, child = name.rpartition(".")
        if parent and is_stub(mod) and is_stub(sys.modules.get(parent)):
            setattr(sys.modules[parent], child, mod)  # `import flash_attn.utils.distributed` walks attributes
    return installed()


def installed() -> list[str]:
    return [name for name in STUBS if is_stub(sys.modules.get(name))]


if __name__ == "__main__":
    print("\n".join(install()))
