"""The start-up checks of a composed verl ``main_ppo`` config (``microcoder recipe show``, ``microcoder doctor
verl``): the checks a training run would otherwise hit only after Ray and the workers have started, run in this
process by :func:`check_config`:

* the installed verl version (:func:`microcoder_ext.compat.require`);
* verl's start-up validation, called as ``verl/trainer/main_ppo.py`` calls it
  (``validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))``),
  after building the actor config dataclass (``omega_conf_to_dataclass(actor_rollout_ref.actor)``);
* the lookups verl does later: advantage estimator, policy loss, v1 trainer (``trainer.v1.trainer_mode``; needs
  the ``verl.plugins`` entry point of microcoder-ext to have loaded) and the custom reward function;
* ``trainer.use_v1=false`` with a non-``sync`` trainer mode (verl's legacy trainer ignores ``trainer_mode``, so
  ``microcoder_sync``'s mask would silently not be applied);
* the ``microcoder:`` section (:func:`microcoder_ext.core.config.parse_config`, as the trainer reads it) and the
  temperature rules of ``microcoder_sync`` (:func:`microcoder_ext.verl.temperature.check_temperature_config`: one
  source of truth, refused async modes); notes warn where the rollout's and the actor's temperatures could differ;
* Ray's logical CPUs where the launch fixes them (``ray_kwargs.ray_init.num_cpus``, one node): fewer than verl's
  resource pool and transfer queue hold leave ``main_ppo`` waiting forever in its set-up
  (:func:`microcoder_ext.verl.ray_resources.shortfall`).

verl's validation requires micro-batch sizes that depend on the GPUs and that no recipe sets; unset ones are
filled with :data:`PLACEHOLDER_MICRO_BATCH` for the checks only (:attr:`CheckReport.placeholders`). verl, Hydra and
torch are imported when :func:`check_config` runs.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from microcoder_ext.verl.recipes import MISSING, message, select

#: trainer mode of :class:`microcoder_ext.verl.trainer.MicrocoderSyncTrainer` (applies the ``microcoder:`` section)
MASK_TRAINER_MODE = "microcoder_sync"

#: value given, for the checks only, to micro-batch sizes verl's validation requires but nobody set
PLACEHOLDER_MICRO_BATCH = 1

#: code of the failure "trainer.use_v1=false with a non-sync trainer mode" (see :attr:`CheckReport.failure_codes`)
LEGACY_TRAINER = "legacy-trainer"

#: code of the failure "ray_kwargs.ray_init.num_cpus below what main_ppo holds" (:mod:`microcoder_ext.verl.ray_resources`)
RAY_CPUS = "ray-cpus"

#: legacy top-level reward sections (verl/trainer/config/legacy_reward_impl.yaml): verl 0.9.1's main_ppo never
#: migrates them (only fully_async_main calls migrate_legacy_reward_impl), so values set there are ignored
LEGACY_REWARD_SECTIONS = ("custom_reward_function", "reward_model", "sandbox_fusion")


@dataclass
class CheckReport:
    """Outcome of :func:`check_config`. ``log`` holds ``(status, text)`` in the order the checks ran;
    ``failure_codes`` the code of each failure, in the order of :attr:`failures`: the ``code`` of the
    :class:`~microcoder_ext.core.config.ConfigError` that failed the check (e.g.
    :data:`microcoder_ext.verl.temperature.AGENT_LOOP_REQUIRED`), :data:`LEGACY_TRAINER`, or ``None`` (verl's own
    errors). Code that reacts to a failure dispatches on its code, never on its text."""

    log: list[tuple[str, str]] = field(default_factory=list)
    failure_codes: list[str | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: dotted key -> value filled in for verl's validation only
    placeholders: dict[str, int] = field(default_factory=dict)
    use_reference_policy: bool | None = None
    use_critic: bool | None = None
    actor_config_type: str | None = None
    trainer_class: str | None = None
    mask_applied: bool = False
    #: parsed :class:`~microcoder_ext.core.config.MicrocoderConfig` when the section is used or present, and valid
    microcoder: Any = None
    #: the :class:`~microcoder_ext.core.config.TemperatureConfig` microcoder_sync runs with (when valid)
    temperature: Any = None

    @property
    def failures(self) -> list[str]:
        return [text for status, text in self.log if status == "FAIL"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, text: str, code: str | None = None) -> None:
        """Log a failure and its code."""
        self.log.append(("FAIL", text))
        self.failure_codes.append(code)

    def check(self, label: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; log ``label`` as passed, or the exception as a failure (never raises)."""
        from microcoder_ext.core.config import ConfigError

        try:
            result = fn()
        except Exception as e:  # noqa: BLE001  (every failure is reported, none is raised)
            self.fail(f"{label}: {type(e).__name__}: {message(e)}", e.code if isinstance(e, ConfigError) else None)
            return None
        self.log.append(("ok", label))
        return result


