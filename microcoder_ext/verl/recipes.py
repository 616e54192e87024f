"""The verl Hydra recipes shipped in :mod:`microcoder_ext.configs` (config group ``recipe``, ``+recipe=NAME``) and
verl's real ``main_ppo`` config composed with one (config module ``verl.trainer.config``, config ``ppo_trainer``)
through Hydra's compose API: the config that ``python -m verl.trainer.main_ppo +recipe=NAME OVERRIDES... --cfg job``
prints. Hydra and OmegaConf are imported when a config is composed or read.
"""

from __future__ import annotations

import importlib.resources
import warnings
from collections.abc import Sequence
from typing import Any

RECIPE_PACKAGE = "microcoder_ext.configs"
RECIPE_GROUP = "recipe"
VERL_CONFIG_MODULE = "verl.trainer.config"
VERL_CONFIG_NAME = "ppo_trainer"

MISSING = "???"


class RecipeError(Exception):
    """An unknown recipe or an override Hydra rejects (a usage error)."""


def recipe_dir():
    """The ``recipe`` config group shipped in :mod:`microcoder_ext.configs` (a ``Traversable``)."""
    return importlib.resources.files(RECIPE_PACKAGE).joinpath(RECIPE_GROUP)


def available_recipes() -> dict[str, str]:
    """Recipe name -> one-line summary (the first comment line after ``# @package _global_``)."""
    recipes = {}
    for entry in sorted(recipe_dir().iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        comments = (line for line in entry.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
        summary = next((c.lstrip("#").strip() for c in comments if "@package" not in c), "")
        recipes[entry.name.removesuffix(".yaml")] = summary
    return recipes


def load_recipe(name: str):
    """The recipe file itself (what it sets, before composition) as a DictConfig."""
    from omegaconf import OmegaConf

    return OmegaConf.create(recipe_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))


def compose(name: str | None, overrides: Sequence[str] = ()) -> Any:
    """verl's main_ppo config with ``+recipe=name`` (``None``: no recipe) and the Hydra ``overrides``.

    Raises :class:`RecipeError` (usage) for an unknown recipe or an override Hydra rejects.
    """
    return compose_many([(name, overrides)])[0]


def compose_many(requests: Sequence[tuple[str | None, Sequence[str]]]) -> list[Any]:
    """Several :func:`compose` calls under one Hydra initialisation (the first compose costs seconds)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    recipes = available_recipes()
    for name, _ in requests:
        if name is not None and name not in recipes:
            raise RecipeError(f"unknown recipe {name!r}; available: {', '.join(recipes)}")
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time noise of verl's config package (no megatron etc.)
        with initialize_config_module(config_module=VERL_CONFIG_MODULE, version_base=None):
            for name, overrides in requests:
                full = ([f"+{RECIPE_GROUP}={name}"] if name is not None else []) + list(overrides)
                try:
                    results.append(hydra_compose(config_name=VERL_CONFIG_NAME, overrides=full))
                except (HydraException, OmegaConfBaseException) as e:
                    raise RecipeError(f"cannot compose {' '.join(full)}:\n{message(e)}") from e
    return results


_ABSENT = object()


def select(cfg, key: str, default: Any = None) -> Any:
    """Resolved value at a dotted key (containers as plain dicts/lists); ``default`` if absent, ``"???"`` if unset."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue

    try:
        value = OmegaConf.select(cfg, key, default=default, throw_on_missing=True)
    except (MissingMandatoryValue, InterpolationToMissingValueError):
        return MISSING
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def has_key(cfg, key: str) -> bool:
    """Whether the dotted ``key`` is present in ``cfg`` (with a value other than ``???``)."""
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False) is not _ABSENT


def message(e: BaseException) -> str:
    """The exception text plus its causes (Hydra puts the useful part, e.g. 'Key 'x' is not in struct', there)."""
    parts: list[str] = []
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).strip()
        if text and not any(text in p for p in parts):
            parts.append(text)
        e = e.__cause__
    return "\n".join(parts)
