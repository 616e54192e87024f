"""Runs inside a child forked by the worker's fork server (W) ahead of its job: apply every sandbox layer, then run
the program that the job process (M) sends on the control pipe.

Status records go to fd 3 as ``<nonce> <json>\\n`` lines (the worker ignores lines without the nonce):
  any mode:   ``{"s": "setup_failed", "e": msg}`` when a sandbox layer could not be applied
              (infrastructure), else ``{"s": "ready", "c": cpu}`` once every layer is on, before the program runs;
  stdin mode: per test ``{"i": i, "s": "end", "r": "ok"|"exception"|"memory", "e": msg, "x": 0|1}`` (``x`` = 1:
              this child exits instead of running the next test), or ``{"i": i, "s": "compile_error", "e": msg}``
  call mode:  per test ``{"i": i, "s": "ok", "v": <json text of the return value>, "c": cpu}`` or
              ``{"i": i, "s": "exception"|"memory"|"unserialisable"|"compile_error", "e": msg, "c": cpu}``
              (``c``: this process's CPU seconds when the test ended, where the job process starts the next
              test's CPU budget; it trusts the value only between the previous start and its own reading)
The child never sees expected outputs: only the program, the inputs and its own nonce. One child runs every
test of its job (stdin tests one after another in fresh namespaces, call-based tests as calls) until it
crashes or must not be reused; the job process then takes a fresh one for the remaining tests. Tests of
one job share a process, never tests of two jobs (two samples).

Compiled-code cache: the first child of a job that compiles the program stores ``marshal.dumps`` of the code
object in the job's ``code`` memfd (after every sandbox layer is on); later children of the same job load it
from there instead of compiling again (the job process copies the first child's memfd into the next one's with
``copy_file_range``). The job process never reads that memfd into its memory, so it never parses anything a
program could have written; a child that finds the
blob unusable (absent, foreign source hash, not loadable) just compiles. What a program can do through it
(make a later child of the same job run other code) it can already do by writing a file to the job's
tmpdir that its later runs read and exec; and it cannot even do that: every child closes the descriptor
right after loading or storing the code, before the program runs. The nonce is not
a secret from the program (same process: it can walk the frames or scan memory for it); it only keeps a
premature exit from looking like success. What a forged record can claim is bounded by the worker: an
output it could have printed anyway, never ``setup_failed`` after ``ready``, never a huge integer.
"""

from __future__ import annotations

import atexit
import builtins
import fcntl
import hashlib
import io
import json
import marshal
import os
import signal
import sys
import threading
import time
import traceback
import types

from . import limits, seccomp_bpf
from . import landlock as _landlock

RESULT_FD = 3
CODE_FD = None  # the job's compiled-code memfd after setup (see the module docstring), when the worker gives one
_CODE_MAGIC = b"MCcode1\0"
MAX_ERR = 2000
_json_dumps = json.dumps
_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=True, separators=(",", ":"), check_circular=True).encode


def _emit(nonce: str, rec: dict) -> None:
    data = (nonce + " " + _json_dumps(rec, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    view = memoryview(data)
    while view:
        view = view[os.write(RESULT_FD, view):]


_clock_gettime, _CPU_CLOCK = time.clock_gettime, time.CLOCK_PROCESS_CPUTIME_ID  # bound before any program runs


def _cpu() -> float:
    """This process's CPU seconds (all threads), for the ``c`` field of call-mode records."""
    try:
        return round(_clock_gettime(_CPU_CLOCK), 6)
    except BaseException:
        return 0.0


def _remap(sources: list[int], keep=()) -> None:
    """Make ``sources[i]`` fd ``i`` for every i and close every other descriptor except ``keep``
    (which must lie above ``len(sources)``); collision-safe."""
    keep = sorted(set(keep))
    floor = max([len(sources)] + [fd + 1 for fd in list(sources) + keep])
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in sources]
    for i, fd in enumerate(high):
        os.dup2(fd, i, inheritable=False)
    low = len(sources)
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 0x7FFFFFFF)


#: descriptor layout of a sandboxed child (see :func:`prepare`)
STDIN_FD, STDOUT_FD, STDERR_FD, RULESET_FD, CODE_MEMFD, CTL_FD = 0, 1, 2, 4, 5, 6
BACKUP_FDS = (7, 8, 9)  # copies of the stdin/stdout/stderr memfds: a program may close or replace 0-2


