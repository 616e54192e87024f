"""``python -m microcoder_ext.openrlhf.train``: the ``--mc.*`` flags, the presets on the args OpenRLHF 0.11.2's own
``train_ppo_ray`` builds, the conflicts it refuses, the PPOTrainer swap and the dry run.

Everything runs the real ``openrlhf.cli.train_ppo_ray`` (argparse, ``hierarchize``, its validation) in this process
with ``--mc.dry_run``, which stops where ``train()`` starts; only flash_attn / vLLM are the conftest's CPU stubs.
Exit codes: 2 = a bad ``--mc.*`` flag (like argparse's usage errors) or OpenRLHF's argparse, 1 = refused by the
preset, the guard or OpenRLHF's validation.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from host_load import hang_guard

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import openrlhf.trainer.ppo_trainer as ppo_trainer
import openrlhf.utils.config as openrlhf_config
import ray

from microcoder_ext.core.config import MaskConfig, TemperatureConfig, parse_config
from microcoder_ext.openrlhf import dry_run_imports, launcher, options
from microcoder_ext.openrlhf.presets import PRESETS
from microcoder_ext.openrlhf.settings import settings_from_args

ROOT = Path(__file__).resolve().parents[2]
BASE = ["--actor.model_name_or_path", "fake/model", "--rollout.n_samples_per_prompt", "8", "--vllm.num_engines", "8"]
MY_REWARD = "/my/reward.py"
MASK_PRESETS = ["microcoder", "mask_only"]
BASELINES = ["dapo_baseline", "grpo_baseline"]


def dry(*argv: str, preset: str = "microcoder", code: int = 0) -> launcher.Launch:
    """One in-process dry run; asserts the exit status."""
    # mask_only sets neither estimator nor reward: the group estimator the mask is meant for and a reward of "yours"
    extra = ["--algo.advantage.estimator", "group_norm", "--reward.remote_url", MY_REWARD] if preset == "mask_only" \
        else []
    result = launcher.launch([*BASE, *extra, "--mc.preset", preset, *argv, "--mc.dry_run"])
    assert result.code == code
    return result


@pytest.fixture
def run(capsys):
    """``run(*argv, preset=, code=) -> (Launch, stdout, stderr)``."""

    def go(*argv, preset="microcoder", code=0):
        result = dry(*argv, preset=preset, code=code)
        out, err = capsys.readouterr()
        return result, out, err

    return go


def our_reward() -> str:
    return str((ROOT / "microcoder_ext" / "openrlhf" / "openrlhf_reward.py").resolve())


# ------------------------------------------------------------------------------------------------ --mc.* flags


def test_one_flag_per_config_key_with_its_default_and_the_fields_help():
    by_key = {s.key: s for s in options.specs()}
    expected = [f"{section}.{f.name}" for section, cls in (("mask", MaskConfig), ("temperature", TemperatureConfig))
                for f in dataclasses.fields(cls)]
    assert list(by_key) == expected
    actions = {a.option_strings[0]: a for a in options.build_parser()._actions if a.option_strings}
    for section, cls in (("mask", MaskConfig), ("temperature", TemperatureConfig)):
        for f in dataclasses.fields(cls):
            spec = by_key[f"{section}.{f.name}"]
            assert spec.default == getattr(cls(), f.name)
            # the flag's help is the config field's help metadata (the one copy) and the default
            action = actions[f"--mc.{section}.{f.name}"]
            assert action.help.replace("%%", "%") == f"{f.metadata['help']} (default {spec.show_default()})"
            assert (action.dest, action.metavar, action.nargs) == (spec.dest, spec.metavar, spec.nargs)
    text = options.format_help()
    for key in expected:
        assert options.flag(key) in text
    for name, preset in PRESETS.items():
        assert name in text and preset.summary[:40] in text


def test_flags_merge_over_the_core_defaults_through_parse_config():
    mc, rest = options.parse(["--rollout.top_p", "0.9", "--mc.mask.rho", "0.1", "--mc.mask.enable", "false",
                              "--mc.temperature.mode", "auto", "--mc.temperature.candidates", "0.6", "0.8", "1.0",
                              "--mc.temperature.value", "0.6", "--mc.temperature.target", "null",
                              "--reward.clip_range", "-5", "5"])
    assert rest == ["--rollout.top_p", "0.9", "--reward.clip_range", "-5", "5"]
    assert mc.config == parse_config({"mask": {"rho": 0.1, "enable": False},
                                      "temperature": {"mode": "auto", "candidates": [0.6, 0.8, 1.0], "value": 0.6,
                                                      "target": None}})
    mc, _ = options.parse(["--mc.temperature.candidates", "[0.6, 0.8]", "--mc.temperature.mode", "auto",
                           "--mc.temperature.value", "0.8"])
    assert mc.config.temperature.candidates == (0.6, 0.8)
    mc, _ = options.parse([])
    assert mc.preset.name == "microcoder" and mc.config == parse_config({}) and mc.given == {}


# ------------------------------------------------------------------------------------------------ presets


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_values_on_openrlhf_args(run, name):
    result, out, _ = run(preset=name)
    args = result.args
    adv, kl, actor = args.algo.advantage, args.algo.kl, args.actor
    assert adv.estimator == "group_norm"
    init_coef, use_loss, clip, temperature = {
        # kl.init_coef, kl.use_loss, actor.eps_clip_low_high, rollout.temperature
        "microcoder": (0.0, False, (0.2, 0.28), 1.2),
        "mask_only": (0.01, False, (0.2, 0.2), 1.0),  # OpenRLHF's defaults, untouched
        "dapo_baseline": (0.0, False, (0.2, 0.28), 1.2),
        "grpo_baseline": (0.001, True, (0.2, 0.2), 1.2),
    }[name]
    assert kl.init_coef == pytest.approx(init_coef) and kl.use_loss is use_loss
    assert list(actor.eps_clip_low_high) == pytest.approx(clip)
    # OpenRLHF 0.11.0/0.11.1 have no --actor.loss_agg_mode: their loss is always token-mean
    assert getattr(actor, "loss_agg_mode", "token-mean") == "token-mean"
    assert args.rollout.temperature == pytest.approx(temperature)
    if name == "grpo_baseline":
        assert kl.estimator == "k3"
    assert args.reward.remote_url == ([MY_REWARD] if name == "mask_only" else [our_reward()])  # not filled in
    settings = settings_from_args(args)
    assert settings.preset == name and settings.config == parse_config({})
    assert (settings.mask, settings.temperature_control) == (PRESETS[name].mask, PRESETS[name].temperature_control)
    assert f"--mc.preset {name}" in out and "OK: OpenRLHF's argument validation passed" in out


def test_mc_flags_reach_args_microcoder_and_the_rollout_temperature(run):
    result, out, _ = run("--mc.mask.rho", "0.1", "--mc.temperature.mode", "staged",
                         "--mc.temperature.stages", "[[0,0.6],[140,1.2]]")
    settings = settings_from_args(result.args)
    assert settings.config == parse_config({"mask": {"rho": 0.1},
                                            "temperature": {"mode": "staged", "stages": [[0, 0.6], [140, 1.2]]}})
    assert result.args.rollout.temperature == pytest.approx(0.6)
    assert "step 0: T=0.6, step 140: T=1.2" in out
    assert pickle.loads(pickle.dumps(result.args.microcoder)) == result.args.microcoder  # Ray ships it
    assert settings_from_args(pickle.loads(pickle.dumps(result.args))) == settings


CONFLICTS = [
    (["--algo.kl.init_coef", "0.01"], "--algo.kl.init_coef 0.01", ("algo", "kl", "init_coef"), 0.01),
    (["--algo.kl.use_loss"], "--algo.kl.use_loss", ("algo", "kl", "use_loss"), True),
    (["--actor.eps_clip_low_high", "0.2", "0.2"], "--actor.eps_clip_low_high 0.2 0.2",
     ("actor", "eps_clip_low_high"), [0.2, 0.2]),
    (["--actor.eps_clip", "0.3"], "--actor.eps_clip 0.3", ("actor", "eps_clip"), 0.3),
]


@pytest.mark.parametrize("flags,named,path,value", CONFLICTS, ids=[c[1] for c in CONFLICTS])
def test_a_flag_contradicting_the_preset_is_refused_unless_allow_override(run, flags, named, path, value):
    result, _, err = run(*flags, code=1)
    assert f"error: {named} contradicts --mc.preset microcoder" in err
    assert "pass --mc.allow_override to keep yours" in err
    result, out, err = run(*flags, "--mc.allow_override")
    assert f"WARNING: {named} contradicts --mc.preset microcoder" in err
    kept = result.args
    for part in path:
        kept = getattr(kept, part)
    assert kept == pytest.approx(value)
    assert "yours (override" in out


def test_every_conflict_is_reported_at_once(run):
    _, _, err = run("--algo.kl.init_coef", "0.01", "--actor.eps_clip_low_high", "0.2", "0.2", "--train.async_enable",
                    code=1)
    assert [line.split(" contradicts")[0].split(" is refused")[0] for line in err.splitlines()
            if line.startswith("error: ")] == ["error: --algo.kl.init_coef 0.01",
                                               "error: --actor.eps_clip_low_high 0.2 0.2",
                                               "error: --train.async_enable"]


def test_rollout_temperature_is_never_overridable_under_microcoder(run):
    for extra in ([], ["--mc.allow_override"]):
        _, _, err = run("--rollout.temperature", "1.0", *extra, code=1)
        assert "error: --rollout.temperature 1.0 contradicts --mc.preset microcoder" in err
        assert "--mc.allow_override does not apply" in err
    result, _, _ = run("--rollout.temperature", "0.8", "--mc.temperature.value", "0.8")
    assert result.args.rollout.temperature == pytest.approx(0.8)


@pytest.mark.parametrize("name", ["microcoder", "dapo_baseline", "grpo_baseline"])
def test_token_mean_is_passed_only_where_openrlhf_has_the_flag(run, name):
    """OpenRLHF 0.11.0/0.11.1 have no --actor.loss_agg_mode (their loss is always token-mean): passing it would make
    their argparse refuse the launch; 0.11.2 gets it."""
    from importlib import metadata

    from packaging.version import Version

    result, out, _ = run(preset=name)
    installed = metadata.version("openrlhf")
    row = next(line for line in out.splitlines() if line.strip().startswith("--actor.loss_agg_mode"))
    if Version(installed) < Version("0.11.2"):
        assert not hasattr(result.args.actor, "loss_agg_mode")
        assert "token-mean" in row and f"fixed in OpenRLHF {installed} (no such flag before 0.11.2)" in row
    else:
        assert result.args.actor.loss_agg_mode == "token-mean" and row.split()[-1] == "preset"


@pytest.mark.parametrize("name", MASK_PRESETS)
@pytest.mark.parametrize("flag", ["--train.async_enable", "--train.partial_rollout_enable"])
def test_async_training_is_refused_where_our_trainer_runs(run, name, flag):
    extra = ["--train.async_enable"] if flag == "--train.partial_rollout_enable" else []
    for override in ([], ["--mc.allow_override"]):
        _, _, err = run(flag, *extra, *override, preset=name, code=1)
        assert f"error: {flag} is refused with --mc.preset {name}: OpenRLHF then builds PPOTrainerAsync" in err
        assert "the truncation mask would not run" in err


def test_baselines_may_train_async(run):
    result, out, _ = run("--train.async_enable", preset="dapo_baseline")
    assert result.args.train.async_enable and "on (--train.async_enable)" in out


@pytest.mark.parametrize("name,flags", [
    ("dapo_baseline", ["--mc.mask.rho", "0.1"]),
    ("grpo_baseline", ["--mc.mask.enable", "true"]),
    ("dapo_baseline", ["--mc.temperature.mode", "staged"]),
    ("mask_only", ["--mc.temperature.value", "1.0"]),
])
def test_mc_flags_of_a_part_the_preset_does_not_run_are_refused(run, name, flags):
    _, _, err = run(*flags, preset=name, code=2)
    assert f"error: {flags[0]}: --mc.preset {name}" in err


@pytest.mark.parametrize("flags,message", [
    (["--mc.mask.rho", "2"], "error: --mc.mask.rho: must be a probability in [0, 1], got 2.0"),
    (["--mc.mask.rho", "x"], "error: argument --mc.mask.rho: expected a number, got 'x'"),
    (["--mc.temperature.mode", "staged"], "error: --mc.temperature.stages: stages must list at least one"),
    (["--mc.temperature.stages", "[[0,0.6],[5,1.2]]", "--mc.temperature.mode", "staged"],
     "error: --mc.temperature.stages: stage 0 (0.6) lasts 5 step(s)"),
    (["--mc.mask.bogus", "1"], "error: unknown flag --mc.mask.bogus"),
    (["--mc.preset", "ppo"], "error: argument --mc.preset: invalid choice: 'ppo'"),
    (["--mc.temperature.mode", "auto", "--mc.temperature.start", "probe", "--mc.temperature.target", "0.5"],
     "error: --mc.temperature.start probe: the diversity probe is not run inside OpenRLHF"),
])
def test_bad_mc_flags_exit_2_naming_the_flag(capsys, flags, message):
    assert launcher.main([*BASE, *flags, "--mc.dry_run"]) == 2
    assert message in capsys.readouterr().err


def test_other_flags_pass_through_to_openrlhf(run, capsys):
    result, _, _ = run("--data.max_samples", "7", "--rollout.top_p", "0.95")
    assert result.args.data.max_samples == 7 and result.args.rollout.top_p == pytest.approx(0.95)
    assert launcher.main([*BASE, "--actor.bogus", "1", "--mc.dry_run"]) == 2
    assert "error: unrecognized arguments: --actor.bogus 1" in capsys.readouterr().err


def test_openrlhf_validation_failure_is_reported(run):
    _, _, err = run("--rollout.n_samples_per_prompt", "1", code=1)
    assert "error: OpenRLHF rejected the arguments: group_norm requires n_samples_per_prompt > 1" in err


def test_mask_only_warns_without_a_group_estimator(run):
    result, _, err = run("--algo.advantage.estimator", "gae", preset="mask_only")
    assert result.args.algo.advantage.estimator == "gae"
    assert "WARNING: --mc.preset mask_only with --algo.advantage.estimator gae" in err


def test_mask_only_needs_a_reward(capsys):
    assert launcher.main([*BASE, "--mc.preset", "mask_only", "--mc.dry_run"]) == 1
    assert f"error: no reward: --mc.preset mask_only does not fill one in; pass --reward.remote_url {our_reward()}" \
        in capsys.readouterr().err


def test_a_users_reward_is_kept(run):
    result, out, _ = run("--reward.remote_url", "/my/reward.py")
    assert result.args.reward.remote_url == ["/my/reward.py"] and "--reward.remote_url" in out
    result, _, _ = run("--train.agent_func_path", "/my/agent.py")
    assert result.args.reward.remote_url == ["agent"]


# ------------------------------------------------------------------------------------------------ trainer swap


@pytest.mark.parametrize("name", list(PRESETS))
def test_trainer_swap_only_where_the_preset_needs_it_and_everything_restored(run, name):
    originals = (ppo_trainer.PPOTrainer, openrlhf_config.hierarchize, ray.is_initialized, list(sys.argv))
    result, _, _ = run(preset=name)
    if PRESETS[name].uses_trainer:
        from microcoder_ext.openrlhf.trainer import MicrocoderPPOTrainerRemote

        assert result.trainer is MicrocoderPPOTrainerRemote
    else:
        assert result.trainer is originals[0]
    assert (ppo_trainer.PPOTrainer, openrlhf_config.hierarchize, ray.is_initialized, sys.argv) == originals
    assert not ray.is_initialized()  # the dry run stopped before ray.init()
    dry("--algo.kl.init_coef", "0.5", code=1)  # refused runs restore too
    assert (ppo_trainer.PPOTrainer, openrlhf_config.hierarchize, ray.is_initialized, sys.argv) == originals


# ------------------------------------------------------------------------------------------------ subprocesses


def _python(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=hang_guard(300))


def test_help_shows_the_mc_flags_then_openrlhfs():
    proc = _python("-m", "microcoder_ext.openrlhf.train", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--mc.mask.rho" in proc.stdout and "--rollout.n_samples_per_prompt" in proc.stdout
    assert proc.stdout.index("--mc.mask.rho") < proc.stdout.index("--rollout.n_samples_per_prompt")
    assert "grpo_baseline" in proc.stdout


def test_a_real_run_without_flash_attn_fails_with_openrlhfs_import_error():
    proc = _python("-m", "microcoder_ext.openrlhf.train", *BASE)
    assert proc.returncode == 1, proc.stderr
    assert "error: OpenRLHF cannot be imported: ModuleNotFoundError: No module named 'flash_attn'" in proc.stderr


def test_a_launch_without_vllm_engines_exits_2_naming_the_flag(capsys):
    """OpenRLHF generates only with vLLM engines; without --vllm.num_engines it would die at the first step
    with IndexError (a pop from its empty engine heap). The launcher says so and exits 2, dry run or not."""
    launch = ["--actor.model_name_or_path", "fake/model", "--mc.preset", "microcoder",
              "--rollout.n_samples_per_prompt", "4"]
    assert launcher.main([*launch, "--mc.dry_run"]) == 2
    assert "error: --vllm.num_engines is missing (or 0): OpenRLHF generates only with vLLM engines" in \
        capsys.readouterr().err
    # a real launch (flash_attn stubbed in this process): refused before train() starts Ray
    assert launcher.main([*launch, "--algo.kl.init_coef", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "--vllm.num_engines is missing" in err and "--algo.kl.init_coef 0.01 contradicts" in err  # all at once
    assert not ray.is_initialized()


def test_dry_run_import_placeholders_are_exact_and_fail_when_used():
    assert dry_run_imports.install() == []  # here: vLLM's CPU build and the conftest's flash_attn stubs
    code = """
