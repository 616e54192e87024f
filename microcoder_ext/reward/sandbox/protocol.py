"""Framing over raw pipe fds (no ``sys.stdin``/``sys.stdout`` objects, no pickling): one JSON header line per
message, optionally followed by one binary payload.

A message whose values include ``bytes`` (a program's stdout, a returned value's JSON text) is sent as the header
``{..., "_payload": {"key": <field>, "len": <n>}}`` + ``\\n`` + the ``n`` raw bytes: the bytes are never JSON-escaped
(an invalid byte would cost six) and the reader puts them, undecoded and copied once, back under ``<field>``. At
most one ``bytes`` field per message.
"""

from __future__ import annotations

import json
import os
import select
import time

PAYLOAD = "_payload"


class ChannelClosed(EOFError):
    """The other end closed the pipe."""


class ChannelTimeout(TimeoutError):
    """No complete message before the deadline."""


def encode(msg: dict) -> bytes:
    """Header line (+ payload) of ``msg``; see the module doc."""
    binary = [k for k, v in msg.items() if isinstance(v, (bytes, bytearray, memoryview))]
    if len(binary) > 1:
        raise ValueError(f"at most one bytes field per message, got {binary}")
    if not binary:
        return (json.dumps(msg, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")
    key = binary[0]
    payload = bytes(msg[key])
    header = {k: v for k, v in msg.items() if k != key}
    header[PAYLOAD] = {"key": key, "len": len(payload)}
    return (json.dumps(header, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii") + payload


def pack_results(results: list[dict]) -> dict:
    """One ``{"op": "results"}`` message for several test results (``{"i", "status", "value": bytes | None,
    "error"}`` each, in order): their values concatenated in one payload, ``items`` ``[i, status, error, length
    of the value or -1]``. A message costs both ends more than a result does, and one process per submission ends
    many tests per read of its pipe."""
    items, values = [], []
    for r in results:
        v = r.get("value")
        items.append([r["i"], r["status"], r.get("error"), -1 if v is None else len(v)])
        if v is not None:
            values.append(v)
    return {"op": "results", "items": items, "values": b"".join(values)}


def unpack_results(msg: dict) -> list[dict]:
    """The results of a :func:`pack_results` message, each as a ``{"op": "result", ...}`` message (``ValueError``
    for a malformed one)."""
    items, values = msg.get("items"), msg.get("values", b"")
    if not isinstance(items, list) or not isinstance(values, (bytes, bytearray)):
        raise ValueError("malformed results message")
    out, off, view = [], 0, memoryview(values)
    for item in items:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], int) and isinstance(item[1], str)
                and isinstance(item[3], int) and item[3] >= -1):
            raise ValueError(f"malformed result item {item!r:.200}")
        i, status, error, n = item
        r = {"op": "result", "i": i, "status": status, "error": error}
        if n >= 0:
            if off + n > len(values):
                raise ValueError("result values shorter than their lengths")
            r["value"] = bytes(view[off:off + n])  # one copy (a slice of the bytearray would be a second)
            off += n
        out.append(r)
    return out


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class LineReader:
    """Buffered message reader on a blocking fd; :meth:`read` waits at most ``timeout`` seconds (``None``: forever).

    ``max_line`` bounds a header line, ``max_payload`` a payload (bytes)."""

    def __init__(self, fd: int, max_line: int = 1 << 30, max_payload: int = 1 << 31):
        self.fd = fd
        self.buf = bytearray()
        self.max_line = max_line
        self.max_payload = max_payload

    def pending(self) -> bool:
        return b"\n" in self.buf

    def _fill(self, deadline: float | None, timeout: float | None) -> None:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            raise ChannelTimeout(f"no message within {timeout:.1f} s")
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            raise ChannelClosed("pipe closed")
        self.buf += chunk

    def read(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                msg = json.loads(bytes(self.buf[:nl]))
                del self.buf[: nl + 1]
                if isinstance(msg, dict) and PAYLOAD in msg:
                    self._read_payload(msg, deadline, timeout)
                return msg
            if len(self.buf) > self.max_line:
                raise ValueError(f"message longer than {self.max_line} bytes")
            self._fill(deadline, timeout)

    def _read_payload(self, msg: dict, deadline: float | None, timeout: float | None) -> None:
        spec = msg.pop(PAYLOAD)
        key, n = spec.get("key"), spec.get("len")
        if not isinstance(key, str) or not isinstance(n, int) or not 0 <= n <= self.max_payload:
            raise ValueError(f"bad payload header {spec!r}")
        out = bytearray(n)
        view = memoryview(out)
        got = min(n, len(self.buf))
        view[:got] = self.buf[:got]
        del self.buf[:got]
        while got < n:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                raise ChannelTimeout(f"payload incomplete within {timeout:.1f} s")
            k = os.readv(self.fd, [view[got:]])
            if not k:
                raise ChannelClosed("pipe closed inside a payload")
            got += k
        msg[key] = out