def prepare(fds: dict, parent_pid: int, libc) -> None:
    """Stage 1, before the job is known (every child is forked by the fork server ahead of its job): own
    session, the descriptor layout, cwd, death with the fork server. No program, input or limit is known yet.

    Descriptors afterwards: 0-2 stdio (memfds), 3 result pipe, 4 the landlock ruleset (or /dev/null; closed
    in stage 2), 5 the job's compiled-code memfd (``CODE_FD``), 6 the control pipe from the job process
    (the job spec, then one byte per further stdin test), 7-9 copies of the stdio memfds, and, at their
    worker-chosen numbers, the ``O_PATH`` descriptors of interpreter directories the sandbox uid cannot
    reach (``sys.path`` already names them: see ``probe.map_interpreter_dirs``); nothing else.
    """
    global CODE_FD
    os.setsid()
    signal.set_wakeup_fd(-1)  # the fork server's SIGCHLD wake-up (its pipe is closed below)
    for sig in (signal.SIGTERM, signal.SIGCHLD):  # the worker's handlers are not the program's
        signal.signal(sig, signal.SIG_DFL)
    atexit._clear()  # the worker's exit handlers are not the program's (run_stdin runs the program's own)
    os.fchdir(fds["tmpdir_fd"])  # by descriptor (the temp dir is a mount point)
    sources = [fds["stdin"], fds["stdout"], fds["stderr"], fds["result"], fds["ruleset"], fds["code"], fds["ctl"],
               fds["stdin"], fds["stdout"], fds["stderr"]]
    _remap(sources, keep=[fd for _real, fd in fds.get("paths") or ()])
    CODE_FD = CODE_MEMFD
    limits.die_with_parent(libc, parent_pid)


