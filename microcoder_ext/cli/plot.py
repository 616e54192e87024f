"""``microcoder plot``: the paper's training-curve panels from run logs, several runs side by side, as one PNG.

  microcoder plot RUN [RUN ...] -o curves.png [--label NAME ...] [--panels reward,accuracy,...] [--smooth 0.6]
  microcoder plot RUN [RUN ...] --list        # the metrics read from each run and which one each panel uses

RUN: a TensorBoard log directory or event file, verl's console output (``step:N - key:value ...``), a JSONL of
metrics (verl's ``trainer.logger=[file]``) or a wandb CSV export (``FILE.csv#RUN NAME`` for a multi-run export).
Exit status: 0 written (panels without data for a run say so, with a warning), 1 no panel has data for any run,
2 a run cannot be read or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import sys

from microcoder_ext.eval.curves import DEFAULT_PANELS, PANELS, panel_candidates, plot_runs, resolve_metric, save_png
from microcoder_ext.eval.runlogs import FORMATS, RunLog, RunLogError, read_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "panels: " + "; ".join(f"{k} ({v.title})" for k, v in PANELS.items())
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run logs: TensorBoard dir/event file, verl console log, metrics JSONL, wandb CSV")
    p.add_argument("-o", "--output", metavar="OUT.png", help="PNG to write (required unless --list)")
    p.add_argument("--label", action="append", default=[], metavar="NAME",
                   help="legend name of each RUN, in order (default: the path)")
    p.add_argument("--panels", default=",".join(DEFAULT_PANELS),
                   help=f"comma-separated panels, in order (default: {','.join(DEFAULT_PANELS)})")
    p.add_argument("--smooth", type=float, default=0.0, metavar="EMA",
                   help="TensorBoard-style EMA weight in [0, 1) (default 0: raw values)")
    p.add_argument("--metric", action="append", default=[], metavar="PANEL=NAME",
                   help="plot metric NAME in PANEL instead of the aliases (e.g. accuracy=val-core/lcb/acc/mean@4)")
    p.add_argument("--format", choices=FORMATS, default=None, help="force the log format of every RUN")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--dpi", type=int, default=120)
    p.add_argument("--list", action="store_true", help="print the metrics found per run and the panel mapping; no plot")


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def print_listing(labelled: list[tuple[str, RunLog]], panels: list[str], overrides: dict[str, str]) -> None:
    for label, run in labelled:
        where = f" ({run.source})" if run.source and run.source != run.path else ""
        print(f"== {label}: {run.path}{where} [{run.fmt}], {len(run.metrics)} metrics")
        width = max(len(k) for k in run.metrics)
        for name, series in run.metrics.items():
            steps = [s for s, _ in series]
            span = f"steps {min(steps)}..{max(steps)}"
            print(f"  {name:<{width}}  {len(series):>5} pts  {span}  last {_fmt(series[-1][1])}")
        print("  panels:")
        for pname in panels:
            name = overrides.get(pname)
            if name is not None and name not in run.metrics:
                name = None
            elif name is None:
                name = resolve_metric(PANELS[pname], run.metrics)
            print(f"    {pname:<12} {name or '(no data)'}")


def run(args: argparse.Namespace) -> int:
    panels = [p.strip() for p in args.panels.split(",") if p.strip()]
    unknown = [p for p in panels if p not in PANELS]
    if unknown or not panels:
        return _fail(f"unknown panel(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(PANELS)}")
    if args.label and len(args.label) != len(args.runs):
        return _fail(f"{len(args.label)} --label for {len(args.runs)} runs: give one per run, in order")
    if not 0 <= args.smooth < 1:
        return _fail(f"--smooth must be in [0, 1), got {args.smooth}")
    overrides = {}
    for spec in args.metric:
        pname, sep, name = spec.partition("=")
        if not sep or pname not in PANELS or not name:
            return _fail(f"--metric {spec!r}: expected PANEL=NAME with PANEL one of {', '.join(PANELS)}")
        overrides[pname] = name
    if not args.list and not args.output:
        return _fail("-o/--output OUT.png is required (or --list)")

    labels = args.label or list(args.runs)
    if len(set(labels)) != len(labels):
        return _fail(f"run labels must differ: {labels}")
    labelled: list[tuple[str, RunLog]] = []
    for label, path in zip(labels, args.runs):
        try:
            labelled.append((label, read_run(path, fmt=args.format)))
        except RunLogError as e:
            return _fail(f"cannot read run {path!r}: {e}")

    if args.list:
        print_listing(labelled, panels, overrides)
        return 0

    result = plot_runs(labelled, panels=panels, smooth=args.smooth, overrides=overrides, title=args.title)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if all(v is None for v in result.resolved.values()):
        looked = "; ".join(f"{p}: {', '.join(panel_candidates(PANELS[p]) + list(PANELS[p].patterns))}" for p in panels)
        print(f"error: no run has any metric of the requested panels ({looked}); `--list` shows what was read",
              file=sys.stderr)
        return 1
    try:
        save_png(result, args.output, dpi=args.dpi)
    except OSError as e:
        return _fail(f"cannot write {args.output}: {e}")
    n_lines = sum(v is not None for v in result.resolved.values())
    print(f"wrote {args.output}: {len(panels)} panels x {len(labelled)} runs, {n_lines} curves")
    return 0

