"""Resource limits and privilege drop applied in a forked child before it runs model code."""

from __future__ import annotations

import ctypes
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


PR_SET_KEEPCAPS = 8
CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "amd64": 126, "aarch64": 91, "arm64": 91}


def drop_privileges(uid: int, gid: int, libc: ctypes.CDLL | None = None, keep_read_search: bool = False) -> None:
    """Root only: clear supplementary groups and switch real/effective/saved ids to ``uid:gid``.

    ``keep_read_search`` keeps CAP_DAC_READ_SEARCH alone (every other capability is dropped), so that an
    interpreter installed under a private home (pyenv, a venv in /root) stays importable; use it only when
    landlock restricts reads to the allowlist, since it bypasses file permission bits for reading.
    """
    if os.geteuid() != 0:
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    if keep_read_search:
        libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setresuid(uid, uid, uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise PermissionError("uid drop failed")
    if keep_read_search:
        _capset(libc, 1 << CAP_DAC_READ_SEARCH)
        libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)


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
