"""A ``GRPOConfig`` from a preset that needs MicrocoderGRPOTrainer (``microcoder``, ``mask_only``) given to any other
``GRPOTrainer`` (TRL's own, or a user's subclass of it) stops at construction, before a model is loaded, with a
message naming the trainer to use: such a trainer would train without the mask and the temperature controller. The
baselines' presets (nothing of ours to apply) go through TRL's plain trainer untouched."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from datasets import Dataset
from trl import GRPOTrainer

from microcoder_ext.trl.guard import PlainTrainerError
from microcoder_ext.trl.reward import CodeReward
from microcoder_ext.trl.trainer import MicrocoderGRPOTrainer

_spec = importlib.util.spec_from_file_location("trl_conftest", Path(__file__).with_name("conftest.py"))
_c = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_c)
grpo_args, tiny_qwen2 = _c.grpo_args, _c.tiny_qwen2

NEEDS_OURS = ["microcoder", "mask_only"]
SAYS = "which needs microcoder_ext.trl.trainer.MicrocoderGRPOTrainer"


def dataset():
    return Dataset.from_list([{"prompt": f"p{i}:", "tests": "{}"} for i in range(4)])


class MyTrainer(GRPOTrainer):
    """A user's own GRPOTrainer subclass (not ours)."""


@pytest.mark.parametrize("preset", NEEDS_OURS)
@pytest.mark.parametrize("trainer", [GRPOTrainer, MyTrainer], ids=["trl.GRPOTrainer", "subclass"])
def test_a_trainer_that_is_not_ours_refuses_the_preset_before_loading_a_model(tmp_path, tokenizer, preset, trainer):
    args = grpo_args(tmp_path, preset)
    with pytest.raises(PlainTrainerError) as err:
        # a model id that does not exist: the refusal comes before TRL would try to load it
        trainer(model="microcoder-test/no-such-model", reward_funcs=[CodeReward()], args=args,
                train_dataset=dataset(), processing_class=tokenizer)
    msg = str(err.value)
    assert f"microcoder_grpo_config({preset!r}), {SAYS}" in msg
    assert f"{trainer.__module__}.{trainer.__qualname__} would train without the conditional truncation mask" in msg
    assert "microcoder_grpo_config('dapo_baseline')" in msg


def test_positional_args_are_refused_too(tmp_path, tokenizer):
    with pytest.raises(PlainTrainerError, match=SAYS):
        GRPOTrainer("microcoder-test/no-such-model", [CodeReward()], grpo_args(tmp_path))


@pytest.mark.parametrize("preset", ["dapo_baseline", "grpo_baseline"])
def test_the_baselines_train_in_trls_own_trainer(tmp_path, tokenizer, preset):
    model = tmp_path / "model"  # on disk: grpo_baseline's reference model is loaded from the policy's path
    tiny_qwen2(tokenizer).save_pretrained(model)
    trainer = GRPOTrainer(model=str(model), reward_funcs=[CodeReward()], args=grpo_args(tmp_path, preset),
                          train_dataset=dataset(), processing_class=tokenizer)
    assert trainer.args.epsilon == 0.2 and trainer.args.beta == (0.0 if preset == "dapo_baseline" else 0.001)


@pytest.mark.parametrize("preset", NEEDS_OURS)
def test_our_trainer_and_its_subclasses_take_the_preset(tmp_path, tokenizer, preset):
    class Yours(MicrocoderGRPOTrainer):
        pass

    trainer = Yours(model=tiny_qwen2(tokenizer), reward_funcs=[CodeReward()], args=grpo_args(tmp_path, preset),
                    train_dataset=dataset(), processing_class=tokenizer)
    assert trainer.mc_mask_enabled


def test_a_users_script_stops_in_seconds_with_the_message(tmp_path):
    """The real entry point of a TRL run is the user's own script: it exits 1 with the reason, having loaded no
    model (the model id does not exist and the hub is offline)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        from datasets import Dataset
        from trl import GRPOTrainer
        from microcoder_ext.trl.config import microcoder_grpo_config
        from microcoder_ext.trl.reward import CodeReward

        args = microcoder_grpo_config("microcoder", output_dir="out", use_cpu=True, bf16=False, report_to="none",
                                      per_device_train_batch_size=4, num_generations=2)
        GRPOTrainer(model="microcoder-test/no-such-model", reward_funcs=[CodeReward()], args=args,
                    train_dataset=Dataset.from_list([{"prompt": "p", "tests": "{}"}]))
        print("TRAINING WOULD START")
    """))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    print(f"refused after {time.monotonic() - t0:.1f} s (mostly importing TRL)")
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert "TRAINING WOULD START" not in r.stdout
    assert "PlainTrainerError: this GRPOConfig is microcoder_grpo_config('microcoder'), " + SAYS in r.stderr
    assert "OSError" not in r.stderr and "HFValidationError" not in r.stderr  # no attempt to load the model
