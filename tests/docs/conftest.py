"""tests/docs: the documentation site builds (``mkdocs build --strict``) and its shell examples run.

The verl suite runs ``test_docs.py`` and ``test_examples_verl.py``, the OpenRLHF and TRL suites their
``test_examples_*.py`` (tests/run_all.sh): each example runs in the venv of its framework."""

import sys
from pathlib import Path

# support modules of this folder (docblocks.py) are imported by their plain names
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
