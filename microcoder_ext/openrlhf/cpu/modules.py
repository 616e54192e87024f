"""The one builder of exact-name stand-in modules in ``sys.modules`` (no import finder, no catch-all module).

Three users, each with its own mark (so that one never mistakes another's module for its own):

* :mod:`.flash_attn_standin` (the CPU backend, :data:`MARK`), through :func:`install`, which refuses to shadow a
  real package or another module already in ``sys.modules``;
* :mod:`microcoder_ext.openrlhf.dry_run_imports` (OpenRLHF's CLI parsed where vLLM / flash-attn are not installed);
* the test suite's ``flash_attn`` stubs (``compat/cpu_stubs.py``).

A stand-in module defines only the names it is given; any other attribute and any other submodule stay missing, so
``from flash_attn.ops.triton.cross_entropy import ...`` still raises ``ImportError`` and OpenRLHF takes its torch
fallback (``openrlhf/models/utils.py``). Each module has a real ``__spec__`` (``ModuleSpec(name, None)``:
``importlib.util.find_spec`` and pickling behave) and its mark set to ``True``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

MARK = "__microcoder_cpu_standin__"


class StandinRefused(RuntimeError):
    """A stand-in would shadow something real (an installed package, another stub, a GPU)."""


def is_standin(module, mark: str = MARK) -> bool:
    # the module's own dict: lazy modules (torch.ops) answer any getattr
    return isinstance(module, types.ModuleType) and vars(module).get(mark) is True


def importable(root: str, mark: str = MARK) -> bool:
    """Whether a real ``root`` package can be imported here (a stand-in carrying ``mark`` does not count)."""
    mod = sys.modules.get(root)
    if mod is not None:
        return not is_standin(mod, mark)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


def make(name: str, attrs: dict, doc: str, mark: str = MARK) -> types.ModuleType:
    """A module named ``name`` holding exactly ``attrs`` (name -> value), marked with ``mark``."""
    mod = types.ModuleType(name, doc)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__loader__ = None
    mod.__package__ = name if "." not in name else name.rpartition(".")[0]
    setattr(mod, mark, True)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def register(modules: dict[str, types.ModuleType]) -> list[str]:
    """Put each module into ``sys.modules`` unless the name is taken (``setdefault``) and link it as an attribute of
    its parent when both are the ones given here (``import a.b.c`` walks attributes). Returns the names whose entry is
    now the given module."""
    placed = []
    for name, mod in modules.items():
        if sys.modules.setdefault(name, mod) is mod:
            placed.append(name)
    for name in placed:
        parent, _, child = name.rpartition(".")
        if parent in placed:
            setattr(sys.modules[parent], child, sys.modules[name])
    return placed


def install(root: str, modules: dict[str, dict], doc: str) -> list[str]:
    """Register ``modules`` (exact name -> attributes) under ``root`` with :data:`MARK`; idempotent.

    Raises :class:`StandinRefused` if a real ``root`` can be imported, or if ``sys.modules`` already holds
    something else under one of the names (e.g. a test stub or a dry-run placeholder)."""
    for name in modules:
        present = sys.modules.get(name)
        if present is not None and not is_standin(present):
            raise StandinRefused(f"sys.modules[{name!r}] is already {present!r}, not microcoder-ext's CPU stand-in")
    if importable(root):
        raise StandinRefused(f"{root} is installed here: microcoder-ext's CPU stand-in for it is never used over a "
                             "real one (run OpenRLHF as is on a machine with its GPU dependencies)")
    register({name: sys.modules.get(name) or make(name, attrs, doc.format(name=name))
              for name, attrs in modules.items()})
    return list(modules)
