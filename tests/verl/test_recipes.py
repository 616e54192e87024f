"""The Hydra recipes (``+recipe=...``) and ``microcoder recipe``, against verl 0.9.1's real main_ppo config.

Most tests compose in-process with Hydra's compose API (one initialisation for all configs); a few run the real
command lines in subprocesses: ``python -m verl.trainer.main_ppo ... --cfg job`` / ``--info searchpath``, the
``microcoder`` console script, and a non-editable wheel install of this repo.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
from host_load import hang_guard

pytestmark = pytest.mark.verl

import verl  # noqa: F401  (a missing framework fails, never skips)
import hydra  # noqa: F401  (a missing framework fails, never skips)

from omegaconf import OmegaConf  # noqa: E402

from microcoder_ext.core.config import MaskConfig, MicrocoderConfig, parse_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE_DIR = ROOT / "microcoder_ext" / "configs" / "recipe"
RECIPES = ("microcoder", "microcoder_mask_only", "grpo_baseline", "dapo_baseline")

# ------------------------------------------------------------------ what each recipe must set, value by value

#: the paper's mask settings (docs/paper.md#conditional-truncation-mask); must also be MaskConfig's defaults (checked below)
MASK = {
    "microcoder.mask.enable": True,
    "microcoder.mask.rho": 0.2,
    "microcoder.mask.m": 128,
    "microcoder.mask.mode": "non_incorrect",
    "microcoder.mask.repeat_check": "block",
    "microcoder.mask.seed": 0,
    "microcoder.mask.verdict_key": "verdict",
    "microcoder.mask.missing_verdict": "score",
    "microcoder.mask.correct_score": 1.0,
}
#: the paper's temperature (constant 1.2, docs/paper.md#main-runs-temperature); must also be TemperatureConfig's defaults (checked below)
TEMPERATURE = {
    "microcoder.temperature.mode": "constant",
    "microcoder.temperature.value": 1.2,
    "microcoder.temperature.stages": [],
    "microcoder.temperature.candidates": [0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8],
    "microcoder.temperature.max_temperature": 1.8,
    "microcoder.temperature.start": "value",
    "microcoder.temperature.target": None,
    "microcoder.temperature.target_steps": 10,
    "microcoder.temperature.target_margin": 0.05,
    "microcoder.temperature.window": 20,
    "microcoder.temperature.min_interval": 50,
    "microcoder.temperature.smoothing": 0.9,
    "microcoder.temperature.metric": "distinct",
    "microcoder.temperature.n": 4,
    "microcoder.temperature.probe_prompts": 64,
    "microcoder.temperature.probe_samples": 8,
    "microcoder.temperature.min_stage_steps": 20,
}
OUR_REWARD = {
    "reward.custom_reward_function.path": "pkg://microcoder_ext.reward",
    "reward.custom_reward_function.name": "compute_score",
}
GRPO_T12 = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.use_kl_in_reward": False,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.rollout.temperature": 1.2,
    "trainer.use_v1": True,
    **OUR_REWARD,
}
EXPECTED: dict[str, dict[str, object]] = {
    "microcoder": {
        **GRPO_T12,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
        "trainer.v1.trainer_mode": "microcoder_sync",
        # derived from microcoder.temperature.value (one source of truth); the per-step agent loop
        "actor_rollout_ref.rollout.agent.default_agent_loop": "microcoder_single_turn",
        **MASK,
        **TEMPERATURE,
    },
    "microcoder_mask_only": {"trainer.use_v1": True, "trainer.v1.trainer_mode": "microcoder_sync", **MASK},
    "grpo_baseline": {
        **GRPO_T12,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.clip_ratio_high": 0.2,
        "trainer.v1.trainer_mode": "sync",
    },
    "dapo_baseline": {
        **GRPO_T12,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
        "trainer.v1.trainer_mode": "sync",
    },
}
#: verl's need_reference_policy for each recipe (launched with LAUNCH)
REFERENCE_MODEL = {"microcoder": False, "microcoder_mask_only": False, "grpo_baseline": True, "dapo_baseline": False}

#: a launch command at the paper's scale (docs/paper.md#training-settings), with the GPU-dependent values verl's validation needs.
#: GRPO is given explicitly for microcoder_mask_only, which keeps verl's default estimator (GAE, with a critic whose
#: validation loads the critic model's HF config from actor_rollout_ref.model.path).
LAUNCH = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=64",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "trainer.n_gpus_per_node=8",
]
#: a user's own algorithm, which microcoder_mask_only must leave alone
USER_ALGORITHM = [
    "algorithm.adv_estimator=rloo",
    "algorithm.use_kl_in_reward=true",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.05",
    "actor_rollout_ref.actor.clip_ratio_high=0.3",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.rollout.temperature=0.7",
    "reward.custom_reward_function.path=/data/my_reward.py",
    "reward.custom_reward_function.name=my_score",
]
CLI_OVERRIDES = ["actor_rollout_ref.actor.clip_ratio_high=0.3", "microcoder.mask.rho=0.1"]
STAGED = ["microcoder.temperature.mode=staged", "microcoder.temperature.stages=[[0,0.6],[140,1.2]]"]
TEMPERATURE_OVERRIDES = {
    "value1.0": ["microcoder.temperature.value=1.0"],
    "staged": STAGED,
    "auto": ["microcoder.temperature.mode=auto", "microcoder.temperature.value=0.8", "microcoder.temperature.target=0.5"],
    "rollout1.0": ["actor_rollout_ref.rollout.temperature=1.0"],
    "staged+rollout1.0": [*STAGED, "actor_rollout_ref.rollout.temperature=1.0"],
    "staged+other_loop": [*STAGED, "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"],
    "async": ["trainer.v1.trainer_mode=colocate_async"],
    "pss2": ["+trainer.v1.sync.parameter_sync_step=2"],
}

# ------------------------------------------------------------------------------------------------- helpers


def flatten(node, prefix: str = "") -> dict[str, object]:
    """Dotted leaf key -> value of a plain container (lists and empty dicts are leaves)."""
    if isinstance(node, dict) and node:
        out: dict[str, object] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def leaves(cfg) -> dict[str, object]:
    """Every leaf of a composed config, interpolations unresolved (so derived values compare as written)."""
    return flatten(OmegaConf.to_container(cfg, resolve=False))


def changed_keys(a, b) -> set[str]:
    absent = object()
    la, lb = leaves(a), leaves(b)
    return {k for k in la.keys() | lb.keys() if la.get(k, absent) != lb.get(k, absent)}


def recipe_file_keys(name: str) -> set[str]:
    return set(flatten(OmegaConf.to_container(OmegaConf.load(RECIPE_DIR / f"{name}.yaml"))))


def assert_values(cfg, expected: dict[str, object]) -> None:
    for key, want in expected.items():
        got = OmegaConf.select(cfg, key)
        if OmegaConf.is_config(got):
            got = OmegaConf.to_container(got)
        assert (type(got), got) == (type(want), want), f"{key}: got {got!r}, want {want!r}"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``microcoder ARGV...`` in this process (same code path as the console script)."""
    from microcoder_ext.cli import main

    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def row(key: str, value: str, source: str) -> re.Pattern:
    """A line of ``recipe show``'s table."""
    return re.compile(rf"^\s+{re.escape(key)}\s+{re.escape(value)}\s+{re.escape(source)}\s*$", re.M)


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "HYDRA_FULL_ERROR": "1"}


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def composed() -> dict[str, object]:
    """Every config the in-process tests need, composed under one Hydra initialisation."""
    from hydra import compose, initialize_config_module

    requests: dict[str, list[str]] = {"base": [], "base+launch": LAUNCH, "base+user": USER_ALGORITHM}
    for name in RECIPES:
        requests[name] = [f"+recipe={name}"]
        requests[f"{name}+launch"] = [f"+recipe={name}", *LAUNCH]
    requests["microcoder_mask_only+user"] = ["+recipe=microcoder_mask_only", *USER_ALGORITHM]
    requests["microcoder+cli"] = ["+recipe=microcoder", *CLI_OVERRIDES]
    requests["cli+microcoder"] = [*CLI_OVERRIDES, "+recipe=microcoder"]  # order on the command line is irrelevant
    for label, ov in TEMPERATURE_OVERRIDES.items():
        requests[f"microcoder+{label}"] = ["+recipe=microcoder", *ov]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return {label: compose(config_name="ppo_trainer", overrides=ov) for label, ov in requests.items()}


