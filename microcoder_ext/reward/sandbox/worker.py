"""Worker process: started once by the supervisor (``subprocess.Popen``, scrubbed env), pre-imports common
modules, probes the sandbox layers, then serves jobs, forking one sandboxed child per stdin test (or one
child for a whole call-based test list, restarted after a crash). It never sees expected outputs.

Protocol (JSON lines; supervisor -> worker on the Popen stdin, worker -> supervisor on its stdout):
  <- {"op": "hello", "pid", "layers": {...}, "fatal": str|None}           once at start
  -> {"op": "job", "mode": "stdin"|"call", "code", "tests", "caps", "limits", ...}
  <- {"op": "result", "i", "status", "stdout"|"value", "error", "time"}   per test, streamed
  <- {"op": "await", "next": k}   a child ended and tests remain   -> {"op": "next"} | {"op": "stop"}
  -> {"op": "stop"}               at any time: kill the running child, clean up
  <- {"op": "done", "cleanup": str|None}
Statuses: ok, exception, memory, timeout, output_limit, compile_error, unserialisable, signal, sandbox_error.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import select
import shutil
import signal
import site
import sys
import sysconfig
import tempfile
import time

from . import child, landlock, protocol, seccomp_bpf

STDLIB_PREIMPORT = (
    "abc array bisect builtins calendar cmath collections collections.abc contextlib copy dataclasses datetime "
    "decimal enum fractions functools hashlib heapq io itertools json math numbers operator queue random re "
    "statistics string struct textwrap threading time traceback types typing unicodedata weakref"
).split()
SYSTEM_READ_PATHS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/etc/localtime",
                     "/etc/ld.so.cache", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


def _preimport(names) -> list[str]:
    failed = []
    for name in names:
        try:
            __import__(name)
        except Exception:
            failed.append(name)
    return failed


def interpreter_paths() -> list[str]:
    """Directories the interpreter needs to read (prefixes, stdlib, site-packages)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        paths.update(site.getsitepackages())
    except AttributeError:
        pass
    return sorted(p for p in paths if p and os.path.exists(p))


