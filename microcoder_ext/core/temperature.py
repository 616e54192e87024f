"""Diversity-determined training temperature (MicroCoder-GRPO,
docs/paper.md#diversity-determined-temperature). Framework-free.

The paper picks the sampling temperature from measured output diversity and changes it only in **stages**:
"Continuous uniform temperature changes significantly influence training stability … necessitating staged
temperature transitions or diversity-determined constant initial temperatures" (MicroCoder-Insights, summarised in
docs/paper.md#diversity-determined-temperature). Its main runs use a constant T = 1.2 (Qwen3-4B-Instruct-2507); a single low-to-high switch
(0.6 -> 1.2/1.8 at step 140) trained best in its temperature ablation.

:class:`TemperatureController` modes (config: :class:`~microcoder_ext.core.config.TemperatureConfig`):

* ``constant`` (default): ``value`` (1.2) at every step.
* ``staged``: an explicit list of ``(step, temperature)`` stages; the first starts at step 0. A schedule whose
  stages last fewer than :data:`~microcoder_ext.core.schedule.MIN_STAGE_STEPS` steps or change by less than
  :data:`~microcoder_ext.core.schedule.MIN_TEMPERATURE_STEP` is a (near-)continuous ramp and is rejected
  (:mod:`microcoder_ext.core.schedule`).
* ``auto`` (diversity-determined): starts at ``value`` (a candidate), or, with ``start: probe``, at the lowest
  candidate whose probe diversity reaches ``target`` (:meth:`TemperatureController.calibrate`, fed by
  :func:`probe`). After every step it smooths the step's diversity (EMA) and moves **one** candidate up when the
  smoothed diversity has been below the target for ``window`` consecutive steps, at least ``min_interval`` steps
  after the last change and never above ``max_temperature``. Without a configured ``target`` the target is
  estimated as the mean diversity of the first ``target_steps`` steps minus ``target_margin``.

The temperature of step ``t`` is a pure function of the controller's state (:meth:`temperature`), so the
rollout and every log-prob/update computation of the step can ask for it independently and get the same value.
A decision made after step ``t`` takes effect at step ``t + 1``. The state is a plain JSON-serialisable dict
(:meth:`state_dict` / :meth:`load_state_dict`); a resumed controller makes the same decisions.
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from microcoder_ext.core.config import TemperatureConfig, parse_temperature_config
from microcoder_ext.core.diversity import DEFAULT_N, METRICS, PREFIX, DiversityResult, diversity_metrics, metric_key

logger = logging.getLogger(__name__)

_EPS = 1e-9


# ----------------------------------------------------------------------------------------------- probe


@dataclass(frozen=True)
class ProbeRow:
    temperature: float
    diversity: float  #: the configured metric's step value
    metrics: dict  #: every step metric (:meth:`DiversityResult.metrics`)


@dataclass(frozen=True)
class ProbeResult:
    """Diversity measured at each candidate temperature and the recommended starting temperature."""

    rows: tuple[ProbeRow, ...]
    metric: str
    n: int
    target: float | None
    recommended: float | None  #: lowest candidate reaching ``target``; highest measured if none does
    reason: str

    def table(self) -> dict[float, float]:
        """``{temperature: diversity}``, the input of :meth:`TemperatureController.calibrate`."""
        return {r.temperature: r.diversity for r in self.rows}

    def format(self) -> str:
        """A plain-text table for the CLI."""
        key = metric_key(self.metric, self.n)
        lines = [f"{'temperature':>11}  {key}", *(f"{r.temperature:>11.2f}  {r.diversity:.4f}" for r in self.rows)]
        lines.append(f"target {self.target if self.target is not None else 'unset'}: {self.reason}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "n": self.n,
            "target": self.target,
            "recommended": self.recommended,
            "reason": self.reason,
            "rows": [
                {"temperature": r.temperature, "diversity": r.diversity, "metrics": dict(r.metrics)} for r in self.rows
            ],
        }


def recommend(table: Mapping[float, float], target: float | None) -> tuple[float | None, str]:
    """Lowest temperature whose diversity reaches ``target`` (docs/paper.md#choosing-the-temperature, step 3), with the reason."""
    measured = sorted((float(t), float(d)) for t, d in table.items() if math.isfinite(float(d)))
    if not measured:
        return None, "no finite diversity measured"
    if target is None:
        return None, "no target diversity: set microcoder.temperature.target to get a recommendation"
    for t, d in measured:
        if d >= target:
            return t, f"lowest candidate whose diversity {d:.4f} reaches the target {target:.4f}"
    t, d = measured[-1]
    return t, f"no candidate reaches the target {target:.4f}; highest candidate {t} (diversity {d:.4f})"


def probe(
    sampler: Callable[[Sequence[Any], float, int], Sequence[Sequence[Sequence[int]]]],
    prompts: Sequence[Any],
    candidates: Sequence[float] = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8),
    *,
    samples: int = 8,
    target: float | None = None,
    metric: str = "distinct",
    n: int = DEFAULT_N,
    max_temperature: float | None = None,
) -> ProbeResult:
    """Measure diversity at each candidate temperature on a probe set and recommend a starting temperature.

    ``sampler(prompts, temperature, samples)`` returns, for every prompt, ``samples`` responses as token-id
    sequences (a vLLM engine or HF ``generate`` wrapped by the caller). The responses of one prompt form one
    group. Candidates above ``max_temperature`` are skipped.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    if not prompts:
        raise ValueError("probe needs at least one prompt")
    rows = []
    for temp in sorted(float(c) for c in candidates):
        if max_temperature is not None and temp > max_temperature + _EPS:
            continue
        out = sampler(prompts, temp, samples)
        if len(out) != len(prompts):
            raise ValueError(f"sampler returned {len(out)} groups for {len(prompts)} prompts at T={temp}")
        responses, index = [], []
        for p, group in enumerate(out):
            for r in group:
                responses.append(list(r))
                index.append(p)
        res = diversity_metrics(responses, index, n=n)
        rows.append(ProbeRow(temp, res.value(metric), res.metrics()))
        logger.info("temperature probe: T=%.2f %s=%.4f", temp, metric_key(metric, n), rows[-1].diversity)
    rec, reason = recommend({r.temperature: r.diversity for r in rows}, target)
    logger.info("temperature probe: recommended %s (%s)", rec, reason)
    return ProbeResult(tuple(rows), metric, n, target, rec, reason)


# ----------------------------------------------------------------------------------------------- controller


@dataclass
class StepUpdate:
    """What :meth:`TemperatureController.observe` decided after one step."""

    step: int
    temperature: float  #: the temperature step ``step`` was sampled and scored with
    stage: int
    next_temperature: float  #: the temperature of step ``step + 1``
    next_stage: int
    changed: bool  #: a new stage starts at ``step + 1``
    reason: str | None  #: why it changed (or why a due change was held back)
    diversity: float  #: the configured metric's value at this step (NaN: nothing eligible)
    smoothed: float | None  #: the smoothed diversity the decision used (None before any finite value)
    metrics: dict[str, float] = field(default_factory=dict)
    result: DiversityResult | None = None


class TemperatureController:
    """Per-step training temperature (see module doc). One instance per run, on the trainer (driver) process.

    Typical trainer loop (sync: the responses of step ``t`` were all sampled at ``temperature(t)``)::

        ctl = TemperatureController(cfg.temperature)        # or .load_state_dict(saved) on resume
        for step in ...:
            T = ctl.temperature(step)                        # rollout sampling params, old/ref/actor log-probs
            ...                                              # generate, score, update
            upd = ctl.update(step, responses, uid, mask=response_mask)
            metrics.update(upd.metrics)                      # microcoder/temperature, ..._stage, diversity
        checkpoint["microcoder_temperature"] = ctl.state_dict()
    """

    STATE_VERSION = 1

    def __init__(self, config: Any = None):
        if config is None or isinstance(config, Mapping):
            config = parse_temperature_config(config)
        if not isinstance(config, TemperatureConfig):
            raise TypeError(f"config must be a TemperatureConfig or a mapping, got {type(config).__name__}")
        self.config = config
        self._candidates = tuple(c for c in config.candidates if c <= config.max_temperature + _EPS)
        self._reset()

    # -- state

    def _reset(self) -> None:
        cfg = self.config
        self._last_step: int | None = None
        self._ema: float | None = None
        self._below = 0
        self._target: float | None = cfg.target
        self._target_samples: list[float] = []
        self._held: str | None = None  # reason of the last held-back change (logged once)
        self._calibrated = False
        if cfg.mode == "auto":
            idx = _index_of(self._candidates, cfg.value)
            self._stages: list[list] = [[0, self._candidates[idx], idx, f"configured start value={cfg.value}"]]
        elif cfg.mode == "staged":
            self._stages = [[s, t, i, "configured stage"] for i, (s, t) in enumerate(cfg.stages)]
        else:
            self._stages = [[0, cfg.value, 0, "constant"]]

    def state_dict(self) -> dict:
        """Plain JSON-serialisable state (save it with every checkpoint)."""
        return {
            "version": self.STATE_VERSION,
            "mode": self.config.mode,
            "last_step": self._last_step,
            "stages": [list(s) for s in self._stages],
            "ema": self._ema,
            "below": self._below,
            "target": self._target,
            "target_samples": list(self._target_samples),
            "held": self._held,
            "calibrated": self._calibrated,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output. The mode must match the configuration."""
        if state.get("version") != self.STATE_VERSION:
            raise ValueError(f"unsupported temperature state version {state.get('version')!r}")
        if state.get("mode") != self.config.mode:
            raise ValueError(
                f"saved temperature state is for mode={state.get('mode')!r}, "
                f"the configuration says mode={self.config.mode!r}"
            )
        self._last_step = state["last_step"]
        self._ema = state["ema"]
        self._below = int(state["below"])
        self._target = state["target"]
        self._target_samples = [float(x) for x in state["target_samples"]]
        self._held = state["held"]
        self._calibrated = bool(state["calibrated"])
        if self.config.mode == "auto":
            self._stages = [[int(s), float(t), int(i), str(r)] for s, t, i, r in state["stages"]]
            for _, t, i, _ in self._stages:
                if i >= len(self._candidates) or not math.isclose(self._candidates[i], t):
                    raise ValueError(f"saved stage temperature {t} is not candidate {i} of {self._candidates}")
        elif [list(s)[:2] for s in state["stages"]] != [s[:2] for s in self._stages]:
            logger.warning(
                "temperature: the configured %s schedule differs from the checkpoint's; using the configuration",
                self.config.mode,
            )

    # -- the temperature of a step (pure function of the state)

    @property
    def mode(self) -> str:
        return self.config.mode

    def stage(self, step: int) -> int:
        """Index of the stage that step ``step`` belongs to (steps in the trainer's numbering; verl starts at 1)."""
        step = _step(step)
        if self.config.mode == "auto" and self.config.start == "probe" and not self._calibrated:
            raise RuntimeError(
                "microcoder.temperature.start=probe: run the diversity probe and call calibrate() before step 0"
            )
        k = 0
        for i, s in enumerate(self._stages):
            if s[0] <= step:
                k = i
        return k

    def temperature(self, step: int) -> float:
        """The temperature of step ``step`` (sampling and every log-prob of that step)."""
        return float(self._stages[self.stage(step)][1])

    def plan(self) -> list[dict]:
        """The stages known so far: ``[{"step", "temperature", "reason"}]`` (for ``recipe show`` and logs)."""
        return [{"step": s, "temperature": t, "reason": r} for s, t, _, r in self._stages]

    @property
    def target(self) -> float | None:
        """The diversity target (auto mode), configured or estimated; None while being estimated."""
        return self._target

    # -- calibration (auto mode, before step 0)

    def calibrate(self, table: ProbeResult | Mapping[float, float], target: float | None = None) -> float:
        """Start at the lowest candidate whose measured diversity reaches the target (auto mode, before step 0).

        ``table`` is a :class:`ProbeResult` or ``{temperature: diversity}``; temperatures that are not candidates
        (or exceed ``max_temperature``) are ignored. Returns the starting temperature.
        """
        if self.config.mode != "auto":
            raise ValueError(f"calibrate() is for mode=auto, the configuration says mode={self.config.mode!r}")
        if self._last_step is not None:
            raise ValueError(f"calibrate() must run before the first step; step {self._last_step} was already observed")
        if isinstance(table, ProbeResult):
            table = table.table()
        target = self._target if target is None else float(target)
        if target is None:
            raise ValueError("calibrate() needs a target diversity: set microcoder.temperature.target")
        usable = {}
        for t, d in table.items():
            idx = _index_of(self._candidates, float(t), strict=False)
            if idx is not None:
                usable[self._candidates[idx]] = float(d)
        rec, reason = recommend(usable, target)
        if rec is None:
            raise ValueError(f"calibrate(): {reason} among the candidates {self._candidates}")
        idx = _index_of(self._candidates, rec)
        self._target = target
        self._stages = [[0, self._candidates[idx], idx, f"probe: {reason}"]]
        self._calibrated = True
        logger.info("temperature: start at T=%s (%s)", rec, reason)
        return rec

    # -- per-step update

    def update(self, step: int, responses: Any, index: Any, *, lengths: Any = None, mask: Any = None) -> StepUpdate:
        """Measure the step's diversity (:func:`diversity_metrics`) and :meth:`observe` it."""
        result = diversity_metrics(responses, index, lengths=lengths, mask=mask, n=self.config.n)
        return self.observe(step, result)

    def observe(self, step: int, diversity: DiversityResult | float) -> StepUpdate:
        """Record step ``step``'s diversity and decide the temperature of step ``step + 1``.

        ``diversity`` is a :class:`DiversityResult` or the configured metric's value. Steps must increase; a
        repeated or older step (e.g. replayed after a resume) changes nothing and is logged.
        """
        cfg = self.config
        step = _step(step)
        temp, stage = self.temperature(step), self.stage(step)
        result = diversity if isinstance(diversity, DiversityResult) else None
        value = result.value(cfg.metric) if result is not None else float(diversity)
        metrics = dict(result.metrics()) if result is not None else {metric_key(cfg.metric, cfg.n): value}
        replay = self._last_step is not None and step <= self._last_step
        changed, reason = False, None
        smoothed = self._ema
        if replay:
            logger.warning(
                "temperature: step %d was already observed (last %d); state unchanged", step, self._last_step
            )
        else:
            if not math.isfinite(value):
                logger.warning("temperature: step %d has no finite %s (no eligible responses); not counted",
                               step, metric_key(cfg.metric, cfg.n))
            else:
                self._ema = value if self._ema is None else cfg.smoothing * self._ema + (1.0 - cfg.smoothing) * value
            smoothed = self._ema  # the value this step's decision sees (a new stage restarts the EMA)
            if cfg.mode == "auto":
                changed, reason = self._auto_decide(step, value)
            self._last_step = step
            nxt = self.temperature(step + 1)
            if cfg.mode == "staged" and nxt != temp:
                changed, reason = True, f"staged schedule: stage {stage + 1} starts at step {step + 1}"
                logger.info("temperature: step %d -> %d: T %.3g -> %.3g (%s)", step, step + 1, temp, nxt, reason)
        next_temp, next_stage = self.temperature(step + 1), self.stage(step + 1)
        metrics[PREFIX + "smoothed"] = smoothed if smoothed is not None else math.nan
        if cfg.mode == "auto":
            metrics[PREFIX + "target"] = self._target if self._target is not None else math.nan
        metrics["microcoder/temperature"] = temp
        metrics["microcoder/temperature_stage"] = float(stage)
        metrics["microcoder/temperature_next"] = next_temp
        return StepUpdate(step, temp, stage, next_temp, next_stage, changed, reason, value, smoothed, metrics, result)

    def _auto_decide(self, step: int, value: float) -> tuple[bool, str | None]:
        cfg = self.config
        if not math.isfinite(value):
            return False, None
        if self._target is None:
            self._target_samples.append(value)
            if len(self._target_samples) < cfg.target_steps:
                return False, None
            mean = sum(self._target_samples) / len(self._target_samples)
            self._target = mean - cfg.target_margin
            logger.info(
                "temperature: target diversity %.4f = mean of the first %d steps %.4f - margin %.4f (step %d)",
                self._target, len(self._target_samples), mean, cfg.target_margin, step,
            )
            return False, None
        self._below = self._below + 1 if self._ema < self._target else 0
        if self._below < cfg.window:
            self._held = None
            return False, None
        start, temp, idx, _ = self._stages[-1]
        held_for = step + 1 - start
        why = (f"smoothed {metric_key(cfg.metric, cfg.n)} {self._ema:.4f} < target {self._target:.4f} "
               f"for {self._below} steps (window {cfg.window})")
        if idx + 1 >= len(self._candidates):
            return self._hold(step, "top", f"{why}, but T={temp} is the highest candidate <= max_temperature "
                                           f"{cfg.max_temperature}: staying")
        if held_for < cfg.min_interval:
            return self._hold(
                step,
                f"interval:{start}",
                f"{why}, but stage T={temp} started at step {start}: {held_for} < min_interval "
                f"{cfg.min_interval} steps, waiting",
            )
        new = self._candidates[idx + 1]
        reason = f"{why}: T {temp} -> {new} from step {step + 1}"
        self._stages.append([step + 1, new, idx + 1, reason])
        self._ema = None
        self._below = 0
        self._held = None
        logger.info("temperature: %s", reason)
        return True, reason

    def _hold(self, step: int, key: str, reason: str) -> tuple[bool, str]:
        """A change is due but not allowed: log once per cause, report the reason every step."""
        if self._held != key:
            logger.info("temperature: step %d: %s", step, reason)
            self._held = key
        return False, reason


def _step(step: Any) -> int:
    try:
        if isinstance(step, bool):
            raise TypeError
        value = operator.index(step)
    except TypeError:
        raise ValueError(f"step must be a non-negative integer, got {step!r}") from None
    if value < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    return value


def _index_of(candidates: Sequence[float], t: float, strict: bool = True) -> int | None:
    for i, c in enumerate(candidates):
        if math.isclose(c, t, abs_tol=1e-6):
            return i
    if strict:
        raise ValueError(f"temperature {t} is not one of the candidates {tuple(candidates)}")
    return None