def enter(spec: dict, libc) -> None:
    """Stage 2, once the job is known: rlimits, uid, landlock, seccomp, environment (in this order)."""
    lim = spec["limits"]
    limits.apply_rlimits(address_space_bytes=lim["memory_bytes"], cpu_seconds=lim["cpu_seconds"],
                         file_size_bytes=lim["file_size_bytes"], open_files=lim["open_files"],
                         processes=lim["processes"], stack_bytes=lim["stack_bytes"])
    layers = spec["layers"]
    if layers.get("uid_drop"):
        limits.drop_privileges(spec["uid"], spec["gid"], libc)
    elif os.geteuid() == 0:
        limits.drop_all_capabilities(libc)  # root without a uid drop (explicitly allowed): no capabilities
    limits.die_with_parent(libc, spec["parent_pid"])  # again: the uid change cleared it
    if spec.get("landlock"):
        libc.prctl(seccomp_bpf.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _landlock.restrict_self(RULESET_FD, libc)
    os.close(RULESET_FD)
    if layers.get("seccomp"):
        seccomp_bpf.install(seccomp_bpf.program_for(os.getpid()), libc)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": spec["tmpdir"], "TMPDIR": spec["tmpdir"], "LANG": "C.UTF-8",
                       "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})


def read_spec(fd: int = CTL_FD) -> dict | None:
    """The job spec, one JSON line written by the job process on the control pipe (None at EOF)."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        buf += chunk
    return json.loads(buf)


def mapped_path(p, mapping: dict):
    """``p`` with its longest mapped directory prefix replaced (unchanged when none applies)."""
    if isinstance(p, str):
        for r in sorted(mapping, key=len, reverse=True):
            if p == r or p.startswith(r + os.sep):
                return mapping[r] + p[len(r):]
    return p


def map_import_paths(mapping: dict) -> None:
    """Rewrite ``sys.path`` and the ``__path__`` of loaded packages from real directories to the
    ``/proc/self/fd/N`` names of descriptors opened by the worker (as root) before the uid drop.

    The kernel resolves ``/proc/self/fd/N`` straight to the directory, without checking search
    permission on its ancestors (a 0700 ``/root``), while every file opened beneath it is still checked
    against the file's mode and the landlock allowlist of its real location.
    """
    if not mapping:
        return
    def mp(p):
        return mapped_path(p, mapping)

    sys.path[:] = [mp(p) for p in sys.path]
    for mod in list(sys.modules.values()):
        try:
            path = vars(mod).get("__path__")
        except TypeError:
            continue
        if isinstance(path, list):
            path[:] = [mp(p) for p in path]
    for key in [k for k in sys.path_importer_cache if mp(k) != k]:
        del sys.path_importer_cache[key]


def _fresh_stdio() -> None:
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8", errors="surrogateescape")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                                                   encoding="utf-8", errors="surrogateescape", newline="\n")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                                   encoding="utf-8", errors="backslashreplace", newline="\n",
                                                   line_buffering=True)


def _main_namespace(tmpdir: str) -> dict:
    mod = types.ModuleType("__main__")
    mod.__file__ = os.path.join(tmpdir, "solution.py")
    mod.__builtins__ = builtins
    sys.modules["__main__"] = mod
    sys.argv = [mod.__file__]
    return mod.__dict__


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def _exc_text(limit: int = MAX_ERR) -> str:
    etype, value, _tb = sys.exc_info()
    try:
        text = "".join(traceback.format_exception_only(etype, value)).strip()
    except BaseException:
        text = getattr(etype, "__name__", "exception")
    return text[-limit:]


def _finish(code: int) -> None:
    try:
        threading._shutdown()  # join non-daemon threads, like a normal interpreter exit
    except BaseException:
        pass
    _flush()
    os._exit(code)


def run(spec: dict | None, fds: dict, libc) -> None:
    """Entry point in the forked child; never returns. ``spec`` None: a child forked ahead of its job,
    which reads the spec from the control pipe after stage 1 (exits quietly at EOF: no job came)."""
    nonce = spec["nonce"] if spec else None
    try:
        prepare(fds, fds["parent_pid"], libc)
        if spec is None:
            spec = read_spec()
            if spec is None:
                os._exit(0)
            nonce = spec["nonce"]
        enter(spec, libc)
        _fresh_stdio()
        sys.setrecursionlimit(spec.get("recursion_limit", 100000))
        _emit(nonce, {"s": "ready", "c": _cpu()})
    except BaseException as e:  # infrastructure: report, never run the program unsandboxed
        try:
            if nonce is not None:
                _emit(nonce, {"s": "setup_failed", "e": f"{type(e).__name__}: {e}"[:MAX_ERR]})
        finally:
            os._exit(120)
    # From here on the program runs in this process and can write anything to fd 3 (it can find the nonce
    # in memory): the worker accepts "setup_failed" only before "ready", so nothing the program does can
    # turn its run into sandbox_error (which would mask the sample from the loss).
    try:
        if spec["mode"] == "stdin":
            _run_stdin(spec, nonce)
        else:
            _run_calls(spec, _main_namespace(spec["tmpdir"]), nonce)
    except BaseException:
        pass
    os._exit(121)


def _compile(spec: dict, nonce: str, index: int | None):
    """The program's code object (from the job's cache or compiled here); closes the cache descriptor
    before returning, so that the program never holds it (it cannot change what later children run)."""
    try:
        return _compile_cached(spec, nonce, index)
    finally:
        _close_code_fd()


def _close_code_fd() -> None:
    global CODE_FD
    if CODE_FD is not None:
        try:
            os.close(CODE_FD)
        except OSError:
            pass
        CODE_FD = None


def _compile_cached(spec: dict, nonce: str, index: int | None):
    source = spec["code"]
    try:
        digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest()
    except BaseException:
        digest = None
    code = _cached_code(digest)
    if code is not None:
        return code
    try:
        code = compile(source, "solution.py", "exec", dont_inherit=True)
    except BaseException:
        rec = {"s": "compile_error", "e": _exc_text()}
        if index is not None:
            rec["i"] = index
        _close_code_fd()
        _emit(nonce, rec)
        _finish(1)
    _store_code(code, digest, spec["limits"]["file_size_bytes"])
    return code


def _cached_code(digest):
    """The code object a previous child of this job stored for the same source, or None."""
    if CODE_FD is None or digest is None:
        return None
    try:
        size = os.fstat(CODE_FD).st_size
        head = len(_CODE_MAGIC) + len(digest)
        if size <= head:
            return None
        data = os.pread(CODE_FD, size, 0)
        if data[:head] != _CODE_MAGIC + digest:
            return None
        code = marshal.loads(memoryview(data)[head:])
        return code if isinstance(code, types.CodeType) else None
    except BaseException:
        return None


def _store_code(code, digest, file_size_limit: int) -> None:
    """Store ``code`` for the later children of this job (first compiling child only; never past
    RLIMIT_FSIZE, whose SIGXFSZ would kill this child)."""
    if CODE_FD is None or digest is None:
        return
    try:
        if os.fstat(CODE_FD).st_size:
            return
        data = _CODE_MAGIC + digest + marshal.dumps(code)
        if len(data) >= file_size_limit:
            return
        view = memoryview(data)
        off = 0
        while off < len(data):
            off += os.pwrite(CODE_FD, view[off:], off)
    except BaseException:
        try:
            os.ftruncate(CODE_FD, 0)
        except BaseException:
            pass


def _run_stdin(spec: dict, nonce: str) -> None:
    """Run the program once per stdin test, tests ``start..`` in this process: the job process puts each
    test's input in the stdin memfd and (from the second test on) sends one byte on the control pipe; every
    run gets fresh stdio, a fresh ``__main__``, the builtins as they were, and ends like an interpreter exit
    (non-daemon threads joined, ``atexit`` handlers run, streams flushed). After each run one record
    ``{"i", "s": "end", "r", "e", "x"}``; ``x`` = 1 when this process will exit instead of running the next
    test (a MemoryError, or state a later run must not inherit: a stdio descriptor closed or replaced, a thread
    still running), so that the job process starts a fresh child for the rest. The job process itself checks
    every resource limit and the scheduling of this process before it sends the next byte (the program can
    fake what this process's own ``resource`` module says, not what ``prlimit`` says), and starts each test's
    CPU budget (``cpu_clock``) right before it.
    """
    start, n = spec["start"], spec["n_tests"]
    code = _compile(spec, nonce, start)
    pristine = dict(vars(builtins))
    fd_ids = [_fd_id(fd) for fd in BACKUP_FDS]
    for i in range(start, n):
        if i != start and os.read(CTL_FD, 1) != b"n":
            os._exit(0)  # the job process is done with this child
        for fd, backup in zip((STDIN_FD, STDOUT_FD, STDERR_FD), BACKUP_FDS):
            os.dup2(backup, fd, inheritable=False)
        _fresh_stdio()
        g = _main_namespace(spec["tmpdir"])
        status, err = _run_main(code, g)
        g.clear()  # breaks the namespace's reference cycles: the program's data goes now, not at the next GC
        _restore_builtins(pristine)
        keep = status != "memory" and [_fd_id(fd) for fd in BACKUP_FDS] == fd_ids and len(sys._current_frames()) == 1
        _emit(nonce, {"i": i, "s": "end", "r": status, "e": err, "x": 0 if keep else 1})
        if not keep:
            os._exit(0)
    os._exit(0)


def _run_main(code, g: dict) -> tuple[str, str]:
    """Run the program as ``python solution.py`` would, up to its exit: (status, error text)."""
    status, err = "ok", ""
    try:
        exec(code, g)
    except SystemExit as e:
        if e.code is None or e.code == 0:
            pass
        elif isinstance(e.code, int):
            status, err = "exception", f"SystemExit({e.code})"
        else:
            try:
                print(e.code, file=sys.stderr)
            except BaseException:
                pass
            status, err = "exception", f"SystemExit({str(e.code)[:200]!r})"
    except MemoryError:
        status, err = "memory", "MemoryError"
    except BaseException:
        status, err = "exception", _exc_text()
        try:
            traceback.print_exc(limit=5)
        except BaseException:
            pass
    try:
        _flush()
        _join_threads()
        atexit._run_exitfuncs()  # what the program registered (the worker's own were cleared in stage 1)
        atexit._clear()
        _flush()
    except MemoryError:
        status, err = "memory", "MemoryError"
    except BaseException:
        pass
    return status, err


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, like an interpreter exit does."""
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join()


def _fd_id(fd: int):
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _restore_builtins(pristine: dict, _current=vars(builtins), _list=list) -> None:
    """Undo what a program did to ``builtins`` (``builtins.input = ...``), so the next run starts clean
    (bound to the real dict and ``list`` at import: the program may have replaced ``builtins.vars``)."""
    for k in _list(_current):
        if k not in pristine:
            del _current[k]
    for k, v in pristine.items():
        if _current.get(k) is not v:
            _current[k] = v


# --- call mode -----------------------------------------------------------------------------------------

class _ListNode:
    def __init__(self, val=0, next=None):
        self.val, self.next = val, next


class _TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val, self.left, self.right = val, left, right


def _to_linked(values, cls):
    head = None
    for v in reversed(values or []):
        head = cls(v, head)
    return head


def _to_tree(values, cls):
    if not values or values[0] is None:
        return None
    root = cls(values[0])
    queue, i = [root], 1
    for node in queue:
        if i >= len(values):
            break
        for side in ("left", "right"):
            if i < len(values) and values[i] is not None:
                child = cls(values[i])
                setattr(node, side, child)
                queue.append(child)
            i += 1
    return root


def _from_linked(node, cap=10**6):
    out = []
    while node is not None:
        out.append(node.val)
        node = node.next
        if len(out) > cap:
            raise ValueError("linked list longer than 10**6 nodes (cycle?)")
    return out


def _from_tree(root, cap=10**6):
    out, queue = [], [root]
    for node in queue:
        if node is None:
            out.append(None)
            continue
        out.append(node.val)
        queue.append(node.left)
        queue.append(node.right)
        if len(queue) > cap:
            raise ValueError("tree larger than 10**6 nodes (cycle?)")
    while out and out[-1] is None:
        out.pop()
    return out


def _convert_in(value, kind, g):
    if kind == "ListNode":
        return _to_linked(value, g.get("ListNode", _ListNode))
    if kind == "TreeNode":
        return _to_tree(value, g.get("TreeNode", _TreeNode))
    return value


def _resolve(g: dict, fn_name: str):
    sol = g.get("Solution")
    if isinstance(sol, type) and hasattr(sol, fn_name):
        return lambda: getattr(sol(), fn_name)
    fn = g.get(fn_name)
    if callable(fn):
        return lambda: fn
    return None


def _run_calls(spec: dict, g: dict, nonce: str) -> None:
    tests, start, fn_name = spec["tests"], spec["start"], spec["fn_name"]
    arg_types, ret_type = spec.get("arg_types") or {}, spec.get("return_type")
    if "ListNode" in arg_types.values() or ret_type == "ListNode":
        g.setdefault("ListNode", _ListNode)
    if "TreeNode" in arg_types.values() or ret_type == "TreeNode":
        g.setdefault("TreeNode", _TreeNode)
    code = _compile(spec, nonce, start)
    try:
        exec(code, g)
    except MemoryError:
        _emit(nonce, {"i": start, "s": "memory", "e": "MemoryError at module level"})
        _finish(1)
    except BaseException:
        _emit(nonce, {"i": start, "s": "exception", "e": "at module level: " + _exc_text()})
        _finish(1)
    factory = _resolve(g, fn_name)
    if factory is None:
        _emit(nonce, {"i": start, "s": "exception", "e": f"NameError: no function or Solution method {fn_name!r}"})
        _finish(1)
    for i in range(start, len(tests)):
        test = tests[i]
        try:
            args = [_convert_in(a, arg_types.get(str(k)), g) for k, a in enumerate(test.get("args", []))]
            kwargs = {k: _convert_in(v, arg_types.get(k), g) for k, v in (test.get("kwargs") or {}).items()}
            value = factory()(*args, **kwargs)
        except MemoryError:
            _emit(nonce, {"i": i, "s": "memory", "e": "MemoryError", "c": _cpu()})
            _finish(1)
        except BaseException:
            _emit(nonce, {"i": i, "s": "exception", "e": _exc_text(), "c": _cpu()})
            continue
        try:
            if ret_type == "ListNode":
                value = _from_linked(value)
            elif ret_type == "TreeNode":
                value = _from_tree(value)
            text = _dumps(value)
        except MemoryError:
            _emit(nonce, {"i": i, "s": "memory", "e": "MemoryError while serialising", "c": _cpu()})
            _finish(1)
        except BaseException:
            _emit(nonce, {"i": i, "s": "unserialisable", "e": f"return value of type {type(value).__name__} "
                                                              f"is not JSON-serialisable: {_exc_text(300)}",
                          "c": _cpu()})
            continue
        _emit(nonce, {"i": i, "s": "ok", "v": text, "c": _cpu()})
    _finish(0)


# --- start-up probe --------------------------------------------------------------------------------------

def probe(lim: dict, want: dict, tmpdir: str, ruleset, uid: int, gid: int, parent_pid: int, libc,
          read_paths, path_fds=()) -> dict:
    """In a forked child: apply each wanted layer in production order and check that it bites."""
    rep: dict = {}
    os.chdir(tmpdir)
    fsize = max(1 << 20, int(want.get("tmp_quota_bytes") or 0) + (2 << 20))  # the quota check allocates past it
    limits.apply_rlimits(address_space_bytes=lim["memory_bytes"], cpu_seconds=10, file_size_bytes=fsize,
                         open_files=lim["open_files"], processes=lim["processes"], stack_bytes=lim["stack_bytes"])
    rep["rlimits"] = "active"
    if want.get("uid_drop"):
        try:
            limits.drop_privileges(uid, gid, libc)
            rep["uid_drop"] = "active"
            rep["uid"] = os.getuid()
        except BaseException as e:
            rep["uid_drop"] = f"unavailable: {type(e).__name__}: {e}"
    else:
        rep["uid_drop"] = f"not needed (not root, uid {os.getuid()})" if os.geteuid() else "disabled"
        if os.geteuid() == 0:
            try:
                limits.drop_all_capabilities(libc)
            except BaseException as e:
                rep["capabilities_error"] = f"{type(e).__name__}: {e}"
    rep["capabilities"] = "none" if not limits._capabilities_left(libc) else "some (not dropped)"
    limits.die_with_parent(libc, parent_pid)
    if ruleset is not None:
        try:
            libc.prctl(seccomp_bpf.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            _landlock.restrict_self(ruleset, libc)
            rep["landlock"] = "active"
        except BaseException as e:
            rep["landlock"] = f"unavailable: {e}"
    elif "landlock" not in rep:
        rep["landlock"] = "disabled" if not want.get("landlock") else "unavailable"
    if want.get("seccomp"):
        try:
            seccomp_bpf.install(seccomp_bpf.program_for(os.getpid()), libc)
            rep["seccomp"] = "active"
        except BaseException as e:
            rep["seccomp"] = f"unavailable: {e}"
    else:
        rep.setdefault("seccomp", "disabled")
    mapping = {real: f"/proc/self/fd/{fd}" for real, fd in path_fds}
    map_import_paths(mapping)
    checks: dict = {}
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        checks["fork_blocked"] = False
    except OSError:
        checks["fork_blocked"] = True
    try:
        import socket
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        checks["socket_blocked"] = False
    except OSError:
        checks["socket_blocked"] = True
    try:
        os.kill(parent_pid, 0)
        checks["signal_parent_blocked"] = False
    except OSError:
        checks["signal_parent_blocked"] = True
    outside = os.path.join(os.path.dirname(os.path.dirname(tmpdir)), f"mc-probe-{os.getpid()}")
    try:
        with open(outside, "w"):
            pass
        os.unlink(outside)
        checks["write_outside_blocked"] = False
    except OSError:
        checks["write_outside_blocked"] = True
    try:
        with open("/etc/hostname", "rb"):
            pass
        checks["read_outside_blocked"] = False
    except OSError:
        checks["read_outside_blocked"] = True
    try:
        os.close(os.memfd_create("mc-probe"))
        checks["memfd_blocked"] = False
    except OSError:
        checks["memfd_blocked"] = True
    try:
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) - 1)
        checks["nice_blocked"] = False
    except OSError:
        checks["nice_blocked"] = True
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        checks["realtime_blocked"] = False
    except OSError:
        checks["realtime_blocked"] = True
    if want.get("tmp_quota_bytes"):
        from .mounts import quota_error
        err = quota_error(tmpdir, want["tmp_quota_bytes"])
        checks["tmp_quota"] = err is None
        if err:
            checks["tmp_quota_error"] = err
    rep["checks"] = checks
    rep["mapped_paths"] = sorted(mapping)
    rep["unreadable_paths"] = [p for p in read_paths if os.path.isdir(p) and not _can_list(mapped_path(p, mapping))]
    return rep


def _can_list(path: str) -> bool:
    try:
        os.listdir(path)
        return True
    except OSError:
        return False