class Worker:
    def __init__(self, cfg: dict, cmd_in: int, cmd_out: int):
        self.cfg = cfg
        self.cmd = protocol.LineReader(cmd_in)
        self.out = cmd_out
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.pid = os.getpid()
        self.uid, self.gid = int(cfg.get("uid", 65534)), int(cfg.get("gid", 65534))
        self.base = tempfile.mkdtemp(prefix="microcoder-sbx-", dir=cfg.get("tmp_root") or None)
        os.chmod(self.base, 0o711)
        self.read_paths = interpreter_paths() + list(SYSTEM_READ_PATHS) + list(cfg.get("extra_read_paths", []))
        self.layers: dict = {}

    def send(self, msg: dict) -> None:
        protocol.write_all(self.out, protocol.encode(msg))

    # --- start-up probe ------------------------------------------------------------------------------
    def probe(self) -> dict:
        """Fork a child that applies each layer and checks that it works; returns the report."""
        report: dict = {"root": os.geteuid() == 0}
        want = {"uid_drop": os.geteuid() == 0 and self.cfg.get("uid_drop", True),
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
        r, w = os.pipe()
        tmp = self._job_dir()
        ruleset = None
        try:
            if want["landlock"]:
                ruleset, _abi = landlock.create_ruleset(self.read_paths, [tmp, "/dev/null"], self.libc)
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(r)
                    rep = child.probe(self._limits(1, 1 << 20), want, tmp, ruleset, self.uid, self.gid, self.pid,
                                      self.libc, self.read_paths)
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
        return report

    # --- jobs --------------------------------------------------------------------------------------
    def _job_dir(self) -> str:
        d = tempfile.mkdtemp(dir=self.base)
        if os.geteuid() == 0 and self.layers.get("uid_drop", True):
            os.chown(d, self.uid, self.gid)
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
        while True:
            try:
                msg = self.cmd.read()
            except (protocol.ChannelClosed, OSError, ValueError):
                return
            op = msg.get("op")
            if op == "job":
                if msg.get("mode") == "call":
                    msg["tests"] = decode_big_ints(msg["tests"])
                self.cfg.update(msg.get("limits") or {})
                self.run_job(msg)
            elif op == "ping":
                self.send({"op": "pong"})
            elif op == "exit":
                return
            # a late "stop"/"next" from a finished job is ignored

    def run_job(self, job: dict) -> None:
        tmp = self._job_dir()
        fds: dict = {}
        cleanup = None
        try:
            if self.layers.get("landlock"):
                fds["ruleset"], _ = landlock.create_ruleset(self.read_paths, [tmp, "/dev/null"], self.libc)
            for name in ("stdin", "stdout", "stderr"):
                fds[name] = os.memfd_create(f"mc-{name}", os.MFD_CLOEXEC)
            self._run_tests(job, tmp, fds)
        except (protocol.ChannelClosed, BrokenPipeError):
            raise SystemExit(0)
        except Exception as e:  # infrastructure failure: report it, keep serving
            self.send({"op": "result", "i": -1, "status": "sandbox_error", "error": f"worker: {type(e).__name__}: {e}"})
        finally:
            for fd in fds.values():
                os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.exists(tmp):
                cleanup = f"could not remove {tmp}"
        self.send({"op": "done", "cleanup": cleanup})

    def _run_tests(self, job: dict, tmp: str, fds: dict) -> None:
        mode, tests, caps = job["mode"], job["tests"], job["caps"]
        n, i = len(tests), 0
        while i < n:
            nxt, stopped = self._run_child(job, tmp, fds, i)
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

    def _run_child(self, job: dict, tmp: str, fds: dict, start: int) -> tuple[int, bool]:
        """Fork one child for test ``start`` (stdin) or tests ``start..`` (call). Returns (next index, stopped)."""
        mode, tests = job["mode"], job["tests"]
        stdin_mode = mode == "stdin"
        cap = int(job["caps"][start]) if stdin_mode else max(int(c) for c in job["caps"][start:])
        for name in ("stdin", "stdout", "stderr"):
            os.ftruncate(fds[name], 0)
            os.lseek(fds[name], 0, os.SEEK_SET)
        if stdin_mode:
            data = tests[start].encode("utf-8", "surrogateescape")
            protocol.write_all(fds["stdin"], data)
            os.lseek(fds["stdin"], 0, os.SEEK_SET)
        nonce = os.urandom(16).hex()
        spec = {"mode": mode, "code": job["code"], "tmpdir": tmp, "nonce": nonce, "uid": self.uid, "gid": self.gid,
                "parent_pid": self.pid, "layers": self.layers, "fn_name": job.get("fn_name"),
                "arg_types": job.get("arg_types"), "return_type": job.get("return_type"),
                "tests": None if stdin_mode else tests, "start": start,
                "limits": self._limits(1 if stdin_mode else n_remaining(tests, start), cap)}
        r, w = os.pipe2(os.O_CLOEXEC)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                child.run(spec, {**fds, "result": w}, self.libc)
            finally:
                os._exit(122)
        os.close(w)
        try:
            return self._monitor(job, pid, r, fds, start, cap, nonce, t0)
        finally:
            os.close(r)

    def _monitor(self, job, pid, r, fds, start, cap, nonce, t0):
        stdin_mode = job["mode"] == "stdin"
        wall = float(self.cfg.get("wall_timeout") or 2 * float(self.cfg.get("timeout", 5.0)) + 1)
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        buf, current, deadline = bytearray(), start, t0 + wall
        timed_out = stopped = over_cap = False
        setup_error = end = last = None
        records_bytes = 0
        nonce_b = nonce.encode() + b" "
        watch = [r, self.cmd.fd] + ([pidfd] if pidfd is not None else [])
        exited = False
        try:
            while True:
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
                    records_bytes += len(chunk)
                    if records_bytes > cap + 4096:
                        over_cap = True
                        break
                    while (nl := buf.find(b"\n")) >= 0:
                        line = bytes(buf[:nl])
                        del buf[: nl + 1]
                        if not line.startswith(nonce_b):
                            continue  # not written by the driver
                        try:
                            rec = json.loads(line[len(nonce_b):])
                        except (ValueError, RecursionError):
                            continue
                        if not isinstance(rec, dict) or rec.get("s") not in _RECORD_STATUSES:
                            continue  # anything else on fd 3 is ignored (the program may write there)
                        s = rec.get("s")
                        if not isinstance(rec.get("v"), (str, type(None))) or not isinstance(rec.get("e"), (str, type(None))):
                            continue
                        if s == "setup_failed":
                            setup_error = rec.get("e")
                        elif stdin_mode:
                            if s in ("end", "compile_error"):
                                end = {"r": rec.get("r", s), "e": rec.get("e")}
                        elif rec.get("i") == current:
                            now = time.monotonic()
                            self.send({"op": "result", "i": current, "status": s, "value": rec.get("v"),
                                       "error": rec.get("e"), "time": round(now - t0, 6)})
                            t0, deadline, current, last = now, now + wall, current + 1, s
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
        finally:
            status = _kill_and_reap(pid)
            if pidfd is not None:
                os.close(pidfd)
        elapsed = round(time.monotonic() - t0, 6)
        if stopped:
            return current, True
        err_tail = _read_tail(fds["stderr"], 2000)
        if stdin_mode:
            res = {"op": "result", "i": start, "time": elapsed, "stderr": err_tail}
            size = os.fstat(fds["stdout"]).st_size
            if setup_error:
                res.update(status="sandbox_error", error=f"sandbox setup failed: {setup_error}")
            elif timed_out:
                res.update(status="timeout", error=f"wall-clock limit {wall:.1f} s")
            elif size > cap:
                res.update(status="output_limit", error=f"output exceeds {cap} bytes")
            else:
                res.update(_exit_status(status, end))
                if res["status"] == "ok":
                    res["stdout"] = os.pread(fds["stdout"], size, 0).decode("utf-8", "replace")
            self.send(res)
            return start + 1, False
        # a child that reported memory/compile_error exited on purpose: the next child resumes after it
        if current < len(job["tests"]) and last not in ("memory", "compile_error"):
            res = {"op": "result", "i": current, "time": elapsed, "stderr": err_tail}
            if setup_error:
                res.update(status="sandbox_error", error=f"sandbox setup failed: {setup_error}")
            elif timed_out:
                res.update(status="timeout", error=f"wall-clock limit {wall:.1f} s")
            elif over_cap:
                res.update(status="output_limit", error=f"result exceeds {cap} bytes")
            else:
                st = _exit_status(status, None)
                if st["status"] == "ok":
                    st = {"status": "exception", "error": "process exited (code 0) before returning a result"}
                res.update(st)
            self.send(res)
            current += 1
        return current, False


_RECORD_STATUSES = frozenset({"ok", "exception", "memory", "unserialisable", "compile_error", "setup_failed", "end"})


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


def main() -> None:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    cmd_in, cmd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    failed = _preimport(STDLIB_PREIMPORT + list(cfg.get("preimport", [])))
    w = Worker(cfg, cmd_in, cmd_out)
    try:
        report = w.probe()
        report["preimport_failed"] = failed
        fatal = None
        if cfg.get("require_seccomp", True) and not w.layers.get("seccomp"):
            fatal = (f"seccomp filter unavailable ({report.get('seccomp')}); refusing to run model code "
                     "(set MICROCODER_SANDBOX_REQUIRE_SECCOMP=0 to run without it)")
        w.send({"op": "hello", "pid": os.getpid(), "layers": report, "fatal": fatal})
        if fatal is None:
            w.serve()
    finally:
        shutil.rmtree(w.base, ignore_errors=True)
