"""The worker's private mount namespace and the per-child temp-dir quota (a size- and inode-limited tmpfs).

A program's temp dir is the only place it may write (landlock). On a host directory it could fill the disk, or the
RAM when /tmp is a tmpfs (``posix_fallocate`` of 1 GiB takes 0.05 s; RLIMIT_FSIZE bounds one file, not their number).
So, where the worker may mount (root with CAP_SYS_ADMIN), it enters a mount namespace of its own at start-up
(``unshare(CLONE_NEWNS)``, every mount made private: nothing it mounts is visible outside, and the kernel removes it
all when the worker's last process exits, however it dies) and mounts

* a small tmpfs on its base dir (only the per-child mount points live there: the host sees an empty directory, so no
  clean-up outside the namespace, by this worker or by another engine, ever meets a program's files), and
* per sandboxed child, a tmpfs of ``size`` bytes and ``inodes`` inodes (``nosuid,nodev``) on the child's temp dir:
  a program that exceeds it gets ENOSPC (its own error: a program verdict), and its clean-up is one lazy unmount,
  which frees everything at once whatever the program built there (depth, modes, names).

Where mounting is impossible (no CAP_SYS_ADMIN, e.g. an unprivileged container), the worker reports the quota layer
unavailable and the programs get a read-only temp dir instead of an unbounded one.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH, UMOUNT_NOFOLLOW = 2, 8
MiB = 1 << 20


class MountError(OSError):
    pass


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise MountError(err, f"{what}: {os.strerror(err)}")


def private_namespace(libc) -> None:
    """Move the calling (single-threaded) process into a new mount namespace in which every mount is private."""
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")


def mount_tmpfs(path: str, size_bytes: int, inodes: int, libc, mode: int = 0o700) -> None:
    """Mount a tmpfs of at most ``size_bytes`` and ``inodes`` on ``path`` (nosuid, nodev)."""
    opts = f"size={max(4096, int(size_bytes))},nr_inodes={max(2, int(inodes))},mode={mode:o}".encode()
    _check(libc.mount(b"microcoder-sbx", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, opts),
           f"mount tmpfs on {path}")


def unmount(path: str, libc) -> bool:
    """Lazily unmount ``path`` (and every mount beneath it); False if nothing was mounted there."""
    return libc.umount2(os.fsencode(path), MNT_DETACH | UMOUNT_NOFOLLOW) == 0


def readonly_binds(dirs, libc) -> list[str]:
    """Make each existing directory of ``dirs`` read-only in this namespace (a recursive bind mount on itself,
    remounted read-only: mounts beneath it keep their own mode). Returns the directories done."""
    done = []
    for d in dirs:
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        p = os.fsencode(d)
        if libc.mount(p, p, None, MS_BIND | MS_REC, None) != 0:
            continue
        if libc.mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None) == 0:
            done.append(d)
        else:
            unmount(d, libc)
    return done


def quota_error(path: str, size_bytes: int) -> str | None:
    """Check that the tmpfs on ``path`` refuses more than ``size_bytes`` (an fallocate past it, nothing written):
    None if it does, else what happened."""
    name = os.path.join(path, ".quota-probe")
    try:
        fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        return f"cannot create a file: {e}"
    try:
        os.posix_fallocate(fd, 0, size_bytes + MiB)
        return f"{size_bytes + MiB} bytes were allocated past the quota"
    except OSError:
        return None
    finally:
        os.close(fd)
        os.unlink(name)
