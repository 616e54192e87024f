"""``python -m microcoder_ext.cli ARGS`` = ``microcoder ARGS`` (also what ``accelerate launch -m`` runs)."""

import sys

from microcoder_ext.cli import main

sys.exit(main())
