"""Checks of framework internals, shared by the version guards of the adapters (framework-free).

An adapter that subclasses or wraps a framework's internals lists each one it relies on as a :class:`Check`
(:func:`signature`, :func:`params_include`, :func:`source_has`, :func:`fields`, or its own ``run``); its guard calls
:func:`require_internals`, which checks the installed version (:func:`microcoder_ext.compat.require`) and raises the
guard's error listing **every** internal that does not hold, by name, with what was found.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from microcoder_ext.compat import TESTED, UnsupportedVersionError, require


@dataclass(frozen=True)
class Check:
    what: str  # the internal, as the error names it
    run: Callable[[], str | None]  # None when it holds, else what was found


def resolve(path: str):
    """``pkg.module:Attr.attr`` -> the object (ImportError / AttributeError propagate)."""
    module, _, attrs = path.partition(":")
    obj = importlib.import_module(module)
    for name in attrs.split(".") if attrs else ():
        obj = getattr(obj, name)
    return obj


def name(path: str) -> str:
    return path.replace(":", ".")


def _params(fn) -> list[str]:
    # Ray adds _ray_trace_ctx to actor method signatures
    return [p for p in inspect.signature(fn).parameters if p != "_ray_trace_ctx"]


def signature(path: str, expected: Sequence[str]) -> Check:
    """The callable at ``path`` has exactly these parameters, in this order."""
    expected = list(expected)

    def run():
        found = _params(resolve(path))
        return None if found == expected else f"parameters {found}"

    return Check(f"{name(path)}({', '.join(expected)})", run)


def params_include(path: str, expected: Sequence[str]) -> Check:
    """The callable at ``path`` takes (at least) these parameters."""

    def run():
        found = _params(resolve(path))
        missing = [p for p in expected if p not in found]
        return f"no parameter(s) {missing} (has {found})" if missing else None

    return Check(f"{name(path)} takes {', '.join(expected)}", run)


def source_has(path: str, snippets: str | Sequence[str], meaning: str) -> Check:
    """The source of ``path`` still contains every snippet (the code the adapter relies on)."""
    snippets = (snippets,) if isinstance(snippets, str) else tuple(snippets)

    def run():
        src = inspect.getsource(resolve(path))
        missing = [s for s in snippets if s not in src]
        return None if not missing else "its source no longer contains " + ", ".join(f"`{s}`" for s in missing)

    return Check(f"{name(path)} {meaning}", run)


def fields(path: str, names: Sequence[str]) -> Check:
    """The dataclass at ``path`` has these fields."""

    def run():
        have = {f.name for f in dataclasses.fields(resolve(path))}
        missing = [n for n in names if n not in have]
        return f"missing fields {missing}" if missing else None

    return Check(f"{name(path)} dataclass fields {', '.join(names)}", run)


def exists(path: str) -> Check:
    def run():
        return None if callable(resolve(path)) else "not callable"

    return Check(name(path), run)


def problems(checks: Sequence[Check]) -> list[str]:
    """One line per internal that does not hold (empty: all hold)."""
    out = []
    for check in checks:
        try:
            found = check.run()
        except (ImportError, AttributeError, TypeError, ValueError, OSError) as e:
            found = f"{type(e).__name__}: {e}"
        if found is not None:
            out.append(f"{check.what}: {found}")
    return out


def require_internals(dist: str, package: str, found: list[str], error: type[UnsupportedVersionError]) -> str:
    """The installed version of ``dist`` (supported range enforced), or ``error`` listing ``found`` with the releases
    tested (:data:`microcoder_ext.compat.TESTED`)."""
    version = require(dist)
    releases = TESTED[dist]
    if found:
        raise error(
            f"microcoder-ext's {package} adapter relies on {package} internals that differ in the installed "
            f"{dist} {version} (tested: {', '.join(releases)}, compat/matrix.toml):\n  - " + "\n  - ".join(found)
            + f"\nInstall {dist}=={releases[-1]} or port microcoder_ext/{dist} to this release."
        )
    return version
