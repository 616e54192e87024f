"""The ``microcoder:`` config section, framework-free.

verl reads it from the top-level Hydra key ``microcoder`` (dataclass-backed verl nodes reject unknown keys);
the OpenRLHF launcher builds the same structure from ``--mc.*`` flags. Unknown keys and invalid values raise
:class:`ConfigError` naming the offending key, so a typo fails at start-up instead of silently using a default.

Defaults follow the paper (paper-spec §3, §12)::

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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

from microcoder_ext.core.masking import validate_mask_args

MISSING_VERDICT_POLICIES = ("score", "keep", "error")


class ConfigError(ValueError):
    """Invalid ``microcoder:`` configuration."""


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


@dataclass(frozen=True)
class MicrocoderConfig:
    mask: MaskConfig = field(default_factory=MaskConfig)


_SECTIONS: dict[str, type] = {"mask": MaskConfig}


def _section(name: str, cls: type, values: Mapping[str, Any] | None) -> Any:
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) microcoder.{name}.{{{', '.join(unknown)}}}; known: {', '.join(sorted(known))}")
    # integers given where floats are expected (rho=1 on the command line) are fine
    for f in dataclasses.fields(cls):
        if f.name in values and f.type in ("float", float) and isinstance(values[f.name], int):
            values[f.name] = float(values[f.name]) if not isinstance(values[f.name], bool) else values[f.name]
    return cls(**values)


def parse_config(values: Mapping[str, Any] | None) -> MicrocoderConfig:
    """Build a validated :class:`MicrocoderConfig` from a plain mapping (e.g. ``OmegaConf.to_container``)."""
    values = dict(values or {})
    unknown = sorted(set(values) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"unknown section(s) microcoder.{{{', '.join(unknown)}}}; known: {', '.join(_SECTIONS)}")
    return MicrocoderConfig(**{name: _section(name, cls, values.get(name)) for name, cls in _SECTIONS.items()})
