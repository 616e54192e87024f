"""Read a training run's scalar logs into ``{metric: [(step, value), ...]}``.

Formats (``read_run`` picks one from the path; ``fmt=`` forces it):

* ``tensorboard``: a directory holding ``events.out.tfevents.*`` files (searched recursively; they must all sit in one
  directory, i.e. one run), or one event file. verl's ``trainer.logger=[tensorboard]`` writes them to
  ``$TENSORBOARD_DIR`` (default ``tensorboard_log/PROJECT/EXPERIMENT``); OpenRLHF's ``--logger.tensorboard_dir DIR`` to
  ``DIR/RUN_NAME`` (keys prefixed ``train/`` and ``eval/``).
* ``jsonl``: verl's ``trainer.logger=[file]`` (``FileLogger``: one ``{"step": N, "data": {metric: value}}`` per line,
  written to ``$VERL_FILE_LOGGER_PATH`` or ``PROJECT/EXPERIMENT.jsonl``), or flat ``{"step": N, metric: value, ...}``
  lines (``global_step`` / ``_step`` accepted for ``step``).
* ``console``: verl's console logger output (``trainer.logger=[console]``, ``verl.utils.logger.LocalLogger``: one line
  ``step:N - key:value - key:value ...`` per step), anywhere in a line, so a captured stdout with Ray's
  ``(TaskRunner pid=...)`` prefixes and ANSI colours works.
* ``wandb-csv``: a CSV exported from Weights & Biases: the API's ``run.history().to_csv()`` (``_step`` + metric columns)
  or the UI's panel export (``Step`` + ``"RUN NAME - metric"`` columns, ``__MIN``/``__MAX`` columns ignored). A CSV
  with several runs' columns needs ``FILE.csv#RUN NAME`` to pick one.

Values that are not finite numbers (NaN, None, text) are dropped. A step logged twice (a resumed run) keeps the value
logged last. Every series is sorted by step.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from microcoder_ext.jsonl import iter_objects

Series = list[tuple[int, float]]
Metrics = dict[str, Series]

FORMATS = ("tensorboard", "jsonl", "console", "wandb-csv")

#: CSV step columns, by preference. OpenRLHF logs its own step as ``train/global_step`` (wandb's ``_step`` counts
#: log calls, which train and eval share).
CSV_STEP_COLUMNS = ("train/global_step", "global_step", "Step", "_step", "step", "trainer/global_step")
JSONL_STEP_KEYS = ("step", "global_step", "_step", "train/global_step")

_TB_EVENT_GLOB = "events.out.tfevents.*"
_CONSOLE_STEP = re.compile(r"step:(\d+) - (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_WRAPPED_NUMBER = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$")  # np.float64(0.5), tensor(0.5) as pprint writes them


class RunLogError(Exception):
    """A run's logs cannot be read (missing path, unknown format, nothing parseable)."""


@dataclass
class RunLog:
    path: str
    fmt: str
    metrics: Metrics = field(default_factory=dict)
    source: str = ""  # the file or directory actually read (e.g. the event-file directory found under ``path``)


def _number(v) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        s = v.strip()
        m = _WRAPPED_NUMBER.match(s)
        if m:
            s = m.group(1).split(",")[0].strip()
        if s in ("True", "False"):
            return 1.0 if s == "True" else 0.0
        try:
            f = float(s)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    # numpy scalars and 0-d arrays
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class _Collector:
    def __init__(self) -> None:
        self._data: dict[str, dict[int, float]] = {}

    def add(self, key: str, step: int, value) -> None:
        f = _number(value)
        if f is None:
            return
        self._data.setdefault(key, {})[int(step)] = f  # later wins

    def metrics(self) -> Metrics:
        return {k: sorted(v.items()) for k, v in sorted(self._data.items()) if v}


# --------------------------------------------------------------------------------------------------- tensorboard
def _tb_event_dirs(path: Path) -> list[Path]:
    return sorted({p.parent for p in path.rglob(_TB_EVENT_GLOB) if p.is_file()})


def read_tensorboard(path: str | os.PathLike) -> Metrics:
    """Scalars of one run's event files (a directory, searched recursively, or one event file)."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    p = Path(path)
    if p.is_dir():
        dirs = _tb_event_dirs(p)
        if not dirs:
            raise RunLogError(f"{path}: no TensorBoard event files ({_TB_EVENT_GLOB}) under this directory")
        if len(dirs) > 1:
            listing = ", ".join(str(d.relative_to(p)) or "." for d in dirs)
            raise RunLogError(f"{path}: event files of several runs ({listing}): pass one of these directories")
        target = str(dirs[0])
    else:
        target = str(p)
    acc = ea.EventAccumulator(target, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        acc.Reload()
    except Exception as e:  # corrupt/truncated file
        raise RunLogError(f"{path}: cannot read TensorBoard events: {e}") from e
    out = _Collector()
    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        for ev in acc.Scalars(tag):
            out.add(tag, ev.step, ev.value)
    for tag in tags.get("tensors", []):  # TF2-style scalar summaries
        for ev in acc.Tensors(tag):
            try:
                arr = tensor_util.make_ndarray(ev.tensor_proto)
            except Exception:
                continue
            if getattr(arr, "size", 0) == 1 and arr.dtype.kind in "fiub":
                out.add(tag, ev.step, arr.reshape(()).item())
    return out.metrics()


# --------------------------------------------------------------------------------------------------------- jsonl
def _flatten(d: dict, prefix: str = "") -> dict:
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "/"))
        else:
            flat[key] = v
    return flat


def read_jsonl(path: str | os.PathLike) -> Metrics:
    """verl FileLogger lines ``{"step": N, "data": {...}}`` or flat ``{"step": N, metric: value}`` lines."""
    out = _Collector()
    n_records = 0
    for where, rec in iter_objects(path, RunLogError):
        step_key = next((k for k in JSONL_STEP_KEYS if k in rec), None)
        if step_key is None:
            raise RunLogError(f"{where}: no step key (one of {', '.join(JSONL_STEP_KEYS)})")
        step = rec[step_key]
        if isinstance(rec.get("data"), dict) and len(rec) == 2:
            values = _flatten(rec["data"])
        else:
            values = _flatten({k: v for k, v in rec.items() if k != step_key})
        for k, v in values.items():
            out.add(k, step, v)
        n_records += 1
    if not n_records:
        raise RunLogError(f"{path}: empty JSONL file")
    return out.metrics()


# ------------------------------------------------------------------------------------------------------- console
def parse_console_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``step:N - key:value - ...`` (verl's ``concat_dict_to_str``) anywhere in ``line`` -> (N, {key: value})."""
    m = _CONSOLE_STEP.search(_ANSI.sub("", line.rstrip("\r\n")))
    if not m:
        return None
    values = {}
    for item in m.group(2).split(" - "):
        key, sep, raw = item.rpartition(":")
        if not sep or not key:
            continue
        f = _number(raw)
        if f is not None:
            values[key.strip()] = f
    return int(m.group(1)), values


