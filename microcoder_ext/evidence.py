"""What the engine and the trainer's workers saw during a smoke run, for the smoke report and the end-to-end tests:
one JSON object per line in the file named by :data:`ENV` (set by ``microcoder smoke``; nothing is written when it
is unset). Standard library only, below every package that records (the reward, the smoke pieces, the adapters).

Writers are several processes (vLLM's engine and worker processes, the trainer's workers, reward workers); each
event is one ``write`` of one line on a file opened with ``O_APPEND``, so lines never interleave. Events (``event``
key):

``engine_loaded``   ``engine``, ``checksum`` (what vLLM serves before the first sync, in the trainer's names),
                    ``tensors`` (OpenRLHF also ``start``, ``per_tensor``, ``unmapped``, ``packed_error``)
``generate``        one per request, as vLLM received and finished it (:func:`microcoder_ext.smoke.vllm_cpu.
                    record_requests`): ``engine``, ``version`` (the weight version the engine serves), ``temperature``,
                    ``top_p``, ``top_k``, ``max_tokens``, ``logprobs``, ``finish`` (vLLM's ``finish_reason``: "stop" |
                    "length" | "abort"), ``tokens``, ``request``, ``started`` (when vLLM got it; ``t``: when
                    it finished); OpenRLHF's also ``prompt`` (hash of the prompt ids) and ``query`` (the digest
                    of the text its reward scores)
``weights_sent``    ``sender``, ``version``, ``checksum``, ``tensors``, ``per_tensor`` (the trainer side of a sync)
``weights_loaded``  ``engine``, ``version``, ``checksum``, ``tensors``, ``per_tensor`` (what vLLM holds after the
                    sync, read inside its worker in the trainer's names and dtype), ``unmapped``, ``packed_error``
                    (largest relative error of vLLM's packed CPU kernels vs their weights), ``changed`` (vs before)
``reward``          ``seconds`` (wall time of one call of the code reward), ``verdict``

Every event also has ``pid``, ``t`` (Unix time, seconds) and ``node``: the host name and, in a process of a Ray
worker or a child of one (vLLM's engine processes), the pid of that node's raylet (``RAY_RAYLET_PID``, set by Ray),
so that the raylets of a local multi-node cluster are told apart.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

ENV = "MICROCODER_SMOKE_EVIDENCE"


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def record(event: str, **fields: Any) -> None:
    """Append one event (no-op unless :data:`ENV` names a file). Never raises: evidence must not break a run."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), "node": node(), **fields}, default=str,
                      sort_keys=True) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def node() -> str:
    """This process's node: ``host`` or, under Ray, ``host:raylet-pid``."""
    raylet = os.environ.get("RAY_RAYLET_PID")
    return f"{socket.gethostname()}:{raylet}" if raylet else socket.gethostname()


def read(path: str | os.PathLike) -> list[dict]:
    """Every event in the file (an unreadable or missing file: none; a torn last line is skipped)."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError:
        return []
    return out
