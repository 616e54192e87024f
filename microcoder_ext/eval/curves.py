"""The paper's training-curve panels (docs/paper.md#training-dynamics) from run logs read by :mod:`runlogs`.

Each panel lists the metric names that carry it, in order of preference: ours (``microcoder/*``, what the verl and
OpenRLHF trainers log; OpenRLHF's loggers prefix ``train/``), then verl 0.9.1's own (``verl.trainer.ppo.metric_utils``)
and OpenRLHF 0.11.2's own (``openrlhf.trainer.ppo_trainer``: ``rollout/*`` -> ``train/rollout/*``, eval ->
``eval/eval_<source>_pass1``). The first name a run has is plotted for it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from microcoder_ext.eval.runlogs import Metrics, RunLog, Series


@dataclass(frozen=True)
class Panel:
    name: str
    title: str
    ylabel: str
    #: exact names, tried in order; each is also tried with OpenRLHF's ``train/`` prefix
    names: tuple[str, ...] = ()
    #: regexes over all names (first sorted match), tried after ``names``
    patterns: tuple[str, ...] = ()
    #: matplotlib drawstyle/marker: the temperature is a step function, validation points are sparse
    drawstyle: str = "default"
    marker: str | None = None


PANELS: dict[str, Panel] = {
    p.name: p
    for p in (
        Panel("reward", "Critic reward (mean training score)", "reward",
              names=("critic/score/mean", "rollout/reward_mean", "critic/rewards/mean")),
        Panel("accuracy", "Validation accuracy (pass@1)", "pass@1",
              patterns=(r"^val-core/.+/acc/mean@\d+$",          # verl: mean over n samples = pass@1
                        r"^val-core/.+/reward/mean@\d+$",       # verl when the reward returns no "acc"
                        r"^eval/eval_.+_pass1$",                # OpenRLHF's loggers ("eval/" + eval_<src>_pass1)
                        r"^eval_.+_pass1$"), marker="o"),
        Panel("length", "Response length (mean tokens)", "tokens",
              names=("response_length/mean", "rollout/response_length_mean")),
        Panel("truncation", "Truncated fraction", "fraction",
              names=("microcoder/truncated_frac", "response_length/clip_ratio", "rollout/truncated_rate")),
        Panel("masked", "Masked fraction (advantage zeroed)", "fraction",
              names=("microcoder/masked_frac",)),
        Panel("diversity", "Diversity (distinct-4)", "distinct-4",
              names=("microcoder/diversity/distinct4",)),
        Panel("temperature", "Rollout temperature", "T",
              names=("microcoder/temperature",), drawstyle="steps-post"),
    )
}
DEFAULT_PANELS = tuple(PANELS)


def panel_candidates(panel: Panel) -> list[str]:
    out = []
    for n in panel.names:
        out += [n, f"train/{n}"]
    return out


def resolve_metric(panel: Panel, metrics: Metrics | dict) -> str | None:
    """The name of ``panel``'s metric in ``metrics`` (None when the run has none of its names)."""
    for name in panel_candidates(panel):
        if metrics.get(name):
            return name
    for pat in panel.patterns:
        rx = re.compile(pat)
        hits = sorted(k for k in metrics if rx.match(k) and metrics[k])
        if hits:
            return hits[0]
    return None


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: exponential moving average with weight ``weight`` in [0, 1), debiased at the start."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    if weight == 0:
        return list(values)
    out, last = [], 0.0
    for i, v in enumerate(values, 1):
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**i))
    return out


@dataclass
class CurvePlot:
    figure: object  # matplotlib Figure
    panels: list[str]
    #: (run label, panel) -> metric name plotted, or None ("no data")
    resolved: dict[tuple[str, str], str | None] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def axes(self, panel: str):
        return self.figure.axes[self.panels.index(panel)]


def plot_runs(runs: list[tuple[str, RunLog | Metrics]], panels=DEFAULT_PANELS, smooth: float = 0.0,
              overrides: dict[str, str] | None = None, title: str | None = None, ncols: int | None = None) -> CurvePlot:
    """One figure, one subplot per panel, one line per run (colour Cn for the n-th run, label = run label).

    ``runs``: (label, RunLog or metrics dict). ``overrides``: panel -> metric name to use instead of the aliases.
    A run without the panel's metric gets no line there; the panel lists it under "no data" and a warning is recorded.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    unknown = [p for p in panels if p not in PANELS]
    if unknown:
        raise ValueError(f"unknown panel(s) {', '.join(unknown)} (known: {', '.join(PANELS)})")
    overrides = dict(overrides or {})
    panels = list(panels)
    n = len(panels)
    ncols = ncols or min(n, 3 if n in (3, 5, 6, 9) else 4 if n > 4 else n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.4 * nrows), layout="constrained")
    axs = fig.subplots(nrows, ncols, squeeze=False).ravel()
    result = CurvePlot(figure=fig, panels=panels)
    for ax in axs[n:]:
        fig.delaxes(ax)
    for ax, pname in zip(axs, panels):
        panel = PANELS[pname]
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        missing = []
        for i, (label, run) in enumerate(runs):
            metrics = run.metrics if isinstance(run, RunLog) else run
            name = overrides.get(pname)
            if name is not None and not metrics.get(name):
                name = None
            else:
                name = name or resolve_metric(panel, metrics)
            result.resolved[(label, pname)] = name
            if name is None:
                missing.append(label)
                wanted = overrides.get(pname) or ", ".join(panel_candidates(panel) + list(panel.patterns))
                result.warnings.append(f"{label}: no data for panel '{pname}' (looked for {wanted})")
                continue
            series: Series = metrics[name]
            steps = [s for s, _ in series]
            values = ema([v for _, v in series], smooth)
            (line,) = ax.plot(steps, values, color=f"C{i % 10}", label=label, linewidth=1.4,
                              drawstyle=panel.drawstyle, marker=panel.marker, markersize=3)
            line.set_gid(name)
        if missing:
            ax.text(0.5, 0.5, "no data: " + ", ".join(missing), transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="0.4", wrap=True)
        if ax.get_lines():
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return result


def save_png(plot: CurvePlot, path: str, dpi: int = 120) -> None:
    plot.figure.savefig(path, dpi=dpi, format="png")
