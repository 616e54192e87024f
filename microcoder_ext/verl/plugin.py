"""``verl.plugins`` entry point: verl imports this module in every process that imports verl.

It must stay cheap: it checks the verl version (:mod:`microcoder_ext.compat`) and registers *lazy* hooks
(:mod:`microcoder_ext.verl.lazy`); it imports nothing of verl. The v1 trainer ``microcoder_sync`` is registered
right after ``verl.trainer.ppo.v1`` finishes importing: verl resolves ``trainer.v1.trainer_mode`` with
``verl.trainer.ppo.v1.get_trainer_cls`` (``verl/trainer/main_ppo.py`` ``TaskRunner.run``), and any access to
that registry (``TRAINER_REGISTRY`` lives in ``verl/trainer/ppo/v1/trainer_base.py``) imports the
``verl.trainer.ppo.v1`` package first. So a process that never looks a trainer up (Ray workers, reward workers,
``import verl`` alone) never imports verl's v1 trainer stack or our trainer, and the one that does finds
``microcoder_sync`` (already imported ``verl.trainer.ppo.v1``: registered at once).

With ``VERL_PLATFORM=cpu`` (``microcoder smoke verl``) it also activates the CPU backend
(:mod:`microcoder_ext.verl.cpu`: a ``cpu`` platform, verl's vLLM rollout routed for vLLM's CPU build); without it nothing
of that is imported.

verl swallows plugin import errors at DEBUG level (``verl/__init__.py``), so failures are logged at ERROR: a
failing version guard here (then re-raised), a failing registration by :mod:`~microcoder_ext.verl.lazy` when it
runs; a missing trainer would otherwise only show up as "Unknown trainer".
"""

import logging

logger = logging.getLogger("microcoder_ext.verl")

#: the module whose import triggers the trainer registration (verl's v1 trainer package, holds get_trainer_cls)
TRAINER_HOOK_MODULE = "verl.trainer.ppo.v1"
TRAINER_NAME = "microcoder_sync"


def register_trainer(v1_module=None) -> None:
    """Register :class:`~microcoder_ext.verl.trainer.MicrocoderSyncTrainer` as ``microcoder_sync`` (idempotent)."""
    import sys

    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer as _register

    ours = sys.modules.get("microcoder_ext.verl.trainer")
    if ours is not None and getattr(getattr(ours, "__spec__", None), "_initializing", False):
        return  # our trainer module is being imported (it imported verl's v1 package): its decorator registers it
    from microcoder_ext.verl.trainer import MicrocoderSyncTrainer  # its @register_trainer runs on first import

    if TRAINER_REGISTRY.get(TRAINER_NAME) is not MicrocoderSyncTrainer:  # e.g. after a reload of verl's registry
        _register(TRAINER_NAME)(MicrocoderSyncTrainer)


try:
    from microcoder_ext.compat import require as _require

    _require("verl")
    from microcoder_ext.verl.lazy import register_when_imported

    from microcoder_ext.verl import cpu as _cpu

    if _cpu.requested():
        _cpu.activate()
    register_when_imported(
        TRAINER_HOOK_MODULE,
        register_trainer,
        key="microcoder_ext.verl.plugin:trainer",
        what=f"registering trainer.v1.trainer_mode={TRAINER_NAME} (+recipe=microcoder / microcoder_mask_only)",
    )
except Exception:
    logger.error(
        "microcoder-ext: the verl plugin failed to load, so trainer.v1.trainer_mode=microcoder_sync "
        "(+recipe=microcoder / microcoder_mask_only) is unavailable in this process",
        exc_info=True,
    )
    raise
