"""MicroCoder-GRPO for Hugging Face TRL 1.15-1.16 (``GRPOTrainer``): single GPU, LoRA, or CPU.

* :mod:`microcoder_ext.trl.config`: :func:`~microcoder_ext.trl.config.microcoder_grpo_config`, ``GRPOConfig`` presets
  (no KL + clip-higher, the baselines);
* :mod:`microcoder_ext.trl.reward`: :class:`~microcoder_ext.trl.reward.CodeReward`, the sandboxed code reward as a TRL
  reward function (records each completion's verdict for the mask);
* :mod:`microcoder_ext.trl.trainer`: :class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer`, ``GRPOTrainer`` plus
  the conditional truncation mask and the diversity-determined temperature (``microcoder_ext.core``);
* :mod:`microcoder_ext.trl.guard`: the version guard (every TRL internal relied on);
* ``microcoder train`` (:mod:`microcoder_ext.cli.train`): its flags and settings
  (:mod:`microcoder_ext.trl.train_settings`), dataset (:mod:`microcoder_ext.trl.train_data`) and run
  (:mod:`microcoder_ext.trl.train_run`); ``microcoder doctor trl`` (:mod:`microcoder_ext.trl.doctor`) and
  ``microcoder smoke trl`` (:mod:`microcoder_ext.trl.smoke`) read the same flags.

Importing this package imports nothing of TRL; the submodules do.
"""
