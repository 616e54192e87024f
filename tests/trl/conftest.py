"""Fixtures of the TRL adapter tests: a tiny random Qwen2 and a byte-level tokenizer built in-process (no download),
real TRL 1.16 ``GRPOTrainer`` machinery on CPU. Nothing of TRL is faked."""

from __future__ import annotations

import logging
import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

EOS = "<|im_end|>"
PAD = "<|endoftext|>"


def byte_tokenizer():
    """A real ``transformers`` fast tokenizer: one token per UTF-8 byte, plus ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                additional_special_tokens=["<|im_start|>"], clean_up_tokenization_spaces=False)
    t.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return t


@pytest.fixture(scope="session")
def tokenizer():
    return byte_tokenizer()


def tiny_qwen2(tokenizer, seed: int = 0):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=None, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


@pytest.fixture
def model_factory(tokenizer):
    return lambda seed=0: tiny_qwen2(tokenizer, seed)


def grpo_args(tmp_path, preset: str = "microcoder", **overrides):
    """A CPU ``GRPOConfig`` from :func:`microcoder_ext.trl.config.microcoder_grpo_config`."""
    from microcoder_ext.trl.config import microcoder_grpo_config

    kwargs = dict(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                  per_device_train_batch_size=4, num_generations=2, max_completion_length=8, max_steps=1,
                  learning_rate=1e-3, logging_steps=1, save_strategy="no", seed=0, dataloader_num_workers=0,
                  disable_tqdm=True)
    kwargs.update(overrides)
    return microcoder_grpo_config(preset, **kwargs)


@pytest.fixture(autouse=True)
def _quiet():
    import torch

    torch.set_num_threads(1)  # tiny tensors: threads only add overhead on a 2-core machine
    logging.getLogger("transformers").setLevel(logging.ERROR)
    yield
