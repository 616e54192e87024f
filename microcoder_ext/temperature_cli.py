"""``microcoder temperature probe``: measure output diversity at candidate temperatures, recommend a start.

The paper picks its training temperature from measured output diversity (paper-spec §4): sample every probe
prompt ``--samples`` times at each candidate temperature, measure the diversity of the responses (the metrics of
:mod:`microcoder_ext.core.diversity`, one group per prompt) and start at the lowest candidate whose diversity
reaches ``--target``. The measuring and the decision are :func:`microcoder_ext.core.temperature.probe`; this module
only loads prompts, tokenises them and samples.

Samplers (``--backend``):

* ``vllm`` -- offline ``vllm.LLM(model).generate(prompt_token_ids, SamplingParams(n, temperature, top_p=1,
  max_tokens, seed))``; the responses are vLLM's ``RequestOutput.outputs[i].token_ids``. ``auto`` picks it when
  the real ``vllm`` package is importable (it has ``vllm.LLM``) and CUDA is available (unless ``--device cpu``).
* ``hf`` -- ``transformers`` ``generate(do_sample=True, temperature=T, top_p=1, top_k=0,
  num_return_sequences=n)``, batched over prompts with left padding, each response cut at the first EOS/pad
  token. Works on CPU with a small model.

Both sample with the temperature alone (no top-k/top-p/min-p/repetition penalty, whatever the model's
``generation_config.json`` suggests), as a training rollout with ``top_p=1`` does.

Only the standard library is imported at module level (``microcoder --help`` stays fast); torch, transformers,
pyarrow and vllm are imported when a probe runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from microcoder_ext.jsonl import iter_objects

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


class ProbeInputError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


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


# ----------------------------------------------------------------------------------------------- prompts


def _check_messages(value: Any, where: str) -> list[dict]:
    if not value:
        raise ProbeInputError(f"{where}: empty message list")
    out = []
    for m in value:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ProbeInputError(f"{where}: a chat message must be {{\"role\": str, \"content\": str}}, got {m!r:.80}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _prompt_value(value: Any, where: str) -> str | list[dict]:
    if hasattr(value, "tolist"):  # numpy array from a parquet reader
        value = value.tolist()
    if isinstance(value, str):
        if not value.strip():
            raise ProbeInputError(f"{where}: empty prompt")
        return value
    if isinstance(value, (list, tuple)):
        return _check_messages(value, where)
    raise ProbeInputError(f"{where}: prompt must be a string or a chat message list, got {type(value).__name__}")


def load_prompts(path: str, key: str = "prompt", limit: int = 0) -> list[str | list[dict]]:
    """Prompts (strings or chat message lists) from JSONL(.gz) or parquet; raises :class:`ProbeInputError`."""
    if not os.path.exists(path):
        raise ProbeInputError(f"prompt file {path} does not exist")
    if os.path.isdir(path):
        raise ProbeInputError(f"prompt file {path} is a directory")
    prompts: list[str | list[dict]] = []
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            if key not in schema.names:
                raise ProbeInputError(f"{path}: no {key!r} column (columns: {', '.join(schema.names)})")
            values = pq.read_table(path, columns=[key]).column(key).to_pylist()
        except ProbeInputError:
            raise
        except ImportError:
            raise ProbeInputError("reading parquet needs pyarrow (pip install pyarrow)") from None
        except Exception as e:  # pyarrow's ArrowInvalid and OSError
            raise ProbeInputError(f"{path}: not a readable parquet file ({_first_line(e)})") from None
        for i, v in enumerate(values[:limit] if limit else values):
            prompts.append(_prompt_value(v, f"{path}: row {i}"))
    else:
        for where, rec in iter_objects(path, ProbeInputError):
            if key not in rec:
                raise ProbeInputError(f"{where}: no {key!r} key (keys: {', '.join(map(str, rec))})")
            prompts.append(_prompt_value(rec[key], where))
            if limit and len(prompts) >= limit:
                break
    if not prompts:
        raise ProbeInputError(f"{path}: no prompts")
    return prompts


def encode_prompts(tokenizer: Any, prompts: Sequence[str | list[dict]], chat_template: bool | None) -> list[list[int]]:
    """Token ids of every prompt: the chat template (``add_generation_prompt=True``) when used, else raw text."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template and not has_template:
        raise ProbeInputError("--chat-template: the model's tokenizer has no chat template")
    use = has_template if chat_template is None else chat_template
    out = []
    for p in prompts:
        if use:
            messages = [{"role": "user", "content": p}] if isinstance(p, str) else p
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
            ids = tokenizer(text)["input_ids"]
        if not ids:
            raise ProbeInputError("a prompt encodes to no tokens")
        out.append(list(ids))
    return out


# ----------------------------------------------------------------------------------------------- samplers


