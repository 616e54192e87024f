"""Evaluation as the paper reports it (``microcoder eval``, ``microcoder plot``): pass@k by platform x difficulty."""
