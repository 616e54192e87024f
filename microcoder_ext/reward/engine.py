"""The supervisor: a pool of pre-started sandbox workers, safe to call from any thread (verl's thread
pool, OpenRLHF's ``asyncio.to_thread``) and from Ray actors (verl's ``remote`` reward manager). It alone
holds the expected outputs and does every comparison.

Start-up is lazy and cheap: nothing happens at import; the first ``evaluate`` starts one worker
(``subprocess.Popen`` of a fresh interpreter: the host process is never forked), more start only while
every started worker is busy, up to ``workers``. At interpreter exit (``atexit``) the workers are told
to exit; if the host dies without running atexit (SIGKILL of a Ray actor), each worker sees its command
pipe close and exits, and its sandboxed children die with it (parent-death signal, which they cannot
clear).

Concurrency: every job holds one node-wide slot while its sandboxed child runs (``concurrency.NodeSlots``:
flock'd lock files shared by all processes of the node, e.g. verl's 8 RewardLoopWorkers), so the node
never runs more sandboxed programs at once than it has slots (default: usable cores, cgroup quota
included). The slot index also selects the job's sandbox uid (``uid + slot``).

Sandbox design (details in ``sandbox/``): per job (one sample) a child forked from a per-job process of the
worker that runs every test of the job (a fresh child after a crash), in its own session, with real pipes/memfds, a private temp dir, rlimits, a wall-clock kill, an output
cap, a seccomp filter and landlock, and -- when the host runs as root -- an unprivileged uid with no
capability at all. Why no capability: an interpreter installed under a private home (``/root/.pyenv``, a
venv under ``/root``; ``/root`` is 0700) is not importable by the sandbox uid. The previous design kept
CAP_DAC_READ_SEARCH in the child for that, trusting landlock to confine reads; but that capability
bypasses the file modes of everything inside the allowlist (0600 files in a venv or an extra read
path), lets the child stat/getxattr/inotify any path on the machine (landlock does not mediate these),
and ``open_by_handle_at`` with it reads any file on a mounted filesystem unless seccomp denies it. Running
the child as uid 0 with every capability dropped was rejected too: uid 0 still owns every root file
(read/write through the owner bits wherever landlock is missing, e.g. GPU pods without the LSM), can
direct SIGIO at root processes and passes uid checks against the trainer. Chosen: the worker (root)
opens ``O_PATH`` descriptors of the allowlisted interpreter directories the sandbox uid cannot reach,
and the child imports through ``/proc/self/fd/N`` (the kernel does not check search permission on the
ancestors of a descriptor), while every file it opens is still checked against its mode and the
landlock allowlist. Only done when landlock is active (without it ``..`` from such a descriptor could
reach world-readable files under the private home); then non-preimported modules from such an
interpreter cannot be imported and the engine says so once.

Configuration (constructor arguments, or environment variables for the process-wide
:func:`~microcoder_ext.reward.backends.get_engine`):
  workers        MICROCODER_REWARD_WORKERS        max worker processes in this process (default: node slots)
  node_slots     MICROCODER_REWARD_NODE_SLOTS     node-wide concurrent sandboxes (default: usable cores,
                                                  cgroup CPU quota included; 0 = per-process limit only)
  slots_dir      MICROCODER_REWARD_SLOTS_DIR      lock directory shared by the node's processes
                                                  (default /dev/shm/microcoder-reward-slots-<euid>)
  slot_timeout   MICROCODER_REWARD_SLOT_TIMEOUT   seconds to wait for a slot before ``sandbox_error`` (600)
  worker_idle_timeout MICROCODER_REWARD_WORKER_IDLE_S  idle workers beyond the last used one exit (300 s)
  timeout        MICROCODER_REWARD_TIMEOUT        CPU seconds per test (default 5); wall clock 2x+1 s
                                                  (not counting waits for a CPU: sandbox/wall_clock.py)
  call_process   MICROCODER_REWARD_CALL_PROCESS   call-based tests: ``submission`` (default: one process runs
                                                  every test of a sample, module state kept, a fresh Solution()
                                                  per test, as LeetCode's judge) or ``test`` (a fresh process per
                                                  test); stdin programs always get a process per test
  memory_mb      MICROCODER_REWARD_MEMORY_MB      address-space limit per run, MiB (default 2048)
  output_limit   MICROCODER_REWARD_OUTPUT_LIMIT   bytes of output per test (default 16 MiB; raised to
                                                  2x the expected output + 1 KiB when that is larger)
  stop_on_first_failure                           default True (binary score; pass_rate is then a lower bound)
  require_seccomp MICROCODER_SANDBOX_REQUIRE_SECCOMP fail closed without seccomp (default 1)
  uid            MICROCODER_SANDBOX_UID           first sandbox uid (and gid) when running as root (60600);
                                                  slot k runs as uid + k, a worker's start-up probe as
                                                  uid + slots (60578-61183 is unused by systemd and
                                                  distributions and fits a 16-bit user namespace map)
  uid_per_slot   MICROCODER_SANDBOX_UID_PER_SLOT  0: every job runs as ``uid`` (default 1)
  require_uid_drop MICROCODER_SANDBOX_REQUIRE_UID_DROP as root, refuse to run when the uid drop fails (1)
  preimport      MICROCODER_SANDBOX_PREIMPORT     extra modules imported by the workers (comma list)
  extra_read_paths MICROCODER_SANDBOX_READ_PATHS  extra read-only paths for the programs (``:`` list)
  tmp_root       MICROCODER_SANDBOX_TMPDIR        where the per-job temp dirs live (default: $TMPDIR or /tmp)
  tmp_quota_mb   MICROCODER_SANDBOX_TMP_QUOTA_MB  size of a program's temp dir (a tmpfs of its own, 64 MiB); where
                                                  the worker cannot mount (no CAP_SYS_ADMIN) the temp dir is
                                                  read-only instead; 0: always read-only
  tmp_inodes     MICROCODER_SANDBOX_TMP_INODES    files + directories in that tmpfs (4096)
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass, field

from microcoder_ext.core import verdicts as V

from .concurrency import LocalSlots, NodeSlots, SlotsUnavailable, available_cores
from .ground_truth import TestCase, TestSuite
# shared with the other backends (judge.py); re-exported here for existing importers
from .judge import (BIG_INT_KEY, MiB, _STATUS_VERDICT, _env, _json_size,  # noqa: F401
                    call_test_lines, encode_big_ints, judge, output_cap)
from .result import EvalResult, safe_text
from .setup_error import RewardSetupError
from .sandbox import protocol
from .worker_client import WorkerError, WorkerProcess

log = logging.getLogger("microcoder_ext.reward")


def usable_cores() -> int:
    """Cores this process may use (affinity and cgroup CPU quota)."""
    return available_cores()


#: how call-based tests are run: every test of a sample in one process (LeetCode's judge), or one process per test
CALL_PROCESSES = ("submission", "test")


@dataclass
class EngineConfig:
    workers: int = 0  # 0: as many as node slots
    timeout: float = 5.0
    wall_timeout: float | None = None
    call_process: str = "submission"
    memory_mb: int = 2048
    output_limit: int = 16 * MiB
    stop_on_first_failure: bool = True
    require_seccomp: bool = True
    seccomp: bool = True
    landlock: bool = True
    uid_drop: bool = True
    require_uid_drop: bool = True
    uid: int = 60600
    uid_per_slot: bool = True
    node_slots: int | None = None  # None: usable cores; 0: per-process limit only
    slots_dir: str | None = None
    slot_timeout: float = 600.0
    worker_idle_timeout: float = 300.0
    preimport: list = field(default_factory=list)
    extra_read_paths: list = field(default_factory=list)
    tmp_root: str | None = None
    tmp_quota_mb: float = 64.0
    tmp_inodes: int = 4096
    debug: bool = False

    @classmethod
    def from_env(cls) -> "EngineConfig":
        return cls(workers=_env("MICROCODER_REWARD_WORKERS", 0, int),
                   timeout=_env("MICROCODER_REWARD_TIMEOUT", 5.0, float),
                   call_process=_env("MICROCODER_REWARD_CALL_PROCESS", "submission"),
                   memory_mb=_env("MICROCODER_REWARD_MEMORY_MB", 2048, int),
                   output_limit=_env("MICROCODER_REWARD_OUTPUT_LIMIT", 16 * MiB, int),
                   require_seccomp=_env("MICROCODER_SANDBOX_REQUIRE_SECCOMP", True, bool),
                   require_uid_drop=_env("MICROCODER_SANDBOX_REQUIRE_UID_DROP", True, bool),
                   uid=_env("MICROCODER_SANDBOX_UID", 60600, int),
                   uid_per_slot=_env("MICROCODER_SANDBOX_UID_PER_SLOT", True, bool),
                   node_slots=_env("MICROCODER_REWARD_NODE_SLOTS", None, int),
                   slots_dir=_env("MICROCODER_REWARD_SLOTS_DIR", None),
                   slot_timeout=_env("MICROCODER_REWARD_SLOT_TIMEOUT", 600.0, float),
                   worker_idle_timeout=_env("MICROCODER_REWARD_WORKER_IDLE_S", 300.0, float),
                   preimport=[m for m in _env("MICROCODER_SANDBOX_PREIMPORT", "").split(",") if m.strip()],
                   extra_read_paths=[p for p in _env("MICROCODER_SANDBOX_READ_PATHS", "").split(os.pathsep) if p],
                   tmp_root=_env("MICROCODER_SANDBOX_TMPDIR", None),
                   tmp_quota_mb=_env("MICROCODER_SANDBOX_TMP_QUOTA_MB", 64.0, float),
                   tmp_inodes=_env("MICROCODER_SANDBOX_TMP_INODES", 4096, int),
                   debug=_env("MICROCODER_SANDBOX_DEBUG", False, bool))

    def slot_count(self) -> int:
        return self.node_slots if self.node_slots else available_cores()

    def worker_cfg(self, uid_max: int | None = None, uid_exclusive: bool = False) -> dict:
        return {"uid": self.uid, "gid": self.uid, "uid_max": self.uid if uid_max is None else uid_max,
                "uid_exclusive": uid_exclusive,
                "require_seccomp": self.require_seccomp, "seccomp": self.seccomp, "landlock": self.landlock,
                "uid_drop": self.uid_drop, "require_uid_drop": self.require_uid_drop,
                "preimport": list(self.preimport), "extra_read_paths": list(self.extra_read_paths),
                "tmp_root": self.tmp_root, "tmp_quota_mb": self.tmp_quota_mb, "tmp_inodes": self.tmp_inodes,
                "timeout": self.timeout, "memory_mb": self.memory_mb,
                "debug": self.debug}


class Engine:
    """Thread-safe pool of sandbox workers. ``evaluate(code, suite)`` -> :class:`EvalResult`."""

    backend = "local"

    def __init__(self, config: EngineConfig | None = None, **overrides):
        cfg = config or EngineConfig()
        self.config = EngineConfig(**{**asdict(cfg), **overrides})
        if self.config.call_process not in CALL_PROCESSES:
            raise RewardSetupError(f"call_process (MICROCODER_REWARD_CALL_PROCESS) must be one of {', '.join(CALL_PROCESSES)}; "
                             f"got {self.config.call_process!r}")
        self.slot_count = self.config.slot_count()
        self.size = self.config.workers or self.slot_count
        self._cond = threading.Condition()
        self._idle: list[WorkerProcess] = []
        self._all: set[WorkerProcess] = set()
        self._started = 0
        self._closed = False
        self._slots = None
        self._slots_lock = threading.Lock()
        self.layers: dict | None = None
        self.fatal: str | None = None
        self.pid = os.getpid()
        root = os.geteuid() == 0 and self.config.uid_drop
        self.uid_max = self.config.uid + self.slot_count - 1 if root and self.config.uid_per_slot else self.config.uid
        self._uid_range_ok = True
        atexit.register(self.close)

    # --- node slots --------------------------------------------------------------------------------
    def slots(self):
        """The slot pool (created on first use): node-wide unless disabled or unusable."""
        with self._slots_lock:
            if self._slots is None:
                if self.config.node_slots == 0:
                    self._slots = LocalSlots(self.slot_count)
                else:
                    try:
                        self._slots = NodeSlots(self.slot_count, self.config.slots_dir)
                    except (SlotsUnavailable, OSError) as e:
                        log.warning("microcoder reward: node-wide sandbox slots unavailable (%s); limiting "
                                    "concurrency per process only", e)
                        self._slots = LocalSlots(self.slot_count)
            return self._slots

    def uid_exclusive(self) -> bool:
        """Whether a job's uid belongs to it alone on this node while it runs (node-wide slot per uid)."""
        return (self._uid_range_ok and self.config.uid_per_slot and os.geteuid() == 0 and self.config.uid_drop
                and self.uid_max - self.config.uid + 1 == self.slot_count
                and getattr(self.slots(), "node_wide", False))

    def job_uid(self, slot: int) -> int:
        if self.uid_max == self.config.uid or not self._uid_range_ok:
            return self.config.uid
        return self.config.uid + slot % (self.uid_max - self.config.uid + 1)

    # --- pool ------------------------------------------------------------------------------------
    def warmup(self, n: int | None = None) -> dict:
        """Start missing workers now (in parallel; all of them unless ``n``); returns the sandbox layer
        report. Optional: ``evaluate`` starts workers on demand."""
        self.slots()
        with self._cond:
            n = max(0, min(self.size if n is None else n, self.size) - self._started)
            self._started += n
        fresh = [self._spawn_safe() for _ in range(n)]
        ready = []
        for w in fresh:
            ok = w is not None and self._await_hello(w)
            if ok:
                ready.append(w)
        for w in ready:
            w.idle_since = time.monotonic()
        with self._cond:
            self._started -= len(fresh) - len(ready)
            self._idle.extend(ready)
            self._cond.notify_all()
        return self.layers or {}

    def _spawn_safe(self):
        try:
            w = WorkerProcess(self.config.worker_cfg(self.uid_max, self.uid_exclusive()))
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
        lay = hello.get("layers") or {}
        if lay.get("uid_range"):  # the worker found the uid range unusable: one shared uid
            self._uid_range_ok = False
        if hello.get("fatal"):
            self.fatal = hello["fatal"]
            self._discard(w)
            return False
        return True

    def _report(self, hello: dict) -> None:
        lay = hello.get("layers") or {}
        parts = [f"{k}={lay.get(k)}" for k in ("uid_drop", "seccomp", "landlock", "rlimits")]
        log.info("microcoder reward sandbox layers: %s (landlock ABI %s, capabilities %s, checks %s)", ", ".join(parts),
                 lay.get("landlock_abi"), lay.get("capabilities"), lay.get("checks"))
        for k in ("uid_drop", "seccomp", "landlock"):
            v = str(lay.get(k))
            if v != "active" and not v.startswith("not needed"):
                log.warning("microcoder reward sandbox: layer %s is %s", k, v)
        if lay.get("landlock") != "active":
            log.warning("microcoder reward sandbox: without landlock, sandboxed programs can read every file that "
                        "is readable by 'other' (e.g. a training set in a world-readable directory: keep data "
                        "in directories closed to other users) and see /proc")
        if lay.get("uid_range"):
            log.warning("microcoder reward sandbox: %s", lay["uid_range"])
        if lay.get("preimport_failed"):
            log.warning("microcoder reward sandbox: the workers could not import %s; programs that import them fail "
                        "(LeetCode's judge modules are dependencies of microcoder-ext: reinstall it)",
                        ", ".join(lay["preimport_failed"]))
        if lay.get("unreadable_paths"):
            log.warning("microcoder reward sandbox: %s not readable by the sandbox uid: model code cannot import "
                        "third-party packages from there (pre-imported: MICROCODER_SANDBOX_PREIMPORT)",
                        ", ".join(lay["unreadable_paths"]))

    def _discard(self, w: WorkerProcess, job_uid: int | None = None) -> None:
        w.kill()
        if job_uid is not None and self.uid_exclusive():
            kill_uid_processes(job_uid)  # belt and braces: nothing of that job may survive its worker
        with self._cond:
            self._all.discard(w)

    def _acquire(self) -> WorkerProcess | None:
        while True:
            with self._cond:
                while not self._idle and self._started >= self.size and not self.fatal and not self._closed:
                    self._cond.wait()
                if self.fatal or self._closed:
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

    def _release(self, w: WorkerProcess | None, broken: bool, job_uid: int | None = None) -> None:
        if w is not None and (broken or not w.alive() or self._closed):
            self._discard(w, job_uid if broken else None)
            w = None
        now = time.monotonic()
        retire = []
        with self._cond:
            if w is None:
                self._started -= 1
            else:
                w.idle_since = now
                self._idle.append(w)
                # workers idle for long (a burst is over) go away; the most recently used one stays
                limit = now - self.config.worker_idle_timeout
                retire = [x for x in self._idle[:-1] if getattr(x, "idle_since", now) < limit]
                if retire:
                    self._idle = [x for x in self._idle if x not in retire]
                    self._started -= len(retire)
            self._cond.notify()
        for x in retire:
            x.close()
            with self._cond:
                self._all.discard(x)

    def close(self) -> None:
        self._closed = True
        with self._cond:
            workers, self._idle = list(self._all), []
            self._cond.notify_all()
        with self._slots_lock:
            if self._slots is not None:
                self._slots.close()  # wakes threads waiting for a slot (they return sandbox_error)
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
        job = {"op": "job", "mode": suite.mode, "process": "test" if suite.mode == "stdin" else cfg.call_process,
               "code": program, "fn_name": suite.fn_name,
               "arg_types": suite.arg_types, "return_type": suite.return_type,
               "caps": [self._cap(t, suite) for t in suite.tests],
               "limits": {"timeout": timeout, "wall_timeout": wall, "memory_mb": memory_mb}}
        if suite.mode == "stdin":
            job["tests"] = [t.input for t in suite.tests]
        else:  # one JSON line per test, sent as bytes: the job process hands them to the test process unparsed
            job["tests_jsonl"], job["n_tests"] = call_test_lines(t.input for t in suite.tests), n
        slots = self.slots()
        slot = slots.acquire(self.config.slot_timeout)
        if slot is None:
            why = "engine closed" if self._closed else f"no free sandbox slot within {self.config.slot_timeout:.0f} s"
            return EvalResult(V.SANDBOX_ERROR, n, 0, f"sandbox unavailable: {why}", time.monotonic() - t0)
        try:
            w = self._acquire()
            if w is None:
                why = self.fatal or "engine closed"
                return EvalResult(V.SANDBOX_ERROR, n, 0, f"sandbox unavailable: {why}", time.monotonic() - t0)
            job["uid"] = uid = self.job_uid(slot)
            broken = True
            try:
                res = self._run_job(w, job, suite, stop_first, wall + 10)
                broken = False
            except WorkerError as e:
                res = EvalResult(V.SANDBOX_ERROR, n, 0, f"sandbox worker failure: {e}")
            finally:
                self._release(w, broken, uid)
        finally:
            slots.release(slot)
        res.time_s = time.monotonic() - t0
        return res

    def _cap(self, test: TestCase, suite: TestSuite) -> int:
        return output_cap(test.expected, self.config.output_limit)

    def _run_job(self, w: WorkerProcess, job: dict, suite: TestSuite, stop_first: bool, msg_timeout: float) -> EvalResult:
        n = len(suite.tests)
        passed, first_fail, infra, stop_sent = 0, None, None, False
        w.send(job)
        while True:
            msg = w.recv(msg_timeout)
            op = msg.get("op")
            if op in ("result", "results"):
                try:
                    results = [msg] if op == "result" else protocol.unpack_results(msg)
                except ValueError as e:
                    raise WorkerError(str(e)) from None
                for res in results:
                    i = res.get("i", -1)
                    if res.get("status") == "sandbox_error" or not isinstance(i, int) or not 0 <= i < n:
                        infra = infra or (res.get("error") or f"bad result index {i!r}")
                        ok, verdict, detail = False, V.SANDBOX_ERROR, infra
                    elif stop_first and first_fail is not None:
                        continue  # the verdict is decided: results the worker sent before the stop are not judged
                    else:
                        ok, verdict, detail = self.judge(suite.tests[i], res, suite)
                    if ok:
                        # with stop_first, tests the worker ran before the stop reached it do not count: num_passed
                        # is the run of passes before the first failure, whatever the timing
                        passed += not (stop_first and first_fail is not None)
                    elif first_fail is None:
                        first_fail = (i, verdict, detail)
                    if not ok and not stop_sent and (stop_first or verdict in (V.COMPILE_ERROR, V.SANDBOX_ERROR)):
                        w.send({"op": "stop"})
                        stop_sent = True
            elif op == "await":
                if not stop_sent:
                    w.send({"op": "next"})
            elif op == "alive":
                pass  # a test waited for a CPU past its plain wall limit (sandbox/wall_clock.py): keep waiting
            elif op == "done":
                break
            else:
                raise WorkerError(f"unexpected message {op!r}")
        if msg.get("cleanup"):
            # names in it come from the program's own tree: escaped and bounded like every result string
            log.warning("microcoder reward sandbox: %s", safe_text(msg["cleanup"], 1000))
        if infra:
            return EvalResult(V.SANDBOX_ERROR, n, passed, f"sandbox: {infra}")
        if first_fail is not None:
            i, verdict, detail = first_fail
            return EvalResult(verdict, n, passed, f"test {i + 1}/{n}: {detail}")
        if passed == n:
            return EvalResult(V.CORRECT, n, passed, f"all {n} tests passed")
        return EvalResult(V.SANDBOX_ERROR, n, passed, f"only {passed} of {n} tests reported")

    #: compare one worker result with the expected output (shared by every backend: ``judge.judge``)
    judge = staticmethod(judge)


def kill_uid_processes(uid: int) -> int:
    """SIGKILL every process whose real uid is ``uid`` (a per-slot sandbox uid); returns how many."""
    n = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            os.kill(int(name), signal.SIGKILL)
                            n += 1
                        break
        except (OSError, ValueError):
            pass
    return n
