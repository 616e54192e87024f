"""What the job process reads from a sandboxed child: its status records (fd 3), its stdio memfds and its wait
status, turned into the per-test result fields of the protocol. Everything here treats the child's bytes as hostile:
a record is accepted only with the nonce and the expected shape, integers in it are short, outputs are read up to the
test's cap."""

from __future__ import annotations

import json
import os
import signal

from . import protocol

RECORD_STATUSES = frozenset({"ok", "exception", "memory", "unserialisable", "compile_error", "setup_failed", "end",
                             "ready", "run"})
END_STATUSES = frozenset({"ok", "exception", "memory"})


def parse_record(line: bytes, nonce_b: bytes) -> dict | None:
    """A status record of the driver, or None for anything else on the result pipe."""
    if not line.startswith(nonce_b):
        return None
    try:
        rec = json.loads(line[len(nonce_b):], parse_int=small_int)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or rec.get("s") not in RECORD_STATUSES:
        return None
    if not isinstance(rec.get("v"), (str, type(None))) or not isinstance(rec.get("e"), (str, type(None))):
        return None
    if rec.get("r", "ok") not in END_STATUSES:
        return None
    c = rec.get("c")
    if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float))):
        return None
    return rec


#: what a test process may report for its test, per mode (anything else from it is ignored)
TEST_RECORDS = {"stdin": frozenset({"end"}), "call": frozenset({"ok", "exception", "memory", "unserialisable"})}


def parse_launcher_record(line: bytes, prefix: bytes) -> dict | None:
    """A launcher record ``<secret> {"s": "start", "i", "p", "c"}`` / ``{"s": "exit", "i", "w", "clean"}``, or
    None."""
    try:
        rec = json.loads(line[len(prefix):], parse_int=small_int)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("i"), int):
        return None
    if rec.get("s") == "start" and isinstance(rec.get("p"), int) and rec["p"] > 0 and isinstance(
            rec.get("c", 0.0), (int, float)):
        return rec
    if rec.get("s") == "exit" and isinstance(rec.get("w"), int) and isinstance(rec.get("clean"), bool):
        return rec
    return None


def test_result(mode: str, status: int, detail: dict | None, fds: dict, cap: int) -> dict:
    """The result of one test from its process's wait status (``status``, reported by the launcher: the authority
    on how the test ended) and the process's own record for it (``detail``: the return value, the exception's
    text; untrusted, used only where the exit status agrees)."""
    out: dict = {"stderr": read_tail(fds["stderr"], 2000)}
    if mode == "stdin":
        size = os.fstat(fds["stdout"]).st_size
        if size > cap:
            return {**out, "status": "output_limit", "error": f"output exceeds {cap} bytes"}
        st = exit_status(status)
        if st["status"] == "ok":
            return {**out, "status": "ok", "error": None, "stdout": read_output(fds["stdout"], size)}
        if st["status"] == "exception" and detail is not None and detail.get("r") in ("exception", "memory"):
            return {**out, "status": detail["r"], "error": detail.get("e")}
        return {**out, **st}
    st = exit_status(status)
    if st["status"] == "ok":
        if detail is not None and detail["s"] == "ok":
            return {**out, "status": "ok", "value": value_bytes(detail.get("v")), "error": None}
        return {**out, "status": "exception", "error": "process exited (code 0) before returning a result"}
    if st["status"] == "exception" and detail is not None and detail["s"] != "ok":
        return {**out, "status": detail["s"], "error": detail.get("e")}
    return {**out, **st}


def record_result(detail: dict) -> dict:
    """The result of a call-based test from the test process's own record alone (one process per submission: the
    process runs on after the test, so there is no exit status to read). ``ok`` carries the value; any other
    record status is the test's failure, with the record's error text (no stderr: the process has gone on to the
    next test, and only a ``signal`` result, which a record never gives, shows stderr)."""
    if detail["s"] == "ok":
        return {"status": "ok", "value": value_bytes(detail.get("v")), "error": None}
    return {"status": detail["s"], "error": detail.get("e")}


def small_int(text: str) -> int:
    """Integers in a record envelope are test indices; a forged megabyte-long literal would take this
    process (which runs without the int-digit limit) minutes to convert."""
    if len(text) > 20:
        raise ValueError("integer literal too long")
    return int(text)


# --- the child's stdio memfds -----------------------------------------------------------------------------------

def reset_stdio(fds: dict) -> None:
    for name in ("stdin", "stdout", "stderr"):
        os.ftruncate(fds[name], 0)
        os.lseek(fds[name], 0, os.SEEK_SET)


def load_stdin(fds: dict, data: str | bytes) -> None:
    """Empty the stdio memfds and put the next test's input in stdin (the child reads from offset 0)."""
    reset_stdio(fds)
    protocol.write_all(fds["stdin"], data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
    os.lseek(fds["stdin"], 0, os.SEEK_SET)


def read_output(fd: int, size: int) -> bytes:
    """The program's stdout, undecoded: sent to the supervisor as a binary payload (``protocol``), never as JSON text
    (an invalid byte would cost six escaped ones, and the judge compares bytes)."""
    return os.pread(fd, size, 0)


def value_bytes(text: str | None) -> bytes | None:
    """A call-mode return value's JSON text as UTF-8 bytes (a binary payload to the supervisor; lone surrogates kept
    as their 3-byte form, as the judge encodes the expected side)."""
    return None if text is None else text.encode("utf-8", "surrogatepass")


def read_tail(fd: int, n: int) -> str:
    size = os.fstat(fd).st_size
    off = max(0, size - n)
    return os.pread(fd, size - off, off).decode("utf-8", "replace")


# --- wait statuses ------------------------------------------------------------------------------------------------

def describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


def exit_status(status: int) -> dict:
    """``{"status", "error"}`` of a child that ended in the middle of a test (``ok``: exit code 0)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return {"status": "timeout", "error": "CPU time limit"}
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return {"status": "signal", "error": f"killed by {name}"}
    code = os.WEXITSTATUS(status)
    if code == 0:
        return {"status": "ok", "error": None}
    return {"status": "exception", "error": f"exit code {code}"}


def decode_big_ints(v):
    """Inverse of the supervisor's ``encode_big_ints`` (``{"__mc_bigint__": hex}`` -> int)."""
    if isinstance(v, dict):
        if len(v) == 1 and "__mc_bigint__" in v:
            return int(v["__mc_bigint__"], 16)
        return {k: decode_big_ints(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode_big_ints(x) for x in v]
    return v
