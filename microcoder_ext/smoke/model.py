"""The model a smoke run trains: a tiny random model of the user's architecture family, built offline.

:func:`prepare_model` reads the user's model ``config.json`` when it can be read locally (a directory, or a Hugging
Face hub id already in the local hub cache; nothing is downloaded) and shrinks it (:func:`microcoder_ext.tiny.shrink_config`:
same ``model_type`` and architecture, 2 layers, hidden size 128); otherwise it builds a tiny Qwen3 (a name
containing "qwen3") or Qwen2 model. The tokenizer is the model's when its files are local, else a built-in byte-level
BPE trained on the bundled problems. A short supervised warm start on the bundled problems' reference solutions
follows (default 150 steps, ~10 s): a purely random model truncates every response, so every GRPO group has equal
rewards and the update has no policy gradient; after it, responses mix correct, wrong and cut-off answers.

Built models are cached under ``$MICROCODER_CACHE/smoke-models`` (default ``~/.cache/microcoder-ext``), keyed by
everything they are built from.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from microcoder_ext import tiny

#: bump when the way smoke models are built changes (invalidates the cache)
BUILD_VERSION = 2  # 2: the warm start runs at BUILD_THREADS torch threads (before: the process's count, so the
#                    same key held different weights on hosts, or in processes, with other thread counts)
#: torch threads of a build: a float32 warm start's sums depend on how many threads share them, and a model must
#: not depend on the host's cores or on OMP_NUM_THREADS in the process that happens to build it first
BUILD_THREADS = 2
DEFAULT_SHAPE = tiny.TinyShape(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256,
                               max_position_embeddings=4096)
META_FILE = "microcoder_smoke_model.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class TinyModel:
    """What :func:`prepare_model` built (``path`` is a ``save_pretrained`` directory with the tokenizer)."""

    path: str
    family: str  #: model_type
    architecture: str
    config_source: str
    tokenizer_source: str
    parameters: int
    vocab_size: int
    warm_start_steps: int = 0
    warm_start_loss: list = field(default_factory=list)  #: [first, last]
    changes: list = field(default_factory=list)  #: config fields changed by the shrink
    cached: bool = False
    demonstrations: str = ""  #: what the warm start trained on (:data:`DEMONSTRATIONS`), "" without one

    def to_dict(self) -> dict:
        return asdict(self)


def cache_root() -> Path:
    return Path(os.environ.get("MICROCODER_CACHE", Path.home() / ".cache" / "microcoder-ext")) / "smoke-models"


def _local_file(model: str | None, filename: str) -> str | None:
    """``filename`` of ``model`` if it can be read without a download (a directory or the hub cache)."""
    if not model:
        return None
    path = Path(os.path.expanduser(model))
    if path.is_dir():
        return str(path / filename) if (path / filename).is_file() else None
    if path.is_file():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, filename)
    except Exception:  # not a repo id, or no hub library
        return None
    return found if isinstance(found, str) and os.path.isfile(found) else None


def _family_from_name(model: str | None) -> str:
    return "qwen3" if model and "qwen3" in model.lower() else "qwen2"


#: the warm start's demonstrations: the references of the bundled train problems, or the demo's mix of each
#: reference with a plausible wrong solution (:func:`microcoder_ext.bundled.demonstrations.demonstrations`)
DEMONSTRATIONS = ("reference", "mixed")


def _bundled_examples(kind: str = "reference", seed: int = 0):
    from microcoder_ext.smoke.data import answer, bundled_problems, messages

    problems = bundled_problems("train")
    if kind == "mixed":
        from microcoder_ext.bundled.demonstrations import demonstrations

        return problems, demonstrations(problems, seed=seed)
    if kind != "reference":
        raise ValueError(f"unknown demonstrations {kind!r}; one of {DEMONSTRATIONS}")
    return problems, [(messages(p), answer(p)) for p in problems]


def _built_record(folder: Path) -> TinyModel | None:
    """The record of the model :func:`prepare_model` built in ``folder`` (``path`` = ``folder``), else None."""
    meta = folder / META_FILE
    if not meta.is_file():
        return None
    info = TinyModel(**json.loads(meta.read_text()))
    info.path, info.cached = str(folder), True
    return info


def built_here(model: str | None) -> TinyModel | None:
    """The model's record if ``model`` is a directory that :func:`prepare_model` built (used as is, never rebuilt)."""
    return _built_record(Path(os.path.expanduser(model)).resolve()) if model else None


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
    return h.hexdigest()[:16]


