"""Reports of one or several runs: an aligned text table, a JSON document, a PNG bar chart.

A *run* (:class:`Run`) is a label, its :class:`~.breakdown.Table`, optionally its per-problem results, settings and
verdict rates; the paper's published rows are runs too (``reference=True``, pass@1 only).

Text table: one block per k; inside it one row block per run (rows AtCoder / LeetCode / others / All), columns
Easy / Medium / Hard / All; each cell is ``pass@k in % (number of problems)``; ``-`` where a cell has no problem
(or the run has no value for that k, e.g. the paper for k > 1).

JSON (:func:`run_document`): ``{"format": "microcoder-eval/1", "label", "settings", "problems": [per-problem
n, c, verdict counts, pass@k], "table": Table.to_dict(), "verdict_rates", "compare": [other runs' tables]}``.
:func:`load_run` reads it back (the table is recomputed from the problems for the requested k).

PNG (:func:`plot`): one panel per table row (AtCoder, LeetCode, ..., All), x = Easy / Medium / Hard / All, one bar
per run in each group (the paper's reference in grey hatching), value labels on the bars; title: model, n, k.
Returns the matplotlib Figure (Agg backend), so callers can inspect it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .breakdown import ALL, COLUMNS, ProblemResult, Table, breakdown, label, verdict_rates

FORMAT = "microcoder-eval/1"
REF_GREYS = ("0.75", "0.6", "0.88", "0.45")  # paper reference bars (hatched)


@dataclass
class Run:
    label: str
    table: Table
    problems: list = field(default_factory=list)  # ProblemResult
    settings: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)
    reference: bool = False


class RunFileError(Exception):
    pass


def run_from_results(lbl: str, results: list[ProblemResult], ks, settings: dict | None = None) -> Run:
    return Run(lbl, breakdown(results, ks), list(results), dict(settings or {}), verdict_rates(results))


def load_run(path: str, ks) -> Run:
    """A run JSON written by ``microcoder eval --json``; its table is recomputed for ``ks`` from the problems."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise RunFileError(f"cannot read run {path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("problems"), list):
        raise RunFileError(f"{path}: not a run written by microcoder eval --json (format {FORMAT})")
    try:
        results = [ProblemResult.from_dict(p) for p in doc["problems"]]
        return Run(str(doc.get("label") or path), breakdown(results, ks), results, doc.get("settings") or {},
                   doc.get("verdict_rates") or verdict_rates(results))
    except (KeyError, TypeError, ValueError) as e:
        raise RunFileError(f"{path}: malformed problem results ({e})") from None


def paper_runs(spec: str) -> list[Run]:
    from .paper import reference

    return [Run(r.label, r.table(), settings=r.to_dict(), reference=True) for r in reference(spec)]


# ---------------------------------------------------------------------------------------------------- text


def fmt_cell(table: Table, row: str, col: str, k: int) -> str:
    cell = table.cells.get(row, {}).get(col)
    if cell is None or cell.pass_at.get(k) is None:
        return "-"
    return f"{cell.pass_at[k]:.1f} ({cell.problems})"


def all_rows(runs: list[Run]) -> list[str]:
    """Union of the runs' rows, in display order (paper platforms first, others, All last)."""
    rows: list[str] = []
    for run in runs:
        for r in run.table.rows:
            if r not in rows and r != ALL:
                rows.append(r)
    return rows + [ALL]


