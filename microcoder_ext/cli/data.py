"""``microcoder data``: ``prepare`` (coding datasets -> verl parquet / OpenRLHF JSONL) and ``difficulty`` (the
five-dimension difficulty scores of prepared data).

  microcoder data prepare SOURCE... -o OUTDIR [--source auto|leetcodedataset|livecodebench|code_contests|
        deepcoder|microcoder|problems] [--format verl,openrlhf[,problems]] [--difficulty easy,medium,hard]
        [--platform P,...] [--date-from DAY] [--date-before DAY] [--release v6] [--min-difficulty X]
        [--no-dedup] [--near-dup-threshold 0.8] [--decontaminate EVALFILE...] [--val-size N | --val-from FILE]
        [--test-options FILE.jsonl] [--limit N] [--seed S] [--report FILE.json]
  microcoder data difficulty IN... -o OUT [--judge-url URL --judge-model NAME] [--weights DIM=W,...]

``prepare``: the pipeline is :mod:`microcoder_ext.data.prepare` (sources, filters), the outputs
:mod:`microcoder_ext.data.writers`. Exit status: 0 written, 1 nothing kept, 2 usage error or unreadable input.

``difficulty`` adds the scores of :mod:`microcoder_ext.data.difficulty` to prepared rows
(:mod:`microcoder_ext.data.difficulty_rows`: verl, OpenRLHF or Problem rows; OUT is written in the kind of the
input, its container by its suffix), so ``data prepare --min-difficulty`` (or any reader) can filter on
``difficulty_scores.score``. Exit status: 0 every row scored (and judged, with a judge); 1 OUT written but some rows
have a judge failure or could not be scored (listed in the summary); 2 bad arguments or unreadable / unrecognised
input (nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from microcoder_ext.data.lcb import RELEASE_WINDOWS
from microcoder_ext.data.sources import SHAPES
from microcoder_ext.data.writers import FORMATS


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
    g.add_argument("--min-tests", type=int, default=5, metavar="N",
                   help="flag problems with fewer than N tests (default 5; 0: no count threshold). Problems whose "
                        "tests are only the statement's examples are always flagged: a program that hard-codes "
                        "the examples passes them")
    g.add_argument("--drop-weak-tests", action="store_true",
                   help="drop the flagged problems instead of keeping them (flagged rows carry extra_info "
                        "weak_tests)")
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
                       description="Score problem difficulty (microcoder_ext.data.difficulty).")
    add_difficulty_arguments(d)
    d.set_defaults(_data_run=run_difficulty)


def run(args) -> int:
    return int(args._data_run(args) or 0)


# --- prepare ---------------------------------------------------------------------------------------------------
def format_summary(stats: dict) -> str:
    """The table: per SOURCE (:class:`~microcoder_ext.data.prepare.SourceStats`, in order) rows read, kept,
    dropped; under each its drop reasons and its kept problems with weak tests; then the totals."""
    order = list(stats)
    name_w = max([len("source")] + [min(len(o), 60) for o in order]
                 + [len("  " + r) for s in stats.values() for r in s.reasons]
                 + [len("  kept, weak tests: " + r) for s in stats.values() for r in getattr(s, "weak", {})]) + 2
    lines = [f"{'source':<{name_w}}{'shape':<17}{'rows':>8}{'kept':>8}{'dropped':>9}"]
    total = Counter()
    for o in order:
        s = stats[o]
        name = o if len(o) <= 60 else "..." + o[-57:]
        lines.append(f"{name:<{name_w}}{s.shape:<17}{s.rows:>8}{s.kept:>8}{s.rows - s.kept:>9}")
        for reason, n in sorted(s.reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"{'  ' + reason:<{name_w}}{'':<17}{'':>8}{'':>8}{n:>9}")
        for reason, n in sorted(s.weak.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"{'  kept, weak tests: ' + reason:<{name_w}}{'':<17}{'':>8}{n:>8}")
        total["rows"] += s.rows
        total["kept"] += s.kept
    lines.append(f"{'total':<{name_w}}{'':<17}{total['rows']:>8}{total['kept']:>8}{total['rows'] - total['kept']:>9}")
    return "\n".join(lines)


def run_prepare(args) -> int:
    from microcoder_ext.data.filters import FilterError
    from microcoder_ext.data.prepare import build_filters, load_test_options, prepare
    from microcoder_ext.data.rows import Drop, SourceError
    from microcoder_ext.data.sources import read_problems
    from microcoder_ext.data.writers import shuffle_split, write_outputs

    t0 = time.monotonic()

    def log(msg):
        print(msg, file=sys.stderr)

    formats = tuple(_csv(args.format))
    if not formats or set(formats) - set(FORMATS):
        log(f"error: --format must be a comma-separated subset of {', '.join(FORMATS)}")
        return 2
    if args.val_size < 0 or (args.limit is not None and args.limit < 1) or args.min_tests < 0:
        log("error: --val-size and --min-tests must be >= 0 and --limit >= 1")
        return 2
    if args.val_size and args.val_from:
        log("error: --val-size and --val-from are exclusive")
        return 2
    try:
        filters = build_filters(
            difficulty=args.difficulty, platform=args.platform, date_from=args.date_from,
            date_before=args.date_before, release=args.release, min_difficulty=args.min_difficulty,
            decontaminate=args.decontaminate, decontam_by=args.decontam_by, decontam_ngram=args.decontam_ngram,
            decontam_threshold=args.decontam_threshold, dedup=not args.no_dedup,
            near_dup_threshold=args.near_dup_threshold, log=log)
        val = None
        if args.val_from:
            val_drops: list[Drop] = []
            val = read_problems(args.val_from, drops=val_drops)
            log(f"validation set: {len(val)} problems from {args.val_from} ({len(val_drops)} rows unreadable)")
    except (FilterError, SourceError) as e:
        log(f"error: {e}")
        return 2
    try:
        test_options = load_test_options(args.test_options) if args.test_options else {}
    except SourceError as e:
        log(f"error: {e}")
        return 2

    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with datasets
        tqdm = None

    def progress(spec):
        return tqdm(desc=Path(spec).name or spec, unit="row", file=sys.stderr,
                    disable=True if args.no_progress else None, dynamic_ncols=True) if tqdm else None

    try:
        result = prepare(args.sources, args.source, filters=filters, split=args.split, limit=args.limit,
                         test_options=test_options, val_ids={p.id for p in val} if val else set(),
                         progress=progress, min_tests=args.min_tests, drop_weak_tests=args.drop_weak_tests)
    except (SourceError, FilterError) as e:
        log(f"error: {e}")
        return 2

    print(format_summary(result.sources))
    for spec, rep in result.schema.items():
        d = rep.to_dict()
        print(f"\nschema of {spec} (detected fields, rows per column):")
        for attr, cols in d["fields_used"].items():
            print(f"  {attr:<13} <- " + ", ".join(f"{c} ({n})" for c, n in cols.items()))
        print(f"  missing:      {', '.join(d['missing']) or 'none'}")
        print(f"  unknown columns (ignored): {', '.join(d['unknown_columns']) or 'none'}")
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(result.report(), indent=1, ensure_ascii=False))
    if not result.kept:
        log("error: no problem kept; nothing written")
        return 1
    train, val_split = shuffle_split(result.kept, seed=args.seed, val_size=args.val_size, val=val)
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


# --- difficulty ------------------------------------------------------------------------------------------------
def add_difficulty_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="IN",
                   help="verl parquet / JSONL rows of `data prepare`, OpenRLHF JSONL, or a JSONL of Problem dicts")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output file: .parquet, .jsonl or .jsonl.gz")
    p.add_argument("--judge-url", default=None,
                   help="OpenAI-compatible API root for the cognitive/domain judge, e.g. http://127.0.0.1:8000/v1 "
                        "(API key from $MICROCODER_JUDGE_API_KEY if set)")
    p.add_argument("--judge-model", default=None, help="model name sent to the judge endpoint")
    p.add_argument("--judge-concurrency", type=int, default=8, help="parallel judge requests (default 8)")
    p.add_argument("--judge-timeout", type=float, default=60.0, help="seconds per judge request (default 60)")
    p.add_argument("--judge-retries", type=int, default=2, help="retries after a failed/malformed answer (default 2)")
    p.add_argument("--weights", default=None, metavar="DIM=W,...",
                   help="dimension weights, e.g. structural=1,halstead=0.5 (default: all 1; the paper's weights "
                        "are unpublished)")
    p.add_argument("--limit", type=int, default=None, help="score only the first N rows (they alone are written)")
    p.add_argument("--summary-json", default=None, metavar="PATH", help="also write the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _parse_weights(text: str | None) -> dict | None:
    from microcoder_ext.data import difficulty_rows
    from microcoder_ext.data.difficulty import DIMENSIONS

    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, _, val = part.partition("=")
        name = name.strip()
        if name not in DIMENSIONS:
            raise difficulty_rows.InputError(f"--weights: unknown dimension {name!r} (one of {', '.join(DIMENSIONS)})")
        try:
            out[name] = float(val)
        except ValueError:
            raise difficulty_rows.InputError(f"--weights: {part!r} is not DIM=NUMBER") from None
        if out[name] < 0:
            raise difficulty_rows.InputError(f"--weights: {name} must be >= 0")
    return out


def print_summary(summary: dict, inputs: list[str], output: str, judge: str | None, out=None) -> None:
    out = sys.stdout if out is None else out  # the stdout of the call (tests replace it)
    pr = lambda *a: print(*a, file=out)  # noqa: E731
    pr(f"difficulty: {summary['rows']} rows from {', '.join(inputs)} -> {output} (judge: {judge or 'none'})")
    pr(f"  with reference solutions: {summary['with_solutions']}, with a parsed size bound: "
       f"{summary['with_constraints']}, unscored: {summary['unscored']}, judge failures: {summary['judge_failed']}")
    if summary["no_score"]:
        pr(f"  {summary['no_score']} rows have no dimension to score (no reference solution, no stated bound, no "
           f"judge): their score is null")
    if summary["with_solutions"] < summary["scored"]:
        pr("  note: rows without reference solutions get no McCabe/Halstead score; `data prepare --format problems` "
           "keeps the solutions (Problem JSONL), verl/OpenRLHF rows carry them only in extra_info/meta_solutions")
    for err, n in summary["judge_errors"].items():
        pr(f"    judge error x{n}: {err}")
    pr(f"  {'dimension':<12} {'rows':>6} {'mean':>7}")
    for d, v in summary["dimensions"].items():
        mean = f"{v['mean']:.3f}" if v["mean"] is not None else "-"
        pr(f"  {d:<12} {v['rows']:>6} {mean:>7}")
    pr("  score histogram:")
    top = max(summary["histogram"].values()) or 1
    for b, n in summary["histogram"].items():
        pr(f"    {b}  {n:>6}  {'#' * round(40 * n / top)}")


def run_difficulty(args: argparse.Namespace) -> int:
    from microcoder_ext.data import difficulty_rows as R

    try:
        if not (args.output.endswith(".parquet") or args.output.endswith(".jsonl")
                or args.output.endswith(".jsonl.gz")):
            raise R.InputError(f"-o {args.output}: use a .parquet, .jsonl or .jsonl.gz file name")
        if bool(args.judge_url) != bool(args.judge_model):
            raise R.InputError("--judge-url and --judge-model go together")
        if args.judge_concurrency < 1:
            raise R.InputError("--judge-concurrency must be >= 1")
        weights = _parse_weights(args.weights)
        rows, kind, problems = R.load_inputs(args.inputs, args.limit)
    except R.InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    judge = None
    if args.judge_url:
        from microcoder_ext.data.llm_judge import LLMJudge

        judge = LLMJudge(args.judge_url, args.judge_model, timeout=args.judge_timeout, retries=args.judge_retries)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(problems), desc="difficulty", unit="row", file=sys.stderr)

    def warn(p, e: Exception) -> None:
        print(f"warning: {p.id}: not scored: {type(e).__name__}: {e}", file=sys.stderr)

    try:
        scores = R.score_rows(problems, judge, weights, args.judge_concurrency,
                              on_done=bar.update if bar else None, on_error=warn)
    finally:
        if bar:
            bar.close()
    out_rows = [R.store(r, kind, s) if s else r for r, s in zip(rows, scores)]
    R.write_rows(args.output, out_rows)
    summary = R.summarise(scores)
    summary.update({"inputs": list(args.inputs), "output": args.output, "kind": kind,
                    "judge": judge.model if judge else None})
    print_summary(summary, list(args.inputs), args.output, summary["judge"])
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary, f, indent=2)
    return 1 if summary["unscored"] or summary["judge_failed"] else 0
