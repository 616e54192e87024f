"""What every framework's smoke runner shares: options, the work directory, running the framework's entry point
as a child process with its output in a log, and finding the framework's own error in that log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from microcoder_ext import evidence

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class SmokeUsageError(ValueError):
    """Bad smoke arguments or a launch the smoke run cannot take (exit 2 with the reason)."""


def require_ints(options, names, minimum: int = 1) -> None:
    """Raise :class:`SmokeUsageError` naming the command-line flag unless each of ``names`` (attributes of
    ``options``) is an integer (not a bool) >= ``minimum``."""
    for name in names:
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SmokeUsageError(f"--{name.replace('_', '-')} must be an integer >= {minimum}, got {value!r}")


@dataclass
class SmokeOptions:
    """Sizes of a smoke run (``microcoder smoke --help``)."""

    steps: int = 3
    rows: int = 16  #: data rows taken from each of the launch's files
    val_rows: int | None = None  #: rows of the validation file (None: rows // 4)
    prompts: int = 4  #: prompts per step (the launch's batch, scaled down)
    max_samples: int = 8  #: cap on the group size (samples per prompt)
    response_length: int = 32  #: cap on the response budget, tokens
    gpus: int = 1  #: logical GPUs (training ranks) the run is given
    topology: bool = False  #: keep the launch's nodes, ranks, parallel groups and batches (``--topology``)
    ray_address: str | None = None  #: run against this existing Ray cluster (``--ray-address``; with ``topology``)
    warm_start: int = 150  #: supervised warm-start steps of the tiny model (0: none)
    workdir: str | None = None
    json: str | None = None
    verbose: bool = False
    timeout: float | None = None  #: seconds for the framework's process (None: none)
    extra_env: dict = field(default_factory=dict)

    def __post_init__(self):
        require_ints(self, ("steps", "rows", "prompts", "max_samples", "response_length", "gpus")
                     + (("val_rows",) if self.val_rows is not None else ()))
        require_ints(self, ("warm_start",), minimum=0)
        if self.topology and self.gpus != 1:
            raise SmokeUsageError("--topology takes the GPUs from the launch (nodes x GPUs per node); drop --gpus")
        if self.ray_address is not None and not self.topology:
            raise SmokeUsageError("--ray-address runs the launch at its declared size on that cluster: add --topology")


def workdir(opts: SmokeOptions, framework: str) -> Path:
    """The run's directory (``--workdir``, else a new one under the system temp dir)."""
    if opts.workdir:
        path = Path(opts.workdir).expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix=f"microcoder-smoke-{framework}-"))


