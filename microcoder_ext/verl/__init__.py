"""verl 0.9.x adapter (thin): the ``verl.plugins`` entry point, the ``microcoder_sync`` trainer, the recipes and
their start-up checks (``recipes``, ``recipe_checks``: what ``microcoder recipe`` and ``microcoder doctor verl``
show). Importing this package does not import verl. ``plugin`` (loaded by ``import verl`` in
every verl process) imports no verl module either: it registers post-import hooks (``lazy``) that register the
trainer once verl imports ``verl.trainer.ppo.v1``; ``trainer`` imports verl's v1 trainer stack."""
