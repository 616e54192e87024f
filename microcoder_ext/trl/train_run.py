"""One ``microcoder train`` run from its validated :class:`~microcoder_ext.trl.train_settings.Plan`: the tokenizer,
then ``GRPOConfig`` (the preset + the plan's overrides), LoRA,
:class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer` with the sandboxed
:class:`~microcoder_ext.trl.reward.CodeReward`, training, the saved model (LoRA: the adapter) and
``microcoder_train.json`` (the effective settings and TRL's log history). TRL, transformers and peft are imported
when called.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from microcoder_ext.trl.train_settings import Plan, UsageError

SETTINGS_FILE = "microcoder_train.json"


def load_tokenizer(name: str, *, trust_remote_code: bool = False) -> Any:
    """The model's tokenizer (pad token = EOS when it has none); :class:`UsageError` when it cannot be loaded."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - missing / offline / not a model
        raise UsageError(f"--model_name_or_path {name}: cannot load its tokenizer "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def train(p: Plan, *, model: str, dataset: Any, tokenizer: Any, output_dir: str, settings: dict,
          is_main: bool = True) -> Any:
    """Train and save into ``output_dir``; on the main process also write :data:`SETTINGS_FILE` (``settings`` plus
    ``wall_time_s``, ``global_step``, ``train_metrics`` and ``log_history``, added to ``settings`` in place).
    Raises :class:`UsageError` (``GRPOConfig: ...``) before anything is loaded when ``GRPOConfig`` refuses the
    settings. Returns the trainer."""
    from microcoder_ext.trl.config import microcoder_grpo_config
    from microcoder_ext.trl.reward import CodeReward
    from microcoder_ext.trl.trainer import MicrocoderGRPOTrainer

    try:
        config = microcoder_grpo_config(p.preset, **p.grpo)
    except (ValueError, TypeError) as e:  # GRPOConfig's own checks (batch divisibility, ...)
        raise UsageError(f"GRPOConfig: {e}") from None
    peft_config = None
    if p.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(**p.lora)
    out = Path(output_dir)
    t0 = time.monotonic()
    trainer = MicrocoderGRPOTrainer(
        model=model, args=config, reward_funcs=[CodeReward(tests_key="tests")], train_dataset=dataset,
        processing_class=tokenizer, peft_config=peft_config, microcoder=p.microcoder,
        temperature_control=p.temperature_control)
    result = trainer.train()
    trainer.save_model(str(out))
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        settings["wall_time_s"] = time.monotonic() - t0
        settings["global_step"] = int(trainer.state.global_step)
        settings["train_metrics"] = dict(result.metrics) if result is not None else {}
        settings["log_history"] = list(trainer.state.log_history)  # TRL's own per-step logs
        (out / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, default=str) + "\n")
    return trainer
