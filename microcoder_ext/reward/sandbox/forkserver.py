"""The worker's fork server (W): the only process that forks sandboxed children, and one that never reads a job.

Every child is forked from W ahead of its job, with everything that does not depend on the job (its temp dir with
the quota tmpfs, landlock ruleset, stdio and code memfds, result and control pipes; sandbox stage 1 done in the
child, which then waits for its spec). W hands the other ends of the child's descriptors to the job process M over
a unix socket (``SCM_RIGHTS``) and keeps nothing of them; it reaps its children and tells M how each one ended (and reaps
the orphans of their test processes: it is their subreaper).
Because W never holds a job's code, inputs or outputs (M does), a child, which is a copy of W's memory, holds
nothing of any job but its own (what M writes to its control pipe and memfds): never another sample's solution.

Messages on the socket (one JSON object per SOCK_SEQPACKET datagram):
  M -> W  {"op": "want"}                                  fork the next child ahead
  W -> M  {"op": "child", "pid", "tmp", "quota", "pidfd"}  + descriptors, in :data:`CHILD_FDS` order (and a
          pidfd when ``pidfd`` is true)
  W -> M  {"op": "child_failed", "error"}                 the child could not be prepared (infrastructure)
  W -> M  {"op": "exit", "pid", "status"}                  a child ended (``status``: its wait status)
W ends when M does (its socket closes, or SIGCHLD for M), and M dies with W (parent-death signal).
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket

from . import child, landlock

#: descriptors sent with a "child" message, in this order
CHILD_FDS = ("result", "ctl", "stdin", "stdout", "stderr", "code")
MAX_MSG = 1 << 16
_INT = array.array("i")


def send(sock: socket.socket, msg: dict, fds=()) -> None:
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def recv(sock: socket.socket, block: bool = True) -> tuple[dict | None, list[int]]:
    """One message and its descriptors; ``({}, [])`` when nothing is waiting (``block`` False); ``(None, [])`` when
    the other end is gone. (``socket.recv_fds`` ignores its flags argument before Python 3.12.)"""
    try:
        data, anc, _flags, _addr = sock.recvmsg(MAX_MSG, socket.CMSG_LEN(16 * _INT.itemsize),
                                                0 if block else socket.MSG_DONTWAIT)
    except BlockingIOError:
        return {}, []
    except OSError:
        return None, []
    fds = array.array("i")
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    fds = list(fds)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


class ForkServer:
    """W's loop. ``worker``: the started-up :class:`~.worker.Worker` (configuration, probe results, base dir)."""

    def __init__(self, worker, sock: socket.socket):
        self.w = worker
        self.sock = sock
        self.children: set[int] = set()

    def serve(self, m_pid: int) -> int:
        """Serve M until it exits; returns M's exit code (or -1 if it was killed)."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        old_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        try:
            while True:
                ready = select.select([self.sock, wake_r], [], [])[0]
                if wake_r in ready:
                    try:
                        while os.read(wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    code = self._reap(m_pid)
                    if code is not None:
                        return code
                if self.sock in ready:
                    msg, fds = recv(self.sock, block=False)
                    for fd in fds:
                        os.close(fd)
                    if msg is None:  # M is gone (its SIGCHLD follows)
                        _, status = os.waitpid(m_pid, 0)
                        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
                    if msg.get("op") == "want":
                        self.offer()
        finally:
            signal.set_wakeup_fd(old_fd)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_r)
            os.close(wake_w)
            for pid in self.children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _reap(self, m_pid: int) -> int | None:
        """Reap every child that ended and tell M; M's exit code if M itself ended."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid == 0:
                return None
            if pid == m_pid:
                return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
            if pid not in self.children:
                continue  # an orphaned test process (W is a child subreaper): reaped, nothing to tell
            self.children.discard(pid)
            try:
                send(self.sock, {"op": "exit", "pid": pid, "status": status})
            except OSError:
                pass  # M is gone: its own SIGCHLD ends the loop

    def offer(self) -> None:
        """Prepare and fork one child ahead, hand its descriptors to M."""
        try:
            msg, fds = self.spawn()
        except Exception as e:  # e.g. no memory for the tmpfs, fork failed: M answers the job with sandbox_error
            try:
                send(self.sock, {"op": "child_failed", "error": f"{type(e).__name__}: {e}"})
            except OSError:
                pass
            return
        try:
            send(self.sock, msg, fds)
        except OSError:
            pass
        finally:
            for fd in fds:
                os.close(fd)

    def spawn(self) -> tuple[dict, list[int]]:
        """Fork a child past sandbox stage 1 (``child.run`` with no spec: it waits for one on its control pipe)."""
        w = self.w
        tmp, quota = w.child_dir()
        fds: dict = {}  # the child's ends (and W's copies of the memfds), by role
        ours: dict = {}  # the ends M gets
        try:
            fds["tmpdir_fd"] = os.open(tmp, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            if w.layers.get("landlock"):
                reads, writes = (w.read_paths, [tmp, "/dev/null"]) if quota else (w.read_paths + [tmp], ["/dev/null"])
                fds["ruleset"], _ = landlock.create_ruleset(reads, writes, w.libc)
            else:
                fds["ruleset"] = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            for name in ("stdin", "stdout", "stderr", "code"):  # "code": the job's compiled-code cache
                fds[name] = os.memfd_create(f"mc-{name}", os.MFD_CLOEXEC)
            ours["result"], fds["result"] = os.pipe2(os.O_CLOEXEC)
            fds["ctl"], ours["ctl"] = os.pipe2(os.O_CLOEXEC)
            pid = os.fork()
            if pid == 0:
                try:
                    child.run(None, {**fds, "paths": w.path_fds, "parent_pid": w.pid}, w.libc)
                finally:
                    os._exit(122)
            self.children.add(pid)
            try:
                ours["pidfd"] = os.pidfd_open(pid)
            except (AttributeError, OSError):
                pass
            for name in ("stdin", "stdout", "stderr", "code"):  # M gets W's copies of the memfds
                ours[name] = fds.pop(name)
            sent = [ours[name] for name in CHILD_FDS] + ([ours["pidfd"]] if "pidfd" in ours else [])
            return {"op": "child", "pid": pid, "tmp": tmp, "quota": quota, "pidfd": "pidfd" in ours}, sent
        except BaseException:
            for fd in ours.values():
                os.close(fd)
            w.release_child_dir(tmp, quota)
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
