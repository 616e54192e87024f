"""The supervisor: a pool of pre-started sandbox workers, safe to call from any thread (verl's thread
pool, OpenRLHF's ``asyncio.to_thread``). It alone holds the expected outputs and does every comparison.

Configuration (constructor arguments, or environment variables for the process-wide :func:`get_engine`):
  workers        MICROCODER_REWARD_WORKERS        concurrent sandboxes (default: usable CPU cores)
  timeout        MICROCODER_REWARD_TIMEOUT        CPU seconds per test (default 5); wall clock 2x+1 s
  memory_mb      MICROCODER_REWARD_MEMORY_MB      address-space limit per run, MiB (default 2048)
  output_limit   MICROCODER_REWARD_OUTPUT_LIMIT   bytes of output per test (default 16 MiB; raised to
                                                  2x the expected output + 1 KiB when that is larger)
  stop_on_first_failure                           default True (binary score; pass_rate is then a lower bound)
  require_seccomp MICROCODER_SANDBOX_REQUIRE_SECCOMP fail closed without seccomp (default 1)
  uid            MICROCODER_SANDBOX_UID           unprivileged uid (and gid) when running as root (65534)
  preimport      MICROCODER_SANDBOX_PREIMPORT     extra modules imported by the workers (comma list)
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field

from microcoder_ext.core import verdicts as V

from .compare import compare_stdout, compare_values, parse_json_value
from .ground_truth import TestCase, TestSuite
from .result import EvalResult
from .worker_client import WorkerError, WorkerProcess

log = logging.getLogger("microcoder_ext.reward")
MiB = 1 << 20

#: worker status -> verdict when a test did not produce a comparable result
_STATUS_VERDICT = {"exception": V.RUNTIME_ERROR, "signal": V.RUNTIME_ERROR, "memory": V.MEMORY_LIMIT,
                   "timeout": V.TIMEOUT, "compile_error": V.COMPILE_ERROR, "output_limit": V.WRONG_ANSWER,
                   "unserialisable": V.WRONG_ANSWER}


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _env(name: str, default, cast=str):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    if cast is bool:
        return v.strip().lower() not in ("0", "false", "no", "off")
    return cast(v)


@dataclass
class EngineConfig:
    workers: int = 0  # 0: usable cores
    timeout: float = 5.0
    wall_timeout: float | None = None
    memory_mb: int = 2048
    output_limit: int = 16 * MiB
    stop_on_first_failure: bool = True
    require_seccomp: bool = True
    seccomp: bool = True
    landlock: bool = True
    uid_drop: bool = True
    uid: int = 65534
    preimport: list = field(default_factory=list)
    debug: bool = False

    @classmethod
    def from_env(cls) -> "EngineConfig":
        return cls(workers=_env("MICROCODER_REWARD_WORKERS", 0, int),
                   timeout=_env("MICROCODER_REWARD_TIMEOUT", 5.0, float),
                   memory_mb=_env("MICROCODER_REWARD_MEMORY_MB", 2048, int),
                   output_limit=_env("MICROCODER_REWARD_OUTPUT_LIMIT", 16 * MiB, int),
                   require_seccomp=_env("MICROCODER_SANDBOX_REQUIRE_SECCOMP", True, bool),
                   uid=_env("MICROCODER_SANDBOX_UID", 65534, int),
                   preimport=[m for m in _env("MICROCODER_SANDBOX_PREIMPORT", "").split(",") if m.strip()],
                   debug=_env("MICROCODER_SANDBOX_DEBUG", False, bool))

    def worker_cfg(self) -> dict:
        return {"uid": self.uid, "gid": self.uid, "require_seccomp": self.require_seccomp, "seccomp": self.seccomp,
                "landlock": self.landlock, "uid_drop": self.uid_drop, "preimport": list(self.preimport),
                "timeout": self.timeout, "memory_mb": self.memory_mb, "debug": self.debug}


class Engine:
    """Thread-safe pool of sandbox workers. ``evaluate(code, suite)`` -> :class:`EvalResult`."""

    def __init__(self, config: EngineConfig | None = None, **overrides):
        cfg = config or EngineConfig()
        self.config = EngineConfig(**{**asdict(cfg), **overrides})
        self.size = self.config.workers or usable_cores()
        self._cond = threading.Condition()
        self._idle: list[WorkerProcess] = []
        self._all: set[WorkerProcess] = set()
        self._started = 0
        self._closed = False
        self.layers: dict | None = None
        self.fatal: str | None = None
        self.pid = os.getpid()
        atexit.register(self.close)

    # --- pool ------------------------------------------------------------------------------------
    def warmup(self) -> dict:
        """Start every missing worker now (in parallel); returns the sandbox layer report."""
        with self._cond:
            n = self.size - self._started
            self._started += max(0, n)
        fresh = [self._spawn_safe() for _ in range(max(0, n))]
        ready = []
        for w in fresh:
            ok = w is not None and self._await_hello(w)
            if ok:
                ready.append(w)
        with self._cond:
            self._started -= len(fresh) - len(ready)
            self._idle.extend(ready)
            self._cond.notify_all()
        return self.layers or {}

    def _spawn_safe(self):
        try:
            w = WorkerProcess(self.config.worker_cfg())
        except OSError as e:
            self.fatal = self.fatal or f"cannot start a sandbox worker: {e}"
            return None
        with self._cond:
            self._all.add(w)
        return w

    def _await_hello(self, w: WorkerProcess) -> bool:
        try:
            hello = w.wait_hello()
        except WorkerError as e:
            log.error("microcoder reward: sandbox worker failed to start: %s", e)
            self._discard(w)
            return False
        if self.layers is None:
            self.layers = hello.get("layers") or {}
            self._report(hello)
        if hello.get("fatal"):
            self.fatal = hello["fatal"]
            self._discard(w)
            return False
        return True

    def _report(self, hello: dict) -> None:
        lay = hello.get("layers") or {}
        parts = [f"{k}={lay.get(k)}" for k in ("uid_drop", "seccomp", "landlock", "rlimits")]
        log.info("microcoder reward sandbox layers: %s (landlock ABI %s, checks %s)", ", ".join(parts),
                 lay.get("landlock_abi"), lay.get("checks"))
        for k in ("uid_drop", "seccomp", "landlock"):
            v = str(lay.get(k))
            if v != "active" and not v.startswith("not needed"):
                log.warning("microcoder reward sandbox: layer %s is %s", k, v)
        if lay.get("unreadable_paths"):
            log.warning("microcoder reward sandbox: %s not readable by the sandbox uid: model code cannot import "
                        "third-party packages from there (pre-imported: MICROCODER_SANDBOX_PREIMPORT)",
                        ", ".join(lay["unreadable_paths"]))

    def _discard(self, w: WorkerProcess) -> None:
        w.kill()
        with self._cond:
            self._all.discard(w)

    def _acquire(self) -> WorkerProcess | None:
        if self._started == 0 and self.layers is None:
            self.warmup()
        while True:
            with self._cond:
                while not self._idle and self._started >= self.size and not self.fatal:
                    self._cond.wait()
                if self.fatal:
                    return None
                if self._idle:
                    return self._idle.pop()
                self._started += 1
            w = self._spawn_safe()
            if w is not None and self._await_hello(w):
                return w
            with self._cond:
                self._started -= 1
                self._cond.notify()
            if self.fatal:
                return None

    def _release(self, w: WorkerProcess | None, broken: bool) -> None:
        if w is not None and (broken or not w.alive() or self._closed):
            self._discard(w)
            w = None
        with self._cond:
            if w is None:
                self._started -= 1
            else:
                self._idle.append(w)
            self._cond.notify()

    def close(self) -> None:
        self._closed = True
        with self._cond:
            workers, self._idle = list(self._all), []
        for w in workers:
            w.close()

    # --- scoring ---------------------------------------------------------------------------------
    def evaluate(self, code: str, suite: TestSuite, *, timeout: float | None = None, memory_mb: int | None = None,
                 stop_on_first_failure: bool | None = None) -> EvalResult:
        """Run ``code`` against every test of ``suite`` (in one worker) and judge it."""
        t0 = time.monotonic()
        n = len(suite.tests)
        cfg = self.config
        timeout = float(suite.time_limit or timeout or cfg.timeout)
        memory_mb = int(suite.memory_limit_mb or memory_mb or cfg.memory_mb)
        stop_first = cfg.stop_on_first_failure if stop_on_first_failure is None else stop_on_first_failure
        wall = cfg.wall_timeout or 2 * timeout + 1
        program = (suite.setup_code.rstrip("\n") + "\n\n" + code) if suite.setup_code else code
        job = {"op": "job", "mode": suite.mode, "code": program, "fn_name": suite.fn_name,
               "arg_types": suite.arg_types, "return_type": suite.return_type,
               "tests": [encode_big_ints(t.input) for t in suite.tests], "caps": [self._cap(t, suite) for t in suite.tests],
               "limits": {"timeout": timeout, "wall_timeout": wall, "memory_mb": memory_mb}}
        w = self._acquire()
        if w is None:
            return EvalResult(V.SANDBOX_ERROR, n, 0, f"sandbox unavailable: {self.fatal}", time.monotonic() - t0)
        broken = True
        try:
            res = self._run_job(w, job, suite, stop_first, wall + 10)
            broken = False
        except WorkerError as e:
            res = EvalResult(V.SANDBOX_ERROR, n, 0, f"sandbox worker failure: {e}")
        finally:
            self._release(w, broken)
        res.time_s = time.monotonic() - t0
        return res

    def _cap(self, test: TestCase, suite: TestSuite) -> int:
        exp = test.expected
        size = len(exp.encode()) if isinstance(exp, str) else _json_size(exp)
        return max(self.config.output_limit, 2 * size + 1024)

    def _run_job(self, w: WorkerProcess, job: dict, suite: TestSuite, stop_first: bool, msg_timeout: float) -> EvalResult:
        n = len(suite.tests)
        passed, first_fail, infra, stop_sent = 0, None, None, False
        w.send(job)
        while True:
            msg = w.recv(msg_timeout)
            op = msg.get("op")
            if op == "result":
                i = msg.get("i", -1)
                if msg.get("status") == "sandbox_error" or not isinstance(i, int) or not 0 <= i < n:
                    infra = infra or (msg.get("error") or f"bad result index {i!r}")
                    ok, verdict, detail = False, V.SANDBOX_ERROR, infra
                else:
                    ok, verdict, detail = self.judge(suite.tests[i], msg, suite)
                if ok:
                    passed += 1
                elif first_fail is None:
                    first_fail = (i, verdict, detail)
                if not ok and not stop_sent and (stop_first or verdict in (V.COMPILE_ERROR, V.SANDBOX_ERROR)):
                    w.send({"op": "stop"})
                    stop_sent = True
            elif op == "await":
                if not stop_sent:
                    w.send({"op": "next"})
            elif op == "done":
                break
            else:
                raise WorkerError(f"unexpected message {op!r}")
        if msg.get("cleanup"):
            log.warning("microcoder reward sandbox: %s", msg["cleanup"])
        if infra:
            return EvalResult(V.SANDBOX_ERROR, n, passed, f"sandbox: {infra}")
        if first_fail is not None:
            i, verdict, detail = first_fail
            return EvalResult(verdict, n, passed, f"test {i + 1}/{n}: {detail}")
        if passed == n:
            return EvalResult(V.CORRECT, n, passed, f"all {n} tests passed")
        return EvalResult(V.SANDBOX_ERROR, n, passed, f"only {passed} of {n} tests reported")

    @staticmethod
    def judge(test: TestCase, msg: dict, suite: TestSuite) -> tuple[bool, str, str]:
        """Compare one worker result with the expected output: ``(passed, verdict if failed, detail)``."""
        status = msg.get("status")
        if status != "ok":
            verdict = _STATUS_VERDICT.get(status, V.SANDBOX_ERROR)
            err = str(msg.get("error") or status)
            if status == "signal" and msg.get("stderr"):
                err += f"; stderr: {msg['stderr'][-200:]}"
            return False, verdict, err[-300:]
        if suite.mode == "stdin":
            actual = msg.get("stdout")
            if not isinstance(actual, str):
                return False, V.SANDBOX_ERROR, "worker returned no stdout"
        else:
            try:
                actual = parse_json_value(msg.get("value"))
            except (TypeError, ValueError, RecursionError) as e:
                return False, V.WRONG_ANSWER, f"return value not decodable: {e}"
        if suite.checker is not None:
            try:
                ok = bool(suite.checker(test.input, test.expected, actual))
            except Exception as e:  # a checker raising on malformed output rejects it
                return False, V.WRONG_ANSWER, f"checker rejected output ({type(e).__name__}: {e})"[:300]
            return ok, V.WRONG_ANSWER, "checker accepted" if ok else "checker rejected output"
        if suite.mode == "stdin":
            ok, why = compare_stdout(test.expected, actual, float_tol=suite.float_tol,
                                     case_sensitive=suite.case_sensitive, line_sensitive=suite.line_sensitive,
                                     unordered=suite.unordered)
        else:
            ok, why = compare_values(test.expected, actual, float_tol=suite.float_tol, unordered=suite.unordered)
            if not ok and test.apps_unwrap and isinstance(test.expected, list) and len(test.expected) == 1:
                ok2, _ = compare_values(test.expected[0], actual, float_tol=suite.float_tol, unordered=suite.unordered)
                ok = ok2 or ok
        return ok, V.WRONG_ANSWER, why


BIG_INT_KEY = "__mc_bigint__"
_BIG = 10**4000


def encode_big_ints(v):
    """Replace integers too long for ``json.dumps`` under Python's int-digit limit by ``{BIG_INT_KEY: hex}``
    (the worker, which runs without the limit, turns them back into ints)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return {BIG_INT_KEY: hex(v)} if abs(v) >= _BIG else v
    if isinstance(v, list):
        return [encode_big_ints(x) for x in v]
    if isinstance(v, dict):
        return {k: encode_big_ints(x) for k, x in v.items()}
    return v


def _json_size(v) -> int:
    """Approximate JSON size of a value in bytes, without converting big ints to decimal."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v.bit_length() * 10 // 33 + 2
    if isinstance(v, (list, tuple)):
        return 2 + sum(_json_size(x) + 1 for x in v)
    if isinstance(v, dict):
        return 2 + sum(len(str(k)) + 4 + _json_size(x) for k, x in v.items())
    return len(str(v)) + 2


_engine: Engine | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """The process-wide engine (configured from the environment); recreated after a fork of the host."""
    global _engine
    with _engine_lock:
        if _engine is None or _engine.pid != os.getpid():
            _engine = Engine(EngineConfig.from_env())
        return _engine


def reset_engine() -> None:
    """Close the process-wide engine (tests)."""
    global _engine
    with _engine_lock:
        if _engine is not None and _engine.pid == os.getpid():
            _engine.close()
        _engine = None
