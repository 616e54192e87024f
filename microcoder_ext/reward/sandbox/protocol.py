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
