"""Removal of a directory tree that a sandboxed program may have built, whatever it built. Never raises.

``shutil.rmtree`` recurses once per level (a 1,500-level tree raises RecursionError) and keeps a descriptor per
level; :func:`remove_tree` is iterative and holds two descriptors at any depth:

* depth: an explicit stack of (name, device, inode) frames; the walk goes down with ``openat`` of a name in the open
  directory and back up with ``openat("..")``, checked against the device and inode recorded on the way down (a tree
  moved while it is removed is abandoned, never followed elsewhere);
* width: one listing per directory (names kept on the frame), files unlinked as they are listed;
* symlinks are never followed: directories are opened ``O_NOFOLLOW | O_DIRECTORY``, anything else is unlinked as the
  link it is;
* modes: a directory that cannot be listed, entered or written (mode 0, 0500, ...) is given mode 0700 through its
  ``O_PATH`` descriptor (``/proc/self/fd/N``: never a path a program could swap for a symlink) and retried; file
  modes do not matter to ``unlink``;
* names are passed back exactly as listed (any bytes, through ``surrogateescape``).

What it cannot remove (another user's sticky directory, an immutable file, a mount point) is left and named in the
returned reason; the caller decides (log, retry later), nothing stops.
"""

from __future__ import annotations

import errno
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str, max_ops: int = 20_000_000) -> str | None:
    """Remove ``path`` and everything beneath it (a symlink or file: just that entry). Returns None when ``path`` is
    gone (or never existed), else a short reason. ``max_ops`` bounds the work (entries removed + directories
    entered) against a tree that something keeps growing while it is removed."""
    try:
        parent, name = os.path.split(os.path.abspath(path))
        try:
            pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            return _remove_at(pfd, name, max_ops)
        finally:
            os.close(pfd)
    except Exception as e:  # noqa: BLE001 -- the contract: never raise
        return f"{type(e).__name__}: {e}"


def _remove_at(pfd: int, name: str, max_ops: int) -> str | None:
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return _unlink(pfd, name)
    cur = _open_dir(pfd, name)
    if cur is None:
        return f"cannot open {name!r}"
    # frames: [name in parent, (dev, ino) of the parent, pending subdirectory names, failures here]
    top = os.fstat(pfd)
    stack = [[name, (top.st_dev, top.st_ino), None, 0]]
    ops, failed = 0, 0
    try:
        while True:
            frame = stack[-1]
            if frame[2] is None:  # first visit: unlink the non-directories, remember the subdirectories
                frame[2] = []
                for entry_name, is_dir in _list(cur):
                    ops += 1
                    if is_dir:
                        frame[2].append(entry_name)
                    elif _unlink(cur, entry_name) is not None:
                        frame[3] += 1
                frame[2].reverse()
            if ops > max_ops:
                return f"gave up after {max_ops} operations"
            if frame[2]:  # descend into the next subdirectory
                sub = frame[2].pop()
                child = _open_dir(cur, sub)
                ops += 1
                if child is None:
                    frame[3] += _unlink(cur, sub) is not None  # not a directory any more (or cannot be opened)
                    continue
                here = os.fstat(cur)
                stack.append([sub, (here.st_dev, here.st_ino), None, 0])
                os.close(cur)
                cur = child
                continue
            if frame[3] == 0 and _list(cur):  # something appeared meanwhile: one more pass
                frame[2] = None
                frame[3] = 0
                if ops > max_ops:
                    return f"gave up after {max_ops} operations"
                continue
            # this directory is done: go up, check that ".." is the directory we came from, remove it there
            stack.pop()
            up = os.open("..", _DIR_FLAGS & ~os.O_NOFOLLOW, dir_fd=cur) if stack else os.dup(pfd)
            ust = os.fstat(up)
            os.close(cur)
            cur = up
            if (ust.st_dev, ust.st_ino) != frame[1]:
                return "the tree moved while it was being removed"
            if frame[3]:
                failed += 1
                if stack:
                    stack[-1][3] += 1
            elif _rmdir(cur, frame[0]) is not None:
                failed += 1
                if stack:
                    stack[-1][3] += 1
            if not stack:
                return None if failed == 0 else f"{failed} directories could not be emptied"
    finally:
        os.close(cur)


def _list(fd: int) -> list[tuple[str, bool]]:
    """(name, is a directory (not followed)) of every entry of the open directory ``fd``."""
    out = []
    with os.scandir(fd) as it:  # scandir(fd) works on a duplicate: ``fd`` stays open and usable
        for entry in it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            out.append((entry.name, is_dir))
    return out


def _open_dir(dfd: int, name: str) -> int | None:
    """``openat(dfd, name)`` as a directory, never through a symlink; a directory the caller may not read or enter
    gets mode 0700 first (through its own O_PATH descriptor). None if that is impossible."""
    for attempt in range(2):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except PermissionError:
            if attempt or not _open_up(dfd, name):
                return None
        except OSError:
            return None
        else:
            if os.fstat(fd).st_mode & 0o700 != 0o700:  # readable but not writable or searchable (0500, 0600)
                _writable(fd)
            return fd
    return None


def _open_up(dfd: int, name: str) -> bool:
    """chmod 0700 the directory ``name`` in ``dfd`` (not a symlink: checked on its O_PATH descriptor)."""
    try:
        pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(os.fstat(pfd).st_mode):
            return False
        os.chmod(f"/proc/self/fd/{pfd}", 0o700)
        return True
    except OSError:
        return False
    finally:
        os.close(pfd)


def _writable(dfd: int) -> bool:
    try:
        os.fchmod(dfd, 0o700)
        return True
    except OSError:
        return False


def _unlink(dfd: int, name: str) -> str | None:
    for attempt in range(2):
        try:
            os.unlink(name, dir_fd=dfd)
            return None
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return _remove_at(dfd, name, 20_000_000)  # became a directory meanwhile
        except PermissionError as e:
            if e.errno == errno.EACCES and not attempt and _writable(dfd):
                continue
            return f"unlink {name!r}: {e.strerror}"
        except OSError as e:
            return f"unlink {name!r}: {e.strerror}"
    return f"unlink {name!r}: not permitted"


def _rmdir(dfd: int, name: str) -> str | None:
    for attempt in range(2):
        try:
            os.rmdir(name, dir_fd=dfd)
            return None
        except FileNotFoundError:
            return None
        except PermissionError as e:
            if e.errno == errno.EACCES and not attempt and _writable(dfd):
                continue
            return f"rmdir {name!r}: {e.strerror}"
        except OSError as e:
            return f"rmdir {name!r}: {e.strerror}"
    return f"rmdir {name!r}: not permitted"


def remove_owned_by(uid: int, dirs) -> str | None:
    """Remove every top-level entry of ``dirs`` owned by ``uid`` (a sandbox uid that belongs to one job while it
    runs: without landlock its program can create files in world-writable directories). Returns a warning or None."""
    failed = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            try:
                if os.lstat(path).st_uid != uid:
                    continue
            except OSError:
                continue
            why = remove_tree(path)
            if why:
                failed.append(f"{path}: {why}")
    return "; ".join(failed)[:1000] or None