import importlib, json, pickle, sys
from microcoder_ext.openrlhf import dry_run_imports as d
finders = list(sys.meta_path)
out = {"placed": d.install(), "again": d.install(), "finders_same": sys.meta_path == finders}
from flash_attn.bert_padding import pad_input
import flash_attn.utils.distributed
out["spec"] = sys.modules["flash_attn.bert_padding"].__spec__.name
def fails(fn):
    try:
        fn()
    except Exception as e:
        return type(e).__name__ + ": " + str(e)
    return None
out["call"] = fails(lambda: pad_input(1))
out["attr"] = fails(lambda: pad_input.__wrapped__x)
out["pickle"] = fails(lambda: pickle.dumps(pad_input))
out["other_name"] = fails(lambda: exec("from flash_attn.bert_padding import nothing_here"))
out["other_module"] = fails(lambda: importlib.import_module("flash_attn.ops.triton.cross_entropy"))
print(json.dumps(out))
"""
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["placed"] == ["flash_attn"] == out["again"] and out["finders_same"]  # a real vLLM is never replaced
    assert out["spec"] == "flash_attn.bert_padding"
    for key in ("call", "attr", "pickle"):
        assert out[key].startswith("ImportPlaceholderError: ") and "not installed here" in out[key]
    assert "flash_attn.bert_padding.pad_input is an import placeholder" in out["call"]
    assert out["other_name"].startswith("ImportError: cannot import name 'nothing_here'")
    assert out["other_module"].startswith("ModuleNotFoundError: ")
