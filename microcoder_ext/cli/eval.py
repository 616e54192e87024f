"""``microcoder eval``: pass@1 / pass@k of a model on coding problems, broken down as the paper's table.

  microcoder eval --problems lcb_v6.parquet --responses responses.jsonl [--k 1,4] [--json run.json] [--png run.png]
  microcoder eval --lcb FILE|HUB_ID --release v6 --model PATH --n 4 --temperature 0.6 --top-p 0.95 --max-tokens 4096
  microcoder eval --compare run_a.json run_b.json paper:4b-4k [--png cmp.png]      (no scoring: side by side)

Every response is scored with the training reward (:mod:`microcoder_ext.eval.scoring`, ``--workers/--timeout/
--memory-mb`` on top of the environment's engine settings); a response counts as correct when its verdict is
``correct`` (every test passed). Problems: :mod:`microcoder_ext.eval.problems`; the table, JSON and PNG:
:mod:`microcoder_ext.eval.report`. Nothing heavy is imported at module level.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from microcoder_ext.eval.problems import EvalInputError

PROG = "microcoder eval"
EXIT_OK, EXIT_SCORING, EXIT_INPUT = 0, 1, 2

EPILOG = """\
problems (one of):
  --problems FILE  prepared by `microcoder data prepare`: verl .parquet (prompt, reward_model.ground_truth,
                   extra_info.id/platform/difficulty/date) or OpenRLHF .jsonl[.gz] (prompt, label, meta_*),
                   or JSONL of Problem records (id, statement, tests, platform, difficulty, date, ...)
  --lcb FILE|HUB   a LiveCodeBench code_generation_lite file or hub id (microcoder_ext.data.lcb.read_lcb)
  --release v6 and/or --start-date/--end-date select problems by contest date, half-open
  [start, end) as microcoder_ext.data.lcb.window (explicit dates override the release's ends);
  LiveCodeBench v6 as in the paper: --release v6 = [2025-02-01, 2025-05-01), 175 problems

responses (one of):
  --responses FILE.jsonl  {"id": ID, "responses": [TEXT, ...]} or {"id": ID, "response": TEXT} per line
  --model PATH            sample --n responses per problem with vLLM (needs vLLM + CUDA; --save-responses
                          keeps them in the --responses format)

output: the table on stdout (per k: rows AtCoder / LeetCode / other platforms / All x columns Easy /
Medium / Hard / All, cell = pass@k in % (problems)); --json: per-problem n, c, verdict counts and pass@k,
the table, the verdict rates and the settings; --png: bar chart (one panel per row, one bar per run).
--compare RUN.json | paper:SETTING[:METHOD] adds runs side by side (settings: 1.7b-4k 1.7b-8k 4b-4k
4b-8k 8b-16k; METHOD base|grpo|dapo|microcoder|all, default microcoder). Without problems, --compare
alone prints/plots the given runs.

exit status: 0 scored; 1 scoring failed (sandbox unavailable, or a response got verdict sandbox_error:
the table is still printed and written, marked); 2 usage or unreadable input (problem/responses file,
responses for unknown problem ids, problems without responses, k larger than n, vLLM unavailable)
"""


def _err(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------- arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    src = p.add_argument_group("problems")
    src.add_argument("--problems", metavar="FILE", help="prepared problems (.parquet, .jsonl[.gz])")
    src.add_argument("--lcb", metavar="FILE|HUB_ID", help="LiveCodeBench file or hub id (read_lcb)")
    src.add_argument("--release", metavar="NAME", help="LiveCodeBench release window, e.g. v6")
    src.add_argument("--start-date", metavar="YYYY-MM-DD", help="first contest date (included)")
    src.add_argument("--end-date", metavar="YYYY-MM-DD", help="end of the window (excluded)")
    src.add_argument("--allow-missing", action="store_true",
                     help="leave out problems that have no response (default: exit 2)")
    gen = p.add_argument_group("responses")
    gen.add_argument("--responses", metavar="FILE.jsonl", help="pre-generated responses")
    gen.add_argument("--model", metavar="PATH", help="generate with vLLM from this model")
    gen.add_argument("--n", type=int, default=4, help="samples per problem with --model (default 4, the paper's)")
    gen.add_argument("--temperature", type=float, default=0.6,
                     help="sampling temperature (default 0.6; the paper does not state its eval setting)")
    gen.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling (default 0.95)")
    gen.add_argument("--max-tokens", type=int, default=4096, help="max response tokens (default 4096 = 4K)")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    gen.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM tensor parallel size (default 1)")
    gen.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM (default 0.9)")
    gen.add_argument("--max-model-len", type=int, default=None, help="vLLM context length (default: model's)")
    gen.add_argument("--trust-remote-code", action="store_true", help="vLLM: allow model code")
    gen.add_argument("--save-responses", metavar="FILE.jsonl", help="write generated responses here")
    sc = p.add_argument_group("scoring and output")
    sc.add_argument("--k", default="1", metavar="K1,K2", help="pass@k values (default 1; each <= n)")
    sc.add_argument("--workers", type=int, default=0, help="concurrent sandboxes (default: usable cores)")
    sc.add_argument("--timeout", type=float, default=None, help="CPU seconds per test (default: engine's, 5)")
    sc.add_argument("--memory-mb", type=int, default=None, help="memory limit per run, MiB (default: engine's)")
    sc.add_argument("--label", help="name of this run in tables and plots (default: model or responses file)")
    sc.add_argument("--json", metavar="OUT", help="write per-problem results + table + settings as JSON")
    sc.add_argument("--png", metavar="OUT", help="write a bar chart (PNG) of the first k")
    sc.add_argument("--compare", nargs="+", default=[], metavar="RUN.json|paper:SETTING",
                    help="runs to show side by side (run JSONs, or the paper's numbers)")
    sc.add_argument("--no-progress", action="store_true", help="no progress bar")


def _parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise EvalInputError(f"--k must be comma-separated integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise EvalInputError(f"--k values must be >= 1, got {text!r}")
    return ks


def _check_date(name: str, value: str | None) -> None:
    if value is None:
        return
    import datetime

    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        raise EvalInputError(f"--{name} must be YYYY-MM-DD, got {value!r}") from None


def _check_args(args) -> tuple[int, ...]:
    ks = _parse_ks(args.k)
    if args.problems and args.lcb:
        raise EvalInputError("give --problems or --lcb, not both")
    scoring = bool(args.problems or args.lcb)
    if not scoring and not args.compare:
        raise EvalInputError("nothing to do: give --problems/--lcb with --responses/--model, or --compare RUNS")
    if scoring and bool(args.responses) == bool(args.model):
        raise EvalInputError("give exactly one of --responses FILE or --model PATH")
    if not scoring and (args.responses or args.model):
        raise EvalInputError("--responses/--model need --problems or --lcb")
    _check_date("start-date", args.start_date)
    _check_date("end-date", args.end_date)
    for name in ("n", "max_tokens", "tensor_parallel_size"):
        if getattr(args, name) < 1:
            raise EvalInputError(f"--{name.replace('_', '-')} must be >= 1")
    if args.model and max(ks) > args.n:
        raise EvalInputError(f"--k {max(ks)} exceeds --n {args.n} samples per problem")
    if not 0 < args.top_p <= 1 or args.temperature < 0:
        raise EvalInputError("need --temperature >= 0 and 0 < --top-p <= 1")
    for opt in ("json", "png", "save_responses"):
        path = getattr(args, opt)
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise EvalInputError(f"--{opt.replace('_', '-')} {path}: directory does not exist")
    return ks


# ---------------------------------------------------------------------------------------------------- progress


def _progress(total: int, disabled: bool):
    try:
        from tqdm import tqdm

        return tqdm(total=total, disable=disabled, unit="resp", desc="scoring", file=sys.stderr)
    except ImportError:  # pragma: no cover
        class _Null:
            def update(self, n=1): pass
            def close(self): pass
        return _Null()


# ---------------------------------------------------------------------------------------------------- run


def run(args) -> int:
    try:
        ks = _check_args(args)
        return _run(args, ks)
    except EvalInputError as e:
        _err(str(e))
        return EXIT_INPUT


def _compare_runs(specs: list[str], ks) -> list:
    from microcoder_ext.eval.paper import UnknownReference
    from microcoder_ext.eval.report import RunFileError, load_run, paper_runs

    out = []
    for spec in specs:
        try:
            out += paper_runs(spec) if spec.startswith("paper:") else [load_run(spec, ks)]
        except (UnknownReference, RunFileError) as e:
            raise EvalInputError(f"--compare: {e}") from None
    return out


def _run(args, ks) -> int:
    from microcoder_ext.eval import report
    from microcoder_ext.eval.problems import load_problems, match_responses
    from microcoder_ext.eval.scoring import score

    compare = _compare_runs(args.compare, ks)  # checked before any scoring
    if not (args.problems or args.lcb):
        print(report.format_table(compare, ks))
        if args.json:
            report.write_json(args.json, report.compare_document(compare))
        if args.png:
            report.plot(compare, ks[0], report.title_for(None, ks[0]), args.png)
        return EXIT_OK

    problems, selection = load_problems(problems=args.problems, lcb=args.lcb, release=args.release,
                                        start_date=args.start_date, end_date=args.end_date)
    settings = {"problems": selection, "k": list(ks)}
    if args.responses:
        from microcoder_ext.eval.generate import ResponsesError, read_responses

        try:
            responses = read_responses(args.responses)
        except ResponsesError as e:
            raise EvalInputError(str(e)) from None
        problems, missing = match_responses(problems, responses, args.allow_missing, args.responses)
        if missing:
            _err(f"leaving out {len(missing)} problems without responses")
        settings["responses"] = args.responses
    else:
        from microcoder_ext.eval.generate import (GenerationSettings, GenerationUnavailable, generate_vllm,
                                                  write_responses)

        gs = GenerationSettings(args.model, args.n, args.temperature, args.top_p, args.max_tokens, args.seed,
                                args.tensor_parallel_size, args.gpu_memory_utilization, args.max_model_len,
                                trust_remote_code=args.trust_remote_code)
        try:
            responses = generate_vllm([(p.id, p.messages) for p in problems], gs)
        except GenerationUnavailable as e:
            raise EvalInputError(str(e)) from None
        if args.save_responses:
            write_responses(args.save_responses, responses)
        settings.update(model=args.model, temperature=args.temperature, top_p=args.top_p,
                        max_tokens=args.max_tokens, seed=args.seed, generation=gs.stats)
    ns = sorted({len(responses[p.id]) for p in problems})
    if max(ks) > ns[0]:
        raise EvalInputError(f"--k {max(ks)} exceeds the number of responses of some problems (min {ns[0]})")
    settings["n_samples"] = ns[0] if len(ns) == 1 else f"{ns[0]}..{ns[-1]}"

    t0 = time.monotonic()
    results, fatal, engine_cfg = score(problems, responses, workers=args.workers, timeout=args.timeout,
                                       memory_mb=args.memory_mb,
                                       progress=lambda total: _progress(total, args.no_progress))
    if fatal:
        _err(f"scoring failed: sandbox unavailable: {fatal}")
        return EXIT_SCORING
    settings.update(scoring={"reward": "microcoder_ext.reward (training reward engine)", **engine_cfg,
                             "seconds": round(time.monotonic() - t0, 2)})
    lbl = args.label or args.model or os.path.basename(args.responses)
    this = report.run_from_results(lbl, results, ks, settings)
    runs = [this] + compare
    print(report.format_table(runs, ks))
    print(report.format_verdicts(this))
    sandbox_errors = this.verdicts.get("sandbox_error", {}).get("count", 0)
    if sandbox_errors:
        _err(f"scoring failed for {sandbox_errors} responses (verdict sandbox_error: malformed tests or sandbox "
             "failure); they count as wrong in the table")
    if args.json:
        report.write_json(args.json, report.run_document(this, compare))
    if args.png:
        report.plot(runs, ks[0], report.title_for(this, ks[0]), args.png)
    return EXIT_SCORING if sandbox_errors else EXIT_OK
