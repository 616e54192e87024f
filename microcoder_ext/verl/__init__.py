"""verl 0.9.x adapter (thin): the ``verl.plugins`` entry point, the ``microcoder_sync`` trainer and the
``microcoder recipe`` CLI. Importing this package does not import verl. ``plugin`` (loaded by ``import verl`` in
every verl process) imports no verl module either: it registers post-import hooks (``lazy``) that register the
trainer once verl imports ``verl.trainer.ppo.v1``; ``trainer`` imports verl's v1 trainer stack."""
