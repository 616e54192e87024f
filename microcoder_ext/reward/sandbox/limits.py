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


def apply_rlimits(*, address_space_bytes: int, cpu_seconds: int, file_size_bytes: int, open_files: int,
                  processes: int, stack_bytes: int) -> None:
    """Set limits (AS, CPU, FSIZE, NOFILE, NPROC, STACK; CORE = 0); soft = hard except CPU (hard = soft + 1 s)."""
    for res, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, address_space_bytes),
        (resource.RLIMIT_CPU, max(1, int(cpu_seconds))),
        (resource.RLIMIT_FSIZE, file_size_bytes),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_STACK, stack_bytes),
    ):
        _soft, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        # CPU: soft < hard so that the soft limit delivers SIGXCPU (reported as a timeout), not SIGKILL
        resource.setrlimit(res, (value, value + 1 if res == resource.RLIMIT_CPU and value != hard else value))


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
