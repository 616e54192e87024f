"""The rules a training-temperature schedule must follow (paper-spec §4), shared by the configuration
(:mod:`microcoder_ext.core.config`), the controller (:mod:`microcoder_ext.core.temperature`) and ``microcoder doctor``.

The paper changes the temperature only in **stages**: "Continuous uniform temperature changes significantly
influence training stability … necessitating staged temperature transitions" (MicroCoder-Insights). A staged
schedule whose stages last fewer than :data:`MIN_STAGE_STEPS` steps, or whose consecutive temperatures (stages or
auto candidates) differ by less than :data:`MIN_TEMPERATURE_STEP`, is a (near-)continuous ramp and is rejected.
Framework-free; imports only the standard library.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

MODES = ("constant", "staged", "auto")
STARTS = ("value", "probe")

#: Shortest allowed stage (steps between two temperature changes, staged and auto modes). The paper holds each
#: temperature for long phases (one switch at step 140 of ~500); anything shorter is treated as a continuous ramp.
MIN_STAGE_STEPS = 20
#: Smallest allowed temperature change between consecutive stages / candidates. Smaller steps approximate the
#: "continuous uniform temperature changes" the paper finds destabilising; its probe grid is 0.2 wide.
MIN_TEMPERATURE_STEP = 0.1

PAPER_FINDING = (
    "the paper finds that continuous temperature changes destabilise training ('Continuous uniform temperature "
    "changes significantly influence training stability ... necessitating staged temperature transitions', "
    "MicroCoder-Insights, paper-spec §4)"
)

_EPS = 1e-9


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def normalize_stages(stages: Any) -> tuple[tuple[int, float], ...]:
    """``[[step, T], ...]`` or ``[{"step": s, "temperature": T}, ...]`` -> ``((step, T), ...)``.

    Raises ValueError if malformed.
    """
    if stages is None:
        return ()
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence):
        raise ValueError(f"stages must be a list of [step, temperature] pairs, got {stages!r}")
    out = []
    for i, s in enumerate(stages):
        if isinstance(s, Mapping):
            if set(s) != {"step", "temperature"}:
                raise ValueError(f"stages[{i}] must have exactly the keys step and temperature, got {sorted(s)}")
            step, temp = s["step"], s["temperature"]
        elif isinstance(s, Sequence) and not isinstance(s, (str, bytes)) and len(s) == 2:
            step, temp = s
        else:
            raise ValueError(f"stages[{i}] must be a [step, temperature] pair, got {s!r}")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"stages[{i}] step must be a non-negative integer, got {step!r}")
        if not _is_number(temp) or float(temp) <= 0:
            raise ValueError(f"stages[{i}] temperature must be a positive number, got {temp!r}")
        out.append((int(step), float(temp)))
    return tuple(out)


def validate_stages(stages: Sequence[tuple[int, float]], min_stage_steps: int = MIN_STAGE_STEPS) -> None:
    """Reject schedules that are not staged: see :data:`MIN_STAGE_STEPS`, :data:`MIN_TEMPERATURE_STEP`.

    ``min_stage_steps`` lowers the shortest stage (``microcoder smoke`` compresses a schedule into a few steps);
    training runs keep the default."""
    if not stages:
        raise ValueError("stages must list at least one [step, temperature] stage for mode=staged")
    if stages[0][0] != 0:
        raise ValueError(f"the first stage must start at step 0, got step {stages[0][0]}")
    for i in range(1, len(stages)):
        (s0, t0), (s1, t1) = stages[i - 1], stages[i]
        if s1 <= s0:
            raise ValueError(f"stage steps must increase: stage {i} starts at {s1}, after stage {i - 1} at {s0}")
        if s1 - s0 < min_stage_steps:
            raise ValueError(
                f"stage {i - 1} ({t0}) lasts {s1 - s0} step(s), fewer than MIN_STAGE_STEPS={min_stage_steps}: this is "
                f"a continuous schedule, and {PAPER_FINDING}. Use a few stages of >= {min_stage_steps} steps "
                f"(e.g. [[0, 0.6], [140, 1.2]])"
            )
        if abs(t1 - t0) < MIN_TEMPERATURE_STEP - _EPS:
            raise ValueError(
                f"stage {i} changes the temperature by {abs(t1 - t0):.3g} ({t0} -> {t1}), less than "
                f"MIN_TEMPERATURE_STEP={MIN_TEMPERATURE_STEP}: tiny increments make a continuous ramp, and "
                f"{PAPER_FINDING}. Change the temperature in steps of >= {MIN_TEMPERATURE_STEP}"
            )


def validate_candidates(candidates: Sequence[float], min_interval: int,
                        min_stage_steps: int = MIN_STAGE_STEPS) -> None:
    """Auto mode: increasing candidates at least :data:`MIN_TEMPERATURE_STEP` apart, ``min_interval`` long enough."""
    if not candidates:
        raise ValueError("candidates must list at least one temperature")
    for i, c in enumerate(candidates):
        if not _is_number(c) or float(c) <= 0:
            raise ValueError(f"candidates[{i}] must be a positive number, got {c!r}")
    for i in range(1, len(candidates)):
        if candidates[i] - candidates[i - 1] < MIN_TEMPERATURE_STEP - _EPS:
            raise ValueError(
                f"candidates must increase by >= MIN_TEMPERATURE_STEP={MIN_TEMPERATURE_STEP} "
                f"({candidates[i - 1]} -> {candidates[i]}): tiny increments make a continuous ramp, and {PAPER_FINDING}"
            )
    if min_interval < min_stage_steps:
        raise ValueError(
            f"min_interval={min_interval} is below MIN_STAGE_STEPS={min_stage_steps}: {PAPER_FINDING}"
        )