def check_config(cfg) -> CheckReport:
    """Every start-up check on a composed main_ppo config (see the module docstring); never raises."""
    from omegaconf import OmegaConf

    from microcoder_ext.compat import require
    from microcoder_ext.core.config import parse_config

    report = CheckReport()
    report.check("verl version supported by microcoder-ext", lambda: require("verl"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time noise, need_critic's "Disabled critic" (shown in the table)
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config

        report.use_reference_policy = bool(need_reference_policy(cfg))
        report.use_critic = bool(need_critic(cfg))

        # 1. verl's start-up validation (verl/trainer/main_ppo.py), on a copy with placeholder micro-batch sizes
        vcfg = _validation_copy(cfg, report)
        actor = report.check(
            "actor config: omega_conf_to_dataclass(actor_rollout_ref.actor)",
            lambda: omega_conf_to_dataclass(vcfg.actor_rollout_ref.actor),
        )
        if actor is None:  # validate_config builds the same dataclass first and would fail the same way
            report.log.append(("skip", "verl validate_config: the actor config is invalid"))
        else:
            report.actor_config_type = _qualname(type(actor))
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):  # it prints its verdict and notices
                report.check(
                    "verl validate_config (as main_ppo calls it)",
                    lambda: validate_config(
                        config=vcfg, use_reference_policy=need_reference_policy(vcfg), use_critic=need_critic(vcfg)
                    ),
                )
            report.notes.extend(
                f"verl: {line.strip()}"
                for line in printed.getvalue().splitlines()
                if line.strip() and "All configuration checks passed" not in line
            )

        # 2. registries verl reads only once training runs; plugins loaded via model.external_lib first
        external_lib = select(cfg, "actor_rollout_ref.model.external_lib")
        if external_lib:
            from verl.utils.import_utils import import_external_libs

            report.check(f"import external_lib {external_lib}", lambda: import_external_libs(external_lib))
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

        estimator = select(cfg, "algorithm.adv_estimator")
        report.check(f"advantage estimator {estimator!r} registered", lambda: get_adv_estimator_fn(estimator))
        loss_mode = select(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode")
        report.check(f"policy loss {loss_mode!r} registered", lambda: get_policy_loss_fn(loss_mode))

        use_v1 = bool(select(cfg, "trainer.use_v1"))
        mode = select(cfg, "trainer.v1.trainer_mode")
        if use_v1:
            cls = report.check(f"v1 trainer {mode!r} registered", lambda: _get_trainer_cls(mode))
            report.trainer_class = _qualname(cls) if cls is not None else None
        elif mode != "sync":
            consequence = (
                "the truncation mask would silently not be applied"
                if mode == MASK_TRAINER_MODE
                else f"the {mode!r} trainer would silently not be used"
            )
            report.fail(
                f"trainer.use_v1=false runs verl's legacy trainer (main_ppo_v0), which ignores "
                f"trainer.v1.trainer_mode={mode}: {consequence}. Set trainer.use_v1=true.",
                LEGACY_TRAINER,
            )
        else:
            report.trainer_class = "verl.trainer.main_ppo_v0.TaskRunner (legacy, deprecated)"

        reward_path = select(cfg, "reward.custom_reward_function.path")
        if reward_path:
            from verl.trainer.ppo.reward import get_custom_reward_fn

            reward_name = select(cfg, "reward.custom_reward_function.name")
            report.check(f"reward function {reward_path} : {reward_name} loads", lambda: get_custom_reward_fn(cfg))

    # 3. the microcoder: section, as the microcoder_sync trainer reads it (defaults when absent)
    uses_mask_trainer = use_v1 and mode == MASK_TRAINER_MODE
    section = cfg.get("microcoder", None)
    if section is not None or uses_mask_trainer:
        values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
        report.microcoder = report.check("microcoder section: microcoder_ext.core.config", lambda: parse_config(values))
    if uses_mask_trainer and report.microcoder is not None:
        report.mask_applied = report.microcoder.mask.enable
        if not report.mask_applied:
            report.notes.append("microcoder.mask.enable=false: microcoder_sync then trains exactly like sync")
    elif section is not None and not uses_mask_trainer:
        report.notes.append(
            f"warning: the microcoder: section is ignored; only trainer.v1.trainer_mode={MASK_TRAINER_MODE} "
            f"with trainer.use_v1=true applies it"
        )
    _check_temperature(cfg, report, use_v1, mode, uses_mask_trainer)

    # 4. Ray's CPUs, where the launch fixes them: too few hang main_ppo's set-up (verl waits with no time limit)
    from microcoder_ext.verl.ray_resources import shortfall

    short = report.check("Ray CPUs for verl's resource pool and transfer queue", lambda: shortfall(cfg))
    if short:
        report.log.pop()  # the check ran; its finding is the failure
        report.fail(short, RAY_CPUS)
    _add_warnings(cfg, report)
    return report


def _check_temperature(cfg, report: CheckReport, use_v1: bool, mode: Any, uses_mask_trainer: bool) -> None:
    """The temperature rules of microcoder_sync and the notes on rollout vs actor temperature."""
    from microcoder_ext.verl import temperature as mc_temp

    refusal = mc_temp.async_refusal(cfg) if use_v1 else None
    if refusal:
        report.fail(refusal, mc_temp.ASYNC_REFUSED)
        return
    if mode in mc_temp.ASYNC_TRAINER_MODES and use_v1:
        report.notes.append(
            f"warning: trainer.v1.trainer_mode={mode} (async): a sample can be generated by older weights, still at "
            f"the same constant {mc_temp.ROLLOUT_KEY}; watch training/rollout_probs_diff_*"
        )
    if not uses_mask_trainer or report.microcoder is None:
        return
    checked = report.check(
        "microcoder temperature: one source of truth for sampling and log-probs (microcoder_ext.verl.temperature)",
        lambda: mc_temp.check_temperature_config(cfg, report.microcoder),
    )
    if checked is None:
        return
    report.temperature, notes = checked
    report.notes.extend(notes)
    agent = select(cfg, mc_temp.AGENT_LOOP_KEY)
    if agent != mc_temp.AGENT_LOOP_NAME:
        report.notes.append(
            f"{mc_temp.AGENT_LOOP_KEY}={agent}: samples at the workers' fixed {mc_temp.ROLLOUT_KEY} (same constant as "
            f"the log-probs here), without the per-response temperature check of {mc_temp.AGENT_LOOP_NAME}"
        )
    if not select(cfg, "actor_rollout_ref.rollout.calculate_log_probs"):
        report.notes.append(
            "actor_rollout_ref.rollout.calculate_log_probs=false: verl's training/rollout_probs_diff_* (the live check "
            "that sampling and log-prob temperatures agree) is not computed"
        )
    if select(cfg, "actor_rollout_ref.rollout.logprobs_mode") not in (None, "processed_logprobs"):
        report.notes.append(
            "actor_rollout_ref.rollout.logprobs_mode is not processed_logprobs: rollout log-probs are then not "
            "temperature-scaled, so training/rollout_probs_diff_* no longer checks the temperature"
        )


def _get_trainer_cls(mode: str):
    from verl.trainer.ppo.v1 import get_trainer_cls

    return get_trainer_cls(mode)


def _validation_copy(cfg, report: CheckReport):
    """A copy of ``cfg`` with placeholder micro-batch sizes where verl's validation requires one nobody set."""
    from omegaconf import open_dict
    from verl.trainer.ppo.utils import need_reference_policy

    vcfg = copy.deepcopy(cfg)
    arr = vcfg.actor_rollout_ref
    if arr.actor.use_dynamic_bsz:  # validate_config and the actor dataclass skip the micro-batch checks
        return vcfg
    roles = [("actor", "ppo_micro_batch_size"), ("rollout", "log_prob_micro_batch_size")]
    if need_reference_policy(vcfg):
        roles.append(("ref", "log_prob_micro_batch_size"))
    for role, key in roles:
        node = arr[role]
        if node.get(key) is None and node.get(f"{key}_per_gpu") is None:
            with open_dict(node):
                node[f"{key}_per_gpu"] = PLACEHOLDER_MICRO_BATCH
            report.placeholders[f"actor_rollout_ref.{role}.{key}_per_gpu"] = PLACEHOLDER_MICRO_BATCH
    return vcfg


def _add_warnings(cfg, report: CheckReport) -> None:
    from omegaconf import OmegaConf

    n = select(cfg, "actor_rollout_ref.rollout.n")
    if select(cfg, "algorithm.adv_estimator") == "grpo" and isinstance(n, int) and n < 2:
        report.notes.append(
            f"warning: GRPO groups are the actor_rollout_ref.rollout.n responses per prompt; with n={n} verl's "
            f"GRPO uses the raw score as the advantage. Set rollout.n (the paper does not state its group size)."
        )
    for section in LEGACY_REWARD_SECTIONS:
        if section in cfg and _any_leaf_set(OmegaConf.to_container(cfg[section], resolve=False)):
            report.notes.append(
                f"warning: legacy top-level {section}.* is set, but verl 0.9.1's main_ppo ignores it: "
                f"use the keys under reward.* instead"
            )
    missing = sorted(OmegaConf.missing_keys(cfg))
    if not select(cfg, "reward.reward_model.enable"):  # read only when a reward model is enabled
        missing = [k for k in missing if not k.startswith("reward.reward_model.")]
    if missing:
        report.notes.append(f"still {MISSING}, set before training: {', '.join(missing)}")


def _any_leaf_set(values: Any) -> bool:
    if isinstance(values, dict):
        return any(_any_leaf_set(v) for v in values.values())
    if isinstance(values, list):
        return bool(values)
    return values is not None


def _qualname(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"
