"""The job process's side of the launcher protocol (``sandbox/jobs.py``) for one process per submission (call mode),
driven record by record: a stand-in for the sandboxed child writes the records its launcher and the program in it
would, in the orders a real run can produce them (and some that only a hostile program writes), the fork server's
exit report included, and the real ``JobServer._monitor`` answers."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import deque

from microcoder_ext.reward.judge import call_test_lines
from microcoder_ext.reward.sandbox import forkserver, jobs, limits, protocol
from microcoder_ext.reward.sandbox.jobs import JobServer, Kid


class Child:
    """The stand-in: M's ends of a child's descriptors (given to ``Kid``), the child's own ends, and the fork
    server's end of M's socket (``peer``)."""

    def __init__(self, peer: socket.socket):
        self.peer = peer
        self.result_r, self.result_w = os.pipe()
        self.ctl_r, self.ctl_w = os.pipe()
        memfds = [os.memfd_create(name) for name in ("stdin", "stdout", "stderr", "code")]
        self.kid = Kid({"pid": os.getpid(), "tmp": "/nonexistent", "quota": False},
                       [self.result_r, self.ctl_w, *memfds])

    def write(self, prefix: str | bytes, rec: dict) -> None:
        prefix = prefix.encode() if isinstance(prefix, str) else prefix
        os.write(self.result_w, b"\n" + prefix + b" " + json.dumps(rec).encode() + b"\n")

    def read_release(self) -> bytes:
        """What the job process sent to release the tests: ``b"n"`` alone (the launcher runs them itself)."""
        return os.read(self.ctl_r, 64)

    def end(self, status: int) -> None:
        """The child's process ends: its result pipe closes and the fork server reports its wait status."""
        os.close(self.result_w)
        forkserver.send(self.peer, {"op": "exit", "pid": self.kid.pid, "status": status})


def job_server() -> tuple[JobServer, int]:
    """A JobServer with the pipes of a worker (its messages to the supervisor readable from the returned fd)."""
    js = JobServer.__new__(JobServer)
    js.layers, js.cfg = {"seccomp": "active"}, {}
    cmd_r, _cmd_w = os.pipe()
    js.cmd = protocol.LineReader(cmd_r)
    out_r, js.out = os.pipe()
    js.sock, js._peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    js.spare, js.live, js.child_failed = deque(), {}, None
    js.scheduling = limits.scheduling_of(0)
    return js, out_r


def run_monitor(job: dict, script) -> list[dict]:
    """Run ``_monitor`` on ``job`` while ``script(child, nonce)`` plays the child; the results it sent."""
    job = {**job, "tests": jobs.job_inputs(job)}  # as ``JobServer.run_job`` hands it on
    js, out_r = job_server()
    child = Child(js._peer)
    js.live[child.kid.pid] = child.kid
    nonce = "nonce0"
    caps = [1 << 20] * len(job["tests"])
    lim = {"timeout": 5.0, "wall": 30.0, "memory_mb": 512}
    player = threading.Thread(target=script, args=(child, nonce))
    player.start()
    nxt = js._monitor(job, child.kid, 0, caps, nonce, lim, planned=[])
    player.join(10)
    os.close(js.out)
    reader = protocol.LineReader(out_r)
    out = []
    while True:
        try:
            out.append(reader.read(timeout=1))
        except (protocol.ChannelClosed, OSError, ValueError):
            break
    results = []
    for m in out:
        if m.get("op") == "result":
            results.append(m)
        elif m.get("op") == "results":  # several tests ended by one read (``protocol.pack_results``)
            results += protocol.unpack_results(m)
    return nxt, results


# as the engine sends a job (its inputs one JSON line each: ``judge.call_test_lines``)
CALL_JOB = {"mode": "call", "process": "submission", "fn_name": "f", "n_tests": 3,
            "tests_jsonl": call_test_lines([{"args": [1]}, {"args": [2]}, {"args": [3]}])}


def start(child: Child, nonce: str) -> None:
    """The launcher's part: ready, the release read, the inputs in stdin, then the program runs."""
    child.write(nonce, {"s": "ready", "c": 0.0})
    assert child.read_release() == b"n"
    assert os.pread(child.kid.fds["stdin"], 1 << 16, 0) == CALL_JOB["tests_jsonl"]  # every test, a line each
    child.write(nonce, {"s": "run"})


def test_the_program_s_record_for_each_test_ends_it():
    def play(child: Child, nonce: str):
        start(child, nonce)
        for i in range(3):
            child.write(nonce, {"i": i, "s": "ok", "v": str(2 * (i + 1)), "c": 0.001 * i})

    (nxt, stopped), results = run_monitor(CALL_JOB, play)
    assert (nxt, stopped) == (3, False)
    assert [(r["i"], r["status"], r["value"]) for r in results] == [(0, "ok", b"2"), (1, "ok", b"4"), (2, "ok", b"6")]


