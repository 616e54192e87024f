"""JSON-lines framing over raw pipe fds (no ``sys.stdin``/``sys.stdout`` objects, no pickling)."""

from __future__ import annotations

import json
import os
import select
import time


class ChannelClosed(EOFError):
    """The other end closed the pipe."""


class ChannelTimeout(TimeoutError):
    """No complete message before the deadline."""


def encode(msg: dict) -> bytes:
    return (json.dumps(msg, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class LineReader:
    """Buffered line reader on a blocking fd; :meth:`read` waits at most ``timeout`` seconds (``None``: forever)."""

    def __init__(self, fd: int, max_line: int = 1 << 30):
        self.fd = fd
        self.buf = bytearray()
        self.max_line = max_line

    def pending(self) -> bool:
        return b"\n" in self.buf

    def read(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                return json.loads(line)
            if len(self.buf) > self.max_line:
                raise ValueError(f"message longer than {self.max_line} bytes")
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                raise ChannelTimeout(f"no message within {timeout:.1f} s")
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise ChannelClosed("pipe closed")
            self.buf += chunk
