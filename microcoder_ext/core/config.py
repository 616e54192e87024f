"""The ``microcoder:`` config section, framework-free.

verl reads it from the top-level Hydra key ``microcoder`` (dataclass-backed verl nodes reject unknown keys);
the OpenRLHF launcher builds the same structure from ``--mc.*`` flags. Unknown keys and invalid values raise
:class:`ConfigError` naming the offending key, so a typo fails at start-up instead of silently using a default.

Each field is documented once, in its ``help`` metadata (:func:`_field`); the ``--mc.*`` flags of the OpenRLHF
launcher and ``microcoder train`` and the configuration reference (docs/configuration.md, with every key, type and
default) are generated from it (:mod:`microcoder_ext.core.options`). The defaults follow the paper (arXiv
2603.07777) where it states them, and say where they are our inference (docs/paper.md#our-defaults)::

    microcoder:
      mask: {enable: true, rho: 0.2, m: 128, mode: non_incorrect, repeat_check: block, ...}
      temperature: {mode: constant, value: 1.2, ...}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

from microcoder_ext.core.diversity import METRICS
from microcoder_ext.core.masking import validate_mask_args
from microcoder_ext.core.schedule import (
    MIN_STAGE_STEPS,
    MODES as TEMPERATURE_MODES,
    STARTS as TEMPERATURE_STARTS,
    ScheduleError,
    normalize_stages,
    validate_candidates,
    validate_stages,
)

MISSING_VERDICT_POLICIES = ("score", "keep", "error")

#: :attr:`ConfigError.code` of errors that are not about a temperature schedule (those carry the
#: :class:`~microcoder_ext.core.schedule.ScheduleError` code)
INVALID_VALUE = "invalid-value"
UNKNOWN_KEY = "unknown-key"
UNKNOWN_SECTION = "unknown-section"


def _field(default: Any, help: str) -> Any:
    """A config field documented once: its ``help`` is what the ``--mc.*`` flags, ``microcoder train`` and the
    configuration reference show (:mod:`microcoder_ext.core.options`)."""
    return field(default=default, metadata={"help": help})


class ConfigError(ValueError):
    """Invalid ``microcoder:`` configuration (or a framework setting that contradicts it). ``code``: which rule,
    stable (:data:`INVALID_VALUE`, :data:`UNKNOWN_KEY`, :data:`UNKNOWN_SECTION`, a
    :mod:`microcoder_ext.core.schedule` code for a refused temperature schedule, or an adapter's own code);
    ``reason``: the problem in a few words. The message is for people and may be reworded."""

    def __init__(self, message: str, code: str = INVALID_VALUE, reason: str | None = None):
        super().__init__(message)
        self.code = code
        self.reason = message if reason is None else reason


@dataclass(frozen=True)
class MaskConfig:
    """``microcoder.mask``: the conditional truncation mask (each field's ``help`` metadata says what it does)."""

    enable: bool = _field(True, "apply the conditional truncation mask; false trains without it")
    rho: float = _field(0.2, "probability of zeroing the advantage of a qualifying truncated response; 0.2 matches "
                             "the paper's main 4B run, 0.1 its 'Cond. Mask' ablation")
    m: int = _field(128, "repeat window in tokens (128 is the paper's): a truncated response whose last m tokens "
                         "repeat the m before is kept")
    mode: str = _field("non_incorrect", "which verdicts may be masked: non_incorrect (correct or no verdict: the "
                                        "paper's equation) or correct_only (a stricter reading)")
    repeat_check: str = _field("block", "repetition test: block (the paper's, o[-m:] == o[-2m:-m]) or periodic (also "
                                        "loops whose period does not divide m; ours)")
    seed: int = _field(0, "seed of the per-step coins (step s uses Generator(seed, s): reproducible and "
                          "resume-safe)")
    verdict_key: str = _field("verdict", "key of the reward's extra info that holds the verdict string")
    missing_verdict: str = _field("score", "no verdict from the reward: score (score >= correct_score is correct, "
                                           "else wrong_answer), keep (never mask) or error")
    correct_score: float = _field(1.0, "with missing_verdict=score: a score >= this counts as correct")

    def __post_init__(self) -> None:
        try:
            validate_mask_args(self.rho, self.m, self.mode, self.repeat_check)
        except ValueError as e:
            raise ConfigError(f"microcoder.mask: {e}") from None
        if not isinstance(self.enable, bool):
            raise ConfigError(f"microcoder.mask.enable must be true/false, got {self.enable!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"microcoder.mask.seed must be a non-negative integer, got {self.seed!r}")
        if self.missing_verdict not in MISSING_VERDICT_POLICIES:
            raise ConfigError(
                f"microcoder.mask.missing_verdict must be one of {MISSING_VERDICT_POLICIES}, got {self.missing_verdict!r}"
            )
        if not isinstance(self.verdict_key, str) or not self.verdict_key:
            raise ConfigError(f"microcoder.mask.verdict_key must be a non-empty string, got {self.verdict_key!r}")
        if isinstance(self.correct_score, bool) or not isinstance(self.correct_score, (int, float)):
            raise ConfigError(f"microcoder.mask.correct_score must be a number, got {self.correct_score!r}")

    def generator(self, step: int) -> torch.Generator:
        """A CPU generator seeded from ``(seed, step)``: the same coins for the same step after a resume."""
        state = np.random.SeedSequence([self.seed, int(step)]).generate_state(1, dtype=np.uint64)[0]
        return torch.Generator().manual_seed(int(state) & ((1 << 63) - 1))


DEFAULT_CANDIDATES = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8)  # docs/paper.md#choosing-the-temperature, step 1


def _real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x)


def _count(x: Any, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


@dataclass(frozen=True)
class TemperatureConfig:
    """``microcoder.temperature``: the training temperature (:mod:`microcoder_ext.core.temperature`; each field's
    ``help`` metadata says what it does)."""

    mode: str = _field("constant", "training temperature: constant, staged, or auto (diversity-determined)")
    value: float = _field(1.2, "constant: the temperature (1.2: the paper's main runs); auto: the start (one of the "
                               "candidates)")
    stages: tuple = _field((), "staged: [[step, T], ...] from step 0 (JSON on the command line), e.g. "
                               "[[0, 0.6], [140, 1.2]]; stages shorter than min_stage_steps or changes below 0.1 are "
                               "refused (ramps, not stages)")
    candidates: tuple = _field(DEFAULT_CANDIDATES, "auto: the temperatures it may use, increasing, at least 0.1 apart "
                                                   "(on the command line: several numbers or one JSON list)")
    start: str = _field("value", "auto: value, or probe (the lowest candidate whose probe diversity reaches target; "
                                 "no trainer runs the probe: run `microcoder temperature probe`, then set value)")
    target: float | None = _field(None, "auto: diversity target in [0, 1]; null estimates it from the first steps")
    target_steps: int = _field(10, "auto, target null: the target is the mean diversity of the first target_steps "
                                   "steps minus target_margin")
    target_margin: float = _field(0.05, "auto, target null: subtracted from the mean of the first target_steps steps")
    window: int = _field(20, "auto: steps in a row the smoothed diversity must stay below target before the next "
                             "candidate")
    min_interval: int = _field(50, "auto: fewest steps since the last change before the next candidate")
    max_temperature: float = _field(1.8, "auto: never above this temperature")
    smoothing: float = _field(0.9, "EMA decay of the step diversity (0 = none)")
    n: int = _field(4, "n-gram order of the diversity metrics")
    metric: str = _field("distinct", "diversity metric the controller uses (all three are logged): distinct "
                                     "(distinct-n per response), group_pooled or pairwise")
    probe_prompts: int = _field(64, "`microcoder temperature probe`: prompts of the probe set")
    probe_samples: int = _field(8, "`microcoder temperature probe`: responses per prompt and temperature")
    min_stage_steps: int = _field(MIN_STAGE_STEPS, "shortest stage (and auto min_interval) accepted, in steps; only "
                                                   "`microcoder smoke` lowers it, to fit a schedule into a few steps")

    def __post_init__(self) -> None:
        key = "microcoder.temperature."

        def fail(name: str, why: str) -> None:
            raise ConfigError(f"{key}{name} {why}, got {getattr(self, name)!r}")

        if self.mode not in TEMPERATURE_MODES:
            fail("mode", f"must be one of {TEMPERATURE_MODES}")
        if self.start not in TEMPERATURE_STARTS:
            fail("start", f"must be one of {TEMPERATURE_STARTS}")
        if self.metric not in METRICS:
            fail("metric", f"must be one of {METRICS}")
        for name in ("value", "max_temperature"):
            if not _real(getattr(self, name)) or getattr(self, name) <= 0:
                fail(name, "must be a positive number")
        if self.target is not None and (not _real(self.target) or not 0.0 <= self.target <= 1.0):
            fail("target", "must be a diversity in [0, 1] or null (estimate it)")
        if not _real(self.target_margin) or not 0.0 <= self.target_margin < 1.0:
            fail("target_margin", "must be a number in [0, 1)")
        if not _real(self.smoothing) or not 0.0 <= self.smoothing < 1.0:
            fail("smoothing", "must be an EMA decay in [0, 1)")
        for name, low in (("target_steps", 1), ("window", 1), ("min_interval", 1), ("n", 1), ("probe_prompts", 1),
                          ("probe_samples", 1), ("min_stage_steps", 1)):
            if not _count(getattr(self, name), low):
                fail(name, f"must be an integer >= {low}")
        for name in ("value", "max_temperature", "target", "target_margin", "smoothing"):  # 1 -> 1.0
            v = getattr(self, name)
            if isinstance(v, int) and not isinstance(v, bool):
                object.__setattr__(self, name, float(v))
        try:
            object.__setattr__(self, "stages", normalize_stages(self.stages))
        except ScheduleError as e:
            raise ConfigError(f"{key}{e}", e.code, e.reason) from None
        if isinstance(self.candidates, (str, bytes)) or not isinstance(self.candidates, (list, tuple)):
            fail("candidates", "must be a list of temperatures")
        if not all(_real(c) and c > 0 for c in self.candidates):
            fail("candidates", "must be positive numbers")
        object.__setattr__(self, "candidates", tuple(float(c) for c in self.candidates))

        if self.mode == "staged":
            try:
                validate_stages(self.stages, self.min_stage_steps)
            except ScheduleError as e:
                raise ConfigError(f"{key}stages: {e}", e.code, e.reason) from None
        if self.mode == "auto":
            try:
                validate_candidates(self.candidates, self.min_interval, self.min_stage_steps)
            except ScheduleError as e:
                raise ConfigError(f"{key}candidates/min_interval: {e}", e.code, e.reason) from None
            usable = [c for c in self.candidates if c <= self.max_temperature + 1e-9]
            if not usable:
                fail("max_temperature", f"is below every candidate {self.candidates}")
            if self.start == "value" and not any(abs(c - self.value) <= 1e-6 for c in usable):
                fail("value", f"must be one of the candidates <= max_temperature {tuple(usable)} (auto starts there)")
            if self.start == "probe" and self.target is None:
                fail("target", "must be set with start=probe (the probe picks the lowest candidate reaching it)")


@dataclass(frozen=True)
class MicrocoderConfig:
    mask: MaskConfig = field(default_factory=MaskConfig, metadata={"help": "the conditional truncation mask"})
    temperature: TemperatureConfig = field(default_factory=TemperatureConfig,
                                           metadata={"help": "the training temperature"})


_SECTIONS: dict[str, type] = {"mask": MaskConfig, "temperature": TemperatureConfig}


def _section(name: str, cls: type, values: Mapping[str, Any] | None) -> Any:
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) microcoder.{name}.{{{', '.join(unknown)}}}; known: "
                          f"{', '.join(sorted(known))}", UNKNOWN_KEY)
    # integers given where floats are expected (rho=1 on the command line) are fine
    for f in dataclasses.fields(cls):
        if f.name in values and f.type in ("float", float) and isinstance(values[f.name], int):
            values[f.name] = float(values[f.name]) if not isinstance(values[f.name], bool) else values[f.name]
    return cls(**values)


def parse_temperature_config(values: Mapping[str, Any] | None) -> TemperatureConfig:
    """Build a validated :class:`TemperatureConfig` from the ``microcoder.temperature`` mapping."""
    return _section("temperature", TemperatureConfig, values)


def parse_config(values: Mapping[str, Any] | None) -> MicrocoderConfig:
    """Build a validated :class:`MicrocoderConfig` from a plain mapping (e.g. ``OmegaConf.to_container``)."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"unknown section(s) microcoder.{{{', '.join(unknown)}}}; known: {', '.join(_SECTIONS)}",
                          UNKNOWN_SECTION)
    return MicrocoderConfig(**{name: _section(name, cls, values.get(name)) for name, cls in _SECTIONS.items()})