@pytest.fixture(scope="module")
def real_cli(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """The real command lines, run concurrently from a directory outside the repo (nothing found via the cwd)."""
    python, microcoder = sys.executable, str(Path(sys.executable).with_name("microcoder"))
    commands = {
        "cfg_job": [python, "-m", "verl.trainer.main_ppo", "+recipe=microcoder", *CLI_OVERRIDES, "--cfg", "job"],
        "searchpath": [python, "-m", "verl.trainer.main_ppo", "--info", "searchpath"],
        "show": [microcoder, "recipe", "show", "microcoder"],
    }
    cwd = tmp_path_factory.mktemp("cli")
    procs = {
        k: subprocess.Popen(c, cwd=cwd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, c in commands.items()
    }
    results = {}
    try:
        for key, proc in procs.items():
            out, err = proc.communicate(timeout=hang_guard(180))
            results[key] = subprocess.CompletedProcess(commands[key], proc.returncode, out, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


# ----------------------------------------------------------------------------------------- recipe files


def test_recipe_files_are_global_and_listed():
    from microcoder_ext.verl.recipes import available_recipes

    assert set(available_recipes()) == set(RECIPES)
    for name in RECIPES:
        text = (RECIPE_DIR / f"{name}.yaml").read_text()
        # without it Hydra nests the recipe under `recipe:` and nothing is overridden
        assert text.splitlines()[0] == "# @package _global_", name
        assert available_recipes()[name], f"{name}: no summary comment"


@pytest.mark.parametrize("name", ["microcoder", "microcoder_mask_only"])
def test_microcoder_section_keeps_no_copy_of_the_keys_help(name):
    """Each ``microcoder.*`` key is documented once, in its config field's help (docs/configuration.md shows it): the
    recipe's ``microcoder:`` section has no per-key comments, and the comment before it points to that page."""
    lines = (RECIPE_DIR / f"{name}.yaml").read_text().splitlines()
    start = lines.index("microcoder:")
    section = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith(" "):
            break
        section.append(line)
    assert any(line.strip().startswith(("mask:", "rho:")) for line in section), section
    assert not [line for line in section if re.match(r"^ {4,}#", line)]
    header = []
    for line in reversed(lines[:start]):
        if not line.startswith("#"):
            break
        header.append(line)
    assert "docs/configuration.md" in "\n".join(header), header


#: the Hydra callback of the recipes that claim MicroCoder-GRPO (microcoder_ext.verl.launch_guard): in Hydra's own
#: config (``--cfg hydra``), not in the job's
LAUNCH_GUARD = {"hydra.callbacks.microcoder_launch_guard._target_": "microcoder_ext.verl.launch_guard.LaunchGuard"}
GUARDED = ("microcoder", "microcoder_mask_only")


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_sets_exactly_the_expected_keys(name):
    """Every key a recipe sets is one of the values checked in these tests (and vice versa)."""
    keys = recipe_file_keys(name)
    assert {k for k in keys if not k.startswith("hydra.")} == set(EXPECTED[name])
    hydra = flatten(OmegaConf.to_container(OmegaConf.load(RECIPE_DIR / f"{name}.yaml")).get("hydra", {}), "hydra.")
    assert {k: v for k, v in hydra.items() if k != "hydra"} == (LAUNCH_GUARD if name in GUARDED else {})


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_keys_exist_in_verl_config(composed, name):
    """A typo in a recipe would silently add a key (recipe files are merged, not overridden): every non-microcoder
    key must already exist in verl's config, so that dataclass-backed nodes accept it."""
    base = leaves(composed["base"])
    unknown = {k for k in recipe_file_keys(name) if not k.startswith(("microcoder.", "hydra.")) and k not in base}
    assert not unknown


def test_mask_block_is_mask_config_defaults():
    assert {k.removeprefix("microcoder.mask."): v for k, v in MASK.items()} == dataclasses.asdict(MaskConfig())


def test_temperature_block_is_temperature_config_defaults():
    from microcoder_ext.core.config import TemperatureConfig

    defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(TemperatureConfig()).items()}
    assert {k.removeprefix("microcoder.temperature."): v for k, v in TEMPERATURE.items()} == defaults


# ----------------------------------------------------------------------------------------- composition


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_values_in_composed_config(composed, name):
    assert_values(composed[name], EXPECTED[name])
    assert_values(composed[f"{name}+launch"], EXPECTED[name])


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_changes_nothing_else(composed, name):
    changed = changed_keys(composed["base"], composed[name])
    assert changed <= set(EXPECTED[name])
    # values equal to verl's defaults (e.g. use_v1, token-mean) are pinned, not changes
    absent = object()  # a key verl lacks (e.g. microcoder.temperature.target: null) is a change too
    assert changed == {k for k, v in EXPECTED[name].items() if OmegaConf.select(composed["base"], k, default=absent) != v}


def test_mask_only_changes_only_trainer_mode_and_microcoder(composed):
    mask_keys = {"trainer.v1.trainer_mode", *MASK}
    assert changed_keys(composed["base"], composed["microcoder_mask_only"]) == mask_keys
    assert changed_keys(composed["base+launch"], composed["microcoder_mask_only+launch"]) == mask_keys


def test_mask_only_keeps_the_users_algorithm(composed):
    user = composed["microcoder_mask_only+user"]
    assert changed_keys(composed["base+user"], user) == {"trainer.v1.trainer_mode", *MASK}
    for override in USER_ALGORITHM:
        key, value = override.split("=", 1)
        assert str(OmegaConf.select(user, key)).lower() == value, key
    assert_values(user, EXPECTED["microcoder_mask_only"])


@pytest.mark.parametrize("label", ["microcoder+cli", "cli+microcoder"])
def test_command_line_overrides_win_over_the_recipe(composed, label):
    cfg = composed[label]
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.3
    assert cfg.microcoder.mask.rho == 0.1
    assert changed_keys(composed["microcoder"], cfg) == {
        "actor_rollout_ref.actor.clip_ratio_high",
        "microcoder.mask.rho",
    }


@pytest.mark.parametrize("name", ["microcoder", "microcoder_mask_only"])
def test_microcoder_section_parses_to_the_defaults(composed, name):
    section = OmegaConf.to_container(composed[name].microcoder, resolve=True)
    assert parse_config(section) == MicrocoderConfig()
    assert parse_config(OmegaConf.to_container(composed["microcoder+cli"].microcoder)).mask.rho == 0.1


# ---------------------------------------------------------------------------------- verl's own validation


@pytest.mark.parametrize("name", RECIPES)
def test_verl_validation_passes(composed, name, capsys):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = copy.deepcopy(composed[f"{name}+launch"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # need_critic: "Disabled critic as algorithm.adv_estimator != gae"
        use_critic = need_critic(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=use_critic)
    assert "All configuration checks passed" in capsys.readouterr().out
    assert bool(need_reference_policy(cfg)) is REFERENCE_MODEL[name]
    assert use_critic is False


def test_reference_model_is_required_only_for_the_grpo_baseline(composed):
    """verl's validation demands ref micro-batch sizes exactly when it will create a reference model."""
    from omegaconf import open_dict
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils.config import validate_config

    def validate(cfg) -> None:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=False)

    for name in RECIPES:
        cfg = copy.deepcopy(composed[f"{name}+launch"])
        with open_dict(cfg):
            cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu = None
        if REFERENCE_MODEL[name]:
            with pytest.raises(ValueError, match=r"actor_rollout_ref\.ref"):
                validate(cfg)
        else:
            validate(cfg)


@pytest.mark.parametrize("name", ["microcoder", "grpo_baseline", "dapo_baseline"])
def test_actor_config_dataclass(composed, name):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import FSDPActorConfig

    actor = omega_conf_to_dataclass(composed[f"{name}+launch"].actor_rollout_ref.actor)
    assert type(actor) is FSDPActorConfig
    prefix = "actor_rollout_ref.actor."
    for key, want in EXPECTED[name].items():
        if key.startswith(prefix):
            got = actor
            for part in key.removeprefix(prefix).split("."):
                got = getattr(got, part)
            assert got == want, key
    assert actor.use_kl_loss is (name == "grpo_baseline")
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == ((0.2, 0.2) if name == "grpo_baseline" else (0.2, 0.28))
    assert actor.policy_loss.loss_mode == "vanilla"
    assert actor.rollout_n == 8


def test_mask_only_actor_config_is_verls(composed):
    from verl.utils.config import omega_conf_to_dataclass

    mask_only = omega_conf_to_dataclass(composed["microcoder_mask_only+launch"].actor_rollout_ref.actor)
    base = omega_conf_to_dataclass(composed["base+launch"].actor_rollout_ref.actor)
    assert mask_only == base


# --------------------------------------------------------------------------------------- real command lines


def test_main_ppo_cfg_job_shows_the_recipe(real_cli, capsys):
    result = real_cli["cfg_job"]
    assert result.returncode == 0, result.stderr[-3000:]
    cfg = OmegaConf.create(result.stdout)
    assert_values(
        cfg, {**EXPECTED["microcoder"], "actor_rollout_ref.actor.clip_ratio_high": 0.3, "microcoder.mask.rho": 0.1}
    )
    # `microcoder recipe show --yaml` composes through the API: byte for byte what main_ppo composes
    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder", *CLI_OVERRIDES, "--yaml")
    assert rc == 0, err
    assert out.rstrip("\n") == result.stdout.rstrip("\n")


def test_main_ppo_searchpath_lists_our_configs(real_cli):
    result = real_cli["searchpath"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"\|\s*microcoder-ext\s*\|\s*pkg://microcoder_ext\.configs\s*\|", result.stdout)


def test_console_script_recipe_show(real_cli):
    result = real_cli["show"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    shown_temperature = {f"microcoder.temperature.{k}" for k in ("mode", "value", "stages")}
    for key, value in EXPECTED["microcoder"].items():
        if key in TEMPERATURE and key not in shown_temperature:  # the auto/probe knobs: in --yaml, not the table
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        assert row(key, text, "recipe").search(out), key
    assert row("=> reference model", "no", "verl need_reference_policy()").search(out)
    assert row("=> truncation mask applied", "yes", "trainer mode, microcoder.mask.enable").search(out)
    assert "microcoder_ext.verl.trainer.MicrocoderSyncTrainer" in out
    assert re.search(r"^\s+ok\s+verl validate_config", out, re.M)
    assert re.search(r"^\s+ok\s+v1 trainer 'microcoder_sync' registered", out, re.M)
    assert "FAIL" not in out


def test_wheel_install_exposes_the_plugin(tmp_path):
    """A normal (non-editable) install: build a wheel, install it with --target and use it with the repo hidden."""
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("microcoder_ext", "hydra_plugins"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", src],
        check=True,
        capture_output=True,
        timeout=hang_guard(120),
    )
    (wheel,) = (tmp_path / "dist").glob("microcoder_ext-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "hydra_plugins/microcoder_ext_searchpath/microcoder_ext_searchpath.py" in names
    assert "hydra_plugins/__init__.py" not in names  # a namespace package shared with other Hydra plugins
    assert {f"microcoder_ext/configs/recipe/{n}.yaml" for n in RECIPES} <= names
    target = tmp_path / "target"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", target, wheel], check=True, capture_output=True, timeout=hang_guard(120)
    )

    # python -S: no .pth files, so the editable install of the repo is invisible; site-packages only for verl
    import sysconfig

    script = """
import runpy, sys
from hydra import compose, initialize_config_module
with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=["+recipe=microcoder"])
import hydra_plugins, hydra_plugins.microcoder_ext_searchpath.microcoder_ext_searchpath as plugin, microcoder_ext
print("PLUGIN", plugin.__file__)
print("PACKAGE", microcoder_ext.__file__)
print("NAMESPACE", list(hydra_plugins.__path__))
print("MODE", cfg.trainer.v1.trainer_mode, cfg.actor_rollout_ref.actor.clip_ratio_high)
sys.argv = ["main_ppo", "--info", "searchpath"]
runpy.run_module("verl.trainer.main_ppo", run_name="__main__", alter_sys=True)
"""
    env = {**cli_env(), "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])}
    result = subprocess.run(
        [sys.executable, "-S", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=hang_guard(180)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert f"PLUGIN {target}/hydra_plugins/microcoder_ext_searchpath/microcoder_ext_searchpath.py" in out
    assert f"PACKAGE {target}/microcoder_ext/__init__.py" in out
    # the namespace package: this install's part first; a wheel-installed venv (the verl 0.9.0 lane) adds its own
    # site-packages copy after it, never the checkout
    namespace = ast.literal_eval(out.split("NAMESPACE ", 1)[1].split("\n", 1)[0])
    assert namespace[0] == str(target / "hydra_plugins"), namespace
    assert not any(Path(p).resolve().is_relative_to(ROOT) for p in namespace), namespace
    assert len(namespace) == (1 if os.environ.get("MICROCODER_TEST_INSTALL", "editable") == "editable" else 2), namespace
    assert "MODE microcoder_sync 0.28" in out
    assert re.search(r"\|\s*microcoder-ext\s*\|\s*pkg://microcoder_ext\.configs\s*\|", out)


# --------------------------------------------------------------------------------------- microcoder recipe


def test_recipe_list(capsys):
    rc, out, _ = run_cli(capsys, "recipe", "list")
    assert rc == 0
    for name in RECIPES:
        assert re.search(rf"^{name}\s+\S", out, re.M), name


def test_recipe_show_marks_command_line_values_and_placeholders(capsys):
    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder", *CLI_OVERRIDES)
    assert rc == 0, out + err
    assert row("actor_rollout_ref.actor.clip_ratio_high", "0.3", "command line").search(out)
    assert row("microcoder.mask.rho", "0.1", "command line").search(out)
    assert row("actor_rollout_ref.actor.clip_ratio_low", "0.2", "recipe").search(out)
    assert row("actor_rollout_ref.rollout.n", "1", "verl default").search(out)
    # verl's validation needs micro-batch sizes nobody set: filled for the checks only, and said so
    assert re.search(r"placeholders .*actor_rollout_ref\.actor\.ppo_micro_batch_size_per_gpu=1", out)
    assert "still ???, set before training: actor_rollout_ref.rollout.name" in out

    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder", "--yaml")
    assert rc == 0, err
    assert OmegaConf.create(out).actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is None  # not leaked


def test_recipe_show_grpo_baseline_with_launch_overrides(capsys):
    rc, out, err = run_cli(capsys, "recipe", "show", "grpo_baseline", *LAUNCH)
    assert rc == 0, out + err
    assert row("=> reference model", "yes", "verl need_reference_policy()").search(out)
    assert row("=> truncation mask applied", "no", "trainer mode, microcoder.mask.enable").search(out)
    assert row("actor_rollout_ref.rollout.n", "8", "command line").search(out)
    assert "placeholders" not in out and "still ???" not in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["nope"], 2, "unknown recipe 'nope'; available: dapo_baseline, grpo_baseline, microcoder"),
        (["microcoder", "microcoder.mask.rho=2"], 1, "rho must be a probability in [0, 1], got 2"),
        (["microcoder", "microcoder.mask.bogus=1"], 2, "Key 'bogus' is not in struct"),
        (["microcoder", "+microcoder.mask.bogus=1"], 1, "unknown key(s) microcoder.mask.{bogus}"),
        (["microcoder", "+microcoder.schedule.x=1"], 1, "unknown section(s) microcoder.{schedule}"),
        (["microcoder", "actor_rollout_ref.actor.nonexistent=1"], 2, "Key 'nonexistent' is not in struct"),
        (["microcoder", "+actor_rollout_ref.actor.nonexistent=1"], 1, "unexpected keyword argument 'nonexistent'"),
        (["microcoder", "actor_rollout_ref.actor.loss_agg_mode=mean"], 1, "Invalid loss_agg_mode: mean"),
        (["microcoder", "trainer.use_v1=false"], 1, "the truncation mask would silently not be applied"),
        (["microcoder", "trainer.v1.trainer_mode=sink"], 1, "Unknown trainer 'sink'"),
        (["microcoder", "algorithm.adv_estimator=grop"], 1, "Unknown advantage estimator simply: grop"),
        (["microcoder", "actor_rollout_ref.actor.policy_loss.loss_mode=vanila"], 1, "Unsupported loss mode: vanila"),
        (["microcoder", "reward.custom_reward_function.name=score_it"], 1, "object_name='score_it'"),
        (["microcoder", "actor_rollout_ref.actor.clip_ratio_high=0.3=1"], 2, "cannot compose"),
        (["microcoder", "--resolve"], 2, "--resolve only applies to --yaml"),
    ],
)
def test_recipe_show_rejects(capsys, argv, code, message):
    rc, out, err = run_cli(capsys, "recipe", "show", *argv)
    assert rc == code, out + err
    assert err.startswith("error: ")
    assert message in err


def test_recipe_cli_imports_no_framework():
    """``microcoder --help`` must work without verl: the recipe module imports verl/Hydra/torch lazily."""
    script = (
        "import argparse, sys\n"
        "from microcoder_ext.cli import recipe\n"
        "recipe.add_arguments(argparse.ArgumentParser())\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'verl', 'hydra', 'omegaconf', 'torch', 'ray'})\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=hang_guard(60), check=True)
    assert result.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------- per-step temperature


def _checked(cfg):
    from microcoder_ext.verl.temperature import check_temperature_config

    return check_temperature_config(cfg, parse_config(OmegaConf.to_container(cfg.microcoder, resolve=True)))


def test_rollout_temperature_follows_microcoder_temperature(composed):
    """The recipe derives rollout.temperature from microcoder.temperature.value; command-line overrides compose."""
    assert leaves(composed["microcoder"])["actor_rollout_ref.rollout.temperature"] == "${microcoder.temperature.value}"
    cfg = composed["microcoder+value1.0"]
    assert cfg.actor_rollout_ref.rollout.temperature == 1.0 and cfg.microcoder.temperature.value == 1.0
    tcfg, notes = _checked(cfg)
    assert (tcfg.mode, tcfg.value) == ("constant", 1.0) and notes == []
    tcfg, _ = _checked(composed["microcoder"])
    assert (tcfg.mode, tcfg.value) == ("constant", 1.2)


def test_staged_and_auto_overrides_compose(composed):
    from microcoder_ext.core.temperature import TemperatureController

    tcfg, notes = _checked(composed["microcoder+staged"])
    assert tcfg.mode == "staged" and tcfg.stages == ((0, 0.6), (140, 1.2))
    ctl = TemperatureController(tcfg)
    assert [ctl.temperature(s) for s in (0, 139, 140)] == [0.6, 0.6, 1.2]
    # the recipe's rollout.temperature (= value 1.2) is not step 0's temperature: replaced every step, said so
    assert any("is replaced every step" in n and "step 0: 0.6" in n for n in notes), notes
    tcfg, _ = _checked(composed["microcoder+auto"])
    assert (tcfg.mode, tcfg.value, tcfg.target) == ("auto", 0.8, 0.5)
    _, notes = _checked(composed["microcoder+staged+rollout1.0"])  # replaced anyway: a note, not an error
    assert any("temperature=1.0 is replaced every step" in n for n in notes)


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("rollout1.0", "rollout.temperature=1.0 disagrees with microcoder.temperature.value=1.2"),
        ("staged+other_loop", "default_agent_loop=microcoder_single_turn"),
        ("async", "colocate_async is refused with a microcoder section"),
        ("pss2", "parameter_sync_step=2"),
    ],
)
def test_temperature_config_refusals(composed, label, message):
    from microcoder_ext.core.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        _checked(composed[f"microcoder+{label}"])


def test_mask_only_keeps_verls_temperature(composed):
    from microcoder_ext.verl.temperature import effective_temperature_config

    user = composed["microcoder_mask_only+user"]
    mc = parse_config(OmegaConf.to_container(user.microcoder, resolve=True))
    assert effective_temperature_config(user, mc).value == 0.7  # the user's rollout.temperature, constant
    assert _checked(user)[0].mode == "constant"


def test_recipe_show_prints_the_temperature_plan(capsys):
    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder")
    assert rc == 0, out + err
    assert row("microcoder.temperature.mode", "constant", "recipe").search(out)
    assert row("=> temperature mode", "constant", "microcoder.temperature").search(out)
    assert row("=> temperature value at step 0", "1.2", "microcoder.temperature").search(out)
    assert row("actor_rollout_ref.rollout.temperature", "1.2", "recipe").search(out)
    assert "ok    microcoder temperature: one source of truth" in out

    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder", *STAGED)
    assert rc == 0, out + err
    assert row("=> temperature mode", "staged", "microcoder.temperature").search(out)
    assert row("=> temperature value at step 0", "0.6", "microcoder.temperature").search(out)
    assert row("=> temperature stages", "step 0: T=0.6, step 140: T=1.2", "microcoder.temperature").search(out)
    assert "is replaced every step by microcoder.temperature (mode staged, step 0: 0.6)" in out

    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder_mask_only", "algorithm.adv_estimator=grpo")
    assert rc == 0, out + err
    assert "no microcoder.temperature section: constant T=1 from actor_rollout_ref.rollout.temperature" in out

    # doctor notes: where rollout and actor temperatures could differ, or the live check is off
    rc, out, err = run_cli(
        capsys, "recipe", "show", "microcoder", "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent",
        "actor_rollout_ref.rollout.calculate_log_probs=false",
    )
    assert rc == 0, out + err
    assert "without the per-response temperature check of microcoder_single_turn" in out
    assert "training/rollout_probs_diff_* (the live check" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["actor_rollout_ref.rollout.temperature=1.0"], "disagrees with microcoder.temperature.value=1.2"),
        (["trainer.v1.trainer_mode=colocate_async"], "colocate_async is refused with a microcoder section"),
        (["trainer.v1.trainer_mode=separate_async"], "separate_async is refused with a microcoder section"),
        (["microcoder.temperature.mode=staged", "microcoder.temperature.stages=[[0,0.6],[1,1.2]]"], "continuous"),
    ],
)
def test_recipe_show_rejects_temperature_settings(capsys, argv, message):
    rc, out, err = run_cli(capsys, "recipe", "show", "microcoder", *argv)
    assert rc == 1, out + err
    assert message in err
