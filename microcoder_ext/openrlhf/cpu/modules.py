"""Registering exact-name stand-in modules in ``sys.modules`` (no import finder, no catch-all module).

A stand-in module defines only the names it is given; any other attribute and any other submodule stay missing, so
``from flash_attn.ops.triton.cross_entropy import ...`` still raises ``ImportError`` and OpenRLHF takes its torch
fallback (``openrlhf/models/utils.py``). Each module has a real ``__spec__`` (``importlib.util.find_spec`` and
pickling behave) and ``__microcoder_cpu_standin__ = True``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

MARK = "__microcoder_cpu_standin__"


class StandinRefused(RuntimeError):
    """A stand-in would shadow something real (an installed package, another stub, a GPU)."""


def is_standin(module) -> bool:
    # the module's own dict: lazy modules (torch.ops) answer any getattr
    return isinstance(module, types.ModuleType) and vars(module).get(MARK) is True


def importable(root: str) -> bool:
    """Whether a real ``root`` package can be imported here (a stand-in of ours does not count)."""
    mod = sys.modules.get(root)
    if mod is not None:
        return not is_standin(mod)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


def make(name: str, attrs: dict, doc: str) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__loader__ = None
    mod.__package__ = name if "." not in name else name.rpartition(".")[0]
    setattr(mod, MARK, True)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def install(root: str, modules: dict[str, dict], doc: str) -> list[str]:
    """Register ``modules`` (exact name -> attributes) under ``root``; idempotent.

    Raises :class:`StandinRefused` if a real ``root`` can be imported, or if ``sys.modules`` already holds
    something else under one of the names (e.g. a test stub or a dry-run placeholder)."""
    for name in modules:
        present = sys.modules.get(name)
        if present is not None and not is_standin(present):
            raise StandinRefused(f"sys.modules[{name!r}] is already {present!r}, not microcoder-ext's CPU stand-in")
    if importable(root):
        raise StandinRefused(f"{root} is installed here: microcoder-ext's CPU stand-in for it is never used over a "
                             "real one (run OpenRLHF as is on a machine with its GPU dependencies)")
    for name, attrs in modules.items():
        if name not in sys.modules:
            sys.modules[name] = make(name, attrs, doc.format(name=name))
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])  # `import a.b.c` walks attributes
    return list(modules)
