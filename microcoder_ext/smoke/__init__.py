"""``microcoder smoke``: a few real training steps of a verl, OpenRLHF or TRL launch on the local CPU.

What a passing smoke run proves: the launch configuration composes and validates in the framework, the framework's
own entry point (``verl.trainer.main_ppo``, ``openrlhf.cli.train_ppo_ray`` or our launcher around it, ``microcoder
train``) starts every worker and the framework's own vLLM engine (vLLM's CPU build), generates, scores with the
real reward, computes old log-probs and advantages, applies the conditional truncation mask and the temperature
controller, updates the weights and syncs them into vLLM, logs, and checkpoints. What it cannot show: CUDA kernels
(vLLM's, flash-attention, fused ops), bf16 numerics on GPUs, memory use at full size, NCCL and CUDA IPC,
tensor-parallel engines, vLLM's sleep mode, the real model's behaviour. Every substitution is printed.

Framework-free pieces live here (tiny model, data, vLLM on the CPU, weight checksums, report; the evidence the
processes record is :mod:`microcoder_ext.evidence`, below the reward); each framework's runner lives in its
adapter (``microcoder_ext.verl.smoke``, ``microcoder_ext.openrlhf.smoke``, ``microcoder_ext.trl.smoke``). Importing
this package imports nothing.
"""