def _file_digest(path: str | None) -> str | None:
    if not path:
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def prepare_model(model: str | None, *, shape: tiny.TinyShape = DEFAULT_SHAPE, warm_steps: int = 150,
                  seed: int = 0, cache: bool = True, out_dir: str | os.PathLike | None = None,
                  demonstrations: str = "reference", warm_lr: float = 3e-3, family: str | None = None,
                  threads: int = BUILD_THREADS) -> TinyModel:
    """Build (or reuse from the cache) the tiny model for a smoke run of ``model`` (a path or hub id, or None).

    A directory this function built before (it holds :data:`META_FILE`) is used as is. ``demonstrations``: what
    the warm start trains on (:data:`DEMONSTRATIONS`); ``family``: of the built-in model when there is no local
    ``config.json`` (default: from the name, :data:`microcoder_ext.tiny.FAMILIES`); ``threads``: torch threads of
    the build (:data:`BUILD_THREADS`; the same arguments give the same weights on any host of one CPU type)."""
    import transformers

    mine = built_here(model)
    if mine is not None:
        mine.config_source = f"a tiny model built by microcoder-ext ({mine.config_source}), used as is"
        return mine
    config_file = _local_file(model, "config.json")
    tok_files = [f for f in _TOKENIZER_FILES if _local_file(model, f)]
    problems, examples = _bundled_examples(demonstrations, seed)
    extra_key = [] if (demonstrations, warm_lr, family) == ("reference", 3e-3, None) else [demonstrations, warm_lr,
                                                                                           family]
    if threads != BUILD_THREADS:
        extra_key.append(("threads", threads))
    key = _digest(BUILD_VERSION, model, _file_digest(config_file),
                  [_file_digest(_local_file(model, f)) for f in tok_files], asdict(shape), warm_steps, seed,
                  transformers.__version__, *extra_key)
    if out_dir is not None:
        return _build(model, Path(out_dir), shape, warm_steps, seed, problems, examples, config_file, tok_files,
                      warm_lr, demonstrations, family, threads)
    target = cache_root() / key
    target.parent.mkdir(parents=True, exist_ok=True)
    # one builder per cache entry: runs that start together (concurrent test lanes, several smokes) wait for it
    with open(target.with_name(key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = _built_record(target) if cache else None
        if cached is not None:
            return cached
        return _build(model, target, shape, warm_steps, seed, problems, examples, config_file, tok_files,
                      warm_lr, demonstrations, family, threads)


def _build(model, target: Path, shape, warm_steps, seed, problems, examples, config_file, tok_files,
           warm_lr: float = 3e-3, demonstrations: str = "reference", family: str | None = None,
           threads: int = BUILD_THREADS) -> TinyModel:
    """Build the tiny model into ``target`` (replaced whole, through a temporary sibling directory), at ``threads``
    torch threads (the process's count is restored afterwards)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _build_at(model, target, shape, warm_steps, seed, problems, examples, config_file, tok_files, warm_lr,
                         demonstrations, family)
    finally:
        torch.set_num_threads(before)


def _build_at(model, target: Path, shape, warm_steps, seed, problems, examples, config_file, tok_files,
              warm_lr: float, demonstrations: str, family: str | None) -> TinyModel:
    from transformers import AutoConfig, AutoTokenizer

    if tok_files:
        local = os.path.expanduser(model)
        tokenizer = AutoTokenizer.from_pretrained(local if os.path.isdir(local) else model, local_files_only=True)
        tokenizer_source = f"the model's ({model})"
    else:
        texts = [p.prompt_text() for p in problems] + [a for _, a in examples]
        tokenizer = tiny.train_tokenizer(texts, 400)
        tokenizer_source = f"built-in byte-level BPE ({len(tokenizer)} tokens; no local tokenizer for {model})" if model \
            else f"built-in byte-level BPE ({len(tokenizer)} tokens)"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    vocab = len(tokenizer)

    changes: list[str] = []
    if config_file:
        user_config = AutoConfig.from_pretrained(str(Path(config_file).parent), local_files_only=True)
        config, changes = tiny.shrink_config(user_config, shape, vocab_size=max(vocab, user_config.vocab_size)
                                             if tok_files else vocab)
        config_source = f"config.json of {model}, shrunk"
        if not tok_files:  # the built-in tokenizer's special ids
            config.eos_token_id, config.pad_token_id, config.bos_token_id = (tokenizer.eos_token_id,
                                                                             tokenizer.pad_token_id, None)
    else:
        family = family or _family_from_name(model)
        config = tiny.tiny_config(family, tokenizer, shape)
        config_source = (f"built-in tiny {family} (no local config.json for {model})" if model
                         else f"built-in tiny {family}")
    built = tiny.build_model(config, seed=seed)
    losses: list[float] = []
    if warm_steps > 0:
        batch = max(1, min(16, 6_400_000 // max(vocab, 1)))  # logits of batch x ~150 tokens x vocab stay small
        losses = tiny.warm_start(built, tokenizer, examples, steps=warm_steps, batch_size=batch, lr=warm_lr,
                                 seed=seed)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    built.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = TinyModel(path=str(target), family=config.model_type, architecture=type(built).__name__,
                     config_source=config_source, tokenizer_source=tokenizer_source, parameters=tiny.n_params(built),
                     vocab_size=vocab, warm_start_steps=warm_steps if losses else 0,
                     warm_start_loss=[round(losses[0], 4), round(losses[-1], 4)] if losses else [], changes=changes,
                     demonstrations=demonstrations if losses else "")
    (tmp / META_FILE).write_text(json.dumps(info.to_dict(), indent=1))
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, target)
    return replace(info, path=str(target))
