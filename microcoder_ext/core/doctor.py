"""``microcoder doctor``: the paper's training insights as checks on what a launch will actually do.

Framework-free. Each adapter (:mod:`microcoder_ext.verl.doctor`, ``microcoder_ext.openrlhf.doctor``,
``microcoder_ext.trl.doctor``) turns a launch configuration into a :class:`TrainingPlan`; :func:`diagnose` returns
the :class:`Finding` s, each with a stable ``code``, a severity, the insight behind it (a section of the paper
page, ``docs/paper.md``, and a letter of the authors' Insights, ``docs/paper.md#insights``) and the override that
fixes it. A plan field
left ``None`` is unknown and no rule fires on it.

Rules (one finding per problem; codes are stable):

=======================  ========  =====================================================================================
code                     severity  fires when (insight)
=======================  ========  =====================================================================================
invalid-config           error     the framework's own start-up checks refuse the config (``plan.config_errors``)
group-size-1             error     ``group_size <= 1`` with a group-normalising estimator: every advantage is 0 or the
                                   raw score (objective)
async                    error     async rollout/training with the truncation mask or a temperature controller: a
                                   sample can be generated under an older temperature / without the mask
                                   (objective, temperature)
continuous-temperature   error     a staged schedule or auto ladder finer than MIN_STAGE_STEPS steps /
                                   MIN_TEMPERATURE_STEP: a continuous ramp, which the trainers refuse (temperature; Insights B)
temperature-mismatch     error     a controller with more than one temperature whose log-probs are not synced with the
                                   sampler (``temperature_synced`` False) (objective: pi^T(D) in both policies)
temperature-mismatch     warning   ``rollout_temperature != logprob_temperature`` at step 0 (objective)
mask-without-verdicts    error     mask on, reward without verdicts, ``missing_verdict=error``: every step fails (mask)
mask-without-verdicts    warning   mask on, reward without verdicts (``keep``: never masks; ``score``: "no verdict"
                                   truncations read as wrong answers) (non-incorrect; Insights E)
mask-without-verdicts    info      mask on, reward unknown (custom function): the ``missing_verdict`` policy applies
                                   if it returns no verdict (mask)
low-temperature          warning   sampling temperature (or the controller's only/highest one) <= 0.6: diversity
                                   collapse (temperature; Insights B)
low-temperature          info      a staged/auto controller that starts at <= 0.6 and later rises above it: the paper's
                                   low-to-high schedule, fine if the switch comes (temperature; Insights B)
kl-with-microcoder       warning   mask on and a KL loss, KL in the reward or a KL coefficient > 0 (KL: beta0 = 0;
                                   Insights G)
symmetric-clip           warning   mask on and ``clip_high <= clip_low`` (KL: clip-higher; Insights G)
mask-all                 warning   ``rho >= 0.99`` or a filter that masks every truncated response ("Mask All
                                   (DeepCoder)": diversity spikes, then collapses; rho; Insights E)
rho-range                warning   rho outside [0.1, 0.3], the studied range (rho; Insights E)
rho-range                info      rho = 0 with the mask on: the mask does nothing
short-response           warning   ``max_response_length < 4096`` (settings; Insights D: a small initial limit leaves
                                   persistent deficits)
on-policy-batch          warning   ``mini_batch_size == train_batch_size``: fully on-policy, less stable (settings;
                                   Insights F)
on-policy-batch          info      ``train_batch_size`` outside [32, 128]: the paper's 64 was best of 32/64/128
=======================  ========  =====================================================================================

The sections of docs/paper.md in parentheses: objective = ``docs/paper.md#objective``, mask =
``docs/paper.md#conditional-truncation-mask``, non-incorrect = ``docs/paper.md#non-incorrect``, rho =
``docs/paper.md#masking-probability``, temperature = ``docs/paper.md#diversity-determined-temperature``, KL =
``docs/paper.md#kl-and-clipping``, settings = ``docs/paper.md#training-settings``.

Severity policy: **error** = the run fails at start-up or silently trains something else than configured;
**warning** = runs, but against a finding of the paper; **info** = worth knowing, no action needed.
Exit status (:func:`exit_status`): 0 clean (infos only), 1 warnings with ``strict``, 2 errors.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from microcoder_ext.core.config import ConfigError, MaskConfig, TemperatureConfig, parse_temperature_config
from microcoder_ext.core.schedule import (
    MIN_STAGE_STEPS,
    MIN_TEMPERATURE_STEP,
    ScheduleError,
    validate_candidates,
    validate_stages,
)

SEVERITIES = ("error", "warning", "info")

#: thresholds (the paper's sections in the rule table above)
LOW_TEMPERATURE = 0.6
RHO_RANGE = (0.1, 0.3)
MASK_ALL_RHO = 0.99
MIN_RESPONSE_LENGTH = 4096
PAPER_BATCH = 64
BATCH_RANGE = (32, 128)
#: values the fixes suggest (docs/paper.md#our-defaults)
PAPER_TEMPERATURE = 1.2
PAPER_CLIP = (0.2, 0.28)
PAPER_RHO = 0.2
PAPER_MINI_BATCH = 32
SUGGESTED_GROUP_SIZE = 8
PAPER_STAGES = "[[0,0.6],[140,1.2]]"

FIX_CONCEPTS = (
    "temperature", "temperature_stages", "kl_loss", "kl_coef", "clip_low", "clip_high", "mask_rho", "mask_mode",
    "max_response_length", "train_batch_size", "mini_batch_size", "group_size", "reward", "missing_verdict",
    "logprob_temperature", "temperature_sync",
)


@dataclass
class TrainingPlan:
    """What a launch will actually do, framework-neutral; ``None`` = unknown / not set (no rule fires on it)."""

    framework: str  # "verl" | "openrlhf" | "trl"
    recipe: str | None = None  # recipe / preset name
    estimator: str | None = None  # advantage estimator as the framework names it
    group_estimator: bool | None = None  # estimator normalises within prompt groups (GRPO-like)
    group_size: int | None = None  # responses per prompt
    train_batch_size: int | None = None  # prompts per step
    mini_batch_size: int | None = None  # prompts per optimizer update
    max_response_length: int | None = None  # tokens
    kl_loss: bool | None = None
    kl_coef: float | None = None  # the coefficient in effect (0 when no KL term is used)
    kl_in_reward: bool | None = None
    clip_low: float | None = None
    clip_high: float | None = None
    loss_agg: str | None = None
    rollout_temperature: float | None = None  # sampling temperature at step 0
    logprob_temperature: float | None = None  # temperature of the actor's log-probs at step 0
    temperature_synced: bool | None = None  # one source drives both every step (our trainers)
    temperature: TemperatureConfig | None = None  # the controller's config when it runs (may be unvalidated)
    mask: MaskConfig | None = None  # None: the conditional mask is not applied
    reward_verdicts: bool | None = None  # the reward returns our verdicts (None: unknown)
    async_rollout: bool = False
    fixes: dict[str, str] = field(default_factory=dict)  # concept -> the override that sets it, "{}" = the value
    # --- optional facts (their defaults keep every adapter valid)
    #: the framework's own filter masks every truncated response (e.g. TRL mask_truncated_completions): Mask All
    mask_all_truncated: bool | None = None
    #: failures of the framework's own start-up checks (each becomes an ``invalid-config`` error)
    config_errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready dict (MaskConfig / TemperatureConfig as dicts, stages as lists)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if dataclasses.is_dataclass(v):
                v = {k: _jsonable(x) for k, x in dataclasses.asdict(v).items()}
            out[f.name] = _jsonable(v)
        return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


@dataclass
class Finding:
    code: str
    severity: str
    message: str
    insight: str
    fix: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------------------------ helpers


def lenient_temperature_config(values: Mapping[str, Any] | None) -> TemperatureConfig:
    """A :class:`TemperatureConfig` even when its staged/auto schedule breaks the continuous-ramp rule.

    :func:`parse_temperature_config` refuses such schedules (the trainers do too); the doctor wants to *report*
    them (``continuous-temperature``), so the schedule is kept unvalidated. Other errors still raise ConfigError.
    """
    try:
        return parse_temperature_config(values)
    except ConfigError:
        values = dict(values or {})
        mode = values.get("mode")
        if mode not in ("staged", "auto"):
            raise
        cfg = parse_temperature_config({**values, "mode": "constant"})  # validates everything but the schedule
        object.__setattr__(cfg, "mode", mode)
        return cfg


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _fix(plan: TrainingPlan, *items: tuple[str, Any], prose: str) -> str:
    """The overrides for ``(concept, value)`` pairs the adapter knows, else ``prose``."""
    parts = [plan.fixes[c].replace("{}", _fmt(v)) for c, v in items if plan.fixes.get(c)]
    return " ".join(parts) if parts else prose


def _controller_temperatures(t: TemperatureConfig) -> list[float]:
    if t.mode == "staged":
        return [float(temp) for _, temp in t.stages] or [t.value]
    if t.mode == "auto":
        return [c for c in t.candidates if c <= t.max_temperature + 1e-9] or [t.value]
    return [t.value]


def _first_temperature(t: TemperatureConfig) -> float:
    if t.mode == "staged" and t.stages:
        return float(t.stages[0][1])
    return t.value


def _mask_on(plan: TrainingPlan) -> bool:
    return plan.mask is not None and plan.mask.enable


# -------------------------------------------------------------------------------------------------- rules

INSIGHT = {
    "invalid-config": "the framework's start-up checks",
    "group-size-1": "docs/paper.md#objective: the advantage is normalised within the G responses of a prompt",
    "async": "docs/paper.md#objective (pi^T(D) in both policies): one temperature per step for sampling and "
    "log-probs",
    "continuous-temperature": "docs/paper.md#diversity-determined-temperature; Insights B: 'continuous uniform "
    "temperature changes significantly influence training stability ... necessitating staged temperature "
    "transitions'",
    "temperature-mismatch": "docs/paper.md#objective: the ratio uses pi^T(D) for both the current and the old policy",
    "mask-without-verdicts": "docs/paper.md#non-incorrect (non-incorrect = correct or no verdict); Insights E",
    "low-temperature": "docs/paper.md#diversity-determined-temperature; Insights B: 'standard temperatures (t = 0.6) "
    "can cause training failure'; at 0.6 diversity fell 0.575 -> 0.44 and the run failed at ~260 steps",
    "kl-with-microcoder": "docs/paper.md#kl-and-clipping (beta0 = 0); Insights G: KL loss without clip-higher "
    "reduces diversity, modest gains then decline",
    "symmetric-clip": "docs/paper.md#kl-and-clipping; Insights G: no KL with high clipping (eps 0.2 / eps_high 0.28 "
    "assumed) sustains diversity and length",
    "mask-all": "docs/paper.md#masking-probability; Insights E: Mask All (DeepCoder) spikes diversity to 0.93, then "
    "collapses to 0.13, accuracy < 0.32 after ~220 steps",
    "rho-range": "docs/paper.md#masking-probability; Insights E: the paper studied rho 10/20/30 % (0.1 best peak, "
    "0.2 main run)",
    "short-response": "docs/paper.md#training-settings; Insights D: a small initial max response length leaves "
    "persistent deficits after extension (4K collapsed after ~550 steps, 8K best)",
    "on-policy-batch": "docs/paper.md#training-settings; Insights F: fully on-policy updates are less stable; "
    "train_batch_size 64 beat 32 and 128",
}


def _rule_invalid(plan: TrainingPlan) -> Iterable[Finding]:
    for err in plan.config_errors:
        yield Finding("invalid-config", "error", err, INSIGHT["invalid-config"], None)


def _rule_group_size(plan: TrainingPlan) -> Iterable[Finding]:
    if plan.group_size is not None and plan.group_size <= 1 and plan.group_estimator:
        yield Finding(
            "group-size-1", "error",
            f"group size {plan.group_size} with the group estimator {plan.estimator!r}: a group of one response has "
            f"no baseline (zero or raw-score advantages), nothing to compare",
            INSIGHT["group-size-1"],
            _fix(plan, ("group_size", SUGGESTED_GROUP_SIZE),
                 prose=f"sample several responses per prompt (e.g. {SUGGESTED_GROUP_SIZE}; the paper does not state G)"),
        )


def _rule_async(plan: TrainingPlan) -> Iterable[Finding]:
    controller = plan.temperature is not None and len(set(_controller_temperatures(plan.temperature))) > 1
    if plan.async_rollout and (_mask_on(plan) or controller):
        what = " and ".join(w for w, on in (("the truncation mask", _mask_on(plan)), ("a temperature controller",
                                                                                      controller)) if on)
        yield Finding(
            "async", "error",
            f"asynchronous rollout with {what}: a sample can come from an older policy/temperature than the "
            f"log-probs it is trained with, and the async trainers do not apply the mask",
            INSIGHT["async"], "use the synchronous MicroCoder trainer (verl: trainer.v1.trainer_mode=microcoder_sync)",
        )


def _rule_continuous(plan: TrainingPlan) -> Iterable[Finding]:
    t = plan.temperature
    if t is None or t.mode == "constant":
        return
    try:
        if t.mode == "staged":
            validate_stages(t.stages)
        else:
            validate_candidates(t.candidates, t.min_interval)
    except ScheduleError as e:  # every refused schedule; the finding quotes its reason, never the message
        what = "stages" if t.mode == "staged" else "candidates/min_interval"
        yield Finding(
            "continuous-temperature", "error",
            f"temperature {what} ramp too finely ({e.reason}; stages must last >= {MIN_STAGE_STEPS} steps and change "
            f"by >= {MIN_TEMPERATURE_STEP}); the trainers refuse it",
            INSIGHT["continuous-temperature"],
            _fix(plan, ("temperature_stages", PAPER_STAGES),
                 prose=f"use a few long stages, e.g. stages {PAPER_STAGES} (the paper's single switch)"),
        )


def _rule_mismatch(plan: TrainingPlan) -> Iterable[Finding]:
    t = plan.temperature
    if t is not None and plan.temperature_synced is False and len(set(_controller_temperatures(t))) > 1:
        yield Finding(
            "temperature-mismatch", "error",
            f"the temperature controller (mode {t.mode}) changes the sampling temperature, but the log-probs are not "
            f"driven by the same source: the ratio pi^T/pi_old^T mixes temperatures after the first change",
            INSIGHT["temperature-mismatch"],
            _fix(plan, ("temperature_sync", None),
                 prose="run the controller through the MicroCoder trainer, which sets both every step"),
        )
    r, lp = plan.rollout_temperature, plan.logprob_temperature
    if r is not None and lp is not None and not math.isclose(r, lp, abs_tol=1e-9):
        yield Finding(
            "temperature-mismatch", "warning",
            f"responses are sampled at T={r:g} but the actor's log-probs use T={lp:g}: the importance ratio compares "
            f"two different distributions",
            INSIGHT["temperature-mismatch"],
            _fix(plan, ("logprob_temperature", r), prose=f"score the log-probs at the sampling temperature {r:g}"),
        )


def _rule_verdicts(plan: TrainingPlan) -> Iterable[Finding]:
    if not _mask_on(plan):
        return
    policy = plan.mask.missing_verdict
    reward_fix = _fix(plan, ("reward", "pkg://microcoder_ext.reward"),
                      prose="use microcoder_ext.reward (compute_score), which returns verdicts")
    if plan.reward_verdicts is False:
        if policy == "error":
            yield Finding(
                "mask-without-verdicts", "error",
                "the truncation mask reads verdicts but the reward returns none, and mask.missing_verdict=error: the "
                "first truncated response stops training", INSIGHT["mask-without-verdicts"], reward_fix,
            )
            return
        effect = (
            "the mask never fires (missing_verdict=keep)" if policy == "keep"
            else f"verdicts are guessed from the score (missing_verdict=score, >= {plan.mask.correct_score:g} = "
                 f"correct): truncated responses without code read as wrong answers and are not masked"
        )
        yield Finding(
            "mask-without-verdicts", "warning",
            f"the truncation mask is on but the reward returns no verdicts: {effect}",
            INSIGHT["mask-without-verdicts"], reward_fix,
        )
    elif plan.reward_verdicts is None:
        yield Finding(
            "mask-without-verdicts", "info",
            f"custom reward: if it returns no '{plan.mask.verdict_key}' in its extra info, "
            f"mask.missing_verdict={policy} applies",
            INSIGHT["mask-without-verdicts"], None,
        )


def _rule_low_temperature(plan: TrainingPlan) -> Iterable[Finding]:
    t = plan.temperature
    fix = _fix(plan, ("temperature", PAPER_TEMPERATURE),
               prose=f"raise the temperature (paper: {PAPER_TEMPERATURE:g}; `microcoder temperature probe` picks one "
                     f"from output diversity)")
    if t is not None:
        temps = _controller_temperatures(t)
        first = _first_temperature(t)
        if max(temps) <= LOW_TEMPERATURE + 1e-9:
            yield Finding(
                "low-temperature", "warning",
                f"the training temperature never exceeds {max(temps):g} (mode {t.mode}): at <= {LOW_TEMPERATURE:g} "
                f"diversity keeps falling and training can fail", INSIGHT["low-temperature"],
                _fix(plan, ("temperature_stages", PAPER_STAGES), prose=fix) if t.mode == "staged" else fix,
            )
        elif first <= LOW_TEMPERATURE + 1e-9:
            yield Finding(
                "low-temperature", "info",
                f"the controller starts at T={first:g} (mode {t.mode}) and rises later: the paper's low-to-high "
                f"schedule (0.6 -> 1.8 at step 140 ended best); it fails if it stays low for long",
                INSIGHT["low-temperature"], None,
            )
        return
    if plan.rollout_temperature is not None and plan.rollout_temperature <= LOW_TEMPERATURE + 1e-9:
        yield Finding(
            "low-temperature", "warning",
            f"sampling temperature {plan.rollout_temperature:g} <= {LOW_TEMPERATURE:g}: diversity keeps falling "
            f"and training can fail", INSIGHT["low-temperature"], fix,
        )


def _rule_kl(plan: TrainingPlan) -> Iterable[Finding]:
    if not _mask_on(plan):
        return
    on = [w for w, c in (("a KL loss", plan.kl_loss), ("KL in the reward", plan.kl_in_reward)) if c]
    if not on and plan.kl_coef is not None and plan.kl_coef > 0:
        on = [f"KL coefficient {plan.kl_coef:g}"]
    if on:
        # the first override the adapter knows: the switch when a KL switch is on, else the coefficient
        order = ("kl_loss", "kl_coef") if (plan.kl_loss or plan.kl_in_reward) else ("kl_coef", "kl_loss")
        value = {"kl_loss": False, "kl_coef": 0.0}
        concept = next((c for c in order if plan.fixes.get(c)), order[0])
        yield Finding(
            "kl-with-microcoder", "warning",
            f"MicroCoder-GRPO trains without KL (beta0 = 0), this plan uses {' and '.join(on)}",
            INSIGHT["kl-with-microcoder"],
            _fix(plan, (concept, value[concept]), prose="remove the KL term (KL loss off, coefficient 0)"),
        )


def _rule_clip(plan: TrainingPlan) -> Iterable[Finding]:
    lo, hi = plan.clip_low, plan.clip_high
    if _mask_on(plan) and lo is not None and hi is not None and hi <= lo + 1e-12:
        yield Finding(
            "symmetric-clip", "warning",
            f"clip range 1-{lo:g} .. 1+{hi:g} is symmetric: MicroCoder-GRPO clips higher above (eps_high > eps)",
            INSIGHT["symmetric-clip"],
            _fix(plan, ("clip_low", PAPER_CLIP[0]), ("clip_high", PAPER_CLIP[1]),
                 prose=f"set eps {PAPER_CLIP[0]:g} / eps_high {PAPER_CLIP[1]:g}"),
        )


def _rule_mask_all(plan: TrainingPlan) -> Iterable[Finding]:
    if _mask_on(plan) and plan.mask.rho >= MASK_ALL_RHO:
        yield Finding(
            "mask-all", "warning",
            f"mask.rho={plan.mask.rho:g} masks (almost) every qualifying truncated response: the 'Mask All' regime",
            INSIGHT["mask-all"], _fix(plan, ("mask_rho", PAPER_RHO), prose=f"set the mask rho to {PAPER_RHO:g}"),
        )
    if plan.mask_all_truncated:
        yield Finding(
            "mask-all", "warning",
            "the framework's own filter drops every truncated response from the loss ('Mask All', DeepCoder "
            "overlong filtering)", INSIGHT["mask-all"],
            "turn that filter off and use the conditional mask (rho 0.2) instead",
        )


def _rule_rho(plan: TrainingPlan) -> Iterable[Finding]:
    if not _mask_on(plan):
        return
    rho = plan.mask.rho
    if rho == 0:
        yield Finding(
            "rho-range", "info", "mask.rho=0: the truncation mask is on but never masks anything",
            INSIGHT["rho-range"], _fix(plan, ("mask_rho", PAPER_RHO), prose=f"set the mask rho to {PAPER_RHO:g}"),
        )
    elif rho < MASK_ALL_RHO and not RHO_RANGE[0] - 1e-9 <= rho <= RHO_RANGE[1] + 1e-9:
        yield Finding(
            "rho-range", "warning",
            f"mask.rho={rho:g} is outside the studied range [{RHO_RANGE[0]:g}, {RHO_RANGE[1]:g}]"
            + (": more masking grows length faster, peaks earlier and lower, diversity falls faster" if rho > RHO_RANGE[1]
               else ": close to no mask (peak 0.363 vs 0.389 at 0.1)"),
            INSIGHT["rho-range"], _fix(plan, ("mask_rho", PAPER_RHO), prose=f"set the mask rho to {PAPER_RHO:g}"),
        )


def _rule_length(plan: TrainingPlan) -> Iterable[Finding]:
    n = plan.max_response_length
    if n is not None and n < MIN_RESPONSE_LENGTH:
        yield Finding(
            "short-response", "warning",
            f"max response length {n} < {MIN_RESPONSE_LENGTH} tokens: a small initial limit hurts even after it is "
            f"raised later", INSIGHT["short-response"],
            _fix(plan, ("max_response_length", MIN_RESPONSE_LENGTH),
                 prose=f"start with >= {MIN_RESPONSE_LENGTH} (main runs 4K, ablations 8K)"),
        )


def _rule_batch(plan: TrainingPlan) -> Iterable[Finding]:
    b, mb = plan.train_batch_size, plan.mini_batch_size
    if b is not None and mb is not None and mb >= b:
        yield Finding(
            "on-policy-batch", "warning",
            f"mini-batch size {mb} == train batch size {b}: one update per step, fully on-policy",
            INSIGHT["on-policy-batch"],
            _fix(plan, ("mini_batch_size", max(1, b // 2)),
                 prose=f"use a mini-batch of half the batch (paper: 64 / {PAPER_MINI_BATCH} assumed)"),
        )
    if b is not None and not BATCH_RANGE[0] <= b <= BATCH_RANGE[1]:
        yield Finding(
            "on-policy-batch", "info",
            f"train batch size {b} prompts is far from the paper's {PAPER_BATCH} (studied 32 / 64 / 128)",
            INSIGHT["on-policy-batch"], _fix(plan, ("train_batch_size", PAPER_BATCH), prose=f"{PAPER_BATCH} prompts"),
        )


RULES = (
    _rule_invalid, _rule_group_size, _rule_async, _rule_continuous, _rule_mismatch, _rule_verdicts,
    _rule_low_temperature, _rule_kl, _rule_clip, _rule_mask_all, _rule_rho, _rule_length, _rule_batch,
)

#: every stable finding code
CODES = (
    "invalid-config", "group-size-1", "async", "continuous-temperature", "temperature-mismatch",
    "mask-without-verdicts", "low-temperature", "kl-with-microcoder", "symmetric-clip", "mask-all", "rho-range",
    "short-response", "on-policy-batch",
)


def diagnose(plan: TrainingPlan) -> list[Finding]:
    """Every finding for ``plan``, errors first, then warnings, then infos (rule order within a severity)."""
    findings = [f for rule in RULES for f in rule(plan)]
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def exit_status(findings: Iterable[Finding], strict: bool) -> int:
    """0 clean (or infos only), 1 warnings with ``strict``, 2 any error."""
    severities = {f.severity for f in findings}
    if "error" in severities:
        return 2
    if strict and "warning" in severities:
        return 1
    return 0


def summarize(plan: TrainingPlan) -> str:
    """One line: the settings the rules read."""
    parts = [f"framework={plan.framework}"]
    if plan.recipe:
        parts.append(f"recipe={plan.recipe}")
    for label, v in (("estimator", plan.estimator), ("G", plan.group_size), ("batch", plan.train_batch_size),
                     ("mini_batch", plan.mini_batch_size), ("max_response", plan.max_response_length),
                     ("kl_loss", plan.kl_loss), ("kl_in_reward", plan.kl_in_reward),
                     ("clip", None if plan.clip_low is None else f"{plan.clip_low:g}/{_fmt(plan.clip_high)}"),
                     ("T_sample", plan.rollout_temperature), ("T_logprob", plan.logprob_temperature)):
        if v is not None:
            parts.append(f"{label}={_fmt(v)}")
    if plan.temperature is not None:
        parts.append(f"controller={plan.temperature.mode}")
    parts.append(f"mask={'rho ' + _fmt(plan.mask.rho) + ' ' + plan.mask.mode if _mask_on(plan) else 'off'}")
    parts.append("verdicts=" + {True: "yes", False: "no", None: "unknown"}[plan.reward_verdicts])
    if plan.async_rollout:
        parts.append("async")
    return " ".join(parts)


def format_findings(findings: list[Finding], plan: TrainingPlan) -> str:
    """Human-readable report: the plan, one line per finding (severity, code, message, insight, fix), a summary."""
    lines = [f"plan: {summarize(plan)}", ""]
    width = max((len(f.code) for f in findings), default=0)
    for f in findings:
        line = f"{f.severity.upper():<7}  {f.code:<{width}}  {f.message}  [{f.insight}]"
        if f.fix:
            line += f"  fix: {f.fix}"
        lines.append(line)
    if findings:
        lines.append("")
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    lines.append(
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info(s)"
        + (": clean" if not counts["error"] and not counts["warning"] else "")
    )
    return "\n".join(lines)


__all__ = [
    "SEVERITIES", "CODES", "FIX_CONCEPTS", "TrainingPlan", "Finding", "diagnose", "exit_status", "format_findings",
    "summarize", "lenient_temperature_config",
]
