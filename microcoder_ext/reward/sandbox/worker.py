"""Worker process: started once by the supervisor (``subprocess.Popen``, scrubbed env), pre-imports common
modules, probes the sandbox layers, then serves jobs. It never sees expected outputs.

Processes: the worker itself (W) never reads a job. For every job it forks a job process (J) that reads
the job from the command pipe, runs every test of the job in one sandboxed child (stdin tests one after
another, call-based tests as calls; a fresh child for the remaining tests when one crashes, times out or
must not be reused), answers, and exits. A sandboxed child is a copy of J's memory, so it could read
anything J holds: with a fresh J per job that is only its own job (its code and inputs), never the code or
inputs of an earlier job (another sample's, possibly correct, solution), which a long-lived worker would
still have in freed heap memory.

Off the critical path: W forks the next J as soon as the current one starts, and a J, while it waits for
its turn, makes its job's temp dir, landlock ruleset and memfds and forks its first child, which applies
the job-independent part of the sandbox (session, descriptors, cwd, death with J) and then waits for the
job's spec on a pipe; the job-dependent layers (rlimits, uid, landlock, seccomp) go on when the spec comes.
A child forked ahead holds nothing of any job (J has read none yet).

Protocol (JSON lines; supervisor -> worker on the Popen stdin, worker -> supervisor on its stdout):
  <- {"op": "hello", "pid", "layers": {...}, "fatal": str|None}           once at start
  -> {"op": "job", "mode": "stdin"|"call", "code", "tests", "caps", "limits", "uid", ...}
     ("uid": the sandbox uid of this job's children, within cfg ["uid", "uid_max"])
  <- {"op": "result", "i", "status", "stdout"|"value", "error", "time"}   per test, streamed
  <- {"op": "await", "next": k}   a child ended and tests remain   -> {"op": "next"} | {"op": "stop"}
  -> {"op": "stop"}               at any time: kill the running child, clean up
  <- {"op": "done", "cleanup": str|None}
Statuses: ok, exception, memory, timeout, output_limit, compile_error, unserialisable, signal, sandbox_error.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import math
import os
import select
import shutil
import signal
import site
import stat
import sys
import sysconfig
import tempfile
import time

from . import child, landlock, protocol, seccomp_bpf

STDLIB_PREIMPORT = (
    "abc array bisect builtins calendar cmath collections collections.abc contextlib copy dataclasses datetime "
    "decimal enum fractions functools hashlib heapq io itertools json math numbers operator queue random re "
    "socket statistics string struct textwrap threading time traceback types typing unicodedata weakref"
).split()  # socket: the start-up probe checks that a socket cannot be made (seccomp), also where it cannot import
#: third-party modules of LeetCode's Python 3 judge that solutions import (dependencies of microcoder-ext): pre-imported
#: so that they work even where the sandbox uid cannot read the interpreter's site-packages (no landlock, /root venv)
JUDGE_MODULES = ("sortedcontainers",)
SYSTEM_READ_PATHS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/etc/localtime",
                     "/etc/ld.so.cache", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
EXIT_REQUESTED, EXIT_EOF, EXIT_CRASH = 3, 4, 70


BASE_PREFIX = "microcoder-sbx-lk-"
NEXT_PREFIX, JOB_PREFIX = "next-", "job-"  # a job dir made ahead of its job / in use by a job


def make_base_dir(root: str) -> tuple[str, int]:
    """The worker's temp dir (job dirs go inside), ``flock``ed for the worker's lifetime so that a later
    worker can tell it from the dir of a worker that was SIGKILLed before it could clean up (a Ray actor
    shut down with its children, the OOM killer); those are removed here. Created under a name the
    scan ignores and renamed once locked, so a scan never sees it unlocked."""
    remove_stale_base_dirs(root)
    tmp = tempfile.mkdtemp(prefix="microcoder-sbx-new-", dir=root)
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.chmod(tmp, 0o711)
    base = os.path.join(root, BASE_PREFIX + os.path.basename(tmp)[len("microcoder-sbx-new-"):])
    os.rename(tmp, base)
    return base, fd


def remove_stale_base_dirs(root: str) -> None:
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
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
        finally:
            os.close(fd)


WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/var/lock")


def remove_files_of(uid: int) -> None:
    """Without landlock a program can create files in world-writable directories. Its uid belongs to its
    node slot while the job runs, so whatever that uid owns there (top level) is the job's: remove it.
    ``rmtree`` and ``unlink`` never follow a symlink the program may have planted."""
    for d in WORLD_WRITABLE_DIRS:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            try:
                st = os.lstat(path)
                if st.st_uid != uid:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def _preimport(names) -> list[str]:
    failed = []
    for name in names:
        try:
            __import__(name)
        except Exception:
            failed.append(name)
    return failed


def interpreter_paths() -> list[str]:
    """Directories the interpreter needs to read: stdlib (with lib-dynload), site-packages and the shared
    library dir. Not the whole prefix (a venv or conda prefix can hold logs, caches and data), and not
    the other ``sys.path`` entries (an editable install puts a project checkout there)."""
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        paths.update(site.getsitepackages())
    except AttributeError:
        pass
    paths.update(p for p in sys.path if p.endswith("lib-dynload"))
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        paths.add(libdir)
    return sorted(p for p in paths if p and os.path.isabs(p) and os.path.isdir(p))


def reachable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid:gid`` (no supplementary groups, no capabilities) can search every ancestor of
    ``path`` and list ``path`` itself, judged from the mode bits (ACLs ignored: an ACL can only make this
    answer pessimistic, which costs a mapped descriptor, never access)."""

    def allowed(st, need: int) -> bool:
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        return (st.st_mode >> shift) & need == need

    parts = os.path.realpath(path).split(os.sep)
    cur = os.sep
    try:
        for part in parts[1:]:
            if not allowed(os.stat(cur), 1):
                return False
            cur = os.path.join(cur, part)
        st = os.stat(cur)
        return allowed(st, 5) if stat.S_ISDIR(st.st_mode) else allowed(st, 4)
    except OSError:
        return False


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
        self.base, self._base_lock = make_base_dir(cfg.get("tmp_root") or tempfile.gettempdir())
        self.read_paths = interpreter_paths() + list(SYSTEM_READ_PATHS) + list(cfg.get("extra_read_paths", []))
        self.path_fds: list = []  # (real dir, O_PATH fd) for allowlisted dirs the sandbox uid cannot reach
        self.layers: dict = {}

    def send(self, msg: dict) -> None:
        protocol.write_all(self.out, protocol.encode(msg))

    # --- start-up probe ------------------------------------------------------------------------------
    def map_interpreter_dirs(self) -> None:
        """Interpreter directories under a private home (``/root/.pyenv``, a venv in ``/root``) are not
        reachable by the sandbox uid. Instead of keeping CAP_DAC_READ_SEARCH in the child (which would
        bypass file modes for every read landlock allows, and let it stat/getxattr/inotify any path on
        the machine), the worker opens an ``O_PATH`` descriptor per such directory (numbers >= 100, kept
        open in every child) and rewrites its own ``sys.path`` and package ``__path__`` lists to
        ``/proc/self/fd/N`` names once (``child.map_import_paths``); every job process and child inherits
        both. Only with landlock (without it ``..`` from such a descriptor could reach world-readable
        files under the private home) and only when dropping to a uid."""
        for p in sorted(self.read_paths, key=len):
            if any(p.startswith(q + os.sep) for q, _fd in self.path_fds):
                continue  # beneath a mapped directory already
            if os.path.isdir(p) and not reachable(p, self.uid, self.gid):
                try:
                    fd = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    continue
                high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
                os.close(fd)
                self.path_fds.append((p, high))
        if self.path_fds:
            self._saved_paths = _import_path_lists()
            child.map_import_paths({p: f"/proc/self/fd/{fd}" for p, fd in self.path_fds})

    def _unmap_interpreter_dirs(self) -> None:
        for lst, old in getattr(self, "_saved_paths", ()):
            lst[:] = old
        sys.path_importer_cache.clear()
        for _p, fd in self.path_fds:
            os.close(fd)
        self.path_fds = []

    def probe(self) -> dict:
        """Fork a child that applies each layer and checks that it works; returns the report."""
        root = os.geteuid() == 0
        report: dict = {"root": root}
        want = {"uid_drop": root and self.cfg.get("uid_drop", True),
                "landlock": self.cfg.get("landlock", True), "seccomp": self.cfg.get("seccomp", True)}
        try:
            seccomp_bpf.build(1)
        except seccomp_bpf.SeccompUnavailable as e:
            want["seccomp"] = False
            report["seccomp"] = f"unavailable: {e}"
        if want["landlock"]:
            try:
                report["landlock_abi"] = landlock.abi_version(self.libc)
            except landlock.LandlockUnavailable as e:
                want["landlock"] = False
                report["landlock"] = f"unavailable: {e}"
        if want["uid_drop"] and want["landlock"]:
            self.map_interpreter_dirs()
        if want["uid_drop"] and self.probe_uid != self.uid and not self._can_become(self.probe_uid):
            report["uid_range"] = f"uid {self.probe_uid} unusable here: every job uses uid {self.uid}"
            self.uid_max = self.probe_uid = self.uid
            self.cfg["uid_exclusive"] = False
        r, w = os.pipe()
        tmp = self._job_dir(self.probe_uid)
        ruleset = None
        try:
            if want["landlock"]:
                ruleset, _abi = landlock.create_ruleset(self.read_paths, [tmp, "/dev/null"], self.libc)
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(r)
                    rep = child.probe(self._limits(1, 1 << 20), want, tmp, ruleset, self.probe_uid, self.probe_uid,
                                      self.pid, self.libc, self.read_paths, self.path_fds)
                    os.write(w, json.dumps(rep).encode())
                except BaseException as e:
                    os.write(w, json.dumps({"probe_error": f"{type(e).__name__}: {e}"}).encode())
                finally:
                    os._exit(0)
            os.close(w)
            w = -1
            data = b""
            while chunk := os.read(r, 65536):
                data += chunk
            os.waitpid(pid, 0)
            report.update(json.loads(data or b"{}"))
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
            if ruleset is not None:
                os.close(ruleset)
            shutil.rmtree(tmp, ignore_errors=True)
        self.layers = {k: report.get(k) == "active" for k in ("uid_drop", "landlock", "seccomp")}
        if not (self.layers["landlock"] and self.layers["uid_drop"]):
            self._unmap_interpreter_dirs()
        if self.layers["seccomp"]:
            seccomp_bpf.program_for(1)  # build the filter template once, before any fork
        report["uid_max"] = self.uid_max
        return report

    def _can_become(self, uid: int) -> bool:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

    # --- jobs --------------------------------------------------------------------------------------
    def _job_dir(self, uid: int) -> str:
        d = tempfile.mkdtemp(dir=self.base)
        if os.geteuid() == 0 and self.layers.get("uid_drop", True):
            os.chown(d, uid, uid)
        os.chmod(d, 0o700)
        return d

    def _limits(self, n_tests: int, cap: int) -> dict:
        c = self.cfg
        per_test = float(c.get("timeout", 5.0))
        return {"memory_bytes": int(c.get("memory_mb", 2048)) << 20,
                "cpu_seconds": int(math.ceil(per_test * n_tests)), "per_test_cpu_seconds": per_test,
                "file_size_bytes": cap + 1, "open_files": int(c.get("open_files", 64)),
                "processes": int(c.get("processes", 256)), "stack_bytes": int(c.get("stack_mb", 256)) << 20}

    def serve(self) -> None:
        """W: hand the command pipe to one job process J at a time. The next J is forked (from this
        pristine process) while the current one serves, and released as soon as the current one reports
        its job done, so neither fork nor exit is on the critical path between jobs."""
        finished: list[int] = []
        # every object alive now (the pre-imported modules) goes to the permanent generation: the garbage
        # collector of a forked job process or child never walks them, so it does not copy their pages
        gc.freeze()
        nxt = self._fork_job_process()
        try:
            while True:
                pid, go_w, status_r, _next_tmp = nxt
                os.write(go_w, b"g")
                os.close(go_w)
                nxt = self._fork_job_process()
                marks = b""
                while not marks.endswith(b"D"):
                    chunk = os.read(status_r, 64)
                    if not chunk:  # J exited
                        break
                    marks += chunk
                os.close(status_r)
                if marks.endswith(b"D"):
                    finished.append(pid)  # exiting by itself: reaped later
                    _reap(finished, block=False)
                    continue
                _, status = os.waitpid(pid, 0)
                self._clean_base(keep=nxt[3])  # J ended without finishing its job (the next J's dir stays)
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
                if code in (EXIT_REQUESTED, EXIT_EOF):
                    return
                if marks.endswith(b"S"):  # J died inside a job: answer for it (infrastructure failure)
                    why = f"exit code {code}" if code >= 0 else f"signal {os.WTERMSIG(status)}"
                    self.send({"op": "result", "i": -1, "status": "sandbox_error",
                               "error": f"job process died ({why})"})
                    self.send({"op": "done", "cleanup": None})
        finally:
            pid, go_w, status_r, _next_tmp = nxt
            for fd in (go_w, status_r):
                os.close(fd)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reap(finished + [pid], block=True)

    def _fork_job_process(self) -> tuple[int, int, int, str]:
        """Fork a J that prepares its job (``prepare_job``, in a temp dir made here so that W knows its
        name), waits for W's go (one byte on a pipe), then serves one job."""
        tmp = tempfile.mkdtemp(prefix=NEXT_PREFIX, dir=self.base)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = EXIT_CRASH
            try:
                self.libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with W
                if os.getppid() != parent:
                    os._exit(EXIT_EOF)
                os.close(go_w)
                os.close(status_r)
                self.pid = os.getpid()
                try:
                    prep = self.prepare_job(tmp)
                except Exception:  # e.g. no space for the temp dir: run_job tries again and reports
                    prep = None
                go = os.read(go_r, 1)
                os.close(go_r)
                code = self._job_process(status_w, prep) if go == b"g" else EXIT_EOF
            finally:
                os._exit(code)
        os.close(go_r)
        os.close(status_w)
        return pid, go_w, status_r, tmp

    def _clean_base(self, keep: str | None = None) -> None:
        try:
            names = os.listdir(self.base)
        except OSError:
            return
        for name in names:
            path = os.path.join(self.base, name)
            if path != keep:
                shutil.rmtree(path, ignore_errors=True)

    def _job_process(self, status_w: int, prep: dict | None) -> int:
        """J: read messages until one job has been served; returns the exit code. ``prep``: what
        ``prepare_job`` made while J waited for its turn (None if that failed)."""
        self.pid = os.getpid()
        self.cmd = protocol.LineReader(self.cmd_in)
        while True:
            try:
                msg = self.cmd.read()
            except (protocol.ChannelClosed, OSError, ValueError):
                return EXIT_EOF
            op = msg.get("op")
            if op == "job":
                os.write(status_w, b"S")
                if msg.get("mode") == "call":
                    msg["tests"] = decode_big_ints(msg["tests"])
                self.cfg.update(msg.get("limits") or {})
                self.run_job(msg, prep)
                os.write(status_w, b"D")
                return 0
            if op == "ping":
                self.send({"op": "pong"})
            elif op == "exit":
                if prep is not None:
                    self.release_job(prep)
                return EXIT_REQUESTED
            # a late "stop"/"next" from a finished job is ignored

    def _job_uid(self, job: dict) -> int:
        uid = job.get("uid")
        if isinstance(uid, int) and not isinstance(uid, bool) and self.uid <= uid <= self.uid_max:
            return uid
        return self.uid

    # --- one job (in J) ------------------------------------------------------------------------------
    def prepare_job(self, tmp: str | None = None, spawn: bool = True) -> dict:
        """Everything of a job that does not depend on the job, done by J while it waits for its turn (off
        the critical path): the temp dir ``tmp`` (``next-*``, root-owned, renamed ``job-*`` and given to the
        job's uid when the job starts), the landlock ruleset, the memfds, and -- ``spawn`` -- a child forked
        ahead, past sandbox stage 1, that waits for its spec."""
        prep: dict = {"tmp": tmp or tempfile.mkdtemp(prefix=NEXT_PREFIX, dir=self.base), "fds": {}, "child": None}
        os.chmod(prep["tmp"], 0o700)
        fds = prep["fds"]
        try:
            fds["tmpdir_fd"] = os.open(prep["tmp"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            if self.layers.get("landlock"):
                fds["ruleset"], _ = landlock.create_ruleset(self.read_paths, [prep["tmp"], "/dev/null"], self.libc)
            else:
                fds["ruleset"] = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            for name in ("stdin", "stdout", "stderr", "code"):  # "code": the children's compiled-code cache
                fds[name] = os.memfd_create(f"mc-{name}", os.MFD_CLOEXEC)
            if spawn:
                prep["child"] = self._spawn(prep, None)
        except BaseException:
            self.release_job(prep)
            raise
        return prep

    def release_job(self, prep: dict) -> str | None:
        """Kill a child still alive, close the descriptors, remove the temp dir; returns a clean-up warning."""
        if prep.get("child"):
            _close_child(prep.pop("child"))
        for fd in prep["fds"].values():
            os.close(fd)
        prep["fds"] = {}
        shutil.rmtree(prep["tmp"], ignore_errors=True)
        return f"could not remove {prep['tmp']}" if os.path.exists(prep["tmp"]) else None

    def _spawn(self, prep: dict, spec: dict | None) -> dict:
        """Fork a sandboxed child. ``spec`` None: it stops after stage 1 and reads its spec from the control
        pipe (``_start``); else it runs the spec at once."""
        result_r, result_w = os.pipe2(os.O_CLOEXEC)
        ctl_r, ctl_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            try:
                child.run(spec, {**prep["fds"], "result": result_w, "ctl": ctl_r, "paths": self.path_fds,
                                 "parent_pid": self.pid}, self.libc)
            finally:
                os._exit(122)
        os.close(result_w)
        os.close(ctl_r)
        return {"pid": pid, "result": result_r, "ctl": ctl_w}

    def run_job(self, job: dict, prep: dict | None = None) -> None:
        uid = self._job_uid(job)
        cleanup = None
        try:
            prep = prep or self.prepare_job(spawn=False)
            job_dir = os.path.join(self.base, JOB_PREFIX + os.path.basename(prep["tmp"])[len(NEXT_PREFIX):])
            os.rename(prep["tmp"], job_dir)  # the ruleset and a child forked ahead hold the inode, not the name
            prep["tmp"] = job_dir
            if os.geteuid() == 0 and self.layers.get("uid_drop", True):
                os.chown(prep["tmp"], uid, uid)
            self._run_tests(job, prep, uid)
        except (protocol.ChannelClosed, BrokenPipeError):
            raise SystemExit(0)
        except Exception as e:  # infrastructure failure: report it, keep serving
            self.send({"op": "result", "i": -1, "status": "sandbox_error", "error": f"worker: {type(e).__name__}: {e}"})
        finally:
            if prep is not None:
                cleanup = self.release_job(prep)
            if not self.layers.get("landlock") and self.layers.get("uid_drop") and self.cfg.get("uid_exclusive"):
                remove_files_of(uid)
        self.send({"op": "done", "cleanup": cleanup})

    def _run_tests(self, job: dict, prep: dict, uid: int) -> None:
        """One child runs the tests from ``i`` on until it ends; a child that ended early (crash, timeout,
        state not reusable) is replaced by a fresh one for the rest, unless the supervisor says stop."""
        tests = job["tests"]
        n, i = len(tests), 0
        while i < n:
            nxt, stopped = self._run_child(job, prep, i, uid)
            if stopped or nxt >= n:
                return
            self.send({"op": "await", "next": nxt})
            while True:
                reply = self.cmd.read().get("op")
                if reply in ("next", "stop"):
                    break
            if reply == "stop":
                return
            i = nxt

    def _run_child(self, job: dict, prep: dict, start: int, uid: int) -> tuple[int, bool]:
        """Run tests ``start..`` in one child (the one forked ahead, else a fresh one). Returns (next index,
        stopped)."""
        tests = job["tests"]
        stdin_mode = job["mode"] == "stdin"
        caps = [int(c) for c in job["caps"]]
        fds = prep["fds"]
        if stdin_mode:
            _load_stdin(fds, tests[start])
        else:
            _reset_stdio(fds)
        nonce = os.urandom(16).hex()
        spec = {"mode": job["mode"], "code": job["code"], "tmpdir": prep["tmp"], "nonce": nonce, "uid": uid, "gid": uid,
                "parent_pid": self.pid, "layers": self.layers, "landlock": bool(self.layers.get("landlock")),
                "fn_name": job.get("fn_name"), "arg_types": job.get("arg_types"),
                "return_type": job.get("return_type"), "tests": None if stdin_mode else tests, "start": start,
                "n_tests": len(tests), "limits": self._limits(n_remaining(tests, start), max(caps[start:]))}
        t0 = time.monotonic()
        kid = prep.pop("child", None)
        if kid is not None:
            try:
                protocol.write_all(kid["ctl"], json.dumps(spec).encode() + b"\n")
            except OSError:  # the child forked ahead is gone: start a fresh one
                _close_child(kid)
                kid = None
        if kid is None:
            kid = self._spawn(prep, spec)
        try:
            return self._monitor(job, kid, fds, start, caps, nonce, t0)
        finally:
            _close_child(kid)

    def _monitor(self, job, kid, fds, start, caps, nonce, t0):
        """Relay the child's per-test records as results (stdin: also feed it the next test) until it ends,
        every test is done, the wall clock runs out or the supervisor says stop."""
        stdin_mode = job["mode"] == "stdin"
        tests = job["tests"]
        n = len(tests)
        pid, r = kid["pid"], kid["result"]
        wall = float(self.cfg.get("wall_timeout") or 2 * float(self.cfg.get("timeout", 5.0)) + 1)
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        buf, current, deadline = bytearray(), start, t0 + wall
        timed_out = stopped = over_cap = is_ready = announced_exit = False
        setup_error = None
        record_bytes = 0  # result-pipe bytes since the last accepted record (bounded by the test's cap)
        nonce_b = nonce.encode() + b" "
        watch = [r, self.cmd.fd] + ([pidfd] if pidfd is not None else [])
        exited = False
        while current < n and not announced_exit:
            if self.cmd.pending():
                ready = {self.cmd.fd}
            else:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                wait = deadline - now if pidfd is not None else min(0.002, deadline - now)
                ready = set(select.select(watch, [], [], wait)[0])
            if r in ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    watch.remove(r)
                buf += chunk
                record_bytes += len(chunk)
                if record_bytes > caps[current] + 4096:
                    over_cap = True
                    break
                batch = []  # the results of this chunk go out in one write
                while (nl := buf.find(b"\n")) >= 0 and current < n and not announced_exit:
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    rec = _record(line, nonce_b)
                    if rec is None:
                        continue  # not written by the driver (the program may write anything to fd 3)
                    s = rec["s"]
                    if s == "ready":
                        is_ready = True
                        continue
                    if not is_ready:
                        if s == "setup_failed":  # only before "ready": afterwards the program could forge it
                            setup_error = rec.get("e")
                        continue
                    if rec.get("i") != current:
                        continue
                    now = time.monotonic()
                    res = {"op": "result", "i": current, "time": round(now - t0, 6)}
                    if stdin_mode and s == "end":
                        res.update(_stdin_result(rec, fds, caps[current]))
                        announced_exit = bool(rec.get("x")) or rec.get("r") == "memory"
                    elif stdin_mode and s != "compile_error":
                        continue
                    else:
                        res.update(status=s, value=rec.get("v"), error=rec.get("e"))
                        announced_exit = s in ("memory", "compile_error")
                    batch.append(protocol.encode(res))
                    current += 1
                    record_bytes = len(buf)
                    t0, deadline = now, now + wall
                    if stdin_mode and current < n and not announced_exit:
                        _load_stdin(fds, tests[current])
                        try:
                            os.write(kid["ctl"], b"n")
                        except OSError:
                            pass  # the child is gone: seen below as its exit
                if batch:
                    protocol.write_all(self.out, b"".join(batch))
            if self.cmd.fd in ready:
                if self.cmd.read(timeout=1.0).get("op") == "stop":
                    stopped = True
                    break
            if not exited and (pidfd in ready if pidfd is not None else _reaped(pid)):
                exited = True
                if pidfd is not None:
                    watch.remove(pidfd)
            if exited and r not in watch:
                break
        status = _kill_and_reap(pid)
        if pidfd is not None:
            os.close(pidfd)
        kid["pid"] = None
        if stopped:
            return current, True
        if current >= n or announced_exit:
            return current, False
        # the child ended (or was stopped) in the middle of test `current`: answer for it
        res = {"op": "result", "i": current, "time": round(time.monotonic() - t0, 6),
               "stderr": _read_tail(fds["stderr"], 2000)}
        if not is_ready and not setup_error:
            setup_error = (f"the child ended before the sandbox was ready ({_describe(status)})" if not timed_out
                           else "the sandbox was not ready before the wall-clock limit")
        if setup_error:
            res.update(status="sandbox_error", error=f"sandbox setup failed: {setup_error}")
        elif timed_out:
            res.update(status="timeout", error=f"wall-clock limit {wall:.1f} s")
        elif over_cap:
            res.update(status="output_limit", error=f"result exceeds {caps[current]} bytes")
        elif stdin_mode:
            size = os.fstat(fds["stdout"]).st_size
            if size > caps[current]:
                res.update(status="output_limit", error=f"output exceeds {caps[current]} bytes")
            else:
                res.update(_exit_status(status, None))
                if res["status"] == "ok":  # exited with code 0 (e.g. os._exit(0)) after writing its output
                    res["stdout"] = os.pread(fds["stdout"], size, 0).decode("utf-8", "replace")
        else:
            st = _exit_status(status, None)
            if st["status"] == "ok":
                st = {"status": "exception", "error": "process exited (code 0) before returning a result"}
            res.update(st)
        self.send(res)
        return current + 1, False


def _record(line: bytes, nonce_b: bytes) -> dict | None:
    """A status record of the driver, or None for anything else on the result pipe."""
    if not line.startswith(nonce_b):
        return None
    try:
        rec = json.loads(line[len(nonce_b):], parse_int=_small_int)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or rec.get("s") not in _RECORD_STATUSES:
        return None
    if not isinstance(rec.get("v"), (str, type(None))) or not isinstance(rec.get("e"), (str, type(None))):
        return None
    if rec.get("r", "ok") not in _END_STATUSES or not isinstance(rec.get("x", 0), int):
        return None
    return rec


_END_STATUSES = frozenset({"ok", "exception", "memory"})


def _reset_stdio(fds: dict) -> None:
    for name in ("stdin", "stdout", "stderr"):
        os.ftruncate(fds[name], 0)
        os.lseek(fds[name], 0, os.SEEK_SET)


def _load_stdin(fds: dict, data: str) -> None:
    """Empty the stdio memfds and put the next test's input in stdin (the child reads from offset 0)."""
    _reset_stdio(fds)
    protocol.write_all(fds["stdin"], data.encode("utf-8", "surrogateescape"))
    os.lseek(fds["stdin"], 0, os.SEEK_SET)


def _stdin_result(rec: dict, fds: dict, cap: int) -> dict:
    """The result of one stdin run that ended normally (its ``end`` record)."""
    size = os.fstat(fds["stdout"]).st_size
    out = {"stderr": _read_tail(fds["stderr"], 2000)}
    if size > cap:
        out.update(status="output_limit", error=f"output exceeds {cap} bytes")
    elif rec.get("r") == "ok":
        out.update(status="ok", error=None, stdout=os.pread(fds["stdout"], size, 0).decode("utf-8", "replace"))
    else:
        out.update(status=rec.get("r"), error=rec.get("e"))
    return out


def _close_child(kid: dict) -> None:
    """Kill and reap a child (if still running) and close its pipes."""
    if kid.get("pid"):
        _kill_and_reap(kid["pid"])
        kid["pid"] = None
    for key in ("result", "ctl"):
        if kid.get(key) is not None:
            os.close(kid[key])
            kid[key] = None


_RECORD_STATUSES = frozenset({"ok", "exception", "memory", "unserialisable", "compile_error", "setup_failed", "end",
                              "ready"})


def _small_int(text: str) -> int:
    """Integers in a record envelope are test indices; a forged megabyte-long literal would take this
    process (which runs without the int-digit limit) minutes to convert."""
    if len(text) > 20:
        raise ValueError("integer literal too long")
    return int(text)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


def decode_big_ints(v):
    """Inverse of the supervisor's ``encode_big_ints`` (``{"__mc_bigint__": hex}`` -> int)."""
    if isinstance(v, dict):
        if len(v) == 1 and "__mc_bigint__" in v:
            return int(v["__mc_bigint__"], 16)
        return {k: decode_big_ints(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode_big_ints(x) for x in v]
    return v


def n_remaining(tests, start) -> int:
    return max(1, len(tests) - start)


def _import_path_lists() -> list:
    """(list, copy) for ``sys.path`` and every loaded package's ``__path__`` list."""
    out = [(sys.path, list(sys.path))]
    for mod in list(sys.modules.values()):
        try:
            path = vars(mod).get("__path__")
        except TypeError:
            continue
        if isinstance(path, list):
            out.append((path, list(path)))
    return out


def _reap(pids: list, block: bool) -> None:
    """waitpid the given children (those already gone are dropped from the list)."""
    for pid in list(pids):
        try:
            done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            pids.remove(pid)


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    if done:
        _STATUS[pid] = _
    return bool(done)


_STATUS: dict = {}


def _kill_and_reap(pid: int) -> int:
    """SIGKILL the child's process group (it called setsid) and the child; return its wait status."""
    if pid in _STATUS:
        return _STATUS.pop(pid)
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = 0
    return status


def _exit_status(status: int, end: dict | None) -> dict:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return {"status": "timeout", "error": "CPU time limit"}
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return {"status": "signal", "error": f"killed by {name}"}
    code = os.WEXITSTATUS(status)
    if code == 0:
        return {"status": "ok", "error": None}
    if end and end.get("r") in ("memory", "compile_error", "exception"):
        return {"status": end["r"], "error": end.get("e")}
    return {"status": "exception", "error": f"exit code {code}"}


def _read_tail(fd: int, n: int) -> str:
    size = os.fstat(fd).st_size
    off = max(0, size - n)
    return os.pread(fd, size - off, off).decode("utf-8", "replace")


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
        report = w.probe()
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
        shutil.rmtree(w.base, ignore_errors=True)
