"""The smoke report: what was substituted, and per step what the framework logged and the engines saw.

Everything here is read back from the framework's own logs (verl's file logger, OpenRLHF's TensorBoard events, TRL's
log history) and from what the engine saw (:mod:`microcoder_ext.evidence`); nothing is re-computed.
Times are seconds; fractions are of the step's responses.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: per-step time columns, in the order shown
TIME_COLUMNS = ("generation", "reward", "old_log_prob", "update", "weight_sync")
_VERDICT_SHORT = {"correct": "ok", "wrong_answer": "wa", "no_answer": "na", "compile_error": "ce",
                  "runtime_error": "re", "timeout": "tle", "memory_limit": "mle", "sandbox_error": "se"}


@dataclass
class Substitution:
    """One thing the smoke run does differently from the launch (printed before it starts)."""

    what: str
    launch: str  #: what the launch configuration had
    smoke: str  #: what the smoke run uses instead
    why: str = ""


@dataclass
class StepRecord:
    step: int
    times: dict = field(default_factory=dict)  #: TIME_COLUMNS -> seconds (None: the framework does not log it)
    microcoder: dict = field(default_factory=dict)  #: microcoder/* metrics
    framework: dict = field(default_factory=dict)  #: selected framework metrics (loss, grad norm, advantages, ...)
    verdicts: dict = field(default_factory=dict)  #: verdict -> number of responses
    responses: int | None = None
    weights_changed: bool | None = None  #: the update changed the weights (engine checksum before vs after)
    engine_synced: bool | None = None  #: the engine holds exactly the trainer's weights after the sync
    sampler_temperature: list = field(default_factory=list)  #: temperatures the engine sampled this step at
    logprob_temperature: float | None = None  #: temperature the trainer computed log-probs at
    logprob_check: dict = field(default_factory=dict)  #: {"metric": name, "value": x}: engine vs trainer log-probs


@dataclass
class SmokeReport:
    framework: str
    ok: bool
    exit_code: int
    steps_requested: int
    command: list = field(default_factory=list)
    substitutions: list = field(default_factory=list)
    model: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)
    wall_s: float = 0.0
    log: str | None = None
    error: str | None = None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_finite(self.to_dict()), indent=2, sort_keys=False) + "\n")
        return path


def _finite(obj: Any) -> Any:
    """NaN / inf -> None (JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def format_substitutions(subs: list[Substitution]) -> str:
    if not subs:
        return "substitutions: none"
    w1 = max(len(s.what) for s in subs)
    w2 = min(max(len(s.launch) for s in subs), 40)
    lines = ["substituted for this CPU run (launch -> smoke):"]
    for s in subs:
        why = f"  ({s.why})" if s.why else ""
        lines.append(f"  {s.what:<{w1}}  {s.launch:<{w2}} -> {s.smoke}{why}")
    return "\n".join(lines)


def _num(v: Any, fmt: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt.format(v)


def _yesno(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def _temps(values: list) -> str:
    return "/".join(f"{t:g}" for t in values) if values else "-"


def format_verdicts(counts: dict) -> str:
    parts = [f"{_VERDICT_SHORT.get(k, k)}{int(v)}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v]
    return " ".join(parts) if parts else "-"


def _records(report: SmokeReport) -> list[StepRecord]:
    """The report's steps as :class:`StepRecord` (a report read back from JSON holds dicts)."""
    return [s if isinstance(s, StepRecord) else StepRecord(**s) for s in report.steps]


def format_table(report: SmokeReport) -> str:
    """The per-step table printed at the end of a smoke run."""
    header = ["step", "gen s", "reward s", "oldlp s", "update s", "sync s", "masked", "trunc", "pg_loss",
              "verdicts", "W chg", "engine=W", "T sample", "T logp", "logp check"]
    rows = []
    for s in _records(report):
        mc = s.microcoder
        check = s.logprob_check
        rows.append([
            str(s.step), *(_num(s.times.get(c), "{:.2f}") for c in TIME_COLUMNS),
            _num(mc.get("microcoder/masked_frac"), "{:.3f}"), _num(mc.get("microcoder/truncated_frac",
                                                                          s.framework.get("truncated_frac")), "{:.3f}"),
            _num(s.framework.get("pg_loss"), "{:+.4f}"), format_verdicts(s.verdicts), _yesno(s.weights_changed),
            _yesno(s.engine_synced), _temps(s.sampler_temperature), _num(s.logprob_temperature, "{:g}"),
            f"{check['metric'].rsplit('/', 1)[-1]} {check['value']:.1e}" if check and check.get("value") is not None
            else "-",
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in rows]
    return "\n".join(out)


def require_judged(report: SmokeReport, events: list[dict] = ()) -> bool:
    """Fail ``report`` (``ok`` False, exit status 1, the reason in ``error``) when the reward could not judge some
    responses (verdict ``sandbox_error``: malformed tests in the data, or a sandbox failure): training would learn
    zeros from them. ``events``: the run's evidence, whose ``reward`` events carry each such verdict's reason.
    Returns whether every response was judged."""
    steps = _records(report)
    unjudged = sum(int(s.verdicts.get("sandbox_error", 0)) for s in steps)
    if not unjudged:
        return True
    total = sum(int(s.responses or sum(s.verdicts.values())) for s in steps)
    reasons: dict[str, int] = {}
    for e in events:
        if e.get("event") == "reward" and e.get("verdict") == "sandbox_error" and e.get("detail"):
            reasons[str(e["detail"])] = reasons.get(str(e["detail"]), 0) + 1
    msg = (f"the reward could not judge {unjudged} of {total} responses (verdict sandbox_error): malformed tests in "
           "the data (`microcoder data prepare` drops them) or a sandbox failure")
    if reasons:
        msg += "; reasons: " + "; ".join(f"{n}x {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
    report.ok, report.exit_code = False, 1
    report.error = f"{report.error}\n{msg}" if report.error else msg
    return False


def summary(report: SmokeReport) -> str:
    """The lines under the table: how many steps ran, and what the evidence says."""
    steps = _records(report)
    lines = [f"{report.framework}: {len(steps)} training step(s) ran of {report.steps_requested} "
             f"({'ok' if report.ok else 'FAILED'}, {report.wall_s:.0f} s)"]
    changed = [s.weights_changed for s in steps if s.weights_changed is not None]
    synced = [s.engine_synced for s in steps if s.engine_synced is not None]
    if changed:
        lines.append(f"  weights changed by the update: {sum(changed)}/{len(changed)} steps; "
                     f"engine serves the trainer's weights after each sync: {sum(synced)}/{len(synced)} syncs")
    temps = sorted({t for s in steps for t in s.sampler_temperature})
    if temps:
        lp = sorted({s.logprob_temperature for s in steps if s.logprob_temperature is not None})
        checks = [s.logprob_check["value"] for s in steps if s.logprob_check.get("value") is not None]
        metric = next((s.logprob_check["metric"] for s in steps if s.logprob_check), None)
        lines.append(f"  sampled at T = {_temps(temps)}; log-probs at T = {_temps(lp)}"
                     + (f"; engine vs trainer log-probs, max |{metric}| = {max(abs(c) for c in checks):.1e}"
                        if checks else ""))
    for note in report.notes:
        lines.append(f"  note: {note}")
    if report.error:
        lines.append(f"  error: {report.error}")
    return "\n".join(lines)
