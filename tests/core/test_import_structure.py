"""The package's import graph, read from the source (every ``import`` / ``from ... import`` at any level of a file,
functions included, relative imports resolved, plus ``importlib.import_module("literal")``):

* no import cycle anywhere in ``microcoder_ext``;
* data flows one way, core <- reward / adapters <- cli: ``microcoder_ext.core`` and ``microcoder_ext.reward``
  never reach verl, OpenRLHF, TRL or the command-line package (directly or through another module of ours);
* nothing but the command-line package itself imports ``microcoder_ext.cli`` (the console script and the tests do);
* no framework adapter (``microcoder_ext.verl``, ``.openrlhf``, ``.trl``) imports another: what two of them need
  lives in core (e.g. ``core.options``, the ``--mc.*`` flags' records);
* no import points up the layers of :data:`LAYERS` (e.g. the reward reaching the smoke package, or the smoke
  package reaching the demo): what two layers share lives in the lower one;
* the reward's process sandbox imports only the standard library (it runs inside the worker process).
"""

import ast
import pathlib

import pytest

import microcoder_ext

PKG = "microcoder_ext"
ROOT = pathlib.Path(microcoder_ext.__file__).parent
FRAMEWORKS = ("verl", "openrlhf", "trl")
CLI = f"{PKG}.cli"
#: packages that must stay framework-free and below the command line
LOWER = (f"{PKG}.core", f"{PKG}.reward")
#: the package's layers, lowest first, by the name after ``microcoder_ext.`` ("" = the package's ``__init__``): a
#: module imports modules of its own layer and of the layers below, never of one above
LAYERS = (
    ("", "compat", "internals", "jsonl", "tiny", "evidence", "process_tree", "core"),  # single modules and the algorithms
    ("reward", "data", "bundled", "sampling", "eval"),  # framework-free libraries
    ("smoke",),  # framework-free pieces of the smoke runs, the demo and the quickstart
    FRAMEWORKS,  # the adapters
    ("demo", "configs"),  # what runs on top of an adapter
    ("cli",),
)


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join([PKG, *parts])] = path
    return mods


def _targets(node: ast.AST, base: list[str], known: set[str]) -> list[str]:
    """Dotted names an AST node imports (``from X import y`` names submodule ``X.y`` when there is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            anchor = base[:len(base) - node.level + 1]
            mod = ".".join(anchor + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        return [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
        if name == "import_module":
            return [node.args[0].value]
    return []


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> modules of the package it imports, module -> top-level names of other packages it imports)."""
    mods = _modules()
    known = set(mods)
    internal: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for name, path in mods.items():
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        inside, outside = set(), set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for t in _targets(node, base, known):
                if t == PKG or t.startswith(PKG + "."):
                    # ``import microcoder_ext.a.b`` without a module of that name: its closest known parent
                    while t not in known and "." in t:
                        t = t.rsplit(".", 1)[0]
                    if t != name:
                        inside.add(t)
                else:
                    outside.add(t.split(".")[0])
        internal[name], external[name] = inside, outside
    return internal, external


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, str | None]:
    """Every module ``start`` reaches -> the module it was reached from (for the path in a failure)."""
    seen: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        m = todo.pop()
        for n in sorted(graph[m]):
            if n not in seen:
                seen[n] = m
                todo.append(n)
    return seen


def _path(seen: dict[str, str | None], end: str) -> str:
    chain = [end]
    while seen[chain[-1]] is not None:
        chain.append(seen[chain[-1]])
    return " -> ".join(reversed(chain))


def test_graph_sees_the_layers():
    internal, external = _graph()
    assert f"{PKG}.core.config" in internal[f"{PKG}.core.temperature"]  # function-level and top-level imports
    assert f"{PKG}.core.schedule" in internal[f"{PKG}.core.config"]
    assert f"{PKG}.reward.sandbox.probe" in internal[f"{PKG}.reward.sandbox.worker"]  # relative imports resolved
    assert f"{PKG}.data.rows" in internal[f"{PKG}.data.lcb"]
    assert "verl" in external[f"{PKG}.verl.trainer"] and "trl" in external[f"{PKG}.trl.trainer"]


