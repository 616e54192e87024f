"""vLLM general plugin of the OpenRLHF CPU backend (``pyproject.toml``: ``[project.entry-points."vllm.general_plugins"]
microcoder_ext_openrlhf_cpu = "microcoder_ext.openrlhf.cpu.vllm_plugin:load"``).

vLLM calls :func:`load` in every process it runs plugins in, also in the verl venv and in any user's vLLM: it is a
no-op (reading one environment variable, importing nothing) unless ``MICROCODER_OPENRLHF_CPU=1``, and then also
when CUDA is available. Otherwise it installs :func:`microcoder_ext.openrlhf.cpu.engine.install`; a changed vLLM or
OpenRLHF internal raises there, naming each one (vLLM does not catch a plugin's error: the engine fails to start).
"""

from __future__ import annotations

import os

ENV = "MICROCODER_OPENRLHF_CPU"


def load() -> None:
    if os.environ.get(ENV, "").strip() != "1":
        return
    import torch

    if torch.cuda.is_available():
        return
    from microcoder_ext.openrlhf.cpu import engine

    engine.install()
