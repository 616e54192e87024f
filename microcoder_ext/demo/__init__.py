"""``microcoder demo``: the main job, verl's own ``main_ppo`` with ``+recipe=microcoder`` and verl's vLLM rollout,
training a tiny Qwen3 model on a laptop CPU until its held-back pass rate is clearly up.

* the task: the bundled problems (60 trained on, 20 held back) and the mixed demonstrations of the warm start
  (:mod:`microcoder_ext.bundled.demonstrations`);
* :mod:`~microcoder_ext.demo.run`: the run (model, data, the launch through ``microcoder smoke``'s CPU plan) and
  its ``report.json`` / ``curves.png``, built from verl's own logged metrics.
"""
