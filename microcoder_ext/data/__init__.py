"""Data preparation for training and evaluation (``microcoder data``): coding datasets -> verl parquet / OpenRLHF
JSONL whose ground truth :mod:`microcoder_ext.reward` reads. Framework-free."""
