"""Evaluation as the paper reports it (``microcoder eval``, ``microcoder plot``): pass@k by platform x difficulty.

``pass_at_k(n, c, k)`` is the unbiased Codex estimator (exact for large n); :mod:`.breakdown` builds the paper's
table (AtCoder / LeetCode / All x Easy / Medium / Hard / All), :mod:`.paper` holds the published numbers,
:mod:`.report` prints / writes JSON / draws the PNG, :mod:`.generate` samples with vLLM or reads pre-generated
responses, :mod:`.problems` reads the problems and matches them with their responses, :mod:`.scoring` scores the
responses with the training reward; :mod:`.runlogs` and :mod:`.curves` read run logs and draw the training curves;
:mod:`.learning` sums up what a short run (``microcoder demo``, the TRL quickstart) learned.
The commands are :mod:`microcoder_ext.cli.eval` and :mod:`microcoder_ext.cli.plot`.
"""

from .passk import mean_pass_at_k, pass_at_k, pass_at_k_exact

__all__ = ["pass_at_k", "pass_at_k_exact", "mean_pass_at_k"]
