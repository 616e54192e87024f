"""Post-import hooks: run a callback right after a module finishes importing, so a plugin pays only for what is used.

verl imports its ``verl.plugins`` entry points in every process that imports verl; registering a trainer (or an
agent loop) there means importing verl's heavy trainer modules everywhere. Instead the plugin calls::

    register_when_imported("verl.trainer.ppo.v1", register_trainer_callback)

and the callback runs when (and only when) that module is imported by anyone.

Semantics of :func:`register_when_imported` (stdlib only, safe to import anywhere):

* **Not imported yet**: a finder at the front of ``sys.meta_path`` wraps the module's loader (only for hooked
  names; every other import is one dict lookup). Right after the module body has executed, and *before* the import
  statement that triggered it returns, every hook of that module runs once, with the module as argument. The module
  keeps its real loader (``__loader__`` / ``__spec__.loader`` are restored before its body runs).
* **Already imported**: the callback runs immediately, in the caller's thread. If another thread is still executing
  the module, the call waits for that import to finish first.
* **Thread-safe, exactly once per execution**: hooks run while Python's per-module import lock is held, so a
  second thread importing the module blocks until the hooks have run and never sees it unregistered; each hook runs
  once per execution of the module however many threads import or register concurrently.
* **Idempotent**: a hook is identified by ``key`` (default: the callback's ``module.qualname``); registering the
  same key again replaces the callback but does not run it again for a module execution it already ran for.
  Reloading this module, or the module that registers hooks, keeps one finder and one hook per key.
* **importlib.reload** of a hooked module re-runs its hooks after the new body executed (so a registry rebuilt by
  the reload gets our entries back); hooks must therefore be idempotent themselves.
* **Failures never break the import**: an exception in a hook is logged at ERROR with its traceback (and
  ``what`` it was registering); the module import itself succeeds. An exception raised by the module's own body
  propagates unchanged, and its hooks do not run.

Limitations: loaders without ``exec_module`` (legacy PEP 302 ``load_module``) are not wrapped; a module whose own
import (same thread) registers a hook for itself cannot be hooked for that execution (a WARNING says so).
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import weakref
from types import ModuleType
from typing import Callable, NamedTuple

__all__ = ["register_when_imported", "unregister", "hooks"]

logger = logging.getLogger(__name__)


class _Hook(NamedTuple):
    callback: Callable[[ModuleType], object]
    what: str


# State survives ``importlib.reload`` of this module (a reload re-executes it in the same globals).
_lock: threading.RLock = globals()["_lock"] if "_lock" in globals() else threading.RLock()
#: module name -> {key: hook}
_hooks: dict[str, dict[str, _Hook]] = globals().get("_hooks", {})
#: module object -> keys whose hook already ran for its current execution (cleared when the module re-executes)
_done: weakref.WeakKeyDictionary = globals()["_done"] if "_done" in globals() else weakref.WeakKeyDictionary()
#: module name -> number of wrapped executions in progress (hooks registered meanwhile run at their end)
_executing: dict[str, int] = globals().get("_executing", {})


def register_when_imported(
    module_name: str, callback: Callable[[ModuleType], object], *, key: str | None = None, what: str | None = None
) -> None:
    """Run ``callback(module)`` right after ``module_name`` is imported (now, if it already is); see the module doc.

    ``key`` identifies the hook (default ``callback.__module__ + "." + callback.__qualname__``); ``what`` describes
    it in the ERROR logged when it fails (default: the key).
    """
    if not callable(callback):
        raise TypeError(f"callback must be callable, got {callback!r}")
    if key is None:
        key = f"{getattr(callback, '__module__', '?')}.{getattr(callback, '__qualname__', repr(callback))}"
    with _lock:
        _hooks.setdefault(module_name, {})[key] = _Hook(callback, what or key)
        _install_finder()
        if _executing.get(module_name):
            return  # a wrapped execution is under way; it runs every hook not yet run before the import returns
        module = sys.modules.get(module_name)
    if module is None:
        return
    if _initializing(module):
        # imported before the hook existed and still executing: wait for that import (the module's import lock)
        try:
            importlib.import_module(module_name)
        except Exception:
            pass  # that import failed; the hook stays and runs when the module is imported successfully
        module = sys.modules.get(module_name)
        if module is None:
            return
        if _initializing(module):
            logger.warning(
                "microcoder-ext: %s is registered while %s is still being imported by this thread; it runs only "
                "when %s is imported or reloaded again",
                what or key,
                module_name,
                module_name,
            )
            return
    _run_hooks(module_name, module, finishing=False)


def unregister(module_name: str, key: str) -> bool:
    """Remove a hook; True if it was registered. (Effects of hooks that already ran stay.)"""
    with _lock:
        found = _hooks.get(module_name, {}).pop(key, None) is not None
        if module_name in _hooks and not _hooks[module_name]:
            del _hooks[module_name]
        return found


def hooks() -> dict[str, list[str]]:
    """Registered hooks: module name -> keys (for diagnostics and tests)."""
    with _lock:
        return {name: list(entries) for name, entries in _hooks.items()}


def _initializing(module: ModuleType) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _run_hooks(module_name: str, module: ModuleType, *, finishing: bool) -> None:
    """Run every hook of ``module_name`` not yet run for this execution of ``module``, until none is left.

    ``finishing``: called by the wrapped loader at the end of an execution; the execution is marked finished under
    the same lock that finds nothing left to run, so a concurrent registration is either run here or runs itself.
    """
    while True:
        with _lock:
            done = _done.get(module)
            if done is None:
                done = _done[module] = set()
            todo = [(k, h) for k, h in _hooks.get(module_name, {}).items() if k not in done]
            if not todo:
                if finishing:
                    _end_execution(module_name)
                return
            done.update(k for k, _ in todo)
        for key, hook in todo:
            try:
                hook.callback(module)
            except Exception:
                logger.error(
                    "microcoder-ext: %s failed after %s was imported, so it is unavailable in this process "
                    "(hook %r; the import itself went on)",
                    hook.what,
                    module_name,
                    key,
                    exc_info=True,
                )


def _end_execution(module_name: str) -> None:
    n = _executing.get(module_name, 0) - 1
    if n > 0:
        _executing[module_name] = n
    else:
        _executing.pop(module_name, None)


class _HookedLoader:
    """Delegates to the real loader; runs the module's hooks after ``exec_module``."""

    def __init__(self, loader, module_name: str):
        self._loader = loader
        self._module_name = module_name

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # the module sees (and keeps) its real loader, as if it had been imported without the hook
        module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        with _lock:
            _executing[self._module_name] = _executing.get(self._module_name, 0) + 1
            _done.pop(module, None)  # a new execution (import or reload): every hook runs again
        try:
            self._loader.exec_module(module)
        except BaseException:
            with _lock:
                _end_execution(self._module_name)
            raise
        _run_hooks(self._module_name, module, finishing=True)

    def __getattr__(self, name):  # get_code, get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, name)

    def __repr__(self) -> str:
        return f"<microcoder_ext post-import hook for {self._module_name!r} around {self._loader!r}>"


class _PostImportFinder:
    """``sys.meta_path`` entry: for hooked names only, asks the finders behind it and wraps the loader found."""

    _microcoder_post_import_finder = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _hooks:
            return None
        for finder in list(sys.meta_path):
            if getattr(finder, "_microcoder_post_import_finder", False):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module") and not isinstance(
                spec.loader, _HookedLoader
            ):
                spec.loader = _HookedLoader(spec.loader, fullname)
            return spec
        return None

    def invalidate_caches(self):
        pass

    def __repr__(self) -> str:
        return "<microcoder_ext post-import hook finder>"


def _install_finder() -> None:
    """Exactly one finder, first on ``sys.meta_path`` when installed (stale ones from a reload are replaced)."""
    mine = [f for f in sys.meta_path if getattr(f, "_microcoder_post_import_finder", False)]
    if len(mine) == 1 and type(mine[0]) is _PostImportFinder:
        return
    for f in mine:
        try:
            sys.meta_path.remove(f)
        except ValueError:
            pass
    sys.meta_path.insert(0, _PostImportFinder())
