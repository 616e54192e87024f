"""``microcoder train``: help, flag validation (exit 2 with clear messages), the settings it builds, dataset readers,
and one real TRL step end to end on CPU with a locally saved tiny model (no download, nothing of TRL faked)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from microcoder_ext.cli import main
from microcoder_ext.data.problem import Problem
from microcoder_ext.data.writers import write_openrlhf_jsonl, write_verl_parquet
from microcoder_ext.trl import train_data as td
from microcoder_ext.trl import train_settings as ts
from host_load import hang_guard

_spec = importlib.util.spec_from_file_location("trl_conftest", Path(__file__).with_name("conftest.py"))
_c = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_c)

SEED_FLAGS = ("--model_name_or_path", "--use_conditional_mask", "--diversity_driven_temp", "--remove_kl_loss",
              "--clipping_ratio", "--per_device_train_batch_size", "--gradient_accumulation_steps", "--use_lora",
              "--lora_r", "--lora_alpha", "--max_completion_length", "--temperature_mode", "--temperature", "--preset",
              "--dataset", "--output_dir", "--max_steps", "--num_generations", "--learning_rate", "--use_cpu", "--seed",
              "--mc.mask.rho", "--mc.temperature.mode")


def problems(n=4):
    out = []
    for k in range(2, 2 + n):
        tests = {"inputs": [{"x": 1}, {"x": 5}], "outputs": [1 + k, 5 + k], "fn_name": "add_k"}
        out.append(Problem(id=f"t/add/{k}", source="test", statement=f"Return x plus {k}.", tests=tests,
                           starter_code="def add_k(x):", solutions=[f"def add_k(x):\n    return x + {k}\n"]))
    return out


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-model")
    tok = _c.byte_tokenizer()
    model = _c.tiny_qwen2(tok)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def verl_parquet(tmp_path_factory):
    return str(write_verl_parquet(problems(), tmp_path_factory.mktemp("data") / "train.parquet"))


def parse(argv):
    p = argparse.ArgumentParser()
    ts.add_flags(p)
    return p.parse_args(argv)


BASE = ["--model_name_or_path", "m", "--dataset", "d"]


def test_help_lists_the_seed_flags():
    r = subprocess.run([sys.executable, "-m", "microcoder_ext.cli", "train", "--help"], capture_output=True, text=True,
                       timeout=hang_guard(120))
    assert r.returncode == 0, r.stderr
    for flag in SEED_FLAGS:
        assert flag in r.stdout, flag
    assert "epsilon_high = X" in r.stdout  # what --clipping_ratio means is documented
    assert "accelerate launch" in r.stdout


def test_mc_flags_show_each_config_fields_help():
    """``microcoder train``'s ``--mc.*`` flags are the OpenRLHF launcher's, built from the same records: each flag's
    help is its config field's help metadata and the default."""
    import dataclasses

    from microcoder_ext.core.config import MaskConfig, TemperatureConfig

    p = argparse.ArgumentParser()
    ts.add_flags(p)
    actions = {a.option_strings[0]: a for a in p._actions if a.option_strings}
    shown = {"mask": MaskConfig(), "temperature": TemperatureConfig()}
    for section, config in shown.items():
        for f in dataclasses.fields(config):
            action = actions[f"--mc.{section}.{f.name}"]
            assert action.help.replace("%%", "%").startswith(f"{f.metadata['help']} (default "), f.name
            assert action.default is argparse.SUPPRESS and action.dest == f"mc.{section}.{f.name}"
    assert actions["--mc.mask.rho"].help.endswith("(default 0.2)")
    assert actions["--mc.temperature.candidates"].help.endswith("(default 0.6 0.8 1 1.2 1.4 1.6 1.8)")


