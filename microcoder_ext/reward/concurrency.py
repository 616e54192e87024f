"""Node-wide limit on concurrently running sandboxed programs.

Several processes on one node score code at the same time: verl starts ``reward.num_workers`` (default 8)
RewardLoopWorker processes per node, its ``remote`` reward manager runs the reward function in
``num_cpus=1`` Ray actors, OpenRLHF calls it from every vLLM actor. Each process has its own engine; a
per-process limit of one sandbox per core would run up to 8x more sandboxed programs than there are
cores, and CPU contention turns into wall-clock timeouts (false ``timeout`` verdicts).

:class:`NodeSlots` bounds the total: ``count`` lock files ``slot-<k>`` in one per-user directory
(``/dev/shm/microcoder-reward-slots-<euid>``, else ``/tmp/...``); running a job needs an exclusive
``flock`` on one of them. Locks die with their process (a crashed or SIGKILLed holder frees its slot at
once: no leaked capacity, unlike a named semaphore), and the slot index is node-unique while held, so it
also picks the job's sandbox uid (``uid + k``): two programs running at the same time never share a uid
(no shared RLIMIT_NPROC count, no same-uid signals or /proc access between them).

The directory is created ``0700`` and checked (``O_NOFOLLOW``, a directory owned by this user, not
writable by group or others) before use, slot files are opened with ``O_NOFOLLOW`` relative to it: no
other user (in particular not the sandbox uids, which also cannot reach it through landlock) can create,
replace or lock a slot. If the directory is unusable the engine falls back to a per-process limit
(:class:`LocalSlots`) and says so once.

Configuration (environment, read by ``EngineConfig.from_env``):
  MICROCODER_REWARD_NODE_SLOTS  slots per node (default: :func:`available_cores`; 0 = no node-wide limit)
  MICROCODER_REWARD_SLOTS_DIR   the lock directory (default above); every process of a node must agree
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import random
import stat
import threading
import time

__all__ = ["LocalSlots", "NodeSlots", "SlotsUnavailable", "available_cores", "default_slots_dir"]


class SlotsUnavailable(RuntimeError):
    """The slot directory cannot be used safely."""


def _cgroup_cpu_limit() -> float | None:
    """CPU quota of this process's cgroup in cores (cgroup v2 ``cpu.max`` or v1 CFS quota), or None."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":  # cgroup v2: walk up from our group to the root
            p = path
            while True:
                try:
                    with open(os.path.join("/sys/fs/cgroup", p.lstrip("/"), "cpu.max")) as f:
                        quota, period = f.read().split()[:2]
                    if quota != "max":
                        limits.append(int(quota) / int(period))
                except (OSError, ValueError):
                    pass
                if p in ("/", ""):
                    break
                p = os.path.dirname(p)
        elif "cpu" in controllers.split(","):
            for base in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"):
                try:
                    with open(os.path.join(base, path.lstrip("/"), "cpu.cfs_quota_us")) as f:
                        quota = int(f.read())
                    with open(os.path.join(base, path.lstrip("/"), "cpu.cfs_period_us")) as f:
                        period = int(f.read())
                    if quota > 0 and period > 0:
                        limits.append(quota / period)
                    break
                except (OSError, ValueError):
                    continue
    return min(limits) if limits else None


def available_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup CPU quota (a Kubernetes CPU
    limit shows up there, not in ``os.cpu_count()``)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_limit()
    if quota is not None:
        n = min(n, max(1, math.ceil(quota - 1e-9)))
    return max(1, n)


def default_slots_dir() -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else "/tmp"
    return os.path.join(base, f"microcoder-reward-slots-{os.geteuid()}")


def _open_private_dir(path: str) -> int:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise SlotsUnavailable(f"cannot create {path}: {e}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise SlotsUnavailable(f"cannot open {path}: {e} (a symlink?)") from None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "not a directory"
    elif st.st_uid != os.geteuid():
        problem = f"owned by uid {st.st_uid}, not {os.geteuid()}"
    elif st.st_mode & 0o022:
        problem = f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    if problem:
        os.close(fd)
        raise SlotsUnavailable(f"{path}: {problem}")
    return fd


class NodeSlots:
    """``count`` node-wide slots backed by ``flock`` on lock files. Thread-safe.

    ``acquire(timeout)`` returns a slot index in ``range(count)`` (or None on timeout); ``release(k)``
    frees it. Within one process a slot is handed to one thread at a time (flock locks belong to the
    open file, which the threads of a process share), across processes by the kernel.
    """

    node_wide = True

    def __init__(self, count: int, directory: str | None = None):
        if count < 1:
            raise ValueError("count must be >= 1")
        self.count = int(count)
        self.directory = directory or default_slots_dir()
        self._dfd = _open_private_dir(self.directory)
        self._fds: dict[int, int] = {}
        self._held: set[int] = set()
        self._cond = threading.Condition()
        self._poller = None
        self._next = random.randrange(self.count)
        self._closed = False

    def _fd(self, k: int) -> int:
        fd = self._fds.get(k)
        if fd is None:
            if self._closed:
                raise OSError(errno.EBADF, "slots closed")
            fd = os.open(f"slot-{k}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self._dfd)
            self._fds[k] = fd
        return fd

    def _try_any(self) -> int | None:
        """One non-blocking pass over the slots not held by this process (caller holds ``_cond``)."""
        start = self._next
        for j in range(self.count):
            k = (start + j) % self.count
            if k in self._held:
                continue
            try:
                fcntl.flock(self._fd(k), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    continue
                raise
            self._held.add(k)
            self._next = (k + 1) % self.count
            return k
        return None

    def acquire(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        me = threading.get_ident()
        delay = 0.001
        with self._cond:
            try:
                while True:
                    if self._closed:
                        return None
                    k = self._try_any()
                    if k is not None:
                        return k
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    # Slots freed by other processes are found by polling; one thread per process polls
                    # (exponential backoff to 25 ms), the others wait for a local release or their turn.
                    if self._poller is None:
                        self._poller = me
                    if self._poller == me:
                        wait = delay * (0.5 + random.random())
                        delay = min(delay * 2, 0.025)
                    else:
                        wait = 0.25
                    self._cond.wait(wait if remaining is None else min(wait, remaining))
            finally:
                if self._poller == me:
                    self._poller = None
                    self._cond.notify()

    def release(self, k: int) -> None:
        with self._cond:
            if k in self._held and k in self._fds:
                fcntl.flock(self._fds[k], fcntl.LOCK_UN)
            self._held.discard(k)
            self._cond.notify()

    def held(self) -> int:
        with self._cond:
            return len(self._held)

    def close(self) -> None:
        """Release every slot of this process and wake its waiters (idempotent: never closes a
        descriptor number twice, which could by then belong to something else)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            fds, self._fds = list(self._fds.values()), {}
            self._held.clear()
            dfd, self._dfd = self._dfd, -1
            self._cond.notify_all()
        for fd in fds + [dfd]:
            try:
                os.close(fd)
            except OSError:
                pass


class LocalSlots:
    """The per-process fallback with the same interface (indices unique within this process only)."""

    node_wide = False

    def __init__(self, count: int):
        self.count = max(1, int(count))
        self.directory = None
        self._free = list(range(self.count))
        self._cond = threading.Condition()
        self._closed = False

    def acquire(self, timeout: float | None = None) -> int | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free or self._closed, timeout):
                return None
            return None if self._closed else self._free.pop(0)

    def release(self, k: int) -> None:
        with self._cond:
            if k not in self._free:
                self._free.append(k)
            self._cond.notify()

    def held(self) -> int:
        with self._cond:
            return self.count - len(self._free)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
