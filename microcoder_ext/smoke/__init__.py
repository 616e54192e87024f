"""``microcoder smoke``: a few real training steps of a verl, OpenRLHF or TRL launch on the local CPU.

What a passing smoke run proves: the launch configuration composes and validates in the framework, the framework's
own entry point (``verl.trainer.main_ppo``, ``openrlhf.cli.train_ppo_ray`` or our launcher around it, ``microcoder
train``) starts every worker, generates, scores with the real reward, computes old log-probs and advantages, applies
the conditional truncation mask and the temperature controller, updates the weights and sends them to the generation
engine, logs, and checkpoints. What it cannot show: GPU kernels (flash-attention, fused ops), memory use at full
size, NCCL, vLLM's numerics and scheduling, the real model's behaviour. Every substitution is printed.

Framework-free pieces live here (tiny model, data, engine, evidence, report); each framework's runner lives in its
adapter (``microcoder_ext.verl.smoke``, ``microcoder_ext.openrlhf.smoke``, ``microcoder_ext.trl.smoke``). Importing
this package imports nothing.
"""
