"""``curves.png`` of a demo run (:mod:`microcoder_ext.demo.run`): six panels from verl's own logged metrics."""

from __future__ import annotations

from pathlib import Path

#: (panel title, report.steps key, y-axis label); the first panel also draws the held-back pass rate
PANELS = [
    ("training reward and held-back pass rate", "reward", "mean"),
    ("response length", "response_length", "tokens"),
    ("truncated at the budget", "truncated_frac", "fraction"),
    ("advantages masked", "masked_frac", "fraction"),
    ("diversity (distinct 4-grams)", "diversity", "distinct4"),
    ("temperature", "temperature", "T"),
]


def plot(report: dict, path: str | Path) -> Path:
    """Write the curves of ``report`` (a :class:`~microcoder_ext.demo.run.DemoReport` as a dict) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = report.get("steps", [])
    s = report.get("settings", {})
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (title, key, label) in zip(axes.flat, PANELS):
        xs = [r["step"] for r in steps if r.get(key) is not None]
        ys = [r[key] for r in steps if r.get(key) is not None]
        if xs:
            ax.plot(xs, ys, lw=1.2, label="training (per step)" if key == "reward" else None)
        if key == "reward":
            held = report.get("heldout", [])
            if held:
                ax.plot([h["step"] for h in held], [h["pass_rate"] for h in held], "o-", color="C3", lw=1.5,
                        label="held-back pass rate (verl validation)")
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=8, loc="lower right")
        if not xs and key != "reward":
            ax.text(0.5, 0.5, "not logged by this recipe", ha="center", va="center", transform=ax.transAxes,
                    color="0.5")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    summary = report.get("summary", {})
    change = summary.get("heldout_change")
    fig.suptitle(f"microcoder demo: verl main_ppo +recipe={s.get('recipe')}, seed {s.get('seed')}"
                 + (f"; held-back pass rate {summary['heldout_before']:.3f} -> {summary['heldout_after']:.3f} "
                    f"({change:+.3f})" if change is not None else ""), fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