def test_records_before_the_program_runs_are_not_a_test_s_end():
    def play(child: Child, nonce: str):
        child.write(nonce, {"s": "ready", "c": 0.0})
        child.read_release()
        child.write(nonce, {"i": 0, "s": "ok", "v": "999", "c": 0.0})  # before "run": no program wrote it
        child.write(nonce, {"s": "run"})
        child.write(nonce, {"i": 0, "s": "ok", "v": "2", "c": 0.0})
        child.end(0)

    (nxt, _), results = run_monitor(CALL_JOB, play)
    assert [(r["i"], r["status"], r.get("value")) for r in results] == [(0, "ok", b"2"), (1, "exception", None)]
    assert nxt == 2


def test_a_submission_process_that_dies_mid_test_fails_that_test_and_the_rest_go_to_a_fresh_child():
    def play(child: Child, nonce: str):
        start(child, nonce)
        child.write(nonce, {"i": 0, "s": "ok", "v": "2", "c": 0.0})
        child.end(0)  # it exited (code 0) during test 1, e.g. os._exit(0)

    (nxt, stopped), results = run_monitor(CALL_JOB, play)
    assert (nxt, stopped) == (2, False)  # test 2 onwards: a fresh child
    assert [(r["i"], r["status"]) for r in results] == [(0, "ok"), (1, "exception")]
    assert "before returning a result" in results[1]["error"]


def test_a_submission_process_killed_by_a_signal_fails_its_test_as_signal():
    def play(child: Child, nonce: str):
        start(child, nonce)
        child.end(9)  # SIGKILL (wait status 9), e.g. the OOM killer

    (nxt, _), results = run_monitor(CALL_JOB, play)
    assert nxt == 1
    assert [(r["i"], r["status"]) for r in results] == [(0, "signal")]


def test_forged_records_change_nothing():
    def play(child: Child, nonce: str):
        start(child, nonce)
        child.write(nonce, {"i": 0, "s": "ok", "v": "2", "c": 0.0})
        child.write(nonce, {"i": 0, "s": "ok", "v": "999", "c": 0.0})  # a second record for a test that ended
        child.write(nonce, {"i": 2, "s": "ok", "v": "999", "c": 0.0})  # a record for a later test, out of turn
        child.write(nonce, {"s": "compile_error", "e": "forged"})  # the program runs: nothing compiles any more
        child.write(b"0" * 32, {"s": "exit", "i": 1, "w": 0, "clean": True})  # a launcher's record: none exists here
        child.write(nonce, {"i": 1, "s": "ok", "v": "4", "c": 0.0})
        child.write(nonce, {"i": 2, "s": "ok", "v": "6", "c": 0.0})

    (nxt, _), results = run_monitor(CALL_JOB, play)
    assert nxt == 3
    assert [(r["i"], r["status"], r["value"]) for r in results] == [(0, "ok", b"2"), (1, "ok", b"4"), (2, "ok", b"6")]


def test_a_compile_error_before_the_program_runs_is_the_first_test_s_verdict():
    def play(child: Child, nonce: str):
        child.write(nonce, {"s": "ready", "c": 0.0})
        child.read_release()
        child.write(nonce, {"s": "compile_error", "e": "SyntaxError: invalid syntax"})
        child.end(256)  # exit code 1

    (nxt, _), results = run_monitor(CALL_JOB, play)
    assert [(r["i"], r["status"]) for r in results] == [(0, "compile_error")]
    assert nxt == 1


def test_a_launcher_that_dies_before_the_program_runs_is_a_sandbox_failure():
    def play(child: Child, nonce: str):
        child.write(nonce, {"s": "ready", "c": 0.0})
        child.read_release()
        child.end(120 << 8)  # e.g. the seccomp filter could not be installed: exit 120 before "run"

    (nxt, _), results = run_monitor(CALL_JOB, play)
    assert [(r["i"], r["status"]) for r in results] == [(0, "sandbox_error")]


def test_several_results_travel_as_one_message_and_a_malformed_one_is_refused():
    results = [{"i": 0, "status": "ok", "value": b'[1,"\\u00e9"]', "error": None},
               {"i": 1, "status": "exception", "error": "ValueError: x"},
               {"i": 2, "status": "ok", "value": b"", "error": None}]
    r, w = os.pipe()
    protocol.write_all(w, protocol.encode(protocol.pack_results(results)))
    msg = protocol.LineReader(r).read(timeout=1)
    got = protocol.unpack_results(msg)
    assert [(x["i"], x["status"], x.get("value"), x["error"]) for x in got] == [
        (0, "ok", b'[1,"\\u00e9"]', None), (1, "exception", None, "ValueError: x"), (2, "ok", b"", None)]
    for bad in ({"items": [[0, "ok", None, 5]], "values": b"abc"},  # values shorter than their lengths
                {"items": [[0, "ok", None]], "values": b""}, {"items": "x", "values": b""},
                {"items": [["0", "ok", None, -1]], "values": b""}):
        try:
            protocol.unpack_results({"op": "results", **bad})
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
