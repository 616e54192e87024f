"""``python -m microcoder_ext.openrlhf.train <train_ppo_ray flags> --mc.preset NAME [--mc.* flags]``.

Only an entry point: everything lives in :mod:`microcoder_ext.openrlhf.launcher`. Define nothing here (this module
runs as ``__main__``, and Ray workers unpickle classes by module path).
"""
from microcoder_ext.openrlhf.launcher import main

if __name__ == "__main__":
    raise SystemExit(main())
