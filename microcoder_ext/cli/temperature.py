"""``microcoder temperature probe``: measure output diversity at candidate temperatures, recommend a start.

The paper picks its training temperature from measured output diversity (docs/paper.md#choosing-the-temperature): sample every probe
prompt ``--samples`` times at each candidate temperature, measure the diversity of the responses (the metrics of
:mod:`microcoder_ext.core.diversity`, one group per prompt) and start at the lowest candidate whose diversity
reaches ``--target``. The measuring and the decision are :func:`microcoder_ext.core.temperature.probe`, the prompt
files :mod:`microcoder_ext.sampling.prompts`, the samplers :mod:`microcoder_ext.sampling.samplers`; this module
parses the options, shows progress and prints the result.

Samplers (``--backend``): ``vllm`` (offline vLLM; ``auto`` picks it when the real ``vllm`` package is importable
and CUDA is available, unless ``--device cpu``) or ``hf`` (``transformers`` ``generate``, works on CPU with a small
model), both with the temperature alone (``top_p=1``). torch, transformers, pyarrow and vllm are imported when a
probe runs, so ``microcoder --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from microcoder_ext.sampling.prompts import ProbeInputError, encode_prompts, first_line, load_prompts

PROG = "microcoder temperature probe"
EXIT_OK, EXIT_INPUT = 0, 2
BACKENDS = ("auto", "vllm", "hf")

EPILOG = """\
prompts (--prompts FILE):
  JSONL (.jsonl, .jsonl.gz): one object per line with a "prompt" key (see --prompt-key) that is
    either a string or a chat message list [{"role": "user", "content": "..."}, ...]
  parquet (.parquet): verl's RL dataset format, a "prompt" column of chat message lists
  A string prompt becomes one user message when the chat template is applied. The model's chat
  template (tokenizer.chat_template) is applied with add_generation_prompt=True when it has one
  (--no-chat-template: raw text; message contents are then joined with newlines).

backends:
  vllm  vllm.LLM(model).generate with SamplingParams(n=SAMPLES, temperature=T, top_p=1,
        max_tokens=MAX_NEW_TOKENS, seed=SEED+i per prompt); needs a GPU build of vLLM
  hf    transformers generate(do_sample=True, temperature=T, top_p=1, top_k=0,
        num_return_sequences=SAMPLES), --batch-size prompts per call; runs on CPU
  auto  vllm if the vllm package is installed and CUDA is usable (not with --device cpu), else hf

output: a table (temperature, the three diversity metrics, mean response length in tokens, share of
responses cut at --max-new-tokens), the metric that decides marked with *, and the recommendation:
the lowest candidate whose diversity reaches --target (the highest candidate if none does; none
without --target). --json writes the same (ProbeResult.to_dict() + mean lengths + settings).

