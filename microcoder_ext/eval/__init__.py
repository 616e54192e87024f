"""Evaluation as the paper reports it (``microcoder eval``, ``microcoder plot``): pass@k by platform x difficulty.

``pass_at_k(n, c, k)`` is the unbiased Codex estimator (exact for large n); :mod:`.breakdown` builds the paper's
table (AtCoder / LeetCode / All x Easy / Medium / Hard / All), :mod:`.paper` holds the published numbers,
:mod:`.report` prints / writes JSON / draws the PNG, :mod:`.generate` samples with vLLM or reads pre-generated
responses, :mod:`.cli` is ``microcoder eval``.
"""

from .passk import mean_pass_at_k, pass_at_k, pass_at_k_exact

__all__ = ["pass_at_k", "pass_at_k_exact", "mean_pass_at_k"]
