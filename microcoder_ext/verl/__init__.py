"""verl 0.9.x adapter (thin): the ``verl.plugins`` entry point, the ``microcoder_sync`` trainer and the
``microcoder recipe`` CLI. Importing this package does not import verl; ``plugin`` and ``trainer`` do."""