def read_console(path: str | os.PathLike) -> Metrics:
    out = _Collector()
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parsed = parse_console_line(line)
            if parsed is None:
                continue
            n += 1
            step, values = parsed
            for k, v in values.items():
                out.add(k, step, v)
    if not n:
        raise RunLogError(f"{path}: no verl console metric lines ('step:N - key:value - ...')")
    return out.metrics()


# ----------------------------------------------------------------------------------------------------- wandb csv
def _csv_metric_name(header: str) -> tuple[str | None, str]:
    """``"RUN - metric"`` -> (RUN, metric); a plain header -> (None, header)."""
    run, sep, metric = header.rpartition(" - ")
    return (run, metric) if sep else (None, header)


def read_wandb_csv(path: str | os.PathLike, run: str | None = None) -> Metrics:
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise RunLogError(f"{path}: empty CSV file") from None
        rows = list(reader)
    step_col = next((c for c in CSV_STEP_COLUMNS if c in header), None)
    if step_col is None:
        raise RunLogError(f"{path}: no step column (one of {', '.join(CSV_STEP_COLUMNS)}); columns: {header[:8]}")
    step_idx = header.index(step_col)
    columns: dict[int, tuple[str | None, str]] = {}
    for i, h in enumerate(header):
        if (i == step_idx or not h.strip() or h.startswith(("_", "Unnamed: ")) or h.endswith(("__MIN", "__MAX"))
                or h in CSV_STEP_COLUMNS):  # wandb's _runtime/_timestamp, a pandas index, min/max bands
            continue
        columns[i] = _csv_metric_name(h)
    runs = sorted({r for r, _ in columns.values() if r is not None})
    if run is not None:
        if run not in runs:
            raise RunLogError(f"{path}: no run named {run!r} in the CSV (runs: {', '.join(runs) or 'none named'})")
        columns = {i: rm for i, rm in columns.items() if rm[0] == run}
    elif len(runs) > 1:
        raise RunLogError(f"{path}: columns of several runs ({', '.join(runs)}): pass {path}#RUN to pick one")
    out = _Collector()
    for row in rows:
        if step_idx >= len(row):
            continue
        step = _number(row[step_idx])
        if step is None:
            continue
        for i, (_, metric) in columns.items():
            if i < len(row) and row[i] != "":
                out.add(metric, int(step), row[i])
    return out.metrics()


# -------------------------------------------------------------------------------------------------------- detect
def detect_format(path: str | os.PathLike) -> str:
    p = Path(path)
    if p.is_dir():
        return "tensorboard"
    name = p.name.lower()
    if "tfevents" in name:
        return "tensorboard"
    if name.endswith(".csv"):
        return "wandb-csv"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                return "jsonl" if line.lstrip().startswith("{") else "console"
    return "console"


def read_run(path: str | os.PathLike, fmt: str | None = None) -> RunLog:
    """Read one run. ``path`` may end in ``#RUN`` to pick a run's columns from a multi-run wandb CSV."""
    spec = str(path)
    csv_run = None
    if not os.path.exists(spec) and "#" in spec:
        spec, csv_run = spec.rsplit("#", 1)
    if not os.path.exists(spec):
        raise RunLogError(f"{spec}: no such file or directory")
    if fmt is not None and fmt not in FORMATS:
        raise RunLogError(f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})")
    try:
        fmt = fmt or detect_format(spec)
        if csv_run is not None and fmt != "wandb-csv":
            raise RunLogError(f"{path}: '#RUN' only selects a run in a wandb CSV")
        source = spec
        if fmt == "tensorboard":
            metrics = read_tensorboard(spec)
            if Path(spec).is_dir():
                source = str(_tb_event_dirs(Path(spec))[0])
        elif fmt == "jsonl":
            metrics = read_jsonl(spec)
        elif fmt == "console":
            metrics = read_console(spec)
        else:
            metrics = read_wandb_csv(spec, run=csv_run)
    except RunLogError:
        raise
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise RunLogError(f"{spec}: cannot read as {fmt}: {e}") from e
    if not metrics:
        raise RunLogError(f"{spec}: read as {fmt}, but it holds no numeric metrics")
    return RunLog(path=str(path), fmt=fmt, metrics=metrics, source=source)
