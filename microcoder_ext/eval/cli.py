"""``microcoder eval``: pass@1 / pass@k of a model on coding problems, broken down as the paper's table.

  microcoder eval --problems lcb_v6.parquet --responses responses.jsonl [--k 1,4] [--json run.json] [--png run.png]
  microcoder eval --lcb FILE|HUB_ID --release v6 --model PATH --n 4 --temperature 0.6 --top-p 0.95 --max-tokens 4096
  microcoder eval --compare run_a.json run_b.json paper:4b-4k [--png cmp.png]      (no scoring: side by side)

Every response is scored with the training reward (:func:`microcoder_ext.reward.evaluate_response` on a sandboxed
:class:`~microcoder_ext.reward.Engine`, configured from the MICROCODER_REWARD_* / MICROCODER_SANDBOX_* environment
as in training, ``--workers/--timeout/--memory-mb`` on top); a response counts as correct when its verdict is
``correct`` (every test passed). Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from microcoder_ext.jsonl import iter_objects

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


class EvalInputError(Exception):
    """Bad usage or unreadable input: one message on stderr, exit status 2."""


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


# ---------------------------------------------------------------------------------------------------- problems


@dataclass
class EvalProblem:
    id: str
    ground_truth: object
    messages: list = field(default_factory=list)
    platform: str | None = None
    difficulty: str | None = None
    date: str | None = None
    title: str = ""
    extra_info: dict = field(default_factory=dict)

    @classmethod
    def from_problem(cls, p) -> "EvalProblem":
        return cls(p.id, json.dumps(p.tests), [{"role": "user", "content": p.prompt_text()}], p.platform,
                   p.difficulty, p.date, p.title, p.metadata())


def _plain(v):
    return v.tolist() if hasattr(v, "tolist") else v


def _from_verl_row(row: dict, i: int, where: str) -> EvalProblem:
    info = _plain(row.get("extra_info")) or {}
    rm = row.get("reward_model") or {}
    if "ground_truth" not in rm:
        raise EvalInputError(f"{where}: row {i} has no reward_model.ground_truth")
    return EvalProblem(str(info.get("id", i)), rm["ground_truth"], _plain(row.get("prompt")) or [],
                       info.get("platform"), info.get("difficulty"), info.get("date"), info.get("title") or "", info)


def _from_jsonl_record(rec: dict, where: str) -> EvalProblem:
    if "label" in rec:  # OpenRLHF row
        meta = {k[5:]: v for k, v in rec.items() if k.startswith("meta_")}
        prompt = rec.get("prompt")
        msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else (prompt or [])
        if "id" not in meta:
            raise EvalInputError(f"{where}: OpenRLHF row without meta_id")
        return EvalProblem(str(meta["id"]), rec["label"], msgs, meta.get("platform"), meta.get("difficulty"),
                           meta.get("date"), meta.get("title") or "", meta)
    if "reward_model" in rec:
        return _from_verl_row(rec, 0, where)
    if "tests" in rec and "statement" in rec and "id" in rec:
        from microcoder_ext.data.problem import Problem

        try:
            return EvalProblem.from_problem(Problem(**rec))
        except TypeError as e:
            raise EvalInputError(f"{where}: not a Problem record ({e})") from None
    raise EvalInputError(f"{where}: unknown record (expected an OpenRLHF row with 'label', a verl row with "
                         "'reward_model', or a Problem record with 'id', 'statement', 'tests')")


def load_problems_file(path: str) -> list[EvalProblem]:
    if not os.path.isfile(path):
        raise EvalInputError(f"problems file {path} does not exist" if not os.path.exists(path)
                             else f"problems file {path} is not a file")
    out: list[EvalProblem] = []
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except ImportError:
            raise EvalInputError("reading parquet needs pyarrow") from None
        except Exception as e:  # ArrowInvalid, OSError
            raise EvalInputError(f"{path}: not a readable parquet file ({str(e).splitlines()[0]})") from None
        out = [_from_verl_row(r, i, path) for i, r in enumerate(rows)]
    else:
        out = [_from_jsonl_record(rec, where) for where, rec in iter_objects(path, EvalInputError)]
    if not out:
        raise EvalInputError(f"{path}: no problems")
    dup = [k for k, n in collections.Counter(p.id for p in out).items() if n > 1]
    if dup:
        raise EvalInputError(f"{path}: duplicate problem ids: {', '.join(dup[:5])}")
    return out


def load_problems(args) -> tuple[list[EvalProblem], dict]:
    """The problems to evaluate and the selection settings (source, date window)."""
    start, end = args.start_date, args.end_date
    sel = {"start_date": start, "end_date": end, "release": args.release}
    if args.lcb:
        try:
            from microcoder_ext.data.lcb import read_lcb
        except ImportError as e:
            raise EvalInputError(f"--lcb needs microcoder_ext.data.lcb ({e})") from None
        try:
            probs = [EvalProblem.from_problem(p) for p in read_lcb(args.lcb, start_date=start, end_date=end,
                                                                    release=args.release)]
        except (OSError, ValueError) as e:
            raise EvalInputError(f"--lcb {args.lcb}: {e}") from None
        if not probs:
            raise EvalInputError(f"--lcb {args.lcb}: no problems in the selected window")
        from microcoder_ext.data.lcb import window

        start, end = window(args.release, start, end)
        return probs, {"source": args.lcb, **sel, "start_date": start, "end_date": end}
    probs = load_problems_file(args.problems)
    if args.release or start or end:
        try:
            from microcoder_ext.data.lcb import in_window, window
        except ImportError as e:
            raise EvalInputError(f"a date window needs microcoder_ext.data.lcb ({e})") from None
        try:
            start, end = window(args.release, start, end)
        except ValueError as e:
            raise EvalInputError(f"--release: {e}") from None
        sel.update(start_date=start, end_date=end)
        undated = [p.id for p in probs if not p.date]
        if undated:
            raise EvalInputError(f"{args.problems}: a date window was given but {len(undated)} problems have no "
                                 f"date (e.g. {', '.join(undated[:3])})")
        probs = [p for p in probs if in_window(str(p.date)[:10], start, end)]
        if not probs:
            raise EvalInputError(f"{args.problems}: no problem dated in [{start or '...'}, {end or '...'})")
    return probs, {"source": args.problems, **sel}


def match_responses(problems: list[EvalProblem], responses: dict[str, list[str]], allow_missing: bool,
                    where: str) -> list[EvalProblem]:
    """Problems that have responses; unknown ids (and, unless allowed, problems without responses) raise."""
    known = {p.id for p in problems}
    unknown = [pid for pid in responses if pid not in known]
    if unknown:
        raise EvalInputError(f"{where}: responses for {len(unknown)} unknown problem id"
                             f"{'s' if len(unknown) != 1 else ''}: {', '.join(unknown[:5])}"
                             f"{', ...' if len(unknown) > 5 else ''} (not in the {len(known)} problems)")
    missing = [p.id for p in problems if not responses.get(p.id)]
    if missing and not allow_missing:
        raise EvalInputError(f"{where}: no response for {len(missing)} of {len(problems)} problems: "
                             f"{', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''} "
                             "(--allow-missing leaves them out)")
    if missing:
        _err(f"leaving out {len(missing)} problems without responses")
    return [p for p in problems if responses.get(p.id)]


# ---------------------------------------------------------------------------------------------------- scoring


def _progress(total: int, disabled: bool):
    try:
        from tqdm import tqdm

        return tqdm(total=total, disable=disabled, unit="resp", desc="scoring", file=sys.stderr)
    except ImportError:  # pragma: no cover
        class _Null:
            def update(self, n=1): pass
            def close(self): pass
        return _Null()


def score(problems: list[EvalProblem], responses: dict[str, list[str]], args) -> tuple[list, str | None, dict]:
    """Score every response: ``([ProblemResult], fatal engine error or None, engine settings)``."""
    from dataclasses import asdict

    from microcoder_ext.reward import Engine, EngineConfig, evaluate_response

    from .breakdown import ProblemResult

    overrides = {"workers": args.workers or EngineConfig.from_env().workers}
    if args.timeout is not None:
        overrides["timeout"] = args.timeout
    if args.memory_mb is not None:
        overrides["memory_mb"] = args.memory_mb
    engine = Engine(EngineConfig.from_env(), **overrides)
    cfg = {k: v for k, v in asdict(engine.config).items() if k in ("timeout", "memory_mb", "stop_on_first_failure")}
    jobs = [(p, r) for p in problems for r in responses[p.id]]
    bar = None
    try:
        layers = engine.warmup()
        if engine.fatal:
            return [], engine.fatal, cfg
        cfg["sandbox_layers"] = {k: layers.get(k) for k in ("uid_drop", "seccomp", "landlock")}
        bar = _progress(len(jobs), args.no_progress)

        def one(job):
            p, resp = job
            v = evaluate_response(resp, p.ground_truth, p.extra_info, engine=engine).verdict
            bar.update(1)
            return v

        with ThreadPoolExecutor(max_workers=max(1, engine.size)) as pool:
            verdicts = list(pool.map(one, jobs))
    finally:
        if bar is not None:
            bar.close()
        engine.close()
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for (p, _), v in zip(jobs, verdicts):
        per[p.id][str(v)] += 1
    results = [ProblemResult(p.id, p.platform, p.difficulty, sum(per[p.id].values()), per[p.id].get("correct", 0),
                             dict(per[p.id]), p.date, p.title) for p in problems]
    return results, engine.fatal, cfg


# ---------------------------------------------------------------------------------------------------- run


def run(args) -> int:
    try:
        ks = _check_args(args)
        return _run(args, ks)
    except EvalInputError as e:
        _err(str(e))
        return EXIT_INPUT


def _compare_runs(specs: list[str], ks) -> list:
    from .paper import UnknownReference
    from .report import RunFileError, load_run, paper_runs

    out = []
    for spec in specs:
        try:
            out += paper_runs(spec) if spec.startswith("paper:") else [load_run(spec, ks)]
        except (UnknownReference, RunFileError) as e:
            raise EvalInputError(f"--compare: {e}") from None
    return out


def _run(args, ks) -> int:
    from . import report

    compare = _compare_runs(args.compare, ks)  # checked before any scoring
    if not (args.problems or args.lcb):
        print(report.format_table(compare, ks))
        if args.json:
            report.write_json(args.json, report.compare_document(compare))
        if args.png:
            report.plot(compare, ks[0], report.title_for(None, ks[0]), args.png)
        return EXIT_OK

    problems, selection = load_problems(args)
    settings = {"problems": selection, "k": list(ks)}
    if args.responses:
        from .generate import ResponsesError, read_responses

        try:
            responses = read_responses(args.responses)
        except ResponsesError as e:
            raise EvalInputError(str(e)) from None
        problems = match_responses(problems, responses, args.allow_missing, args.responses)
        settings["responses"] = args.responses
    else:
        from .generate import GenerationSettings, GenerationUnavailable, generate_vllm, write_responses

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
    results, fatal, engine_cfg = score(problems, responses, args)
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
