"""``microcoder_grpo_config`` changes nothing of TRL: a plain ``trl.GRPOTrainer`` with a plain ``GRPOConfig`` behaves
exactly as stock TRL in a process that built our presets; our trainer reads the preset the config carries.

The two sides of the comparison are the same script in two fresh processes, one of which first builds every preset:
the same seed, the same tiny model on disk, one real TRL step each; their losses, rewards and trained weights are
equal, and TRL's classes and modules are the very same objects before and after the presets were built."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datasets import Dataset
from trl import GRPOTrainer

from microcoder_ext.trl.config import PRESET_ATTR, PRESETS, microcoder_grpo_config
from microcoder_ext.trl.reward import CodeReward
from microcoder_ext.trl.trainer import MicrocoderGRPOTrainer
from host_load import hang_guard

_spec = importlib.util.spec_from_file_location("trl_conftest", Path(__file__).with_name("conftest.py"))
_c = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_c)
grpo_args, tiny_qwen2 = _c.grpo_args, _c.tiny_qwen2

#: one real GRPO step of stock TRL (a plain GRPOConfig, a plain reward function); argv: model dir, out dir, "presets"
#: to build every microcoder preset first. Prints what TRL's state and classes were.
SCRIPT = textwrap.dedent("""
    import hashlib, json, sys, types
    import torch
    import trl, trl.trainer.grpo_trainer as grpo_module, trl.trainer.utils as trl_utils
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir, out, build_presets = sys.argv[1], sys.argv[2], sys.argv[3] == "presets"

    def objects():  # every attribute of TRL's trainer, config and their modules, by identity
        found = {}
        for name, owner in (("GRPOTrainer", GRPOTrainer), ("GRPOConfig", GRPOConfig), ("grpo_trainer", grpo_module),
                            ("trl.trainer.utils", trl_utils)):
            for key, value in vars(owner).items():
                found[f"{name}.{key}"] = id(value)
        return found

    before = objects()
    if build_presets:
        from microcoder_ext.trl.config import PRESETS, microcoder_grpo_config
        for preset in PRESETS:
            microcoder_grpo_config(preset, output_dir=out + "/" + preset, use_cpu=True, bf16=False, report_to="none")
    after = objects()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))

    def reward_len(completions, **kwargs):
        return [float(len(c)) / 8.0 for c in completions]

    args = GRPOConfig(output_dir=out + "/run", use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=4, num_generations=2, max_completion_length=8, max_steps=1,
                      learning_rate=1e-2, logging_steps=1, save_strategy="no", seed=0, dataloader_num_workers=0,
                      disable_tqdm=True)
    trainer = GRPOTrainer(model=model_dir, reward_funcs=[reward_len], args=args,
                          train_dataset=Dataset.from_list([{"prompt": f"p{i}:"} for i in range(4)]),
                          processing_class=AutoTokenizer.from_pretrained(model_dir))
    trainer.train()
    digest = hashlib.sha256()
    for name, param in sorted(trainer.model.named_parameters()):
        digest.update(name.encode()); digest.update(param.detach().float().numpy().tobytes())
    logged = {k: v for row in trainer.state.log_history for k, v in row.items()
              if k in ("loss", "reward", "completions/mean_length")}
    print("RESULT " + json.dumps({"changed": changed, "init": GRPOTrainer.__init__.__module__, "logged": logged,
                                  "weights": digest.hexdigest()}))
""")


def _stock_step(model_dir: Path, out: Path, build_presets: bool) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(model_dir), str(out), "presets" if build_presets else "-"],
                          capture_output=True, text=True, env=env, timeout=hang_guard(900))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_a_plain_grpo_trainer_is_stock_trl_after_microcoder_grpo_config(tmp_path, tokenizer):
    model_dir = tmp_path / "model"
    tiny_qwen2(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    stock = _stock_step(model_dir, tmp_path / "stock", build_presets=False)
    beside = _stock_step(model_dir, tmp_path / "beside", build_presets=True)
    assert beside["changed"] == [] and stock["changed"] == []  # no TRL class or module attribute replaced
    assert beside["init"] == stock["init"] == "trl.trainer.grpo_trainer"
    assert set(stock["logged"]) >= {"loss", "reward"}, stock
    assert beside["logged"] == stock["logged"] and beside["weights"] == stock["weights"]


def test_building_the_presets_in_this_process_leaves_grpo_trainer_init_as_trl_defines_it():
    init = GRPOTrainer.__init__
    for preset in PRESETS:
        microcoder_grpo_config(preset, output_dir="unused", use_cpu=True, bf16=False, report_to="none")
    assert GRPOTrainer.__init__ is init and not hasattr(init, "__wrapped__")
    assert init.__code__.co_filename.endswith(os.path.join("trl", "trainer", "grpo_trainer.py"))


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_config_names_its_preset_and_is_a_plain_grpo_config(tmp_path, preset):
    from trl import GRPOConfig

    cfg = grpo_args(tmp_path, preset)
    assert type(cfg) is GRPOConfig and getattr(cfg, PRESET_ATTR) == preset
    assert PRESET_ATTR not in cfg.to_dict()  # not a field: saved and logged configs are TRL's own


def test_a_plain_grpo_trainer_takes_a_preset_config_as_a_grpo_config(tmp_path, tokenizer):
    """Nothing stops TRL's own trainer: it trains the preset's GRPOConfig settings, without the mask and the
    controller (for ``microcoder``: the ``dapo_baseline`` settings), as the docs say."""
    trainer = GRPOTrainer(model=tiny_qwen2(tokenizer), reward_funcs=[CodeReward()], args=grpo_args(tmp_path),
                          train_dataset=Dataset.from_list([{"prompt": "p:", "tests": "{}"}] * 4),
                          processing_class=tokenizer)
    assert type(trainer) is GRPOTrainer and (trainer.beta, trainer.epsilon_high) == (0.0, 0.28)
    assert not hasattr(trainer, "mc_mask_enabled")


@pytest.mark.parametrize("preset, given, controller", [
    ("microcoder", None, True), ("mask_only", None, False), ("mask_only", True, True), ("microcoder", False, False)])
def test_our_trainer_takes_the_temperature_switch_from_the_preset_unless_given(tmp_path, tokenizer, preset, given,
                                                                               controller):
    class Yours(MicrocoderGRPOTrainer):  # a subclass of ours behaves as ours
        pass

    kwargs = {} if given is None else {"temperature_control": given}
    trainer = Yours(model=tiny_qwen2(tokenizer), reward_funcs=[CodeReward()], args=grpo_args(tmp_path, preset),
                    train_dataset=Dataset.from_list([{"prompt": "p:", "tests": "{}"}] * 4), processing_class=tokenizer,
                    **kwargs)
    assert trainer.mc_mask_enabled and (trainer.mc_temperature is not None) == controller