def _stop_ids(tokenizer: Any, model_config: Any = None) -> set[int]:
    ids: set[int] = set()
    for src in (tokenizer, getattr(model_config, "generation_config", None), model_config):
        eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    return ids


def cut_at(tokens: Sequence[int], stop: set[int]) -> list[int]:
    """``tokens`` up to (not including) the first stop token."""
    out = []
    for t in tokens:
        t = int(t)
        if t in stop:
            break
        out.append(t)
    return out


@dataclass
class SamplerStats:
    """Per temperature: mean response length (tokens) and the share of responses cut at ``max_new_tokens``."""

    mean_length: dict[float, float] = field(default_factory=dict)
    truncated: dict[float, float] = field(default_factory=dict)

    def record(self, temperature: float, groups: Sequence[Sequence[Sequence[int]]], max_new_tokens: int,
               cut: Sequence[bool]) -> None:
        lengths = [len(r) for g in groups for r in g]
        self.mean_length[temperature] = sum(lengths) / len(lengths) if lengths else math.nan
        self.truncated[temperature] = sum(cut) / len(cut) if cut else math.nan


class HFSampler:
    """``sampler(prompt_ids, temperature, n)`` over a ``transformers`` causal LM (``generate``, batched)."""

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int, batch_size: int = 8, seed: int = 0,
                 progress: Callable[[int], None] | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.batch_size, self.seed = max_new_tokens, batch_size, seed
        self.progress = progress
        self.stop = _stop_ids(tokenizer, model.config) | _stop_ids(None, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = min(self.stop) if self.stop else 0
        self.pad_id = int(pad)
        self.stats = SamplerStats()

    @classmethod
    def load(cls, model: str, *, device: str, dtype: str, trust_remote_code: bool, **kw) -> "HFSampler":
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise ProbeInputError(f"the hf backend needs torch and transformers ({_first_line(e)})") from None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ProbeInputError("--device cuda: CUDA is not available to torch")
        if dtype == "auto":
            dtype = "bfloat16" if device == "cuda" and torch.cuda.is_bf16_supported() else "float32"
            if device == "cuda" and dtype == "float32":
                dtype = "float16"
        try:
            tok = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
            m = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype),
                                                     trust_remote_code=trust_remote_code)
        except Exception as e:  # OSError (not found), ValueError (unknown architecture), ...
            raise ProbeInputError(f"cannot load model {model!r} with transformers: {_first_line(e)}") from None
        m.to(device).eval()
        return cls(m, tok, **kw)

    @staticmethod
    def quiet() -> None:
        """No transformers progress bars (``--no-progress``)."""
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass

    def __call__(self, prompts: Sequence[Sequence[int]], temperature: float, n: int) -> list[list[list[int]]]:
        import torch
        from transformers import set_seed

        set_seed(self.seed)  # the same random stream at every temperature, whatever the candidate order
        device = next(self.model.parameters()).device
        groups: list[list[list[int]]] = []
        cut: list[bool] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = [list(p) for p in prompts[start:start + self.batch_size]]
            width = max(len(p) for p in batch)
            ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, p in enumerate(batch):  # left padding: generation continues right after every prompt
                ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
                mask[i, width - len(p):] = 1
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=ids.to(device), attention_mask=mask.to(device),
                    do_sample=True, temperature=float(temperature), top_p=1.0, top_k=0, min_p=None,
                    typical_p=1.0, repetition_penalty=1.0, num_return_sequences=n,
                    max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_id,
                    eos_token_id=sorted(self.stop) or None,
                )
            new = out[:, width:].tolist()
            for i in range(len(batch)):
                group = []
                for row in new[i * n:(i + 1) * n]:
                    r = cut_at(row, self.stop)  # generate pads only after a stop token
                    group.append(r)
                    cut.append(len(r) >= self.max_new_tokens)
                groups.append(group)
            if self.progress:
                self.progress(len(batch))
        self.stats.record(temperature, groups, self.max_new_tokens, cut)
        return groups


