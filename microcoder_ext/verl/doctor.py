"""verl adapter of ``microcoder doctor``: a composed ``main_ppo`` config -> :class:`~microcoder_ext.core.doctor.TrainingPlan`.

The config is composed exactly like ``microcoder recipe show`` does (:func:`microcoder_ext.verl.recipes.compose`:
verl's own ``ppo_trainer`` config, ``+recipe=NAME`` and the Hydra overrides), and verl's start-up checks run through
:func:`microcoder_ext.verl.recipe_checks.check_config` (with its placeholder micro-batch sizes); their failures become
``invalid-config`` findings unless a doctor rule already reports the same problem (told by the failure's code,
:attr:`~microcoder_ext.verl.recipe_checks.CheckReport.failure_codes`).

What verl 0.9.1 does, read from its config:

* group size ``actor_rollout_ref.rollout.n``; prompts per step ``data.train_batch_size``; prompts per update
  ``actor_rollout_ref.actor.ppo_mini_batch_size`` (verl multiplies it by ``rollout.n`` itself); response length
  ``actor_rollout_ref.rollout.response_length`` (``${data.max_response_length}`` by default);
* KL: ``actor.use_kl_loss`` (coefficient ``actor.kl_loss_coef``) and ``algorithm.use_kl_in_reward``
  (``algorithm.kl_ctrl.kl_coef``); ``kl_coef`` in the plan is the coefficient in effect (0 with no KL term);
* temperature: verl has one key, ``actor_rollout_ref.rollout.temperature``. The v1 trainer passes it to the sampler
  and as ``temperature`` in the meta info of the old/ref/new log-prob passes (``verl/trainer/ppo/v1/trainer_base.py``),
  so sampling and log-probs can not differ in a sync run: ``logprob_temperature = rollout_temperature`` and
  ``temperature_synced = True``. ``microcoder_sync`` writes the controller's step temperature into that key
  every step (:mod:`microcoder_ext.verl.temperature`), so at step 0 both are the controller's first temperature.
  Exception: a staged/auto controller with another agent loop than ``microcoder_single_turn`` (the agent-loop
  workers keep a static copy of the config, so their samplers stay at the first temperature while the log-probs
  follow the controller): ``temperature_synced = False`` (the trainer refuses this config too);
* mask: only ``trainer.use_v1=true`` with ``trainer.v1.trainer_mode=microcoder_sync`` and ``microcoder.mask.enable``;
* reward: ``reward.custom_reward_function.path`` ``pkg://microcoder_ext.reward`` (or the module's file) returns
  verdicts; another custom function is unknown (``None``); no custom function (verl's built-in scorers return a
  bare score) is ``False``;
* async: ``trainer.v1.trainer_mode`` in :data:`microcoder_ext.verl.temperature.ASYNC_TRAINER_MODES`.
"""

from __future__ import annotations

from typing import Any, Sequence

from microcoder_ext.core.config import ConfigError, MaskConfig, parse_config
from microcoder_ext.core.doctor import TrainingPlan, lenient_temperature_config

#: verl advantage estimators that normalise within the rollout.n responses of a prompt
GROUP_ESTIMATORS = frozenset({
    "grpo", "grpo_passk", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg", "gdpo",
    "reinforce_plus_plus_baseline",
})
NON_GROUP_ESTIMATORS = frozenset({"gae", "reinforce_plus_plus", "remax"})

REWARD_PATHS = ("pkg://microcoder_ext.reward",)