def base_env(work: Path, extra: dict | None = None) -> dict:
    """The child's environment: offline, one thread per process, evidence on; a Ray address of the caller is
    dropped (the run starts a local cluster of its own)."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update({
        evidence.ENV: str(work / "evidence.jsonl"),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0", "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


def run_logged(cmd: Sequence[str], env: dict, log_path: Path, *, cwd: Path | None = None, verbose: bool = False,
               on_line: Callable[[str], None] | None = None, timeout: float | None = None) -> int:
    """Run ``cmd`` with stdout+stderr into ``log_path`` (and the terminal with ``verbose``); its exit status.

    ``on_line`` sees every line (progress). A ``timeout`` kills the process group (exit status 124)."""
    import queue
    import threading

    log_path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout if timeout else None
    lines: queue.Queue = queue.Queue()
    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(list(cmd), env=env, cwd=str(cwd) if cwd else None, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)

        def pump() -> None:  # a silent hang must not block the deadline: the pipe is read in a thread
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            exited_at = None
            while True:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    line = ""
                if line is None:  # every writer closed the pipe
                    break
                if line:
                    log.write(line)
                    if verbose:
                        sys.stdout.write(line)
                        sys.stdout.flush()
                    if on_line is not None:
                        on_line(line)
                if deadline is not None and time.monotonic() > deadline:
                    _kill(proc)
                    log.write(f"\n[microcoder smoke] killed after {timeout:.0f} s (--timeout)\n")
                    return 124
                if exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                elif exited_at is not None and not line and time.monotonic() - exited_at > 10:
                    _kill(proc)  # the entry point exited; a leftover process of its group holds the pipe
                    break
            return proc.wait()
        except KeyboardInterrupt:
            _kill(proc)
            raise
        finally:
            if proc.poll() is None:
                _kill(proc)


#: what Ray raises when a new node's raylet did not register within the fixed 30 s Ray waits for it
#: (``ray/_private/node.py``; not configurable): on a loaded host (other runs, a test suite's own lanes) starting Ray
#: can take longer, and the launch dies in ``ray.init``, before anything of it ran
RAY_NODE_START_TIMEOUT = "The current node timed out during startup"
RAY_START_ATTEMPTS = 3


def run_entry_point(cmd: Sequence[str], env: dict, log_path: Path, *, progress: Callable[[str], None] | None = None,
                    **kwargs) -> int:
    """:func:`run_logged` of a framework's entry point, started again (at most ``RAY_START_ATTEMPTS`` times in all)
    when it died because Ray's node did not start within Ray's fixed 30 s (:data:`RAY_NODE_START_TIMEOUT`): nothing
    of the launch had run. Each failed attempt's log is kept beside ``log_path`` (``.attempt<k>``); every other exit
    status is returned as it is."""
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        rc = run_logged(cmd, env, log_path, **kwargs)
        if rc == 0 or attempt == RAY_START_ATTEMPTS or not _ray_node_start_timed_out(log_path):
            return rc
        kept = log_path.with_name(f"{log_path.stem}.attempt{attempt}{log_path.suffix}")
        log_path.replace(kept)
        if progress is not None:
            progress(f"  Ray's node did not start within Ray's fixed 30 s (a loaded machine); nothing ran yet: "
                     f"starting again ({attempt + 1}/{RAY_START_ATTEMPTS}; log of the failed start: {kept})")
    return rc


def _ray_node_start_timed_out(log_path: Path) -> bool:
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return RAY_NODE_START_TIMEOUT in text


def _kill(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX = re.compile(r"^\((\w+) pid=\d+(?:, ip=[\d.]+)?\)\s?")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(\([\w.]+\))?:\s")


def _exception_lines(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(process, line)`` of each traceback's final exception line, in order."""
    out = []
    in_tb: dict[str, bool] = {}
    for proc, line in lines:
        if line.startswith("Traceback (most recent call last)"):
            in_tb[proc] = True
            continue
        if in_tb.get(proc) and _EXC_LINE.match(line):
            if line.startswith("ray.exceptions.RayTaskError"):  # the remote traceback and its exception follow
                continue
            out.append((proc, line.strip()))
            in_tb[proc] = False
    return out


def error_excerpt(log_path: Path, max_lines: int = 30) -> str:
    """The framework's own error from a log: the exceptions its workers raised (root causes, deduplicated, first
    first) and the tail of the last traceback (what the entry point died of); Ray's colour codes stripped."""
    try:
        raw = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    lines = []
    for line in raw:
        line = _ANSI.sub("", line)
        m = _RAY_PREFIX.match(line)
        lines.append((m.group(1) if m else "main", _RAY_PREFIX.sub("", line)))
    excs = _exception_lines(lines)
    if not excs:
        tail = [l for _, l in lines if re.search(r"\b(Error|Exception)\b", l)] or [l for _, l in lines]
        return "\n".join(tail[-max_lines:])
    seen, causes = set(), []
    for proc, line in excs[:-1]:
        if line not in seen:
            seen.add(line)
            causes.append(f"  ({proc}) {line}")
    last_proc, last_line = excs[-1]
    starts = [i for i, (p, l) in enumerate(lines) if p == last_proc and l.startswith("Traceback")]
    block = [l for p, l in lines[starts[-1]:] if p == last_proc] if starts else [last_line]
    end = next((i for i, l in enumerate(block) if l.strip() == last_line), len(block) - 1)
    final = [l for l in block[max(0, end - 12):end + 1] if l.strip().strip("^")]
    out = []
    if causes:
        out += ["raised in the framework's workers:", *causes[:5]] + (
            [f"  ... {len(causes) - 5} more"] if len(causes) > 5 else [])
    out += ["the entry point's error:", *("  " + l for l in final)]
    return "\n".join(out)
