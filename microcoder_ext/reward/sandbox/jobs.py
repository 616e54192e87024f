"""The job process (M): reads jobs from the supervisor, runs each one in sandboxed children taken from the fork
server (``forkserver``), enforces every per-test limit from outside the child, relays the results.

Long-lived (one per worker): it holds the code, inputs and outputs of every job it served, in live or freed
memory, which is why no sandboxed child is ever forked from it. Per test it enforces, none of which the program can
lift: the wall clock (``wall_timeout``, from the test's start, not counting the time the child waited for a CPU:
``wall_clock.WallClock``), the CPU budget (``cpu_clock.CpuBudget``: the
child's process CPU clock, all threads), the cap on result bytes; and before a child runs another test (stdin mode:
before each test; call mode: after each batch of results) it checks every resource limit and the scheduling of the
child with ``prlimit``/``getpriority`` against what the job set, and takes a fresh child for the rest if anything
changed.

Verdict rule: ``sandbox_error`` only for what no program can cause: a child that could not be prepared or ended
before its "ready" record (the program had not run yet), a missing exit status from the fork server, an exception
here. Whatever a program does after "ready" (crash, stop or kill itself, close or fill descriptors, forge records,
fill its temp dir) ends as a program status (exception, signal, timeout, memory, output_limit, ...).
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import time
from collections import deque

from . import forkserver, limits, protocol, records, tree
from .cpu_clock import CpuBudget
from .wall_clock import WallClock

EXIT_REQUESTED, EXIT_EOF = 3, 4
STATUS_WAIT_S = 10.0  # how long the fork server may take to report a child's exit
CHILD_WAIT_S = 30.0  # ... or to hand over a child
LAUNCHER_CPU_S = 600  # RLIMIT_CPU of a launcher (it forks and waits: ~1 ms of CPU per test)
WALL_STEP_S = 0.25  # the shortest wait between two looks at a test's moved wall-clock deadline


def per_submission(job: dict) -> bool:
    """Whether one process, the launcher itself, runs every test of a child (call mode, ``job["process"] ==
    "submission"``, as LeetCode's judge does) instead of one process per test."""
    return job.get("mode") == "call" and job.get("process") == "submission"


def job_inputs(job: dict) -> list:
    """What a child gets as each test's input: stdin mode, the input text (``job["tests"]``); call mode, the test's
    arguments as one line of JSON (bytes, split from ``job["tests_jsonl"]``, never parsed here: the test process
    parses them)."""
    if job.get("mode") != "call":
        return job["tests"]
    n, blob = job.get("n_tests"), job.get("tests_jsonl")
    if not isinstance(n, int) or not isinstance(blob, (bytes, bytearray)):
        raise ValueError("a call-mode job needs tests_jsonl (bytes) and n_tests")
    lines = bytes(blob).split(b"\n") if n else []
    if len(lines) != n:
        raise ValueError(f"tests_jsonl holds {len(lines)} lines for {n} tests")
    return lines


class ChildUnavailable(RuntimeError):
    """The fork server could not provide a child (infrastructure)."""


class Kid:
    """A sandboxed child taken from the fork server: its pid, M's ends of its descriptors, its temp dir."""

    def __init__(self, msg: dict, fds: list[int]):
        self.pid = int(msg["pid"])
        self.tmp, self.quota = msg["tmp"], bool(msg.get("quota"))
        named = dict(zip(forkserver.CHILD_FDS, fds))
        self.result, self.ctl = named.pop("result"), named.pop("ctl")
        self.fds = named  # stdin, stdout, stderr, code memfds
        self.pidfd = fds[len(forkserver.CHILD_FDS)] if msg.get("pidfd") and len(fds) > len(forkserver.CHILD_FDS) else None
        self.status: int | None = None  # wait status, once the fork server reported it
        self.killed = False
        self.limits_text = b""  # /proc/<pid>/limits as last found unchanged

    def kill(self) -> None:
        """SIGKILL the child and its process group (it is a session leader; it cannot fork, but without seccomp
        it could). Nothing to do once it has ended."""
        if self.status is not None or self.killed:
            return
        self.killed = True
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close_pipes(self) -> None:
        for attr in ("result", "ctl"):
            fd = getattr(self, attr)
            if fd is not None:
                os.close(fd)
                setattr(self, attr, None)

    def close(self) -> None:
        self.close_pipes()
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class JobServer:
    """M's loop. ``worker``: the started-up :class:`~.worker.Worker`; ``sock``: M's end of the fork-server socket."""

    def __init__(self, worker, sock):
        self.w = worker
        self.cfg = worker.cfg
        self.layers = worker.layers
        self.out = worker.out
        self.cmd = protocol.LineReader(worker.cmd_in)
        self.sock = sock
        self.spare: deque[Kid] = deque()
        self.live: dict[int, Kid] = {}  # taken by a job and not yet released
        self.child_failed: str | None = None
        self.scheduling = limits.scheduling_of(0)  # what a child inherits from the worker

    def send(self, msg: dict) -> None:
        protocol.write_all(self.out, protocol.encode(msg))

    def serve(self) -> int:
        """Serve jobs until the supervisor says exit (or goes away); returns the exit code."""
        self._want()
        while True:
            try:
                msg = self.cmd.read()
            except (protocol.ChannelClosed, OSError, ValueError):
                return EXIT_EOF
            op = msg.get("op")
            if op == "job":
                self.run_job(msg)
            elif op == "ping":
                self.send({"op": "pong"})
            elif op == "exit":
                return EXIT_REQUESTED
            # a late "stop"/"next" from a finished job is ignored

    # --- children from the fork server ---------------------------------------------------------------------
    def _want(self) -> None:
        forkserver.send(self.sock, {"op": "want"})

    def _drain(self, timeout: float | None = 0.0) -> bool:
        """Handle the fork server's messages; waits up to ``timeout`` s (None: forever) for the first one. False if
        nothing came."""
        got = False
        while True:
            if not got and timeout != 0.0:
                if not select.select([self.sock], [], [], timeout)[0]:
                    return False
            msg, fds = forkserver.recv(self.sock, block=False)
            if msg is None:
                raise ChildUnavailable("the fork server is gone")
            if not msg:
                return got
            got = True
            op = msg.get("op")
            if op == "child":
                self.spare.append(Kid(msg, fds))
            elif op == "child_failed":
                self.child_failed = str(msg.get("error"))
            elif op == "exit":
                self._exited(int(msg["pid"]), int(msg["status"]))

    def _exited(self, pid: int, status: int) -> None:
        kid = self.live.get(pid)
        if kid is not None:
            kid.status = status
            return
        for kid in list(self.spare):  # a child forked ahead died before its job (e.g. the OOM killer)
            if kid.pid == pid:
                self.spare.remove(kid)
                kid.status = status
                self._release(kid)
                self._want()

    def take_child(self) -> Kid:
        self._drain()
        deadline = time.monotonic() + CHILD_WAIT_S
        while not self.spare:
            if self.child_failed:
                why, self.child_failed = self.child_failed, None
                self._want()
                raise ChildUnavailable(f"cannot prepare a sandboxed child: {why}")
            left = deadline - time.monotonic()
            if left <= 0 or not self._drain(left):
                raise ChildUnavailable(f"no sandboxed child from the fork server within {CHILD_WAIT_S:.0f} s")
        kid = self.spare.popleft()
        self.live[kid.pid] = kid
        self._want()  # the next one is forked while this one runs
        return kid

    def _wait_ended(self, kid: Kid, timeout: float) -> bool:
        """Whether the child has ended (waits up to ``timeout`` s): its pidfd turns readable when it exits, without a
        round trip to the fork server; without a pidfd, its exit status from the fork server."""
        if kid.status is not None:
            return True
        if kid.pidfd is not None:
            return bool(select.select([kid.pidfd], [], [], timeout)[0])
        return self._wait_status(kid, timeout)

    def _wait_status(self, kid: Kid, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while kid.status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._drain(left)
        return True

    def _release(self, kid: Kid) -> str | None:
        """Kill the child if still running, close its descriptors, remove its temp dir; a clean-up warning."""
        kid.kill()
        self.live.pop(kid.pid, None)
        kid.close()
        return self.w.release_child_dir(kid.tmp, kid.quota)

    # --- one job ---------------------------------------------------------------------------------------------
    def _job_uid(self, job: dict) -> int:
        uid = job.get("uid")
        if isinstance(uid, int) and not isinstance(uid, bool) and self.w.uid <= uid <= self.w.uid_max:
            return uid
        return self.w.uid

    def _job_limits(self, job: dict) -> dict:
        lim = job.get("limits") or {}
        timeout = float(lim.get("timeout") or self.cfg.get("timeout", 5.0))
        return {"timeout": timeout, "wall": float(lim.get("wall_timeout") or 2 * timeout + 1),
                "memory_mb": int(lim.get("memory_mb") or self.cfg.get("memory_mb", 2048))}

    def child_limits(self, lim: dict, cap: int) -> dict:
        """Keyword arguments of ``limits.planned_rlimits`` for a child (the launcher; each test's process lowers
        its CPU limit to the test's). Nothing in them depends on the number of tests (a program could read it)."""
        c = self.cfg
        return {"address_space_bytes": lim["memory_mb"] << 20,
                "cpu_seconds": max(LAUNCHER_CPU_S, int(math.ceil(lim["timeout"])) + 1),
                "file_size_bytes": cap + 1, "open_files": int(c.get("open_files", 64)),
                "processes": int(c.get("processes", 256)), "stack_bytes": int(c.get("stack_mb", 256)) << 20}

    def run_job(self, job: dict) -> None:
        uid = self._job_uid(job)
        state = {"lim": self._job_limits(job), "kids": [], "code": None, "uid": uid}
        try:
            job["tests"] = job_inputs(job)
            self._run_tests(job, state)
        except (protocol.ChannelClosed, BrokenPipeError):
            raise SystemExit(EXIT_EOF)
        except Exception as e:  # infrastructure failure: report it, keep serving
            self.send({"op": "result", "i": -1, "status": "sandbox_error", "error": f"worker: {type(e).__name__}: {e}"})
        cleanup = self._end_job(state)
        self.send({"op": "done", "cleanup": cleanup})

    def _end_job(self, state: dict) -> str | None:
        warnings = []
        sweep = not self.layers.get("landlock") and self.layers.get("uid_drop") and self.cfg.get("uid_exclusive")
        if sweep:
            # without landlock the program could write to world-writable dirs: once its processes are gone,
            # whatever its (slot-exclusive) uid owns there is its own
            for kid in state["kids"]:
                kid.kill()
                if not self._wait_ended(kid, STATUS_WAIT_S):
                    warnings.append(f"child {kid.pid} did not end")
        for kid in state["kids"]:
            warn = self._release(kid)
            if warn:
                warnings.append(warn)
        if state["code"] is not None:
            os.close(state["code"])
        if sweep:
            warn = tree.remove_owned_by(state["uid"], self.w.world_writable_dirs)
            if warn:
                warnings.append(warn)
        return "; ".join(warnings)[:2000] or None

    def _run_tests(self, job: dict, state: dict) -> None:
        """One child runs the tests from ``i`` on until it ends; a child that ended early (crash, timeout, state or
        limits not reusable) is replaced by a fresh one for the rest, unless the supervisor says stop."""
        n, i = len(job["tests"]), 0
        while i < n:
            nxt, stopped = self._run_child(job, state, i)
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

    def _run_child(self, job: dict, state: dict, start: int) -> tuple[int, bool]:
        """Run tests ``start..`` with one child (a launcher: one fresh process per test, or, one process per
        submission, the launcher runs them). Returns (next index, stopped)."""
        tests, lim, uid = job["tests"], state["lim"], state["uid"]
        caps = [int(c) for c in job["caps"]]
        child_lim = self.child_limits(lim, max(caps[start:]))
        nonce = os.urandom(16).hex()
        spec = {"mode": job["mode"], "code": job["code"], "nonce": nonce, "uid": uid, "gid": uid,
                "parent_pid": self.w.pid, "layers": self.layers, "landlock": bool(self.layers.get("landlock")),
                "fn_name": job.get("fn_name"), "arg_types": job.get("arg_types"),
                "return_type": job.get("return_type"), "start": start, "n_tests": len(tests),
                "per_submission": per_submission(job),
                "limits": {**child_lim, "memory_bytes": child_lim["address_space_bytes"],
                           "per_test_cpu_seconds": lim["timeout"]}}
        for _attempt in range(3):
            kid = self.take_child()
            state["kids"].append(kid)
            self._assign(kid, state, uid)
            spec["tmpdir"] = kid.tmp
            try:
                protocol.write_all(kid.ctl, json.dumps(spec).encode() + b"\n")
                break
            except OSError:  # the child forked ahead is gone: take another
                self._release(kid)
                state["kids"].remove(kid)
        else:
            raise ChildUnavailable("three sandboxed children in a row died before their job")
        planned = limits.planned_rlimits(**child_lim)
        try:
            return self._monitor(job, kid, start, caps, nonce, lim, planned)
        finally:
            kid.kill()
            kid.close_pipes()

    @staticmethod
    def _shared_result(i: int, detail: dict) -> dict:
        """The result of test ``i`` from the program's own record (one process per submission: the process runs on,
        so the record, which can claim no more than a value the program could have returned, ends the test)."""
        return {"i": i, **records.record_result(detail)}

    @staticmethod
    def _shared_used_up(cpu: CpuBudget) -> bool:
        """Whether a process that runs every test of a submission has used half of its CPU backstop
        (``LAUNCHER_CPU_S``): a fresh child runs the rest, so that the backstop never ends a test early."""
        return cpu.now() > LAUNCHER_CPU_S / 2

    def _begin_test(self, job: dict, kid: Kid, i: int) -> bytes | None:
        """Put test ``i``'s input in the child's stdin memfd (call mode: its arguments as JSON), tell the launcher to
        release its process, then send the secret of its records. Returns the secret's record prefix. One process
        per submission: every test from ``i`` on, a line each, and only the release (the launcher runs them itself,
        and nothing of it is secret from the program): returns None."""
        if per_submission(job):
            records.load_stdin(kid.fds, b"\n".join(job["tests"][i:]))
            protocol.write_all(kid.ctl, b"n")
            return None
        records.load_stdin(kid.fds, job["tests"][i])
        secret = os.urandom(16).hex().encode()
        protocol.write_all(kid.ctl, b"n" + secret + b"\n")
        return secret + b" "

    def _assign(self, kid: Kid, state: dict, uid: int) -> None:
        """Give the child's temp dir to the job's uid (quota tmpfs only: otherwise it stays read-only), and the
        compiled code of the job's first child to this one."""
        if kid.quota and os.geteuid() == 0 and self.layers.get("uid_drop"):
            os.chown(kid.tmp, uid, uid)
        if state["code"] is None:
            state["code"] = os.dup(kid.fds["code"])
        else:
            _copy_file(state["code"], kid.fds["code"])

    def _limits_changed(self, kid: Kid, planned: list) -> bool:
        """Whether the child changed any of its resource limits or its scheduling (then it must not run another
        test: a fresh child runs the rest). Read from outside (``/proc/<pid>/limits``, ``getpriority``,
        ``sched_getscheduler``): the program cannot fake it. The limits text is parsed once per child; later checks
        compare bytes."""
        try:
            text = limits.limits_text(kid.pid)
            if text != kid.limits_text:
                if limits.parse_limits(text) != planned:
                    return True
                kid.limits_text = text
            return limits.scheduling_of(kid.pid) != self.scheduling
        except (ProcessLookupError, ValueError):  # gone (or a limits file this parser does not know)
            return True

    def _monitor(self, job, kid: Kid, start, caps, nonce, lim, planned):
        """Run tests ``start..`` through the child's launcher: per test, start it (:meth:`_begin_test`), watch the
        test process's CPU clock and the wall clock, and answer when the launcher reports the test process's exit
        (one process per submission: on the program's record for the test, or on the launcher's own exit).
        Stops when every test is done, a limit is reached (the child is killed: a fresh one runs the rest), the
        launcher ended or must not be reused, or the supervisor says stop. The results of the tests that one read
        of the result pipe ends go out in one write."""
        shared = per_submission(job)  # the launcher runs every test of this child itself (call mode)
        n = len(job["tests"])
        r = kid.result
        wall, budget = lim["wall"], lim["timeout"]
        t0 = time.monotonic()
        cpu = CpuBudget(kid.pid, budget)  # the launcher's clock until a test process starts (it compiles first)
        clock = WallClock(wall, t0, kid.pid)  # likewise: the launcher's run-queue wait, then the test process's
        buf, current, deadline, cpu_due = bytearray(), start, clock.deadline(), math.inf
        timed_out = cpu_out = stopped = over_cap = is_ready = ended = False
        setup_error = None
        record_bytes = 0  # result-pipe bytes read as lines since the test began (with the unfinished line: <= cap)
        nonce_b = nonce.encode() + b" "
        secret = None  # of the launcher's records: the first test begins once the launcher is ready
        started = False  # the launcher reported this test's process (its pid); one process per submission: released
        any_started = False
        detail: dict | None = None  # the test process's own record for this test
        watch = [r, self.cmd.fd, self.sock]
        while current < n and not ended:
            if kid.status is not None and r not in watch:
                break  # the launcher ended and everything it wrote has been read
            now = time.monotonic()
            if now >= cpu_due:
                if cpu.exceeded():
                    cpu_out = True
                    break
                cpu_due = cpu.next_check(now)
            if self.cmd.pending():
                ready = {self.cmd.fd}
            else:
                if now >= deadline:
                    deadline = clock.deadline()  # later by the time the child waited for a CPU meanwhile
                    if now >= deadline:
                        timed_out = True
                        break
                    # the next look no sooner than WALL_STEP_S: the extensions of a program that waits and sleeps
                    # shrink geometrically, and every look sends a message
                    deadline = max(deadline, now + WALL_STEP_S)
                    self.send({"op": "alive", "i": current})  # the supervisor's silence limit counts from here
                ready = set(select.select(watch, [], [], min(deadline, cpu_due) - now)[0])
            if self.sock in ready:
                self._drain()
            if r in ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    watch.remove(r)
                buf += chunk
                batch = []  # the results of this chunk go out in one write
                ended_here: list[dict] = []  # one process per submission: the tests its records ended, in order
                claimed = None  # ... and the CPU time the last of them claims
                while current < n and not ended:
                    if shared and started and detail is not None:  # its record ends the test (same process)
                        ended_here.append(self._shared_result(current, detail))
                        current += 1
                        claimed = detail.get("c")
                        detail, record_bytes = None, 0
                        continue
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    record_bytes += nl + 1
                    if secret is not None and line.startswith(secret):  # the launcher's (no program knows the secret)
                        rec = records.parse_launcher_record(line, secret)
                        if rec is None or rec["i"] != current:
                            continue
                        if rec["s"] == "start" and not started:
                            # the first test of this child also pays for the launcher's compiling
                            used = cpu.used() if is_ready and not any_started else 0.0
                            started = any_started = True
                            # the process's CPU from its release (its set-up before it is not the test's)
                            cpu = CpuBudget(rec["p"], budget - used, base=float(rec.get("c") or 0.0))
                            clock.follow(rec["p"])
                            cpu_due = cpu.next_check(time.monotonic())
                            continue
                        if rec["s"] != "exit" or not started:
                            continue
                        now = time.monotonic()
                        res = {"op": "result", "i": current, "time": round(now - t0, 6),
                               **records.test_result(job["mode"], rec["w"], detail, kid.fds, caps[current])}
                        batch.append(protocol.encode(res))
                        current += 1
                        t0, cpu_due = now, math.inf
                        clock.restart(t0, kid.pid)
                        deadline = clock.deadline()
                        started, detail = False, None
                        if current >= n:
                            break
                        # a test process under seccomp cannot act on the launcher; without it, check the launcher
                        if not rec["clean"] or (not self.layers.get("seccomp") and self._limits_changed(kid, planned)):
                            ended = True  # not reused: a fresh child for the rest
                            break
                        record_bytes = 0
                        try:
                            secret = self._begin_test(job, kid, current)
                        except OSError:
                            pass  # the launcher is gone: seen below as its exit
                        continue
                    rec = records.parse_record(line, nonce_b)
                    if rec is None:
                        continue  # not written by the driver (the program may write anything to fd 3)
                    s = rec["s"]
                    if s == "ready":
                        if not is_ready:  # the launcher compiles now: the first test's CPU budget starts
                            is_ready = True
                            cpu.start(rec.get("c"))
                            cpu_due = cpu.next_check(time.monotonic())
                            try:
                                secret = self._begin_test(job, kid, current)
                            except OSError:
                                pass  # the launcher is gone: seen below as its exit
                        continue
                    if not is_ready:
                        if s == "setup_failed":  # only before "ready": afterwards the program could forge it
                            setup_error = rec.get("e")
                        continue
                    if s == "run":
                        if shared and not any_started:  # one process per submission: the launcher runs the program
                            started = any_started = True  # now (its CPU since "ready", the compiling included, and
                        continue  # its wall clock count for the first test, as for a test process's)
                    if s == "compile_error":
                        if not any_started:  # only the launcher, before any program ran, compiles
                            res = {"op": "result", "i": current, "time": round(time.monotonic() - t0, 6),
                                   "status": "compile_error", "error": rec.get("e")}
                            batch.append(protocol.encode(res))
                            current += 1
                            ended = True
                        continue
                    # the test process's own record (it may come before the launcher's "start"); the only program
                    # process alive now is this test's: an earlier one's records precede its "exit" on this pipe
                    if s not in records.TEST_RECORDS[job["mode"]] or not isinstance(rec.get("i"), int):
                        continue
                    if detail is None and rec["i"] == current and (started or not shared):
                        detail = rec  # (one process per submission: only once the program runs)
                if ended_here:  # (nothing else goes into a batch once the program runs)
                    batch.append(protocol.encode(protocol.pack_results(ended_here)))
                if ended_here and current < n and not ended:
                    # the process goes on with the next test (the tests of a chunk are ended together): its budget
                    # from the CPU time the last record claims (only within [the last test's start, now]: a lie can
                    # only shorten it), its wall clock from now (a late look only lengthens it)
                    t0 = time.monotonic()
                    cpu.start(claimed, budget)
                    clock.restart(t0)
                    deadline, cpu_due = clock.deadline(), cpu.next_check(t0)
                    if self._shared_used_up(cpu) or (not self.layers.get("seccomp")
                                                     and self._limits_changed(kid, planned)):
                        ended = True  # not reused: a fresh child for the rest
                if batch:
                    protocol.write_all(self.out, b"".join(batch))
                if current < n and not ended and record_bytes + len(buf) > caps[current] + 4096:
                    over_cap = True  # the records of one test, the unfinished line included, exceed its cap
                    break
            if self.cmd.fd in ready:
                if self.cmd.read(timeout=1.0).get("op") == "stop":
                    stopped = True
                    break
        if stopped:
            return current, True
        if current >= n or ended:
            return current, False
        # the child was stopped (a limit), or its launcher ended, in the middle of test `current`: answer for it
        ended_by_itself = not (timed_out or cpu_out or over_cap)
        if ended_by_itself and not self._wait_status(kid, STATUS_WAIT_S):
            raise ChildUnavailable(f"no exit status for child {kid.pid} from the fork server")
        res = {"op": "result", "i": current, "time": round(time.monotonic() - t0, 6),
               "stderr": records.read_tail(kid.fds["stderr"], 2000)}
        if not is_ready and not setup_error:
            setup_error = (f"the child ended before the sandbox was ready ({records.describe(kid.status)})"
                           if ended_by_itself else "the sandbox was not ready before the wall-clock limit")
        if setup_error:
            res.update(status="sandbox_error", error=f"sandbox setup failed: {setup_error}")
        elif timed_out:
            res.update(status="timeout",
                       error=f"wall-clock limit {wall:.1f} s (+ {clock.waited():.1f} s waiting for a CPU)")
        elif cpu_out:
            res.update(status="timeout", error=f"CPU time limit {budget:g} s")
        elif over_cap:
            res.update(status="output_limit", error=f"result exceeds {caps[current]} bytes")
        elif shared and started:  # the program's own process ended in the middle of a test: its wait status says how
            res.update(records.test_result(job["mode"], kid.status, detail, kid.fds, caps[current]))
        else:  # the launcher died (the OOM killer, a signal from outside): never a pass
            res.update(status="sandbox_error" if not any_started else "signal",
                       error=f"the test launcher ended ({records.describe(kid.status)})")
        self.send(res)
        return current + 1, False


def _copy_file(src: int, dst: int) -> None:
    """Copy the content of ``src`` into ``dst`` in the kernel (no byte of it enters this process)."""
    size = os.fstat(src).st_size
    off = 0
    try:
        while off < size:
            n = os.copy_file_range(src, dst, size - off, off, off)
            if n <= 0:
                break
            off += n
    except OSError:
        try:
            os.ftruncate(dst, 0)  # the child compiles instead
        except OSError:
            pass