class VLLMSampler:
    """``sampler(prompt_ids, temperature, n)`` over an offline vLLM engine (``vllm.LLM``).

    ``llm`` has vLLM's ``generate(prompts, sampling_params, use_tqdm=...)`` returning one ``RequestOutput`` per
    prompt, in order, whose ``.outputs[i].token_ids`` are the ``n`` sampled responses; ``sampling_params`` is
    ``vllm.SamplingParams`` (a factory taking its keywords).
    """

    def __init__(self, llm: Any, sampling_params: Callable[..., Any], *, max_new_tokens: int, seed: int | None = 0,
                 stop: set[int] | None = None, progress: Callable[[int], None] | None = None):
        self.llm, self.sampling_params = llm, sampling_params
        self.max_new_tokens, self.seed, self.progress = max_new_tokens, seed, progress
        self.stop = set(stop or ())
        self.stats = SamplerStats()

    @classmethod
    def load(cls, model: str, *, dtype: str, trust_remote_code: bool, tensor_parallel_size: int,
             gpu_memory_utilization: float, seed: int, max_model_len: int | None = None, **kw) -> "VLLMSampler":
        import vllm

        try:
            llm = vllm.LLM(model=model, dtype=dtype, seed=seed, trust_remote_code=trust_remote_code,
                           tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
                           max_model_len=max_model_len)
        except (OSError, ValueError) as e:
            raise ProbeInputError(f"cannot load model {model!r} with vLLM: {_first_line(e)}") from None
        stop = _stop_ids(llm.get_tokenizer())
        try:  # vLLM also stops at generation_config.json's eos ids (e.g. Qwen's <|im_end|> and <|endoftext|>)
            from transformers import GenerationConfig

            stop |= _stop_ids(GenerationConfig.from_pretrained(model, trust_remote_code=trust_remote_code))
        except Exception:  # no generation_config.json: the tokenizer's EOS only
            pass
        return cls(llm, vllm.SamplingParams, seed=seed, stop=stop, **kw)

    def __call__(self, prompts: Sequence[Sequence[int]], temperature: float, n: int) -> list[list[list[int]]]:
        params = [
            self.sampling_params(n=n, temperature=float(temperature), top_p=1.0, max_tokens=self.max_new_tokens,
                                 seed=None if self.seed is None else self.seed + i)
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        groups, cut = [], []
        for req in outputs:
            group = []
            for comp in req.outputs:
                ids = list(comp.token_ids)
                cut.append(len(ids) >= self.max_new_tokens and not (ids and ids[-1] in self.stop))
                if ids and ids[-1] in self.stop:  # vLLM keeps the EOS token; the hf sampler cuts it
                    ids = ids[:-1]
                group.append(ids)
            groups.append(group)
        if self.progress:
            self.progress(len(prompts))
        self.stats.record(temperature, groups, self.max_new_tokens, cut)
        return groups


def vllm_usable() -> tuple[bool, str]:
    """Whether the real vLLM can be used here: the package imports, has ``vllm.LLM``, and CUDA is available."""
    try:
        import vllm
    except Exception as e:  # ImportError, or a broken install
        return False, f"vllm is not importable ({_first_line(e)})"
    if not hasattr(vllm, "LLM"):
        return False, "the importable vllm module has no vllm.LLM (a stand-in, not vLLM)"
    try:
        import torch

        if not torch.cuda.is_available():
            return False, "vllm is installed but CUDA is not available"
    except ImportError:
        return False, "torch is not importable"
    return True, f"vllm {getattr(vllm, '__version__', '?')}"


def choose_backend(backend: str, device: str) -> tuple[str, str]:
    """``(backend, why)`` for ``--backend``/``--device``; raises :class:`ProbeInputError` if vllm is asked for
    but unusable."""
    if backend == "hf":
        return "hf", "--backend hf"
    if backend == "vllm":
        if device == "cpu":
            raise ProbeInputError("--backend vllm runs on CUDA; drop --device cpu or use --backend hf")
        ok, why = vllm_usable()
        if not ok:
            raise ProbeInputError(f"--backend vllm: {why}")
        return "vllm", why
    if device == "cpu":
        return "hf", "auto: --device cpu"
    ok, why = vllm_usable()
    return ("vllm", f"auto: {why}") if ok else ("hf", f"auto: {why}")


# ----------------------------------------------------------------------------------------------- output


def format_table(result: Any, stats: SamplerStats) -> str:
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


def _model_missing(model: str) -> bool:
    """A local-looking path that does not exist. Hub names (``name`` or ``org/name``) are left to the loader."""
    looks_local = model.startswith((".", "/", "~")) or model.count("/") > 1 or os.sep in model.replace("/", "")
    return looks_local and not os.path.exists(os.path.expanduser(model))


def _run_probe(args: argparse.Namespace) -> int:
    from microcoder_ext.core.temperature import probe

    candidates = _check_args(args)
    prompts = load_prompts(args.prompts, args.prompt_key, args.limit_prompts)
    if _model_missing(args.model):
        raise ProbeInputError(f"model {args.model} does not exist (expected a model directory or a hub name)")
    if os.path.isfile(os.path.expanduser(args.model)):
        raise ProbeInputError(f"model {args.model} is a file; pass the model directory (with config.json)")
    if os.path.isdir(os.path.expanduser(args.model)) and not os.path.exists(
            os.path.join(os.path.expanduser(args.model), "config.json")):
        raise ProbeInputError(f"model directory {args.model} has no config.json")
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
            raise ProbeInputError(f"--json {args.json}: cannot write ({_first_line(e)})") from None
    return EXIT_OK


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
