"""Per-step training temperature in verl 0.9.1: configuration rules shared by the trainer and ``recipe show``.

One source of truth: the ``microcoder.temperature`` section (:class:`~microcoder_ext.core.config.TemperatureConfig`,
:class:`~microcoder_ext.core.temperature.TemperatureController`). The ``microcoder_sync`` trainer writes the step's
temperature ``T_t`` into ``actor_rollout_ref.rollout.temperature`` at the start of every step (and before any
prompt of that step is submitted), so every place where verl reads that key in the step sees ``T_t``:

* sampling: in modes ``staged`` and ``auto`` each prompt batch carries ``T_t`` in the float64 column
  :data:`TEMPERATURE_FIELD` (a constant T is the workers' own ``rollout.temperature``); the agent loop
  :data:`AGENT_LOOP_NAME` (:mod:`microcoder_ext.verl.agent_loop`) puts it into the sampling params (the agent-loop
  workers hold a static copy of the config, so the key alone would not reach them). Greedy and validation
  requests are untouched (validation keeps ``rollout.val_kwargs.temperature``). verl stores the field with every
  response in TransferQueue, and the trainer checks it before the actor update;
* ``KVBatchMeta.extra_info["temperature"]`` for the sampled batch, old log-probs, ref log-probs, values, critic
  and actor updates (``verl/trainer/ppo/v1/trainer_base.py`` ``_step_once`` and ``_compute_*`` / ``_update_*``).

Rules (:func:`check_temperature_config`; errors are :class:`~microcoder_ext.core.config.ConfigError` whose
``code`` names the rule, e.g. :data:`AGENT_LOOP_REQUIRED`):

* no ``microcoder.temperature`` section (e.g. ``+recipe=microcoder_mask_only``): the temperature is verl's
  ``actor_rollout_ref.rollout.temperature``, constant (a ``constant`` controller at that value);
* ``mode: constant``: ``rollout.temperature`` must equal ``microcoder.temperature.value`` (the recipe
  interpolates it, ``${microcoder.temperature.value}``); a different command-line value is an error that names
  the key to set instead. There is no switch to let them differ: verl scores the log-probs with the same key the
  sampler uses, so a "different" rollout temperature could never take effect anyway;
* ``mode: staged | auto``: ``rollout.temperature`` is replaced every step (a note says so), the agent loop must
  be :data:`AGENT_LOOP_NAME` (``actor_rollout_ref.rollout.agent.default_agent_loop``), ``start: probe`` is
  refused (run ``microcoder temperature probe`` and start from ``value``), and so are settings where a step's
  samples can come from an earlier step (rollout replay ``skip.rollout_tq.enable``);
* the async trainer modes (:data:`ASYNC_TRAINER_MODES`) are refused whenever a ``microcoder`` section is present:
  a sample there can be generated under an older temperature than the one its log-probs are computed with
  (verl passes one scalar per batch), and they run verl's own trainers, which never apply the controller.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import OmegaConf

from microcoder_ext.core.config import ConfigError, MicrocoderConfig, TemperatureConfig

#: prompt-batch float64 column [B] carrying the step temperature to the agent loop (stored with each response in TQ)
TEMPERATURE_FIELD = "mc_rollout_temperature"
#: registered agent loop that applies :data:`TEMPERATURE_FIELD` to the sampling params
AGENT_LOOP_NAME = "microcoder_single_turn"
#: controller state, one JSON file in each ``global_step_<n>`` checkpoint folder
STATE_FILE = "microcoder_temperature.json"
ROLLOUT_KEY = "actor_rollout_ref.rollout.temperature"
AGENT_LOOP_KEY = "actor_rollout_ref.rollout.agent.default_agent_loop"
#: verl 0.9.1 v1 trainer modes where a sample can be older than the current temperature (partial/async rollout)
ASYNC_TRAINER_MODES = ("colocate_async", "separate_async")

#: :attr:`~microcoder_ext.core.config.ConfigError.code` of each refusal of :func:`check_temperature_config`
ASYNC_REFUSED = "async-trainer"  # an async trainer mode with a microcoder section (also :func:`async_refusal`)
ROLLOUT_DISAGREES = "rollout-temperature-disagrees"  # mode constant, rollout.temperature != value
PROBE_START = "probe-start"  # start=probe is not run inside verl
AGENT_LOOP_REQUIRED = "agent-loop"  # staged/auto without the microcoder_single_turn agent loop
ROLLOUT_REPLAY = "rollout-replay"  # skip.rollout_tq.enable replays rollouts of other temperatures
PARAMETER_SYNC_STEP = "parameter-sync-step"  # trainer.v1.sync.parameter_sync_step != 1


def _select(cfg, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(cfg, key, default=default, throw_on_missing=False)
    return default if value is None else value


def section_present(config) -> bool:
    """Whether the config has a ``microcoder.temperature`` section (else verl's rollout.temperature rules)."""
    section = config.get("microcoder", None)
    return section is not None and section.get("temperature", None) is not None


def effective_temperature_config(config, mc_config: MicrocoderConfig) -> TemperatureConfig:
    """The controller configuration ``microcoder_sync`` runs with (see the module doc)."""
    if section_present(config):
        return mc_config.temperature
    return TemperatureConfig(mode="constant", value=float(_select(config, ROLLOUT_KEY, 1.0)))


def async_refusal(config) -> str | None:
    """The error message when an async trainer mode is combined with a ``microcoder`` section, else None (its code:
    :data:`ASYNC_REFUSED`)."""
    mode = _select(config, "trainer.v1.trainer_mode")
    if mode in ASYNC_TRAINER_MODES and config.get("microcoder", None) is not None:
        return (
            f"trainer.v1.trainer_mode={mode} is refused with a microcoder section: in verl's async modes "
            f"({', '.join(ASYNC_TRAINER_MODES)}) a sample can be generated under an older temperature than the one "
            f"its log-probs are computed with (verl sends one temperature per batch), and those trainers never apply "
            f"microcoder.temperature nor the truncation mask. Use trainer.v1.trainer_mode=microcoder_sync."
        )
    return None


def check_temperature_config(config, mc_config: MicrocoderConfig) -> tuple[TemperatureConfig, list[str]]:
    """Validate the temperature settings of a ``microcoder_sync`` config; returns (controller config, notes)."""
    notes: list[str] = []
    refusal = async_refusal(config)
    if refusal:
        raise ConfigError(refusal, ASYNC_REFUSED)
    cfg = effective_temperature_config(config, mc_config)
    rollout_t = _select(config, ROLLOUT_KEY)
    if not section_present(config):
        notes.append(
            f"no microcoder.temperature section: constant T={cfg.value:g} from {ROLLOUT_KEY} (verl's own key)"
        )
    elif cfg.mode == "constant":
        if rollout_t is None or not math.isclose(float(rollout_t), cfg.value, rel_tol=0, abs_tol=1e-9):
            raise ConfigError(
                f"{ROLLOUT_KEY}={rollout_t} disagrees with microcoder.temperature.value={cfg.value:g} (mode constant). "
                f"microcoder.temperature is the one source of the training temperature (the trainer sets "
                f"{ROLLOUT_KEY} from it): set microcoder.temperature.value={rollout_t} instead, and leave "
                f"{ROLLOUT_KEY} to the recipe (${{microcoder.temperature.value}})",
                ROLLOUT_DISAGREES,
            )
    else:
        if cfg.mode == "auto" and cfg.start == "probe":
            raise ConfigError(
                "microcoder.temperature.start=probe is not run inside verl: run `microcoder temperature probe` on the "
                "model, then set microcoder.temperature.start=value and microcoder.temperature.value=<recommended>",
                PROBE_START,
            )
        agent = _select(config, AGENT_LOOP_KEY)
        if agent != AGENT_LOOP_NAME:
            raise ConfigError(
                f"microcoder.temperature.mode={cfg.mode} changes the temperature during training, which reaches the "
                f"sampler only through the {AGENT_LOOP_NAME!r} agent loop; {AGENT_LOOP_KEY}={agent}. Set "
                f"{AGENT_LOOP_KEY}={AGENT_LOOP_NAME} (prompts whose data sets another agent_name are sampled at the "
                f"initial temperature and fail the per-step check)",
                AGENT_LOOP_REQUIRED,
            )
        if _select(config, "skip.rollout_tq.enable", False):
            raise ConfigError(
                f"skip.rollout_tq.enable=true replays stored rollouts, sampled at other temperatures; refused with "
                f"microcoder.temperature.mode={cfg.mode}",
                ROLLOUT_REPLAY,
            )
        if rollout_t is not None and not math.isclose(float(rollout_t), _temperature_at(cfg, 0), abs_tol=1e-9):
            notes.append(
                f"{ROLLOUT_KEY}={rollout_t} is replaced every step by microcoder.temperature "
                f"(mode {cfg.mode}, step 0: {_temperature_at(cfg, 0):g})"
            )
    sync_cfg = config.trainer.v1.get("sync", None) or {}
    pss = sync_cfg.get("parameter_sync_step", 1)
    if pss != 1:
        raise ConfigError(
            f"trainer.v1.sync.parameter_sync_step={pss}: microcoder_sync measures diversity and steps the temperature "
            f"once per training step; only 1 is supported",
            PARAMETER_SYNC_STEP,
        )
    return cfg, notes


def _temperature_at(cfg: TemperatureConfig, step: int) -> float:
    from microcoder_ext.core.temperature import TemperatureController

    return TemperatureController(cfg).temperature(step)


def describe_plan(cfg: TemperatureConfig) -> list[tuple[str, str]]:
    """``(label, value)`` rows of the temperature plan for ``recipe show``."""
    from microcoder_ext.core.temperature import TemperatureController

    ctl = TemperatureController(cfg)
    rows = [("mode", cfg.mode)]
    if cfg.mode == "auto" and cfg.start == "probe":
        rows.append(("value at step 0", "(from the probe)"))
        return rows
    rows.append(("value at step 0", f"{ctl.temperature(0):g}"))
    if cfg.mode == "staged":
        rows.append(("stages", ", ".join(f"step {s['step']}: T={s['temperature']:g}" for s in ctl.plan())))
    elif cfg.mode == "auto":
        target = "estimated" if cfg.target is None else f"{cfg.target:g}"
        usable = [f"{c:g}" for c in cfg.candidates if c <= cfg.max_temperature + 1e-9]
        rows.append(
            (
                "auto rule",
                f"one candidate up ({', '.join(usable)}) when smoothed {cfg.metric} diversity < target {target} "
                f"for {cfg.window} steps, >= {cfg.min_interval} steps apart",
            )
        )
    return rows
