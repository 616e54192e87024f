"""Resource limits and privilege drop applied in a forked child before it runs model code."""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
MiB = 1 << 20


#: every resource limit of Linux (RLIMIT_LOCKS, 10, has no name in Python's ``resource``)
ALL_RLIMITS = tuple(range(16))
RLIMIT_LOCKS = 10
#: limits with a fixed value in every sandboxed child, whatever the host's defaults: no core dumps, no higher priority
#: (nice ceiling 20 - 0) and no real-time scheduling (priority 0, 0 us of real-time CPU), no locked memory, no POSIX
#: message-queue bytes, a small queue of pending signals
FIXED_RLIMITS = {resource.RLIMIT_CORE: 0, resource.RLIMIT_NICE: 0, resource.RLIMIT_RTPRIO: 0, resource.RLIMIT_RTTIME: 0,
                 resource.RLIMIT_MEMLOCK: 0, resource.RLIMIT_MSGQUEUE: 0, resource.RLIMIT_SIGPENDING: 256}


def planned_rlimits(*, address_space_bytes: int, cpu_seconds: int, file_size_bytes: int, open_files: int,
                    processes: int, stack_bytes: int) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` for EVERY resource limit of a sandboxed child, computed from the calling process's own
    hard limits (the worker's, which a forked child inherits), so that the job process can recompute them and check a
    child before reusing it. soft = hard everywhere (nothing a program can raise), except CPU: hard = soft + 1 s, so that
    the soft limit delivers SIGXCPU (reported as a timeout). RLIMIT_CPU is only the whole job's backstop
    (tests x per-test seconds): the per-test budget is enforced from outside by the job process (``cpu_clock``).
    AS, FSIZE, NOFILE, NPROC, STACK as given; the :data:`FIXED_RLIMITS`; any other limit (DATA, RSS, LOCKS) keeps the
    host's hard value as its soft value too."""
    wanted = {resource.RLIMIT_AS: address_space_bytes, resource.RLIMIT_CPU: max(1, int(cpu_seconds)),
              resource.RLIMIT_FSIZE: file_size_bytes, resource.RLIMIT_NOFILE: open_files,
              resource.RLIMIT_NPROC: processes, resource.RLIMIT_STACK: stack_bytes, **FIXED_RLIMITS}
    out = []
    for res in ALL_RLIMITS:
        _soft, hard = resource.getrlimit(res)
        value = wanted.get(res, hard)
        if hard != resource.RLIM_INFINITY and (value == resource.RLIM_INFINITY or value > hard):
            value = hard
        if res == resource.RLIMIT_CPU and value != hard:
            out.append((res, value, value + 1))
        else:
            out.append((res, value, value))
    return out


def apply_rlimits(**limits) -> list[tuple[int, int, int]]:
    """Set every resource limit to :func:`planned_rlimits` (same keyword arguments); returns what was set."""
    plan = planned_rlimits(**limits)
    for res, soft, hard in plan:
        resource.setrlimit(res, (soft, hard))
    return plan


def limits_text(pid: int) -> bytes:
    """``/proc/<pid>/limits``: every resource limit of ``pid`` as the kernel enforces it (not what the process's own
    ``resource`` module, which a program can replace, would say), readable by anyone (``prlimit`` on another uid's
    process needs CAP_SYS_RESOURCE, which containers often drop). ProcessLookupError when the process is gone."""
    try:
        with open(f"/proc/{pid}/limits", "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None


def parse_limits(text: bytes) -> list[tuple[int, int, int]]:
    """``(resource, soft, hard)`` for every resource, from :func:`limits_text`."""
    out = []
    lines = text.decode("ascii", "replace").splitlines()[1:]
    for res, line in zip(ALL_RLIMITS, lines):  # "%-25s %-20s %-20s %-10s", in resource order
        out.append((res, _limit_value(line[26:47].strip()), _limit_value(line[47:68].strip())))
    return out


def rlimits_of(pid: int) -> list[tuple[int, int, int]]:
    return parse_limits(limits_text(pid))


def _limit_value(text: str) -> int:
    return resource.RLIM_INFINITY if text == "unlimited" else int(text)


def scheduling_of(pid: int) -> tuple[int, int]:
    """(nice value, scheduling policy) of ``pid``."""
    return os.getpriority(os.PRIO_PROCESS, pid), os.sched_getscheduler(pid)


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "amd64": 126, "aarch64": 91, "arm64": 91}
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


def drop_privileges(uid: int, gid: int, libc: ctypes.CDLL | None = None) -> None:
    """Root only: clear supplementary groups and switch real/effective/saved ids to ``uid:gid``.

    Every capability goes with the uid change (no PR_SET_KEEPCAPS): the child keeps none, not even
    CAP_DAC_READ_SEARCH (see ``sandbox.worker`` for how an interpreter under a private home stays
    importable without it).
    """
    if os.geteuid() != 0:
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.geteuid() == 0 or os.getuid() == 0 or os.getegid() != gid:
        raise PermissionError("uid drop failed")
    if libc is not None and _capabilities_left(libc):
        raise PermissionError("capabilities survived the uid drop")


def drop_all_capabilities(libc: ctypes.CDLL) -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets (uid unchanged).

    Used only when the sandbox runs as uid 0 without a uid drop (explicitly allowed by configuration):
    uid 0 still owns every root file, so this is much weaker than the uid drop.
    """
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err != errno.EINVAL:  # EINVAL: a capability number unknown to this kernel
                raise PermissionError(f"PR_CAPBSET_DROP({cap}): errno {err}")
    _capset(libc, 0)
    if _capabilities_left(libc):
        raise PermissionError("capabilities could not be dropped")


def _capabilities_left(libc: ctypes.CDLL) -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("CapEff:", "CapPrm:")) and int(line.split()[1], 16):
                    return True
    except OSError:
        pass
    return False


def _capset(libc: ctypes.CDLL, caps: int) -> None:
    import platform
    nr = _SYS_CAPSET.get(platform.machine().lower())
    if nr is None:
        raise PermissionError("capset: unsupported architecture")
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(caps, caps, 0, 0, 0, 0)  # {effective, permitted, inheritable} x 2
    if libc.syscall(nr, header, data) != 0:
        raise PermissionError(f"capset failed: errno {ctypes.get_errno()}")


def die_with_parent(libc: ctypes.CDLL, parent_pid: int) -> None:
    """SIGKILL this process when the worker dies (set after the uid change, which clears it)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(137)
