"""Worker process: started once by the supervisor (``subprocess.Popen``, scrubbed env), pre-imports common
modules, probes the sandbox layers (:mod:`.probe`), then serves jobs. It never sees expected outputs.

Processes (one fork per job, on no critical path):
  W  this process after start-up: the fork server (``forkserver``). It never reads a job, a result or an output:
     it forks every sandboxed child C ahead of its job (sandbox stage 1 done: own session, descriptors, temp dir,
     death with W; then C waits for its spec), hands C's descriptors to M, reaps C and tells M how it ended.
  M  the job process (``jobs``), forked once from W right after start-up: it owns the supervisor's pipes, reads
     each job, sends it to a child taken from W (job-dependent layers go on in C: rlimits, uid, landlock,
     seccomp), enforces the per-test limits from outside (wall clock, CPU budget, output cap, every rlimit of a
     reused child), relays the results and removes the child's temp dir.
  C  one per job (a fresh one for the remaining tests after a crash, a timeout or a state or limit that must not
     be reused), running every test of the job: a fresh process per test (``child._launch_tests``), or, for
     call-based tests, one process per submission, C itself, each test a call (``child._run_submission``).
A child is a copy of W's memory, and W never held any job: a child holds only its own job (what M writes to its
control pipe and memfds), never the code or inputs of an earlier job (another sample's, possibly correct,
solution). M holds all of them, and nothing is ever forked from M.

Temp dirs: where W may mount (root), it runs in a private mount namespace and each child's temp dir is a tmpfs of
``tmp_quota_mb`` MiB and ``tmp_inodes`` inodes (``mounts``), removed with one lazy unmount; elsewhere the programs
get a read-only temp dir (no unbounded writes). Every other removal goes through ``tree.remove_tree`` (iterative,
never follows symlinks, opens up modes, never raises).

Protocol (JSON lines; supervisor -> worker on the Popen stdin, worker -> supervisor on its stdout):
  <- {"op": "hello", "pid", "layers": {...}, "fatal": str|None, "base"}   once at start (from W)
  -> {"op": "job", "mode": "stdin"|"call", "code", "tests" (stdin: the input texts) | "tests_jsonl" + "n_tests"
         (call: a bytes payload, one JSON line of arguments per test: ``judge.call_test_lines``), "caps", "limits",
         "uid", "process": "test"|"submission", ...}
     ("uid": the sandbox uid of this job's children, within cfg ["uid", "uid_max"])
  <- {"op": "result", "i", "status", "stdout"|"value", "error", "time"}   per test, streamed (from M)
  <- {"op": "results", "items": [[i, status, error, len], ...], "values"}   one process per submission: the tests
                                  that one read of its records ended (``protocol.pack_results``)
  <- {"op": "await", "next": k}   a child ended and tests remain   -> {"op": "next"} | {"op": "stop"}
  <- {"op": "alive", "i": k}      test k passed its plain wall-clock limit while it waited for a CPU: its deadline
                                  moved later (sandbox/wall_clock.py); the supervisor keeps waiting
  -> {"op": "stop"}               at any time: kill the running child, clean up
  <- {"op": "done", "cleanup": str|None}
Statuses: ok, exception, memory, timeout, output_limit, compile_error, unserialisable, signal, sandbox_error.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import os
import signal
import socket
import stat
import sys

from . import forkserver, jobs, mounts, probe, protocol, tree

STDLIB_PREIMPORT = (
    "abc array bisect builtins calendar collections collections.abc contextlib copy dataclasses datetime "
    "enum functools heapq io itertools json math numbers operator queue random re "
    "socket string struct textwrap threading time traceback types typing weakref"
).split()  # socket: the start-up probe checks that a socket cannot be made (seccomp), also where it cannot import
#: Every test process is forked from its launcher, which is a fork of this worker, and a fork and an exit cost in
#: proportion to the memory mappings and pages inherited (each extension module is ~5 mappings): modules that few
#: programs use, mostly extension modules, are imported by a job's launcher only when its program names them
#: (``child.ON_DEMAND_IMPORT``), not by the worker (``tempfile``, whose ``shutil`` loads zlib, bz2 and lzma, is not
#: used here for the same reason). Measured per test: bench/reward_throughput.py.
#: third-party modules of LeetCode's Python 3 judge that solutions import (dependencies of microcoder-ext): pre-imported
#: so that they work even where the sandbox uid cannot read the interpreter's site-packages (no landlock, /root venv)
JUDGE_MODULES = ("sortedcontainers",)
EXIT_REQUESTED, EXIT_EOF, EXIT_CRASH = jobs.EXIT_REQUESTED, jobs.EXIT_EOF, 70
MiB = 1 << 20


BASE_PREFIX = "microcoder-sbx-lk-"
NEXT_PREFIX = "next-"  # a child's temp dir (made ahead of its job)


def _mkdtemp(prefix: str, parent: str) -> str:
    """A new directory (mode 0700) with a random name under ``parent``, as ``tempfile.mkdtemp`` makes one."""
    for _ in range(100):
        path = os.path.join(os.path.abspath(parent), prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary directory name under {parent}")


def _default_tmp() -> str:
    """``tempfile.gettempdir()`` in the worker's clean environment (no TMPDIR): the first writable of /tmp,
    /var/tmp, /usr/tmp."""
    for d in ("/tmp", "/var/tmp", "/usr/tmp"):
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    raise FileNotFoundError("no usable temporary directory (/tmp, /var/tmp, /usr/tmp)")


def make_base_dir(root: str) -> tuple[str, int]:
    """The worker's temp dir (job dirs go inside), ``flock``ed for the worker's lifetime so that a later
    worker can tell it from the dir of a worker that was SIGKILLed before it could clean up (a Ray actor
    shut down with its children, the OOM killer); those are removed here. Created under a name the
    scan ignores and renamed once locked, so a scan never sees it unlocked."""
    remove_stale_base_dirs(root)
    tmp = _mkdtemp("microcoder-sbx-new-", root)
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.chmod(tmp, 0o711)
    base = os.path.join(root, BASE_PREFIX + os.path.basename(tmp)[len("microcoder-sbx-new-"):])
    os.rename(tmp, base)
    return base, fd


def remove_stale_base_dirs(root: str) -> None:
    """Remove the base dirs of workers that died without cleaning up (not ``flock``ed by a live worker), whatever
    their programs left in them (``tree.remove_tree``); a dir that cannot be removed stays (never an error: the new
    worker's own dir has a fresh name)."""
    try:
        names = [n for n in os.listdir(root) if n.startswith(BASE_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live worker (or its job process)?
            tree.remove_tree(path)
        except OSError:
            pass
        finally:
            os.close(fd)


def _preimport(names) -> list[str]:
    failed = []
    for name in names:
        try:
            __import__(name)
        except Exception:
            failed.append(name)
    return failed


class Worker:
    def __init__(self, cfg: dict, cmd_in: int, cmd_out: int):
        self.cfg = cfg
        self.cmd_in = cmd_in
        self.cmd = protocol.LineReader(cmd_in)
        self.out = cmd_out
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.pid = os.getpid()
        self.uid, self.gid = int(cfg.get("uid", 65534)), int(cfg.get("gid", cfg.get("uid", 65534)))
        self.uid_max = max(self.uid, int(cfg.get("uid_max", self.uid)))
        # the start-up probe runs as the uid just above the job range, so that it never shares a uid with
        # a program of another process's job (with a single shared uid there is nothing to keep apart)
        self.probe_uid = self.uid_max + 1 if cfg.get("uid_exclusive") else self.uid
        self.base, self._base_lock = make_base_dir(cfg.get("tmp_root") or _default_tmp())
        self.read_paths = (probe.interpreter_paths() + list(probe.SYSTEM_READ_PATHS)
                           + list(cfg.get("extra_read_paths", [])))
        self.path_fds: list = []  # (real dir, O_PATH fd) for allowlisted dirs the sandbox uid cannot reach
        self.saved_import_paths: list = []  # (list, copy) of the import paths the probe rewrote to path_fds
        self.layers: dict = {}
        self.quota_bytes = int(float(cfg.get("tmp_quota_mb", 64)) * MiB)
        self.quota_inodes = int(cfg.get("tmp_inodes", 4096))
        self.private_ns = False
        self.quota_error = self._isolate_base()  # None: every child's temp dir gets the quota tmpfs
        self.world_writable_dirs = list(probe.WORLD_WRITABLE_DIRS)

    def _isolate_base(self) -> str | None:
        """Enter a private mount namespace and mount a small tmpfs on the base dir (``mounts``); the reason when
        that is impossible (then the programs' temp dirs are read-only directories of the base dir)."""
        if self.quota_bytes <= 0:
            return "disabled (tmp_quota_mb = 0)"
        try:
            mounts.private_namespace(self.libc)
            self.private_ns = True
            mounts.mount_tmpfs(self.base, 4 * MiB, 1024, self.libc, mode=0o711)
        except OSError as e:
            return str(e)
        return None

    # --- the children's temp dirs ----------------------------------------------------------------------
    def child_dir(self) -> tuple[str, bool]:
        """A fresh temp dir for one child: ``(path, quota)``. With the quota: a tmpfs of its own (mode 0700; given
        to the job's uid when the job starts). Without: a directory the program can read but not write (root-owned
        0755 for a dropped uid; landlock grants only reads beneath it)."""
        d = _mkdtemp(NEXT_PREFIX, self.base)
        if self.quota_error is None:
            try:
                mounts.mount_tmpfs(d, self.quota_bytes, self.quota_inodes, self.libc)
            except OSError:
                os.rmdir(d)
                raise
            return d, True
        os.chmod(d, 0o755 if os.geteuid() == 0 and self.layers.get("uid_drop", True) else 0o700)
        return d, False

    def release_child_dir(self, d: str, quota: bool) -> str | None:
        """Remove a child's temp dir (one lazy unmount frees everything a program put in its tmpfs); a warning
        or None. Never raises."""
        if quota:
            mounts.unmount(d, self.libc)
        try:
            os.rmdir(d)
            return None
        except FileNotFoundError:
            return None
        except OSError:
            why = tree.remove_tree(d)
            return f"could not remove {d}: {why}" if why else None

    def remove_base(self) -> None:
        """At exit: unmount the base tmpfs with every child's (lazily) and remove the base dir."""
        if self.private_ns:
            mounts.unmount(self.base, self.libc)
        tree.remove_tree(self.base)
        try:
            os.close(self._base_lock)
        except OSError:
            pass

    def send(self, msg: dict) -> None:
        protocol.write_all(self.out, protocol.encode(msg))

    # --- serving -----------------------------------------------------------------------------------------
    def serve(self) -> int:
        """Fork the job process M (it takes over the supervisor's pipes), then be the fork server until M exits;
        returns M's exit code."""
        # every object alive now (the pre-imported modules) goes to the permanent generation: the garbage
        # collector of a forked child never walks them, so it does not copy their pages
        gc.freeze()
        w_sock, m_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = EXIT_CRASH
            try:
                w_sock.close()
                self.libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with W
                if os.getppid() != parent:
                    os._exit(EXIT_EOF)
                self.libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: its memory (every job) stays closed
                code = jobs.JobServer(self, m_sock).serve()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else EXIT_CRASH
            finally:
                os._exit(code)
        m_sock.close()
        os.close(self.cmd_in)  # W never reads a job, nor writes to the supervisor after the hello
        os.close(self.out)
        # orphans of the sandboxed children (a test process whose launcher was killed at the end of its job) come
        # to W, which reaps them: no zombie left to a container's pid 1 that never reaps, and their CPU time is
        # accounted to W as to every other descendant of the worker
        self.libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        return forkserver.ForkServer(self, w_sock).serve(pid)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main() -> None:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    cmd_in, cmd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    # a write to the supervisor after it died raises BrokenPipeError, so that the worker exits through its
    # clean-up (temp dir, pre-forked job process) instead of dying on SIGPIPE
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)  # the same on a polite kill
    failed = _preimport(STDLIB_PREIMPORT + list(JUDGE_MODULES) + list(cfg.get("preimport", [])))
    w = Worker(cfg, cmd_in, cmd_out)
    try:
        report = probe.run(w)
        report["preimport_failed"] = failed
        fatal = None
        if cfg.get("require_seccomp", True) and not w.layers.get("seccomp"):
            fatal = (f"seccomp filter unavailable ({report.get('seccomp')}); refusing to run model code "
                     "(set MICROCODER_SANDBOX_REQUIRE_SECCOMP=0 to run without it)")
        elif (report.get("root") and cfg.get("uid_drop", True) and cfg.get("require_uid_drop", True)
              and not w.layers.get("uid_drop")):
            fatal = (f"running as root and cannot drop to uid {w.uid} ({report.get('uid_drop')}); refusing to run "
                     "model code as uid 0 (set MICROCODER_SANDBOX_UID to a usable uid, or "
                     "MICROCODER_SANDBOX_REQUIRE_UID_DROP=0 to run as uid 0 without capabilities)")
        elif report.get("probe_error"):
            fatal = f"sandbox probe failed: {report['probe_error']}"
        w.send({"op": "hello", "pid": os.getpid(), "layers": report, "fatal": fatal, "base": w.base})
        if fatal is None:
            w.serve()
    finally:
        w.remove_base()
