"""The reward's module layering: ``judge`` (shared judging) <- each backend (``engine``, ``sandbox_fusion``)
<- ``backends`` (interface + registry). Fails when a backend imports another backend or the registry, or
when any import cycle appears among the reward's modules (imports inside functions included)."""

import ast
import pathlib
import subprocess
import sys

import pytest

import microcoder_ext.reward as reward
from host_load import hang_guard

PKG = "microcoder_ext.reward"
ROOT = pathlib.Path(reward.__file__).parent

#: module -> modules of the package it must never import (directly, at any level of the file)
FORBIDDEN = {
    "judge": {"engine", "sandbox_fusion", "backends"},
    "engine": {"sandbox_fusion", "backends"},
    "sandbox_fusion": {"engine", "backends"},
}


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join([PKG, *parts])] = path
    return mods


def _imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its source (top level or in functions)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - node.level + 1]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from X import y`` imports submodule X.y when there is one, else the module X
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def test_module_discovery_sees_the_layers():
    g = _graph()
    for m in ("judge", "engine", "sandbox_fusion", "backends", "batch"):
        assert f"{PKG}.{m}" in g
    assert f"{PKG}.judge" in g[f"{PKG}.engine"] and f"{PKG}.judge" in g[f"{PKG}.sandbox_fusion"]
    assert {f"{PKG}.engine", f"{PKG}.sandbox_fusion"} <= g[f"{PKG}.backends"]  # the registry knows the backends


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_backends_do_not_import_each_other(module):
    got = _graph()[f"{PKG}.{module}"]
    bad = sorted(m for m in got if m.rsplit(".", 1)[-1] in FORBIDDEN[module])
    assert not bad, f"{module} imports {bad}: backends may only depend on judge/result/ground_truth-level modules"


def test_no_import_cycle_in_the_reward_package():
    g = _graph()
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == "open":
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(x.removeprefix(PKG + ".") for x in cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m)


_ISOLATED = r"""
import importlib, importlib.util, sys, types
target, blocked = sys.argv[1], sys.argv[2:]
spec = importlib.util.find_spec("microcoder_ext.reward")
pkg = types.ModuleType("microcoder_ext.reward")  # the package without its __init__ (which imports everything)
pkg.__path__ = list(spec.submodule_search_locations)
pkg.__package__ = "microcoder_ext.reward"
sys.modules["microcoder_ext.reward"] = pkg
for b in blocked:
    sys.modules["microcoder_ext.reward." + b] = None  # importing it now raises ImportError
mod = importlib.import_module("microcoder_ext.reward." + target)
if target == "engine":
    assert mod.Engine.judge is importlib.import_module("microcoder_ext.reward.judge").judge
    mod.Engine(mod.EngineConfig())  # construction starts nothing and needs no other backend
elif target == "sandbox_fusion":
    mod.SandboxFusionEngine(url="http://127.0.0.1:9")
print("ok")
"""


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_each_layer_imports_with_the_others_blocked(module):
    p = subprocess.run([sys.executable, "-c", _ISOLATED, module, *sorted(FORBIDDEN[module])], capture_output=True,
                       text=True, timeout=hang_guard(60))
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