A = "actor_rollout_ref"
#: concept -> Hydra override (``{}`` = the value)
FIXES: dict[str, str] = {
    "temperature": "microcoder.temperature.value={}",
    "temperature_stages": "microcoder.temperature.stages={}",
    "kl_loss": f"{A}.actor.use_kl_loss={{}} algorithm.use_kl_in_reward=false",
    "kl_coef": f"{A}.actor.kl_loss_coef={{}}",
    "clip_low": f"{A}.actor.clip_ratio_low={{}}",
    "clip_high": f"{A}.actor.clip_ratio_high={{}}",
    "mask_rho": "microcoder.mask.rho={}",
    "mask_mode": "microcoder.mask.mode={}",
    "max_response_length": "data.max_response_length={}",
    "train_batch_size": "data.train_batch_size={}",
    "mini_batch_size": f"{A}.actor.ppo_mini_batch_size={{}}",
    "group_size": f"{A}.rollout.n={{}}",
    "reward": "reward.custom_reward_function.path={} reward.custom_reward_function.name=compute_score",
    "missing_verdict": "microcoder.mask.missing_verdict={}",
    # verl scores log-probs with the sampling key itself: there is nothing separate to set
    "logprob_temperature": f"{A}.rollout.temperature={{}}",
}


def _reported_by_rules() -> frozenset[str]:
    """Codes of ``check_config`` failures that a doctor rule reports itself (kept out of ``invalid-config``): a
    refused temperature schedule (``continuous-temperature``, or ``invalid-config`` already from the plan's own
    parse), an async trainer mode (``async``), a controller without our agent loop (``temperature-mismatch``)."""
    from microcoder_ext.core.schedule import CODES
    from microcoder_ext.verl.temperature import AGENT_LOOP_REQUIRED, ASYNC_REFUSED

    return CODES | {ASYNC_REFUSED, AGENT_LOOP_REQUIRED}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _reward_verdicts(path: Any) -> bool | None:
    if not path:
        return False
    path = str(path)
    if path in REWARD_PATHS or path.rstrip("/").endswith(("microcoder_ext/reward/__init__.py", "microcoder_ext/reward")):
        return True
    return None


