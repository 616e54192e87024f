"""``verl.plugins`` entry point: verl imports this module in every process that imports verl.

It checks the verl version (:mod:`microcoder_ext.compat`) and registers the v1 trainer ``microcoder_sync``.
verl swallows plugin import errors at DEBUG level (``verl/__init__.py``), so failures are logged here at
ERROR before being re-raised; a missing trainer would otherwise only show up as "Unknown trainer".
"""

import logging

logger = logging.getLogger("microcoder_ext.verl")

try:
    from microcoder_ext.compat import require as _require

    _require("verl")
    from microcoder_ext.verl import trainer as _trainer  # noqa: F401  (registers "microcoder_sync")
except Exception:
    logger.error(
        "microcoder-ext: the verl plugin failed to load, so trainer.v1.trainer_mode=microcoder_sync "
        "(+recipe=microcoder / microcoder_mask_only) is unavailable in this process",
        exc_info=True,
    )
    raise
