"""The job process's side of the launcher protocol (``sandbox/jobs.py``), driven record by record: a stand-in for the
sandboxed child writes the records a launcher and its test process would, in the orders a real run can produce them,
and the real ``JobServer._monitor`` answers. Orders that a real run produces only now and then on a loaded host (the
records of a process that runs every test of a submission, all written before the launcher's report that it
released the process) are tested here every time."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import deque

from microcoder_ext.reward.sandbox import jobs, limits, protocol
from microcoder_ext.reward.sandbox.jobs import JobServer, Kid


class Child:
    """The stand-in: M's ends of a child's descriptors (given to ``Kid``) and the child's own ends."""

    def __init__(self):
        self.result_r, self.result_w = os.pipe()
        self.ctl_r, self.ctl_w = os.pipe()
        memfds = [os.memfd_create(name) for name in ("stdin", "stdout", "stderr", "code")]
        self.kid = Kid({"pid": os.getpid(), "tmp": "/nonexistent", "quota": False},
                       [self.result_r, self.ctl_w, *memfds])

    def write(self, prefix: str | bytes, rec: dict) -> None:
        prefix = prefix.encode() if isinstance(prefix, str) else prefix
        os.write(self.result_w, b"\n" + prefix + b" " + json.dumps(rec).encode() + b"\n")

    def read_release(self) -> bytes:
        """What the job process sent to release a test: ``b"n"`` and the secret of the launcher's records."""
        data = b""
        while not data.endswith(b"\n"):
            data += os.read(self.ctl_r, 64)
        assert data.startswith(b"n"), data
        return data[1:-1]


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
    js, out_r = job_server()
    child = Child()
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
    return nxt, [m for m in out if m.get("op") == "result"]


CALL_JOB = {"mode": "call", "process": "submission", "fn_name": "f",
            "tests": [{"args": [1]}, {"args": [2]}, {"args": [3]}]}


def test_records_of_a_submission_that_come_before_its_release_report_all_count():
    def play(child: Child, nonce: str):
        child.write(nonce, {"s": "ready", "c": 0.0})
        secret = child.read_release()
        for i in range(3):  # the test process ran every test before the launcher reported its release
            child.write(nonce, {"i": i, "s": "ok", "v": str(2 * (i + 1)), "c": 0.001 * i})
        child.write(secret, {"s": "start", "i": 0, "p": os.getpid(), "c": 0.0})

    (nxt, stopped), results = run_monitor(CALL_JOB, play)
    assert (nxt, stopped) == (3, False)
    assert [(r["i"], r["status"], r["value"]) for r in results] == [(0, "ok", b"2"), (1, "ok", b"4"), (2, "ok", b"6")]


def test_a_submission_process_that_dies_mid_test_fails_that_test_and_the_rest_go_to_a_fresh_child():
    def play(child: Child, nonce: str):
        child.write(nonce, {"s": "ready", "c": 0.0})
        secret = child.read_release()
        child.write(secret, {"s": "start", "i": 0, "p": os.getpid(), "c": 0.0})
        child.write(nonce, {"i": 0, "s": "ok", "v": "2", "c": 0.0})
        child.write(secret, {"s": "exit", "i": 0, "w": 0, "clean": False})  # it ended during test 1

    (nxt, stopped), results = run_monitor(CALL_JOB, play)
    assert (nxt, stopped) == (2, False)  # test 2 onwards: a fresh child
    assert [(r["i"], r["status"]) for r in results] == [(0, "ok"), (1, "exception")]
    assert "before returning a result" in results[1]["error"]


def test_forged_records_for_other_tests_and_a_second_record_for_one_test_change_nothing():
    def play(child: Child, nonce: str):
        child.write(nonce, {"s": "ready", "c": 0.0})
        secret = child.read_release()
        child.write(secret, {"s": "start", "i": 0, "p": os.getpid(), "c": 0.0})
        child.write(nonce, {"i": 0, "s": "ok", "v": "2", "c": 0.0})
        child.write(nonce, {"i": 0, "s": "ok", "v": "999", "c": 0.0})  # a second record for a test that ended
        child.write(nonce, {"i": 2, "s": "ok", "v": "999", "c": 0.0})  # a record for a later test, out of turn
        child.write(nonce, {"i": 1, "s": "ok", "v": "4", "c": 0.0})
        child.write(nonce, {"i": 2, "s": "ok", "v": "6", "c": 0.0})

    (nxt, _), results = run_monitor(CALL_JOB, play)
    assert nxt == 3
    assert [(r["i"], r["value"]) for r in results] == [(0, b"2"), (1, b"4"), (2, b"6")]
