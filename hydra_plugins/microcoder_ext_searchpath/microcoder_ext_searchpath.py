"""Puts microcoder-ext's Hydra configs on every Hydra app's search path.

Hydra imports every module under the ``hydra_plugins`` namespace package and registers the
:class:`~hydra.plugins.search_path_plugin.SearchPathPlugin` subclasses it finds. This one appends
``pkg://microcoder_ext.configs``, so the ``recipe`` config group is available to verl's entry points::

    python -m verl.trainer.main_ppo +recipe=microcoder data.train_files=... actor_rollout_ref.model.path=...

The path is appended (after the app's own config directory), so it can only add config groups, never shadow
verl's. ``+`` is needed because ``recipe`` is not in verl's defaults list; the recipe is merged after
``_self_``, so it overrides verl's defaults and command-line overrides override the recipe.
``python -m verl.trainer.main_ppo --info searchpath`` shows the entry (provider ``microcoder-ext``).
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PROVIDER = "microcoder-ext"
SEARCH_PATH = "pkg://microcoder_ext.configs"


class MicrocoderExtSearchPathPlugin(SearchPathPlugin):
    """Appends ``pkg://microcoder_ext.configs`` (provider ``microcoder-ext``) to the config search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider=PROVIDER, path=SEARCH_PATH)