def test_no_import_cycle_anywhere():
    graph, _ = _graph()
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(x.removeprefix(PKG + ".") for x in cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("package", LOWER)
def test_lower_layers_reach_no_framework_and_no_cli(package):
    internal, external = _graph()
    bad = []
    for start in sorted(m for m in internal if m == package or m.startswith(package + ".")):
        seen = _reach(internal, start)
        for m in seen:
            if m == CLI or m.startswith(CLI + "."):
                bad.append(_path(seen, m))
            for fw in sorted(set(FRAMEWORKS) & external[m]):
                bad.append(f"{_path(seen, m)} imports {fw}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_only_the_cli_package_imports_the_cli_package():
    internal, _ = _graph()
    bad = sorted(f"{m} imports {n}" for m, deps in internal.items() if not (m == CLI or m.startswith(CLI + "."))
                 for n in deps if n == CLI or n.startswith(CLI + "."))
    assert not bad, "\n".join(bad)


def test_no_adapter_imports_another():
    internal, _ = _graph()

    def adapter(m: str) -> str | None:
        return next((fw for fw in FRAMEWORKS if m == f"{PKG}.{fw}" or m.startswith(f"{PKG}.{fw}.")), None)

    assert f"{PKG}.core.options" in internal[f"{PKG}.trl.train_settings"]  # the graph sees function-level imports
    bad = sorted(f"{m} imports {n}" for m, deps in internal.items() if adapter(m)
                 for n in deps if adapter(n) not in (None, adapter(m)))
    assert not bad, "\n".join(bad)


def test_the_sandbox_is_stdlib_only():
    """``microcoder_ext.reward.sandbox`` is loaded by path inside the worker process as ``mc_sandbox`` (see
    ``reward/worker_client.py``): its modules import only the standard library and each other."""
    import sys

    internal, external = _graph()
    sandbox = f"{PKG}.reward.sandbox"
    mods = [m for m in internal if m == sandbox or m.startswith(sandbox + ".")]
    assert f"{sandbox}.probe" in mods and f"{sandbox}.worker" in mods
    bad = sorted(f"{m} imports {n}" for m in mods for n in internal[m] if not n.startswith(sandbox))
    bad += sorted(f"{m} imports {n}" for m in mods for n in external[m] if n not in sys.stdlib_module_names)
    assert not bad, "\n".join(bad)


def _layer(module: str) -> int | None:
    top = module.removeprefix(PKG).removeprefix(".").split(".")[0]
    return next((i for i, names in enumerate(LAYERS) if top in names), None)


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a higher layer than the importer's, as "a (layer i) imports b (layer j)"."""
    return sorted(f"{m} (layer {_layer(m)}) imports {n} (layer {_layer(n)})" for m, deps in graph.items()
                  for n in deps if _layer(n) > _layer(m))


def test_every_module_has_a_layer():
    internal, _ = _graph()
    assert not sorted(m for m in internal if _layer(m) is None), "add its package or module to LAYERS"


def test_the_layer_check_catches_an_upward_import():
    """The two imports that once pointed up: the reward recording smoke evidence, the smoke model reading the
    demo's demonstrations."""
    graph = {f"{PKG}.reward": {f"{PKG}.smoke.evidence", f"{PKG}.core.verdicts"},
             f"{PKG}.smoke.model": {f"{PKG}.demo.task", f"{PKG}.tiny"}}
    assert _upward_imports(graph) == [f"{PKG}.reward (layer 1) imports {PKG}.smoke.evidence (layer 2)",
                                      f"{PKG}.smoke.model (layer 2) imports {PKG}.demo.task (layer 4)"]


def test_no_import_points_up_the_layers():
    internal, _ = _graph()
    assert f"{PKG}.evidence" in internal[f"{PKG}.reward"]  # the graph sees `from microcoder_ext import evidence`
    bad = _upward_imports(internal)
    assert not bad, "\n".join(bad)
