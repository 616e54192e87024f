"""microcoder-ext: MicroCoder-GRPO for verl and OpenRLHF.

Layout (data flows one way, core <- adapters <- recipes):
  microcoder_ext.core      framework-free algorithms (verdicts, truncation mask, config)
  microcoder_ext.reward    code-execution reward (verl ``compute_score``)
  microcoder_ext.verl      thin verl 0.9.x adapter (plugin, trainer)
  microcoder_ext.configs   Hydra recipe group ``recipe`` (``+recipe=microcoder``)
"""

__version__ = "0.1.0"
