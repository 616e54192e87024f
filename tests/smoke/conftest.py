"""Fixtures of the smoke core tests: a tiny model saved once per session."""

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny warm-started Qwen2 + built-in tokenizer (prepare_model, not cached)."""
    from microcoder_ext.smoke.model import prepare_model

    out = tmp_path_factory.mktemp("tiny") / "model"
    info = prepare_model(None, warm_steps=60, out_dir=out)
    return info
