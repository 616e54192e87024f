"""The rules a training-temperature schedule must follow (docs/paper.md#diversity-determined-temperature), shared by the configuration
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
    "MicroCoder-Insights, docs/paper.md#diversity-determined-temperature)"
)

_EPS = 1e-9

#: :attr:`ScheduleError.code` values (stable: code that reacts to an error dispatches on these, never on the text).
#: Malformed schedules:
STAGES_MALFORMED = "stages-malformed"  # not a list of [step, temperature] pairs with a step >= 0 and a T > 0
STAGES_EMPTY = "stages-empty"
FIRST_STAGE_NOT_AT_0 = "first-stage-not-at-0"
STAGES_NOT_INCREASING = "stages-not-increasing"
CANDIDATES_EMPTY = "candidates-empty"
CANDIDATE_NOT_POSITIVE = "candidate-not-positive"
#: continuous ramps (the paper's finding):
STAGE_TOO_SHORT = "stage-too-short"  # a stage lasts fewer than MIN_STAGE_STEPS steps
STAGE_CHANGE_TOO_SMALL = "stage-change-too-small"  # consecutive stages differ by less than MIN_TEMPERATURE_STEP
CANDIDATES_TOO_CLOSE = "candidates-too-close"  # consecutive candidates differ by less than MIN_TEMPERATURE_STEP
INTERVAL_TOO_SHORT = "interval-too-short"  # auto's min_interval is below MIN_STAGE_STEPS
CONTINUOUS = frozenset({STAGE_TOO_SHORT, STAGE_CHANGE_TOO_SMALL, CANDIDATES_TOO_CLOSE, INTERVAL_TOO_SHORT})
CODES = frozenset({STAGES_MALFORMED, STAGES_EMPTY, FIRST_STAGE_NOT_AT_0, STAGES_NOT_INCREASING, CANDIDATES_EMPTY,
                   CANDIDATE_NOT_POSITIVE}) | CONTINUOUS


class ScheduleError(ValueError):
    """A temperature schedule the rules refuse. ``code``: which rule (one of :data:`CODES`, stable); ``reason``: the
    problem in a few words, without the paper's finding and the advice the message adds. The message is for people
    and may be reworded."""

    def __init__(self, message: str, code: str, reason: str | None = None):
        super().__init__(message)
        self.code = code
        self.reason = message if reason is None else reason


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def normalize_stages(stages: Any) -> tuple[tuple[int, float], ...]:
    """``[[step, T], ...]`` or ``[{"step": s, "temperature": T}, ...]`` -> ``((step, T), ...)``.

    Raises :class:`ScheduleError` (:data:`STAGES_MALFORMED`) if malformed.
    """
    def malformed(message: str) -> ScheduleError:
        return ScheduleError(message, STAGES_MALFORMED)

    if stages is None:
        return ()
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence):
        raise malformed(f"stages must be a list of [step, temperature] pairs, got {stages!r}")
    out = []
    for i, s in enumerate(stages):
        if isinstance(s, Mapping):
            if set(s) != {"step", "temperature"}:
                raise malformed(f"stages[{i}] must have exactly the keys step and temperature, got {sorted(s)}")
            step, temp = s["step"], s["temperature"]
        elif isinstance(s, Sequence) and not isinstance(s, (str, bytes)) and len(s) == 2:
            step, temp = s
        else:
            raise malformed(f"stages[{i}] must be a [step, temperature] pair, got {s!r}")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise malformed(f"stages[{i}] step must be a non-negative integer, got {step!r}")
        if not _is_number(temp) or float(temp) <= 0:
            raise malformed(f"stages[{i}] temperature must be a positive number, got {temp!r}")
        out.append((int(step), float(temp)))
    return tuple(out)


def validate_stages(stages: Sequence[tuple[int, float]], min_stage_steps: int = MIN_STAGE_STEPS) -> None:
    """Reject schedules that are not staged: see :data:`MIN_STAGE_STEPS`, :data:`MIN_TEMPERATURE_STEP`. Raises
    :class:`ScheduleError`.

    ``min_stage_steps`` lowers the shortest stage (``microcoder smoke`` compresses a schedule into a few steps);
    training runs keep the default."""
    if not stages:
        raise ScheduleError("stages must list at least one [step, temperature] stage for mode=staged", STAGES_EMPTY)
    if stages[0][0] != 0:
        raise ScheduleError(f"the first stage must start at step 0, got step {stages[0][0]}", FIRST_STAGE_NOT_AT_0)
    for i in range(1, len(stages)):
        (s0, t0), (s1, t1) = stages[i - 1], stages[i]
        if s1 <= s0:
            raise ScheduleError(f"stage steps must increase: stage {i} starts at {s1}, after stage {i - 1} at {s0}",
                                STAGES_NOT_INCREASING)
        if s1 - s0 < min_stage_steps:
            reason = f"stage {i - 1} ({t0}) lasts {s1 - s0} step(s), fewer than MIN_STAGE_STEPS={min_stage_steps}"
            raise ScheduleError(
                f"{reason}: this is a continuous schedule, and {PAPER_FINDING}. Use a few stages of >= "
                f"{min_stage_steps} steps (e.g. [[0, 0.6], [140, 1.2]])", STAGE_TOO_SHORT, reason)
        if abs(t1 - t0) < MIN_TEMPERATURE_STEP - _EPS:
            reason = (f"stage {i} changes the temperature by {abs(t1 - t0):.3g} ({t0} -> {t1}), less than "
                      f"MIN_TEMPERATURE_STEP={MIN_TEMPERATURE_STEP}")
            raise ScheduleError(
                f"{reason}: tiny increments make a continuous ramp, and {PAPER_FINDING}. Change the temperature in "
                f"steps of >= {MIN_TEMPERATURE_STEP}", STAGE_CHANGE_TOO_SMALL, reason)


def validate_candidates(candidates: Sequence[float], min_interval: int,
                        min_stage_steps: int = MIN_STAGE_STEPS) -> None:
    """Auto mode: increasing candidates at least :data:`MIN_TEMPERATURE_STEP` apart, ``min_interval`` long enough.
    Raises :class:`ScheduleError`."""
    if not candidates:
        raise ScheduleError("candidates must list at least one temperature", CANDIDATES_EMPTY)
    for i, c in enumerate(candidates):
        if not _is_number(c) or float(c) <= 0:
            raise ScheduleError(f"candidates[{i}] must be a positive number, got {c!r}", CANDIDATE_NOT_POSITIVE)
    for i in range(1, len(candidates)):
        if candidates[i] - candidates[i - 1] < MIN_TEMPERATURE_STEP - _EPS:
            reason = (f"candidates must increase by >= MIN_TEMPERATURE_STEP={MIN_TEMPERATURE_STEP} "
                      f"({candidates[i - 1]} -> {candidates[i]})")
            raise ScheduleError(f"{reason}: tiny increments make a continuous ramp, and {PAPER_FINDING}",
                                CANDIDATES_TOO_CLOSE, reason)
    if min_interval < min_stage_steps:
        reason = f"min_interval={min_interval} is below MIN_STAGE_STEPS={min_stage_steps}"
        raise ScheduleError(f"{reason}: {PAPER_FINDING}", INTERVAL_TOO_SHORT, reason)
