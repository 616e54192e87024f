"""``microcoder data``: ``prepare`` (coding datasets -> verl parquet / OpenRLHF JSONL) and ``difficulty`` (the
five-dimension difficulty scores, :mod:`microcoder_ext.data.difficulty_cli`, imported when the parser is built;
unavailable -> a clear error).

  microcoder data prepare SOURCE... -o OUTDIR [--source auto|leetcodedataset|livecodebench|code_contests|
        deepcoder|microcoder|problems] [--format verl,openrlhf[,problems]] [--difficulty easy,medium,hard]
        [--platform P,...] [--date-from DAY] [--date-before DAY] [--release v6] [--min-difficulty X]
        [--no-dedup] [--near-dup-threshold 0.8] [--decontaminate EVALFILE...] [--val-size N | --val-from FILE]
        [--test-options FILE.jsonl] [--limit N] [--seed S] [--report FILE.json]

Exit status: 0 written, 1 nothing kept, 2 usage error or unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from .lcb import RELEASE_WINDOWS
from .sources import SHAPES, Drop, RowError, SchemaReport, SourceError, iter_source, read_problems, validate
from .writers import FORMATS

DIFFICULTY_MODULE = "microcoder_ext.data.difficulty_cli"


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def add_prepare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="local .jsonl/.json/.parquet file (optionally .gz) or directory, or a hub id "
                        "owner/name[:config]")
    p.add_argument("--source", default="auto", choices=("auto",) + SHAPES,
                   help="row shape of every SOURCE (default: sniffed from the first rows of each)")
    p.add_argument("-o", "--outdir", required=True, help="output directory")
    p.add_argument("--format", default="verl,openrlhf",
                   help=f"comma-separated output formats: {', '.join(FORMATS)} (default verl,openrlhf)")
    p.add_argument("--split", default="train", help="hub split to load (default train)")
    g = p.add_argument_group("filters")
    g.add_argument("--difficulty", type=_csv, help="keep these difficulties (comma-separated: easy,medium,hard)")
    g.add_argument("--platform", type=_csv, help="keep these platforms (leetcode,atcoder,codeforces,codechef,...)")
    g.add_argument("--date-from", help="keep problems dated on or after this ISO day")
    g.add_argument("--date-before", help="keep problems dated before this ISO day (exclusive)")
    g.add_argument("--release", choices=sorted(RELEASE_WINDOWS),
                   help="keep the contest-date window of a LiveCodeBench release (v6 = 2025-02-01..2025-05-01); "
                        "--date-from/--date-before override its ends")
    g.add_argument("--min-difficulty", type=float,
                   help="keep problems whose difficulty score (extra_info.difficulty_scores.score, else computed "
                        "by `microcoder data difficulty`'s scorer without a judge) is >= X in [0, 1]")
    g.add_argument("--no-dedup", action="store_true", help="keep exact and near duplicates")
    g.add_argument("--near-dup-threshold", type=float, default=0.8,
                   help="Jaccard similarity of word 5-gram shingles at which a statement is a near duplicate "
                        "(default 0.8; 1 = exact duplicates only)")
    g.add_argument("--decontaminate", nargs="+", default=[], metavar="EVALFILE",
                   help="evaluation sets (any SOURCE shape); training problems matching one by id, title or "
                        "statement n-gram overlap are removed and reported")
    g.add_argument("--decontam-ngram", type=int, default=13, help="word n-gram length (default 13)")
    g.add_argument("--decontam-threshold", type=float, default=0.5,
                   help="fraction of an eval statement's n-grams found in a training statement that counts as "
                        "contamination (default 0.5)")
    g.add_argument("--decontam-by", type=_csv, default=["id", "title", "ngram"],
                   help="checks to run (comma-separated: id,title,ngram; default all)")
    g.add_argument("--test-options", metavar="FILE.jsonl",
                   help="per-problem judging options merged into the tests: JSON lines with `id` (the problem id, "
                        "e.g. code_contests/4, or the source row id, 4) and any of checker, float_tol, time_limit, "
                        "case_sensitive, line_sensitive, unordered, memory_limit_mb (e.g. "
                        "bench/data/code_contests_refs.jsonl)")
    s = p.add_argument_group("splits")
    s.add_argument("--val-size", type=int, default=0, help="hold out N problems (after the shuffle) as val")
    s.add_argument("--val-from", metavar="FILE", help="validation problems from this SOURCE instead (training rows "
                   "with the same id are dropped)")
    s.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    s.add_argument("--limit", type=int, help="read at most N rows of each SOURCE")
    p.add_argument("--report", metavar="FILE.json", help="write every drop (id, source, reason, detail) here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", metavar="{prepare,difficulty}", required=True)
    p = sub.add_parser("prepare", help="convert coding datasets to verl parquet / OpenRLHF JSONL",
                       description="Convert coding datasets into verl parquet and OpenRLHF JSONL whose ground truth "
                                   "microcoder_ext.reward reads, with filters, deduplication and decontamination.")
    add_prepare_arguments(p)
    p.set_defaults(_data_run=run_prepare)
    d = sub.add_parser("difficulty", help="five-dimension difficulty scores (McCabe, Halstead, ... + LLM judge)",
                       description="Score problem difficulty (microcoder_ext.data.difficulty_cli).")
    try:
        import importlib

        mod = importlib.import_module(DIFFICULTY_MODULE)
        mod.add_arguments(d)
        d.set_defaults(_data_run=mod.run)
    except Exception as e:  # noqa: BLE001 - a broken difficulty module must not take `data prepare` down
        msg = (f"`microcoder data difficulty` is unavailable: {DIFFICULTY_MODULE} cannot be imported "
               f"({type(e).__name__}: {e})")
        d.description = msg
        d.set_defaults(_data_run=None, _data_unavailable=msg)


def run(args) -> int:
    if getattr(args, "_data_run", None) is None:
        print(f"error: {getattr(args, '_data_unavailable', 'no data subcommand')}", file=sys.stderr)
        return 2
    return int(args._data_run(args) or 0)


# --- prepare ---------------------------------------------------------------------------------------------------
def _build_filters(args, log):
    from .filters import Decontaminator, ExactDedup, FilterError, MetaFilter, MinDifficulty, NearDedup

    date_from, date_before = args.date_from, args.date_before
    if args.release:
        start, end = RELEASE_WINDOWS[args.release]
        date_from, date_before = date_from or start, date_before or end
    filters = [MetaFilter(set(args.difficulty) if args.difficulty else None,
                          set(args.platform) if args.platform else None, date_from, date_before)]
    if args.min_difficulty is not None:
        filters.append(MinDifficulty(args.min_difficulty))
    eval_drops: list[Drop] = []
    if args.decontaminate:
        bad = set(args.decontam_by) - {"id", "title", "ngram"}
        if bad:
            raise FilterError(f"--decontam-by: unknown check {sorted(bad)}")
        evals = []
        for f in args.decontaminate:
            evals += read_problems(f, drops=eval_drops)
        if not evals:
            raise FilterError(f"--decontaminate: no evaluation problems could be read from {args.decontaminate}")
        log(f"decontaminating against {len(evals)} evaluation problems "
            f"({len(eval_drops)} eval rows unreadable)")
        filters.append(Decontaminator(evals, ngram=args.decontam_ngram, threshold=args.decontam_threshold,
                                      by=tuple(args.decontam_by)))
    if not args.no_dedup:
        filters.append(ExactDedup())
        if args.near_dup_threshold < 1:
            filters.append(NearDedup(args.near_dup_threshold))
    return filters


#: ground-truth options ``--test-options`` may set (see ``microcoder_ext/reward/ground_truth.py``)
TEST_OPTIONS = ("checker", "float_tol", "time_limit", "case_sensitive", "line_sensitive", "unordered",
                "memory_limit_mb")


def load_test_options(path: str) -> dict[str, dict]:
    """``--test-options``: id -> options (only :data:`TEST_OPTIONS` keys with a value)."""
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if not isinstance(row, dict) or row.get("id") in (None, ""):
                    raise ValueError(f"line {n}: an object with an `id` expected")
                opts = {k: row[k] for k in TEST_OPTIONS if row.get(k) is not None}
                if opts:
                    out[str(row["id"])] = opts
    except (OSError, ValueError) as e:
        raise SourceError(f"--test-options {path}: {e}") from None
    return out


def _apply_test_options(p, options: dict[str, dict]) -> None:
    opts = options.get(p.id) or options.get(p.id.rsplit("/", 1)[-1])
    if opts:
        p.tests = {**p.tests, **opts}


def format_summary(stats: dict, order: list[str]) -> str:
    """The table: per SOURCE rows read, kept, dropped; under each its drop reasons; then the totals."""
    name_w = max([len("source")] + [min(len(o), 60) for o in order] + [len("  " + r) for s in stats.values()
                                                                        for r in s["reasons"]]) + 2
    lines = [f"{'source':<{name_w}}{'shape':<17}{'rows':>8}{'kept':>8}{'dropped':>9}"]
    total = Counter()
    for o in order:
        s = stats[o]
        name = o if len(o) <= 60 else "..." + o[-57:]
        lines.append(f"{name:<{name_w}}{s['shape']:<17}{s['rows']:>8}{s['kept']:>8}{s['rows'] - s['kept']:>9}")
        for reason, n in sorted(s["reasons"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"{'  ' + reason:<{name_w}}{'':<17}{'':>8}{'':>8}{n:>9}")
        total["rows"] += s["rows"]
        total["kept"] += s["kept"]
    lines.append(f"{'total':<{name_w}}{'':<17}{total['rows']:>8}{total['kept']:>8}{total['rows'] - total['kept']:>9}")
    return "\n".join(lines)


def run_prepare(args) -> int:
    from .filters import FilterError, run_filters
    from .writers import shuffle_split, write_outputs

    t0 = time.monotonic()

    def log(msg):
        print(msg, file=sys.stderr)

    formats = tuple(_csv(args.format))
    if not formats or set(formats) - set(FORMATS):
        log(f"error: --format must be a comma-separated subset of {', '.join(FORMATS)}")
        return 2
    if args.val_size < 0 or (args.limit is not None and args.limit < 1):
        log("error: --val-size must be >= 0 and --limit >= 1")
        return 2
    if args.val_size and args.val_from:
        log("error: --val-size and --val-from are exclusive")
        return 2
    try:
        filters = _build_filters(args, log)
        val = None
        if args.val_from:
            val_drops: list[Drop] = []
            val = read_problems(args.val_from, drops=val_drops)
            log(f"validation set: {len(val)} problems from {args.val_from} ({len(val_drops)} rows unreadable)")
    except (FilterError, SourceError) as e:
        log(f"error: {e}")
        return 2
    val_ids = {p.id for p in val} if val else set()
    try:
        test_options = load_test_options(args.test_options) if args.test_options else {}
    except SourceError as e:
        log(f"error: {e}")
        return 2

    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with datasets
        tqdm = None
    stats: dict = {}
    order: list[str] = []
    drops: list[Drop] = []
    kept = []
    schema: dict[str, SchemaReport] = {}
    for spec in args.sources:
        if spec in stats:
            continue
        report = SchemaReport()
        st = stats[spec] = {"shape": args.source, "rows": 0, "kept": 0, "reasons": Counter()}
        order.append(spec)
        items = iter_source(spec, args.source, split=args.split, limit=args.limit, report=report)
        bar = tqdm(desc=Path(spec).name or spec, unit="row", file=sys.stderr, disable=True if args.no_progress
                   else None, dynamic_ncols=True) if tqdm else None

        def problems():
            for item in items:
                st["rows"] += 1
                if bar is not None:
                    bar.update(1)
                if isinstance(item, Drop):
                    st["reasons"][item.reason] += 1
                    drops.append(item)
                    continue
                st["shape"] = item.source if st["shape"] == "auto" else st["shape"]
                if test_options:
                    _apply_test_options(item, test_options)
                    try:
                        validate(item)
                    except RowError as e:
                        d = Drop("test-options", spec, item.id, e.reason, e.detail)
                        st["reasons"][d.reason] += 1
                        drops.append(d)
                        continue
                if item.id in val_ids:
                    d = Drop("filter", spec, item.id, "in validation set", f"id {item.id} is in --val-from")
                    st["reasons"][d.reason] += 1
                    drops.append(d)
                    continue
                yield item

        try:
            for p, rejected in run_filters(problems(), filters):
                if rejected is None:
                    kept.append(p)
                    st["kept"] += 1
                else:
                    st["reasons"][rejected.reason] += 1
                    d = Drop("filter", spec, p.id, rejected.reason, rejected.detail)
                    if rejected.matched:
                        d.detail += f" [matched {rejected.matched}]"
                    drops.append(d)
        except SourceError as e:
            log(f"error: {e}")
            return 2
        except FilterError as e:
            log(f"error: {e}")
            return 2
        finally:
            if bar is not None:
                bar.close()
        if report.rows:
            schema[spec] = report

    print(format_summary(stats, order))
    for spec, rep in schema.items():
        d = rep.to_dict()
        print(f"\nschema of {spec} (detected fields, rows per column):")
        for attr, cols in d["fields_used"].items():
            print(f"  {attr:<13} <- " + ", ".join(f"{c} ({n})" for c, n in cols.items()))
        print(f"  missing:      {', '.join(d['missing']) or 'none'}")
        print(f"  unknown columns (ignored): {', '.join(d['unknown_columns']) or 'none'}")
    if args.report:
        rep = {"sources": {o: {**stats[o], "reasons": dict(stats[o]["reasons"])} for o in order},
               "schema": {k: v.to_dict() for k, v in schema.items()},
               "kept": len(kept), "drops": [d.to_dict() for d in drops]}
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(rep, indent=1, ensure_ascii=False))
    if not kept:
        log("error: no problem kept; nothing written")
        return 1
    train, val_split = shuffle_split(kept, seed=args.seed, val_size=args.val_size, val=val)
    written = write_outputs(args.outdir, train, val_split, formats)
    by = defaultdict(Counter)
    for p in train:
        by["difficulty"][p.difficulty or "unknown"] += 1
        by["platform"][p.platform or "unknown"] += 1
    print(f"\ntrain {len(train)}, val {len(val_split)}; "
          + "; ".join(f"{k}: " + ", ".join(f"{v} {n}" for v, n in sorted(c.items())) for k, c in by.items()))
    for fmt, paths in written.items():
        print(f"{fmt}: {', '.join(paths)}")
    if args.report:
        print(f"report: {args.report}")
    log(f"done in {time.monotonic() - t0:.1f}s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="microcoder data")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
