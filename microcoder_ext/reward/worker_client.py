"""Supervisor side of one worker process: start (``subprocess.Popen``, scrubbed env, own session), talk
JSON lines with deadlines (``select``, no signals), kill. Not thread-safe by itself: the engine hands
each worker to one thread at a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from .sandbox import protocol, tree

_SANDBOX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox")
# load the stdlib-only sandbox package by path as "mc_sandbox" (does not import microcoder_ext or torch)
_BOOTSTRAP = (
    "import importlib.util as u, sys\n"
    "s = u.spec_from_file_location('mc_sandbox', {init!r}, submodule_search_locations=[{d!r}])\n"
    "m = u.module_from_spec(s); sys.modules['mc_sandbox'] = m; s.loader.exec_module(m)\n"
    "from mc_sandbox.worker import main; main()\n"
)

CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/nonexistent",
    "PYTHONHASHSEED": "0", "PYTHONINTMAXSTRDIGITS": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1",
}


class WorkerError(RuntimeError):
    """The worker died, hung or broke the protocol (infrastructure: ``sandbox_error``)."""


class WorkerProcess:
    def __init__(self, cfg: dict, start_timeout: float = 60.0):
        boot = _BOOTSTRAP.format(init=os.path.join(_SANDBOX_DIR, "__init__.py"), d=_SANDBOX_DIR)
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-B", "-c", boot, json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None if cfg.get("debug") else subprocess.DEVNULL,
            env=dict(CLEAN_ENV), cwd="/", close_fds=True, start_new_session=True)
        self.reader = protocol.LineReader(self.proc.stdout.fileno())
        self.hello: dict | None = None
        self.start_timeout = start_timeout

    def wait_hello(self) -> dict:
        if self.hello is None:
            msg = self.recv(self.start_timeout)
            if msg.get("op") != "hello":
                raise WorkerError(f"unexpected first message {msg.get('op')!r}")
            self.hello = msg
        return self.hello

    def send(self, msg: dict) -> None:
        try:
            protocol.write_all(self.proc.stdin.fileno(), protocol.encode(msg))
        except OSError as e:
            raise WorkerError(f"worker pipe closed: {e}") from None

    def recv(self, timeout: float) -> dict:
        try:
            return self.reader.read(timeout)
        except protocol.ChannelTimeout:
            raise WorkerError(f"worker silent for {timeout:.1f} s") from None
        except (protocol.ChannelClosed, OSError, ValueError) as e:
            raise WorkerError(f"worker connection lost: {e} (exit code {self.proc.poll()})") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker's session (its sandboxed children die with it via PDEATHSIG) and remove
        its temp dir (a killed worker cannot)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._remove_base()

    def _remove_base(self) -> None:
        base = (self.hello or {}).get("base")
        if isinstance(base, str) and os.path.basename(base).startswith("microcoder-sbx-lk-") and os.path.isabs(base):
            tree.remove_tree(base)  # iterative, never follows symlinks, never raises (whatever a program built)

    def close(self) -> None:
        try:
            self.send({"op": "exit"})
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except Exception:
            pass
        if self.alive():
            self.kill()
        else:
            self._remove_base()
