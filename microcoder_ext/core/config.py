"""The ``microcoder:`` config section, framework-free.

verl reads it from the top-level Hydra key ``microcoder`` (dataclass-backed verl nodes reject unknown keys);
the OpenRLHF launcher builds the same structure from ``--mc.*`` flags. Unknown keys and invalid values raise
:class:`ConfigError` naming the offending key, so a typo fails at start-up instead of silently using a default.

Defaults follow the paper (docs/paper.md#our-defaults)::

    microcoder:
      mask:
        enable: true
        rho: 0.2                # masking probability (paper's main runs; 0.1 is the ablation's "Cond. Mask")
        m: 128                  # repeat window in tokens (paper)
        mode: non_incorrect     # non_incorrect | correct_only
        repeat_check: block     # block (paper: o[-m:] == o[-2m:-m]) | periodic
        seed: 0                 # coins for step s come from Generator(seed, s): reproducible and resume-safe
        verdict_key: verdict    # key of the reward's extra info that holds the verdict string
        missing_verdict: score  # no verdict from the reward: score | keep | error
        correct_score: 1.0      # missing_verdict=score: score >= this counts as "correct", else wrong_answer
      temperature:              # training temperature (docs/paper.md#diversity-determined-temperature)
        mode: constant          # constant | staged | auto (diversity-determined)
        value: 1.2              # constant: the temperature (paper's main runs); auto: the start (a candidate)
        stages: []              # staged: [[step, T], ...] from step 0, e.g. [[0, 0.6], [140, 1.2]]
        candidates: [0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8]   # auto: temperatures it may use, increasing
        start: value            # auto: value | probe (lowest candidate whose probe diversity >= target)
        target: null            # auto: diversity target (expected converged diversity); null = estimate it
        target_steps: 10        # auto, target null: estimate = mean of the first target_steps steps ...
        target_margin: 0.05     # ... minus this margin
        window: 20              # auto: smoothed diversity below target for this many consecutive steps ...
        min_interval: 50        # ... and at least this many steps since the last change -> next candidate
        max_temperature: 1.8    # auto: never above
        smoothing: 0.9          # EMA decay of the step diversity (0 = none)
        n: 4                    # n-gram order of the diversity metrics
        metric: distinct        # distinct (distinct-n per response) | group_pooled | pairwise
        probe_prompts: 64       # probe: prompts of the probe set
        probe_samples: 8        # probe: responses per prompt and temperature
        min_stage_steps: 20     # shortest stage / min_interval allowed (the paper's staged changes); lowered only by
                                # `microcoder smoke`, which compresses a schedule into a few steps
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
    enable: bool = True
    rho: float = 0.2
    m: int = 128
    mode: str = "non_incorrect"
    repeat_check: str = "block"
    seed: int = 0
    verdict_key: str = "verdict"
    missing_verdict: str = "score"
    correct_score: float = 1.0

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
    mode: str = "constant"
    value: float = 1.2
    stages: tuple = ()
    candidates: tuple = DEFAULT_CANDIDATES
    start: str = "value"
    target: float | None = None
    target_steps: int = 10
    target_margin: float = 0.05
    window: int = 20
    min_interval: int = 50
    max_temperature: float = 1.8
    smoothing: float = 0.9
    n: int = 4
    metric: str = "distinct"
    probe_prompts: int = 64
    probe_samples: int = 8
    min_stage_steps: int = MIN_STAGE_STEPS

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
    mask: MaskConfig = field(default_factory=MaskConfig)
    temperature: TemperatureConfig = field(default_factory=TemperatureConfig)


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
