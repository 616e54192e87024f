"""Start-up probe of the worker process (:mod:`.worker`): which sandbox layers work on this host.

Before serving any job the worker forks one child that applies every layer (``child.probe``: uid drop, landlock,
seccomp, the tmpfs quota) and checks that each holds; the report goes to the supervisor in the ``hello``
message, and the worker runs its jobs with the layers that passed. Here too: the directories the interpreter
reads (:func:`interpreter_paths`, :data:`SYSTEM_READ_PATHS`), ``O_PATH`` descriptors for those the sandbox uid
cannot reach (:func:`map_interpreter_dirs`), and read-only binds of the world-writable dirs when landlock is
missing. Stdlib-only (loaded inside the worker process as ``mc_sandbox.probe``).
"""

from __future__ import annotations

import fcntl
import json
import os
import site
import stat
import sys
import sysconfig

from . import child, landlock, mounts, seccomp_bpf

MiB = 1 << 20
#: system files and dirs a program may read besides the interpreter's (:func:`interpreter_paths`)
SYSTEM_READ_PATHS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/etc/localtime",
                     "/etc/ld.so.cache", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")

#: where a program without landlock could create files (read-only in the worker's mount namespace when it has
#: one; else whatever the job's slot-exclusive uid owns there is removed after the job: ``tree.remove_owned_by``)
WORLD_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/var/lock")


def interpreter_paths() -> list[str]:
    """Directories the interpreter needs to read: stdlib (with lib-dynload), site-packages (the prefix's, and
    those a ``.pth`` file of it adds with ``site.addsitedir``: a venv layered over another) and the shared
    library dir. Not the whole prefix (a venv or conda prefix can hold logs, caches and data), and not
    the other ``sys.path`` entries (an editable install puts a project checkout there)."""
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    try:
        paths.update(site.getsitepackages())
    except AttributeError:
        pass
    paths.update(p for p in sys.path if p.endswith("lib-dynload") or os.path.basename(p) == "site-packages")
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        paths.add(libdir)
    return sorted(p for p in paths if p and os.path.isabs(p) and os.path.isdir(p))