def plan_from_verl(config, recipe: str | None = None, checks: bool = True) -> TrainingPlan:
    """The :class:`TrainingPlan` of a composed verl ``main_ppo`` config (see the module docstring).

    ``checks``: also run ``microcoder recipe show``'s start-up checks and record failures in ``config_errors``.
    """
    from omegaconf import OmegaConf

    from microcoder_ext.verl import temperature as mc_temp
    from microcoder_ext.verl.recipe_checks import MASK_TRAINER_MODE, check_config
    from microcoder_ext.verl.recipes import MISSING, select

    def get(key: str) -> Any:
        v = select(config, key)
        return None if v == MISSING else v

    plan = TrainingPlan(framework="verl", recipe=recipe, fixes=dict(FIXES))
    plan.estimator = get("algorithm.adv_estimator")
    plan.group_estimator = (
        True if plan.estimator in GROUP_ESTIMATORS else False if plan.estimator in NON_GROUP_ESTIMATORS else None
    )
    plan.group_size = _int(get(f"{A}.rollout.n"))
    plan.train_batch_size = _int(get("data.train_batch_size"))
    plan.mini_batch_size = _int(get(f"{A}.actor.ppo_mini_batch_size"))
    plan.max_response_length = _int(get(f"{A}.rollout.response_length")) or _int(get("data.max_response_length"))
    plan.kl_loss = bool(get(f"{A}.actor.use_kl_loss"))
    plan.kl_in_reward = bool(get("algorithm.use_kl_in_reward"))
    coefs = ([_float(get(f"{A}.actor.kl_loss_coef"))] if plan.kl_loss else []) + (
        [_float(get("algorithm.kl_ctrl.kl_coef"))] if plan.kl_in_reward else []
    )
    plan.kl_coef = max((c for c in coefs if c is not None), default=0.0)
    plan.clip_low = _float(get(f"{A}.actor.clip_ratio_low"))
    plan.clip_high = _float(get(f"{A}.actor.clip_ratio_high"))
    plan.loss_agg = get(f"{A}.actor.loss_agg_mode")
    plan.reward_verdicts = _reward_verdicts(get("reward.custom_reward_function.path"))

    use_v1 = bool(get("trainer.use_v1"))
    mode = get("trainer.v1.trainer_mode")
    plan.async_rollout = use_v1 and mode in mc_temp.ASYNC_TRAINER_MODES
    rollout_t = _float(get(mc_temp.ROLLOUT_KEY))
    plan.rollout_temperature = plan.logprob_temperature = rollout_t
    plan.temperature_synced = True  # one key for sampling and log-probs (module docstring)

    errors: list[str] = []
    section = config.get("microcoder", None)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    runs_controller = use_v1 and (mode == MASK_TRAINER_MODE or (mode in mc_temp.ASYNC_TRAINER_MODES and section))
    mask: MaskConfig | None = None
    if runs_controller or section is not None:
        try:
            mask = parse_config({"mask": values.get("mask")}).mask
        except ConfigError as e:
            errors.append(str(e))
        try:
            if mc_temp.section_present(config):
                temperature = lenient_temperature_config(values.get("temperature"))
            else:  # microcoder_sync without a temperature section: verl's key, constant
                temperature = lenient_temperature_config({"mode": "constant", "value": rollout_t or 1.0})
        except ConfigError as e:
            errors.append(str(e))
            temperature = None
        if runs_controller:
            plan.temperature = temperature
            if mask is not None and mask.enable:
                plan.mask = mask
            if temperature is not None and mode == MASK_TRAINER_MODE:  # the trainer writes it before step 0
                first = float(temperature.stages[0][1]) if temperature.mode == "staged" and temperature.stages \
                    else temperature.value
                plan.rollout_temperature = plan.logprob_temperature = first
                # the step temperature reaches the sampler only through our agent loop; with another one the
                # samplers keep their initial temperature while the log-probs follow the controller
                if temperature.mode != "constant" and get(mc_temp.AGENT_LOOP_KEY) != mc_temp.AGENT_LOOP_NAME:
                    plan.temperature_synced = False
                    plan.fixes["temperature_sync"] = f"{mc_temp.AGENT_LOOP_KEY}={mc_temp.AGENT_LOOP_NAME}"

    if checks:
        report = check_config(config)
        reported = _reported_by_rules()
        for code, failure in zip(report.failure_codes, report.failures):
            if code not in reported and failure not in errors:
                errors.append(failure)
    plan.config_errors = errors
    return plan


def recipe_from_overrides(overrides: Sequence[str]) -> str | None:
    """``NAME`` of a ``+recipe=NAME`` override, if any."""
    for o in overrides:
        if o.startswith("+recipe=") or o.startswith("recipe="):
            return o.split("=", 1)[1]
    return None


def plan_from_args(recipe: str | None, overrides: Sequence[str] = (), checks: bool = True) -> TrainingPlan:
    """Compose like ``microcoder recipe show`` (``recipe`` None: no ``+recipe=``) and build the plan."""
    from microcoder_ext.verl.recipes import compose

    cfg = compose(recipe, list(overrides))
    return plan_from_verl(cfg, recipe=recipe or recipe_from_overrides(overrides), checks=checks)


class ArgvError(ValueError):
    """The command line is not ``[RECIPE|none] [key=value...]`` (``microcoder doctor verl``'s usage error)."""


def plan_from_argv(argv: Sequence[str]) -> TrainingPlan:
    """``microcoder doctor verl [RECIPE|none] [OVERRIDES...]`` -> TrainingPlan (the first word without ``=`` is
    the recipe; ``none`` or ``-``: no ``+recipe=``)."""
    argv = list(argv)
    recipe = None
    if argv and "=" not in argv[0] and not argv[0].startswith(("+", "~", "-")):
        recipe, argv = argv[0], argv[1:]
        recipe = None if recipe.lower() in ("none", "-") else recipe
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ArgvError(f"verl overrides are key=value (Hydra); not understood: {' '.join(bad)}")
    return plan_from_args(recipe, argv)