@pytest.mark.parametrize("argv, message", [
    (["--use_conditional_mask", "maybe"], "argument --use_conditional_mask: expected True or False, got 'maybe'"),
    (["--clipping_ratio", "-1"], "argument --clipping_ratio: must be > 0"),
    (["--remove_kl_loss", "sure"], "argument --remove_kl_loss: expected True or False"),
    (["--temperature_mode", "hot"], "argument --temperature_mode: invalid choice: 'hot'"),
    (["--per_device_train_batch_size", "0"], "argument --per_device_train_batch_size: must be >= 1"),
    (["--mc.mask.rho", "x"], "argument --mc.mask.rho: expected a number"),
])
def test_bad_flag_values_exit_2_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", *BASE, *argv])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--mc.mask.rho", "2"], "--mc.mask.rho: must be a probability in [0, 1], got 2.0"),
    (["--diversity_driven_temp", "True", "--temperature_mode", "constant"],
     "--temperature_mode constant contradicts --diversity_driven_temp True"),
    (["--use_conditional_mask", "False", "--mc.mask.enable", "true"], "--mc.mask.enable"),
    (["--use_conditional_mask", "False", "--mc.mask.rho", "0.1"], "--mc.mask.* given but the mask is off"),
    (["--diversity_driven_temp", "True", "--temperature", "1.3"], "--temperature: "),
    (["--per_device_train_batch_size", "3", "--gradient_accumulation_steps", "1"],
     "not a multiple of --num_generations"),
    (["--remove_kl_loss", "True", "--beta", "0.1"], "--remove_kl_loss True contradicts --beta 0.1"),
    (["--gradient_accumulation_steps", "8", "--steps_per_generation", "12"],
     "--steps_per_generation 12 must be a multiple of --gradient_accumulation_steps 8"),
])
def test_inconsistent_values_exit_2_naming_the_flag(argv, message, capsys, verl_parquet):
    rc = main(["train", "--model_name_or_path", "m", "--dataset", verl_parquet, "--dry_run", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err, err
    assert all(line.startswith("error: ") for line in err.strip().splitlines())


def test_seed_flags_map_onto_trl_and_microcoder_settings():
    p = ts.plan(parse(BASE + ["--use_conditional_mask", "True", "--diversity_driven_temp", "True", "--remove_kl_loss",
                              "True", "--clipping_ratio", "0.3", "--use_cpu"]), cuda=False)
    assert p.grpo["beta"] == 0.0 and p.grpo["epsilon_high"] == 0.3 and p.grpo["use_cpu"] is True
    assert p.grpo["mask_truncated_completions"] is False and p.grpo["bf16"] is False
    assert p.mask and p.temperature_control and p.microcoder.mask.enable
    assert p.microcoder.temperature.mode == "auto" and p.microcoder.temperature.value == 1.2
    assert p.grpo["temperature"] == 1.2 and p.grpo["learning_rate"] == 1e-6

    p = ts.plan(parse(BASE + ["--preset", "grpo_baseline", "--remove_kl_loss", "False", "--diversity_driven_temp",
                              "False", "--temperature", "0.9", "--use_lora", "--lora_r", "8"]), cuda=False)
    assert p.grpo["beta"] == ts.DEFAULT_BETA and not p.mask and p.temperature_control
    assert p.microcoder.temperature.mode == "constant" and p.microcoder.temperature.value == 0.9
    assert p.grpo["temperature"] == 0.9 and p.lora["r"] == 8 and p.grpo["learning_rate"] == 1e-5
    assert any("no GPU" in n for n in p.notes)

    p = ts.plan(parse(BASE + ["--preset", "dapo_baseline"]), cuda=False)
    assert not p.mask and not p.temperature_control and "beta" not in p.grpo
    p = ts.plan(parse(BASE + ["--mc.mask.rho", "0.1", "--mc.temperature.mode", "staged", "--mc.temperature.stages",
                              "[[0, 0.6], [140, 1.2]]"]), cuda=False)
    assert p.microcoder.mask.rho == 0.1 and p.microcoder.temperature.stages == ((0, 0.6), (140, 1.2))


def test_dataset_shapes(tmp_path, verl_parquet):
    ps = problems(2)
    rows, _ = td.read_rows(verl_parquet)
    verl = [td.to_trl_row(r, i) for i, r in enumerate(rows)]
    jsonl = write_openrlhf_jsonl(ps, tmp_path / "train.jsonl")
    orl = [td.to_trl_row(r, i) for i, r in enumerate(td.read_rows(str(jsonl))[0])]
    records = [td.to_trl_row(p.to_dict(), i) for i, p in enumerate(ps)]
    for got in (verl[:2], orl, records):
        assert [json.loads(r["tests"]) for r in got] == [p.tests for p in ps]
        assert [r["prompt"] for r in got] == [[{"role": "user", "content": p.prompt_text()}] for p in ps]
    assert json.loads(verl[0]["extra_info"])["fn_name"] == "add_k"
    # a prepare output directory: train.parquet is picked
    assert td.read_rows(str(Path(verl_parquet).parent))[1].endswith("train.parquet")
    with pytest.raises(td.DatasetError, match="unknown row shape"):
        td.to_trl_row({"question": "q"}, 0)
    with pytest.raises(td.DatasetError, match="no such file"):
        td.read_rows(str(tmp_path / "missing.parquet"))


def test_missing_dataset_exits_2(capsys, tmp_path, tiny_model_dir):
    rc = main(["train", "--model_name_or_path", tiny_model_dir, "--dataset", str(tmp_path / "nope.jsonl"),
               "--use_cpu"])
    assert rc == 2 and "no such file" in capsys.readouterr().err


def test_one_step_end_to_end(tmp_path, tiny_model_dir, verl_parquet, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--model_name_or_path", tiny_model_dir, "--dataset", verl_parquet, "--output_dir", str(out),
               "--use_cpu", "--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "4",
               "--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--learning_rate", "1e-3",
               "--use_conditional_mask", "True", "--diversity_driven_temp", "False", "--temperature", "1.0",
               "--remove_kl_loss", "True", "--clipping_ratio", "0.3", "--mc.mask.m", "2"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "preset microcoder; mask on; temperature controller (constant, start 1)" in text
    settings = json.loads((out / "microcoder_train.json").read_text())
    assert settings["global_step"] == 1
    assert settings["grpo_config"]["epsilon_high"] == 0.3 and settings["grpo_config"]["beta"] == 0.0
    assert settings["microcoder"]["mask"]["m"] == 2
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    # TRL's own log history carries the microcoder/* metrics
    states = list(out.rglob("trainer_state.json"))
    if states:
        history = json.loads(states[0].read_text())["log_history"]
        assert any("microcoder/masked_frac" in h for h in history)
    assert "microcoder/masked_frac" in text  # TRL prints its logs, microcoder/* among them


def test_one_step_lora(tmp_path, tiny_model_dir, verl_parquet):
    out = tmp_path / "lora"
    rc = main(["train", "--model_name_or_path", tiny_model_dir, "--dataset", verl_parquet, "--output_dir", str(out),
               "--use_cpu", "--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2",
               "--gradient_accumulation_steps", "1", "--max_completion_length", "4", "--use_lora", "--lora_r", "4",
               "--lora_alpha", "8", "--report_to", "none"])
    assert rc == 0
    assert (out / "adapter_config.json").is_file()
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
