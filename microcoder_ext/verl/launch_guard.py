"""Stops a verl launch that composed a MicroCoder-GRPO recipe but would train without the algorithm, in seconds and
before Ray or any worker starts.

``+recipe=microcoder`` and ``+recipe=microcoder_mask_only`` register :class:`LaunchGuard` as a Hydra callback
(``hydra.callbacks.microcoder_launch_guard`` in the recipe files). Hydra calls :meth:`LaunchGuard.on_job_start` in
the launching process, after composing the config and before the application's task function runs; a refusal
prints its reason to stderr and exits with status 1 (``SystemExit``: Hydra turns any ``Exception`` a callback
raises into a warning and goes on). What is refused
(:func:`launch_refusal`):

* a verl outside the supported range (:mod:`microcoder_ext.compat`; verl 0.8 has no v1 trainer and never loads the
  plugin);
* any Hydra application other than ``verl.trainer.main_ppo`` (the recipes are on every Hydra app's search path:
  verl's fully-async and one-step-off-policy mains, ``main_generation_server``, a user's own main), since only
  ``main_ppo``'s v1 ``TaskRunner`` builds ``trainer.v1.trainer_mode=microcoder_sync``. An application of one's own
  that hands its config to ``verl.trainer.main_ppo.run_ppo`` unchanged is let through when the environment
  variable ``MICROCODER_ENTRY_POINT`` names it (its module, or the file of its task function, as the refusal
  prints it);
* ``trainer.use_v1=false``: verl's legacy trainer (``main_ppo_v0``) ignores ``trainer.v1.trainer_mode``, so
  ``microcoder_mask_only`` would train without the mask and ``microcoder`` would die at the first rollout
  ("Agent loop microcoder_single_turn not registered") after every worker started;
* a ``trainer.v1.trainer_mode`` other than ``microcoder_sync`` (verl's ``sync``, ``colocate_async``,
  ``separate_async``): verl's own trainers apply neither the mask nor the temperature controller;
* a ``microcoder:`` section that :func:`microcoder_ext.core.config.parse_config` rejects, and the temperature rules
  of ``microcoder_sync`` (:func:`microcoder_ext.verl.temperature.check_temperature_config`): both would otherwise
  fail inside the trainer, after Ray, the workers and vLLM have started.

``microcoder.mask.enable=false`` is not refused: it is an explicit choice (``microcoder_sync`` then trains like
``sync`` with the temperature controller). This module imports neither verl nor Ray.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from hydra.experimental.callback import Callback

#: the one Hydra application that builds ``microcoder_sync`` (``verl/trainer/main_ppo.py`` ``main``)
MAIN_PPO = "verl.trainer.main_ppo"
#: environment variable naming an application of one's own that passes its config to main_ppo's run_ppo
ENTRY_POINT_ENV = "MICROCODER_ENTRY_POINT"
#: how every refusal begins (``microcoder smoke verl`` prints the same line, exit 2)
REFUSED = "microcoder-ext: launch refused before any worker started"
#: the Hydra callback key of the recipes that register the guard
CALLBACK = "microcoder_launch_guard"


def entry_point(task_function: Any) -> str:
    """The module of the Hydra application (``verl.trainer.main_ppo`` also when run as ``python -m``), else the
    file of its task function."""
    module = getattr(task_function, "__module__", None) or ""
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name:
            return spec.name.removesuffix(".__main__")
        code = getattr(task_function, "__code__", None)
        return os.path.realpath(code.co_filename) if code is not None else "__main__"
    return module


def launch_refusal(cfg, app: str) -> str | None:
    """Why the launch of ``app`` with the composed ``cfg`` (a recipe of ours in it) would not apply MicroCoder-GRPO,
    or None. Cheap: no verl import."""
    from omegaconf import OmegaConf

    from microcoder_ext.compat import UnsupportedVersionError, require
    from microcoder_ext.core.config import ConfigError, parse_config
    from microcoder_ext.verl.recipe_checks import MASK_TRAINER_MODE
    from microcoder_ext.verl.recipes import select
    from microcoder_ext.verl.temperature import check_temperature_config

    try:  # a verl outside the supported range (0.8: no v1 trainer, no plugin entry point) never builds our trainer
        require("verl")
    except UnsupportedVersionError as e:
        return str(e)
    run = f"python -m {MAIN_PPO} +recipe=... <your overrides>"
    if app != MAIN_PPO and app != os.environ.get(ENTRY_POINT_ENV):
        return (f"+recipe=microcoder* was composed into {app}, which does not build verl's v1 trainer "
                f"trainer.v1.trainer_mode={MASK_TRAINER_MODE}: it would train without the truncation mask and the "
                f"temperature controller. Run {run}. (An application of your own that passes this config unchanged "
                f"to {MAIN_PPO}.run_ppo is let through with {ENTRY_POINT_ENV}={app}.)")
    mode = select(cfg, "trainer.v1.trainer_mode")
    if not select(cfg, "trainer.use_v1"):
        return (f"trainer.use_v1=false runs verl's legacy trainer (main_ppo_v0), which ignores "
                f"trainer.v1.trainer_mode={mode}: it would train without "
                f"MicroCoder-GRPO (or fail at the first rollout, after every worker started). Drop the override: "
                f"the recipe sets trainer.use_v1=true.")
    if mode != MASK_TRAINER_MODE:
        return (f"trainer.v1.trainer_mode={mode} runs verl's own {mode!r} trainer, which applies neither the "
                f"truncation mask nor the temperature controller of the recipe. Drop the override (the recipe sets "
                f"trainer.v1.trainer_mode={MASK_TRAINER_MODE}), or run without +recipe=microcoder*.")
    section = cfg.get("microcoder", None)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    try:
        mc = parse_config(values)
        check_temperature_config(cfg, mc)
    except ConfigError as e:
        return str(e)
    return None


def guarded_recipe(overrides) -> str | None:
    """The recipe that ``overrides`` (Hydra overrides of ``main_ppo``) compose in, if that recipe registers this
    guard (``hydra.callbacks.microcoder_launch_guard``), else None. Reads the recipe file only."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from microcoder_ext.verl.recipes import RECIPE_GROUP, available_recipes, load_recipe

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    names = [o.value() for o in parsed if o.key_or_group == RECIPE_GROUP and not o.is_delete()]
    name = names[-1] if names else None
    if not isinstance(name, str) or name not in available_recipes():
        return None
    target = OmegaConf.select(load_recipe(name), f"hydra.callbacks.{CALLBACK}._target_")
    return name if target == f"{__name__}.{LaunchGuard.__name__}" else None


class LaunchGuard(Callback):
    """Hydra callback of the microcoder recipes: refuses a launch that would not apply MicroCoder-GRPO."""

    def on_job_start(self, config, *, task_function: Any = None, **kwargs: Any) -> None:  # noqa: D401 - Hydra hook
        app = entry_point(task_function)
        problem = launch_refusal(config, app)
        if problem:
            raise SystemExit(f"{REFUSED}: {problem}")
