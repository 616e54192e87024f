"""Landlock (Linux >= 5.13) through raw syscalls with ctypes: best-effort filesystem, TCP and signal isolation.

A ruleset is built once per job in the worker (read+execute beneath an allowlist of interpreter and
library directories, full access beneath the job's private tmp dir, TCP bind/connect denied on ABI >= 4,
abstract-unix-socket and signal scoping on ABI >= 6) and applied in each forked child with
:func:`restrict_self` (which needs no-new-privs). Files outside the allowlist cannot be read or written.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64 and aarch64
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_ALL_V1 = (1 << 13) - 1  # execute .. make_sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


class LandlockUnavailable(RuntimeError):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version(libc: ctypes.CDLL | None = None) -> int:
    """Landlock ABI version of the running kernel (raises :class:`LandlockUnavailable` when absent)."""
    libc = libc or _libc()
    v = libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    if v < 0:
        err = ctypes.get_errno()
        raise LandlockUnavailable(f"landlock_create_ruleset: {errno.errorcode.get(err, err)} ({os.strerror(err)})")
    return int(v)


def fs_access(abi: int) -> int:
    """Every filesystem right known to ``abi``."""
    acc = FS_ALL_V1
    if abi >= 2:
        acc |= FS_REFER
    if abi >= 3:
        acc |= FS_TRUNCATE
    if abi >= 5:
        acc |= FS_IOCTL_DEV
    return acc


def create_ruleset(read_paths, write_paths, libc: ctypes.CDLL | None = None) -> tuple[int, int]:
    """Build a ruleset; returns ``(fd, abi)``. Missing paths are skipped. Caller closes ``fd``."""
    libc = libc or _libc()
    abi = abi_version(libc)
    handled = fs_access(abi)
    attr = struct.pack("Q", handled)
    if abi >= 4:
        attr += struct.pack("Q", NET_BIND_TCP | NET_CONNECT_TCP)
    if abi >= 6:
        attr += struct.pack("Q", SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise LandlockUnavailable(f"landlock_create_ruleset: {errno.errorcode.get(err, err)}")
    try:
        read_acc = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        for paths, acc in ((read_paths, read_acc), (write_paths, handled)):
            for path in paths:
                _add_path(libc, fd, path, acc & handled)
    except BaseException:
        os.close(fd)
        raise
    return fd, abi


def _add_path(libc: ctypes.CDLL, ruleset_fd: int, path: str, access: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access, pfd), 12)  # packed struct
        if libc.syscall(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, rule, 0) != 0:
            err = ctypes.get_errno()
            raise LandlockUnavailable(f"landlock_add_rule({path}): {errno.errorcode.get(err, err)}")
    finally:
        os.close(pfd)


def restrict_self(ruleset_fd: int, libc: ctypes.CDLL | None = None) -> None:
    """Apply the ruleset to the calling process (needs no-new-privs or CAP_SYS_ADMIN)."""
    libc = libc or _libc()
    if libc.syscall(SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
        err = ctypes.get_errno()
        raise LandlockUnavailable(f"landlock_restrict_self: {errno.errorcode.get(err, err)}")
