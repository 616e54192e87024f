"""Sampling a model outside training: the prompt files (:mod:`.prompts`) and the vLLM / Hugging Face samplers
(:mod:`.samplers`) of ``microcoder temperature probe``; ``microcoder eval`` checks vLLM with
:func:`.samplers.vllm_usable`. Importing this package imports nothing.
"""