exit status: 0 probed; 2 bad input (prompt file missing/unreadable/empty/malformed, model not found
or not loadable, bad option values, backend unavailable) -- one line on stderr, nothing probed
"""


# ----------------------------------------------------------------------------------------------- arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``microcoder temperature`` has one action, ``probe``."""
    sub = parser.add_subparsers(dest="temperature_command", metavar="{probe}", required=True)
    p = sub.add_parser(
        "probe",
        help="sample a model at candidate temperatures, measure diversity, recommend a starting temperature",
        description=(
            "Sample every probe prompt SAMPLES times at each candidate temperature with a vLLM or Hugging Face "
            "model, measure the diversity of the responses (one group per prompt) and recommend the lowest "
            "candidate whose diversity reaches --target (the start of microcoder.temperature mode=auto, "
            "start=probe)."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from microcoder_ext.core.config import DEFAULT_CANDIDATES, TemperatureConfig

    d = TemperatureConfig()
    p.add_argument("--model", required=True, metavar="PATH_OR_NAME",
                   help="local model directory or hub name (loaded by vLLM / transformers; nothing is downloaded "
                        "when offline)")
    p.add_argument("--prompts", required=True, metavar="FILE", help="probe prompts: .jsonl[.gz] or verl .parquet")
    p.add_argument("--prompt-key", default="prompt", help="prompt field/column (default: prompt)")
    p.add_argument("--limit-prompts", type=int, default=d.probe_prompts, metavar="N",
                   help=f"use the first N prompts (default {d.probe_prompts}, "
                        "microcoder.temperature.probe_prompts; 0 = all)")
    p.add_argument("--candidates", default=",".join(f"{c:g}" for c in DEFAULT_CANDIDATES), metavar="T1,T2,...",
                   help="candidate temperatures, comma-separated (default: %(default)s)")
    p.add_argument("--samples", type=int, default=d.probe_samples,
                   help=f"responses per prompt and temperature (default {d.probe_samples})")
    p.add_argument("--max-new-tokens", type=int, default=512, help="response length limit in tokens (default 512)")
    p.add_argument("--target", type=float, default=d.target,
                   help="target diversity in [0, 1] (microcoder.temperature.target); without it no recommendation")
    p.add_argument("--max-temperature", type=float, default=None,
                   help="skip candidates above this (default: none skipped)")
    p.add_argument("--n", type=int, default=d.n, help=f"n-gram size of the metrics (default {d.n})")
    p.add_argument("--metric", choices=("distinct", "group_pooled", "pairwise"), default=d.metric,
                   help=f"metric compared with --target (default {d.metric})")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="sampler (default auto: vllm if usable, else hf)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="hf backend device (default: cuda if available, else cpu); --device cpu also keeps "
                        "backend auto off vLLM")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto",
                   help="model dtype (default auto: float32 on CPU, bfloat16 on CUDA for hf; vLLM's auto)")
    p.add_argument("--batch-size", type=int, default=8, help="hf backend: prompts per generate call (default 8)")
    p.add_argument("--cpu-threads", type=int, default=0,
                   help="hf backend on CPU: torch threads (default 0: torch's default; 1 is fastest for tiny models "
                        "on a busy machine)")
    p.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=None,
                   help="apply the tokenizer's chat template (default: when it has one)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model directory")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm backend (default 1)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vllm backend (default 0.9)")
    p.add_argument("--json", metavar="OUT", help="also write the result and the settings as JSON to OUT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _parse_candidates(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ProbeInputError(f"--candidates must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ProbeInputError("--candidates lists no temperature")
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise ProbeInputError(f"--candidates must be positive temperatures, got {text!r}")
    return sorted(set(values))


def _check_args(args: argparse.Namespace) -> list[float]:
    candidates = _parse_candidates(args.candidates)
    for name in ("samples", "max_new_tokens", "n", "batch_size", "tensor_parallel_size"):
        if getattr(args, name) < 1:
            raise ProbeInputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.cpu_threads < 0:
        raise ProbeInputError(f"--cpu-threads must be >= 0, got {args.cpu_threads}")
    if args.limit_prompts < 0:
        raise ProbeInputError(f"--limit-prompts must be >= 0, got {args.limit_prompts}")
    if args.target is not None and not 0.0 <= args.target <= 1.0:
        raise ProbeInputError(f"--target must be a diversity in [0, 1], got {args.target}")
    if args.max_temperature is not None:
        candidates = [c for c in candidates if c <= args.max_temperature + 1e-9]
        if not candidates:
            raise ProbeInputError(f"no candidate temperature is <= --max-temperature {args.max_temperature}")
    if args.json:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            raise ProbeInputError(f"--json {args.json}: directory {parent} does not exist")
    return candidates


# ----------------------------------------------------------------------------------------------- output


def format_table(result: Any, stats: Any) -> str:
    """Temperature, the three metrics (the deciding one marked ``*``), mean length, truncated share."""
    from microcoder_ext.core.diversity import METRICS, metric_key

    keys = [metric_key(m, result.n) for m in METRICS]
    names = [k.rsplit("/", 1)[-1] + ("*" if m == result.metric else "") for k, m in zip(keys, METRICS)]
    head = f"{'temperature':>11}  " + "  ".join(f"{h:>12}" for h in names) + f"  {'mean_len':>8}  {'truncated':>9}"
    lines = [head]
    for r in result.rows:
        vals = "  ".join(f"{r.metrics.get(k, math.nan):>12.4f}" for k in keys)
        ml, tr = stats.mean_length.get(r.temperature, math.nan), stats.truncated.get(r.temperature, math.nan)
        mark = "  <- recommended" if result.recommended is not None and math.isclose(
            r.temperature, result.recommended) else ""
        lines.append(f"{r.temperature:>11.2f}  {vals}  {ml:>8.1f}  {tr:>9.0%}{mark}")
    return "\n".join(lines)


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


# ----------------------------------------------------------------------------------------------- run


def run(args: argparse.Namespace) -> int:
    """Entry point of ``microcoder temperature``; returns the exit status."""
    try:
        return _run_probe(args)
    except ProbeInputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_INPUT


def _run_probe(args: argparse.Namespace) -> int:
    from microcoder_ext.core.temperature import probe
    from microcoder_ext.sampling.samplers import HFSampler, VLLMSampler, check_model_path, choose_backend

    candidates = _check_args(args)
    prompts = load_prompts(args.prompts, args.prompt_key, args.limit_prompts)
    check_model_path(args.model)
    backend, why = choose_backend(args.backend, args.device)

    from tqdm.auto import tqdm

    bar = None

    def progress(k: int) -> None:
        if bar is not None:
            bar.update(k)

    t0 = time.perf_counter()
    common = dict(max_new_tokens=args.max_new_tokens, progress=progress)
    threads = None
    if backend == "vllm":
        sampler: HFSampler | VLLMSampler = VLLMSampler.load(
            os.path.expanduser(args.model), dtype=args.dtype, trust_remote_code=args.trust_remote_code,
            tensor_parallel_size=args.tensor_parallel_size, gpu_memory_utilization=args.gpu_memory_utilization,
            seed=args.seed, **common)
        tokenizer = sampler.llm.get_tokenizer()
    else:
        if args.no_progress:
            HFSampler.quiet()
        sampler = HFSampler.load(os.path.expanduser(args.model), device=args.device, dtype=args.dtype,
                                 trust_remote_code=args.trust_remote_code, batch_size=args.batch_size,
                                 seed=args.seed, **common)
        tokenizer = sampler.tokenizer
        if args.cpu_threads:
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(args.cpu_threads)
    ids = encode_prompts(tokenizer, prompts, args.chat_template)
    load_s = time.perf_counter() - t0

    def sample(prompt_ids, temperature, n):
        bar.set_postfix_str(f"T={temperature:g}")
        return sampler(prompt_ids, temperature, n)

    bar = tqdm(total=len(candidates) * len(prompts), desc="probe (temperatures x prompts)", unit="prompt",
               disable=args.no_progress, file=sys.stderr, dynamic_ncols=True)
    try:
        result = probe(sample, ids, candidates, samples=args.samples, target=args.target, metric=args.metric,
                       n=args.n, max_temperature=args.max_temperature)
    except ValueError as e:
        raise ProbeInputError(str(e)) from None
    finally:
        bar.close()
        if threads is not None:  # the in-process caller (tests, notebooks) keeps its own setting
            import torch

            torch.set_num_threads(threads)
    elapsed = time.perf_counter() - t0

    print(f"model {args.model}  backend {backend} ({why})  prompts {len(prompts)} x {args.samples} samples  "
          f"max_new_tokens {args.max_new_tokens}  seed {args.seed}")
    print(format_table(result, sampler.stats))
    if result.recommended is None:
        hint = "; pass --target" if args.target is None else ""
        print(f"no recommendation: {result.reason}{hint}")
    else:
        print(f"recommended starting temperature: {float(result.recommended)} ({result.reason})")
    print(f"({elapsed:.1f} s, of which {load_s:.1f} s loading)")

    if args.json:
        out = result.to_dict()
        for row in out["rows"]:
            row["mean_length"] = sampler.stats.mean_length.get(row["temperature"])
            row["truncated"] = sampler.stats.truncated.get(row["temperature"])
        out["settings"] = {
            "model": args.model, "prompts": args.prompts, "prompt_key": args.prompt_key,
            "num_prompts": len(prompts), "limit_prompts": args.limit_prompts, "candidates": candidates,
            "samples": args.samples, "max_new_tokens": args.max_new_tokens, "target": args.target,
            "max_temperature": args.max_temperature, "n": args.n, "metric": args.metric, "backend": backend,
            "backend_reason": why, "device": args.device, "dtype": args.dtype, "batch_size": args.batch_size,
            "chat_template": args.chat_template, "seed": args.seed, "seconds": round(elapsed, 3),
        }
        try:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(_json_safe(out), f, indent=2)
                f.write("\n")
        except OSError as e:
            raise ProbeInputError(f"--json {args.json}: cannot write ({first_line(e)})") from None
    return EXIT_OK