def reachable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid:gid`` (no supplementary groups, no capabilities) can search every ancestor of
    ``path`` and list ``path`` itself, judged from the mode bits (ACLs ignored: an ACL can only make this
    answer pessimistic, which costs a mapped descriptor, never access)."""

    def allowed(st, need: int) -> bool:
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        return (st.st_mode >> shift) & need == need

    parts = os.path.realpath(path).split(os.sep)
    cur = os.sep
    try:
        for part in parts[1:]:
            if not allowed(os.stat(cur), 1):
                return False
            cur = os.path.join(cur, part)
        st = os.stat(cur)
        return allowed(st, 5) if stat.S_ISDIR(st.st_mode) else allowed(st, 4)
    except OSError:
        return False


def map_interpreter_dirs(worker) -> None:
    """Interpreter directories under a private home (``/root/.pyenv``, a venv in ``/root``) are not
    reachable by the sandbox uid. Instead of keeping CAP_DAC_READ_SEARCH in the child (which would
    bypass file modes for every read landlock allows, and let it stat/getxattr/inotify any path on
    the machine), the worker opens an ``O_PATH`` descriptor per such directory (numbers >= 100, kept
    open in every child) and rewrites its own ``sys.path`` and package ``__path__`` lists to
    ``/proc/self/fd/N`` names once (``child.map_import_paths``); every job process and child inherits
    both. Only with landlock (without it ``..`` from such a descriptor could reach world-readable
    files under the private home) and only when dropping to a uid."""
    for p in sorted(worker.read_paths, key=len):
        if any(p.startswith(q + os.sep) for q, _fd in worker.path_fds):
            continue  # beneath a mapped directory already
        if os.path.isdir(p) and not reachable(p, worker.uid, worker.gid):
            try:
                fd = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
            os.close(fd)
            worker.path_fds.append((p, high))
    if worker.path_fds:
        worker.saved_import_paths = _import_path_lists()
        child.map_import_paths({p: f"/proc/self/fd/{fd}" for p, fd in worker.path_fds})

def unmap_interpreter_dirs(worker) -> None:
    """Undo :func:`map_interpreter_dirs` (the layers it serves are not active)."""
    for lst, old in worker.saved_import_paths:
        lst[:] = old
    sys.path_importer_cache.clear()
    for _p, fd in worker.path_fds:
        os.close(fd)
    worker.path_fds = []

def run(worker) -> dict:
    """Fork a child that applies each layer and checks that it works; returns the report (the worker's
    ``layers``, ``quota_error``, ``path_fds``, ``uid_max`` and ``world_writable_dirs`` are set from it)."""
    root = os.geteuid() == 0
    report: dict = {"root": root}
    want = {"uid_drop": root and worker.cfg.get("uid_drop", True),
            "landlock": worker.cfg.get("landlock", True), "seccomp": worker.cfg.get("seccomp", True),
            "tmp_quota_bytes": worker.quota_bytes if worker.quota_error is None else 0}
    try:
        seccomp_bpf.build(1)
    except seccomp_bpf.SeccompUnavailable as e:
        want["seccomp"] = False
        report["seccomp"] = f"unavailable: {e}"
    if want["landlock"]:
        try:
            report["landlock_abi"] = landlock.abi_version(worker.libc)
        except landlock.LandlockUnavailable as e:
            want["landlock"] = False
            report["landlock"] = f"unavailable: {e}"
    if want["uid_drop"] and want["landlock"]:
        map_interpreter_dirs(worker)
    if want["uid_drop"] and worker.probe_uid != worker.uid and not can_become(worker.probe_uid):
        report["uid_range"] = f"uid {worker.probe_uid} unusable here: every job uses uid {worker.uid}"
        worker.uid_max = worker.probe_uid = worker.uid
        worker.cfg["uid_exclusive"] = False
    if not want["landlock"] and worker.private_ns:
        # without landlock the world-writable dirs would be writable: read-only in this namespace
        done = mounts.readonly_binds(WORLD_WRITABLE_DIRS, worker.libc)
        worker.world_writable_dirs = [d for d in WORLD_WRITABLE_DIRS if d not in done]
        report["readonly_dirs"] = done
    worker.layers["uid_drop"] = want["uid_drop"]  # for child_dir (final value below)
    r, w = os.pipe()
    tmp, quota = worker.child_dir()
    if quota and want["uid_drop"]:
        os.chown(tmp, worker.probe_uid, worker.probe_uid)
    ruleset = None
    try:
        if want["landlock"]:
            writes = [tmp, "/dev/null"] if quota else ["/dev/null"]
            ruleset, _abi = landlock.create_ruleset(worker.read_paths + ([] if quota else [tmp]), writes, worker.libc)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                lim = {"memory_bytes": int(worker.cfg.get("memory_mb", 2048)) << 20, "open_files": 64,
                       "processes": 256, "stack_bytes": 256 << 20}
                rep = child.probe(lim, want, tmp, ruleset, worker.probe_uid, worker.probe_uid,
                                  worker.pid, worker.libc, worker.read_paths, worker.path_fds)
                os.write(w, json.dumps(rep).encode())
            except BaseException as e:
                os.write(w, json.dumps({"probe_error": f"{type(e).__name__}: {e}"}).encode())
            finally:
                os._exit(0)
        os.close(w)
        w = -1
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        report.update(json.loads(data or b"{}"))
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
        if ruleset is not None:
            os.close(ruleset)
        worker.release_child_dir(tmp, quota)
    worker.layers = {k: report.get(k) == "active" for k in ("uid_drop", "landlock", "seccomp")}
    checks = report.get("checks") or {}
    if worker.quota_error is None and not checks.get("tmp_quota"):
        worker.quota_error = f"the tmpfs quota did not hold in the probe ({checks.get('tmp_quota_error')})"
    worker.layers["tmp_quota"] = worker.quota_error is None
    report["tmp_quota"] = ("active" if worker.quota_error is None else
                           f"unavailable: {worker.quota_error}; the programs' temp dir is read-only")
    report["tmp_quota_mb"], report["tmp_inodes"] = worker.quota_bytes / MiB, worker.quota_inodes
    if not (worker.layers["landlock"] and worker.layers["uid_drop"]):
        unmap_interpreter_dirs(worker)
    if worker.layers["seccomp"]:
        seccomp_bpf.program_for(1)  # build the filter template once, before any fork
    report["uid_max"] = worker.uid_max
    return report

def can_become(uid: int) -> bool:
    """Whether a forked child can switch to ``uid`` (no supplementary groups)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _import_path_lists() -> list:
    """(list, copy) for ``sys.path`` and every loaded package's ``__path__`` list."""
    out = [(sys.path, list(sys.path))]
    for mod in list(sys.modules.values()):
        try:
            path = vars(mod).get("__path__")
        except TypeError:
            continue
        if isinstance(path, list):
            out.append((path, list(path)))
    return out
