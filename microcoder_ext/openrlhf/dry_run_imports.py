"""Import placeholders for ``vllm`` / ``flash_attn``, so that ``--mc.dry_run`` and ``--help`` work on a CPU machine.

OpenRLHF 0.11.2's ``train_ppo_ray`` imports vLLM and flash-attn at module level
(``openrlhf/trainer/ray/vllm_engine.py:7,11-12``, ``openrlhf/trainer/ppo_utils/samples_generator.py:7``,
``openrlhf/models/ring_attn_utils.py:3-4``), but neither installs without a GPU, and the dry run only needs OpenRLHF's
argument parsing and validation. :func:`install` registers, **only for a top-level package that cannot be found**,
one placeholder module per exact name in :data:`NAMES` (nothing else: no import finder, no catch-all module):

* each module has ``__spec__ = ModuleSpec(name, None)`` and ``__microcoder_placeholder__ = True``;
* each name OpenRLHF imports from it is a :class:`Placeholder` that raises :class:`ImportPlaceholderError` when
  called or used, naming the missing package;
* any other attribute raises ``AttributeError`` (so ``from vllm import X`` for another ``X``, and imports of other
  submodules such as ``flash_attn.ops.triton.cross_entropy``, still fail with ``ImportError`` as without them:
  OpenRLHF's torch fallback in ``openrlhf/models/utils.py:179-188`` keeps working).

They exist only to parse OpenRLHF's CLI where vLLM (or flash-attn) is not installed: the launcher calls
:func:`install` for ``--mc.dry_run`` and ``--help`` only, and ``microcoder smoke openrlhf`` before it parses a launch
(:func:`microcoder_ext.openrlhf.smoke.parse_launch`); where vLLM is installed nothing of it is placed, and nothing
here ever generates or trains. A real run without vLLM fails with OpenRLHF's own ``ImportError``. The placeholders
stay in ``sys.modules`` for the rest of the process (OpenRLHF's modules imported under them refer to them). The
modules are built by :mod:`microcoder_ext.openrlhf.cpu.modules` (the one builder of named stand-in modules).
"""

from __future__ import annotations

from microcoder_ext.openrlhf.cpu import modules

__all__ = ["NAMES", "ImportPlaceholderError", "Placeholder", "install", "is_placeholder", "missing_packages"]

#: exact module name -> the names OpenRLHF 0.11.2 imports from it at module level
NAMES: dict[str, tuple[str, ...]] = {
    "flash_attn": (),
    "flash_attn.bert_padding": ("index_first_axis", "pad_input", "rearrange", "unpad_input"),
    "flash_attn.utils": (),
    "flash_attn.utils.distributed": ("all_gather",),
    "vllm": ("SamplingParams",),
    "vllm.inputs": ("TokensPrompt",),
    "vllm.utils": ("random_uuid",),
}
PACKAGES = ("flash_attn", "vllm")
_MARK = "__microcoder_placeholder__"


class ImportPlaceholderError(RuntimeError):
    """A placeholder of a package that is not installed was used (not only imported)."""


def _why(qualname: str) -> str:
    package = qualname.split(".")[0]
    return (f"{qualname} is an import placeholder: {package} is not installed here. microcoder-ext installs it only "
            f"for `--mc.dry_run` / `--help` of microcoder_ext.openrlhf.train; a training run needs {package}")


class Placeholder:
    """Stands in for one imported name; calling it or reading an attribute raises :class:`ImportPlaceholderError`."""

    __slots__ = ("_qualname",)

    def __init__(self, qualname: str):
        object.__setattr__(self, "_qualname", qualname)

    def __call__(self, *args, **kwargs):
        raise ImportPlaceholderError(_why(self._qualname))

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):  # keep introspection (copy, pickle, inspect) honest
            raise AttributeError(name)
        raise ImportPlaceholderError(_why(f"{self._qualname}.{name}"))

    def __setattr__(self, name, value):
        raise ImportPlaceholderError(_why(self._qualname))

    def __reduce__(self):
        raise ImportPlaceholderError(_why(self._qualname))

    def __repr__(self) -> str:
        return f"<import placeholder {self._qualname}>"


def is_placeholder(module) -> bool:
    return modules.is_standin(module, _MARK)


def missing_packages() -> list[str]:
    """The packages of :data:`PACKAGES` that cannot be found (placeholders count as missing)."""
    return [p for p in PACKAGES if not modules.importable(p, _MARK)]


def _module(name: str, attrs: tuple[str, ...]):
    def __getattr__(attr: str):  # PEP 562: only for names not set
        raise AttributeError(f"module {name!r} has no attribute {attr!r} ({_why(name)})")

    return modules.make(name, {**{a: Placeholder(f"{name}.{a}") for a in attrs}, "__getattr__": __getattr__},
                        f"microcoder-ext import placeholder for {name} (not installed; parsing OpenRLHF's CLI only)",
                        _MARK)


def install() -> list[str]:
    """Register the placeholders of every package in :data:`PACKAGES` that cannot be found (idempotent).

    Returns the packages that are (now) placeholders, e.g. ``["flash_attn", "vllm"]``; ``[]`` when both are installed
    (or already provided by someone else, e.g. the test suite's ``flash_attn`` stubs).
    """
    placed = missing_packages()
    modules.register({name: _module(name, attrs) for name, attrs in NAMES.items() if name.split(".")[0] in placed})
    return placed