def format_table(runs: list[Run], ks) -> str:
    """Aligned text table(s), one block per k, one row block per run."""
    rows = all_rows(runs)
    out = []
    multi = len(runs) > 1
    for k in ks:
        header = (["run"] if multi else []) + ["platform"] + [label(c) for c in COLUMNS]
        body = []
        for run in runs:
            for i, row in enumerate(rows):
                if row not in run.table.rows:
                    continue
                cells = [fmt_cell(run.table, row, c, k) for c in COLUMNS]
                body.append(([run.label if i == 0 else ""] if multi else []) + [label(row)] + cells)
            body.append(None)  # separator between run blocks
        if body and body[-1] is None:
            body.pop()
        widths = [max(len(h), *(len(r[j]) for r in body if r is not None)) for j, h in enumerate(header)]
        ntext = 2 if multi else 1
        line = lambda cols: "  ".join(c.ljust(w) if j < ntext else c.rjust(w)  # noqa: E731
                                      for j, (c, w) in enumerate(zip(cols, widths)))
        rule = "-" * len(line(header))
        out.append(f"pass@{k} (%), cell = pass@{k} in percent (number of problems); All = every platform "
                   f"(LCB in the paper); '-' = no problem or no value")
        out += [line(header), rule]
        out += [rule if r is None else line(r) for r in body]
        out.append("")
    return "\n".join(out).rstrip("\n")


def format_verdicts(run: Run) -> str:
    parts = [f"{v} {d['rate'] * 100:.1f}% ({d['count']})" for v, d in run.verdicts.items() if d["count"]]
    return f"verdicts of {run.label}: " + (", ".join(parts) if parts else "none")


# ---------------------------------------------------------------------------------------------------- JSON


def run_document(run: Run, compare: list[Run] | None = None) -> dict:
    ks = run.table.ks
    return {"format": FORMAT, "label": run.label,
            "units": {"problems[].pass_at": "per-problem estimator, fraction in [0, 1]",
                      "table": "percent", "verdict_rates[].rate": "fraction of all scored responses"},
            "settings": run.settings,
            "problems": [p.to_dict(ks) for p in run.problems], "table": run.table.to_dict(),
            "verdict_rates": run.verdicts,
            "compare": [{"label": r.label, "reference": r.reference, "table": r.table.to_dict(),
                         **({"paper": r.settings} if r.reference else {"settings": r.settings})}
                        for r in (compare or [])]}


def compare_document(runs: list[Run]) -> dict:
    """JSON of a compare-only invocation (no run of its own)."""
    return {"format": FORMAT + "+compare", "runs": [{"label": r.label, "reference": r.reference,
                                                     "table": r.table.to_dict(), "verdict_rates": r.verdicts}
                                                    for r in runs]}


def write_json(path: str, doc: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------------- PNG


def plot(runs: list[Run], k: int = 1, title: str = "", path: str | None = None):
    """Grouped bar chart of pass@k (%); returns the Figure (saved to ``path`` as PNG when given)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    rows = all_rows(runs)
    fig = Figure(figsize=(4.2 * len(rows), 4.2), layout="constrained")
    axes = fig.subplots(1, len(rows), sharey=True, squeeze=False)[0]
    width = 0.8 / max(1, len(runs))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, row in zip(axes, rows):
        for i, run in enumerate(runs):
            values = [run.table.value(row, c, k) for c in COLUMNS]
            heights = [float("nan") if v is None else v for v in values]
            xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(COLUMNS))]
            nref = sum(1 for r in runs[:i] if r.reference)
            style = ({"color": REF_GREYS[nref % len(REF_GREYS)], "hatch": "//", "edgecolor": "0.3"} if run.reference
                     else {"color": colors[(i - nref) % len(colors)]})
            bars = ax.bar(xs, heights, width, label=run.label, **style)
            ax.bar_label(bars, labels=["-" if v is None else f"{v:.1f}" for v in values], fontsize=7, padding=1)
        ax.set_title(label(row))
        ax.set_xticks(range(len(COLUMNS)), [label(c) for c in COLUMNS])
        ax.set_ylim(0, 110)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"pass@{k} (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(runs), 4), fontsize=8)
    fig.suptitle(title or f"pass@{k}")
    if path:
        fig.savefig(path, format="png", dpi=100, metadata={"Title": title or f"pass@{k}"})
    return fig


def title_for(run: Run | None, k: int) -> str:
    if run is None:
        return f"pass@{k} by platform x difficulty"
    s = run.settings
    parts = [run.label if run.label != s.get("model") else str(s["model"])]
    if s.get("n_samples"):
        parts.append(f"n={s['n_samples']}")
    parts.append(f"pass@{k}")
    return ", ".join(parts)
