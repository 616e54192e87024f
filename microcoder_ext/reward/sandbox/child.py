"""Runs inside a child forked by the worker's fork server (W) ahead of its job: apply every sandbox layer, then run
the program that the job process (M) sends on the control pipe, in one of two process models.

A process per test (stdin mode, and call mode with ``call_process="test"``): the child (the launcher, L) compiles
the program but never runs it: per test it forks a test process (T) from its own clean state; T adds the last layer
(this test's CPU limit, the seccomp filter, which also forbids any further fork) and runs the program once. So no
state passes from one test to the next (module globals, ``sys.modules``, builtins, threads, unflushed output, files
in the temp dir, which L empties between tests, resource limits, CPU time): every test starts as a fresh ``python
solution.py`` would, and a test's CPU budget is its own.

One process per submission (call mode, the default, as LeetCode's judge): L compiles the program, closes its
control pipe, adds the seccomp filter and runs the module once and every test as a call (:func:`_run_submission`).

Status records go to fd 3 as ``<nonce> <json>\\n`` lines (the worker ignores lines without the nonce):
  L, any mode: ``{"s": "setup_failed", "e": msg}`` when a sandbox layer could not be applied (infrastructure),
               else ``{"s": "ready", "c": cpu}`` once every layer is on; ``{"i", "s": "compile_error", "e"}``
  T, stdin:    ``{"i": i, "s": "end", "r": "ok"|"exception"|"memory", "e": msg}`` when the run ended
  T, call:     ``{"i": i, "s": "ok", "v": <json text of the return value>}`` or
               ``{"i": i, "s": "exception"|"memory"|"unserialisable", "e": msg}`` (one process per submission:
               L writes ``{"s": "run"}`` before the program runs, then these, each with ``"c"``: its CPU seconds)
and, with a process per test, L's own per-test records with a secret no program ever sees (:func:`_launch_tests`):
``start`` (T's pid) and ``exit`` (T's wait status). A test ends on its ``exit`` record; T's records only add what
its exit status cannot say (the return value, the exception's text). One process per submission: a test ends on
the program's record for it, and the process's end on its wait status from the fork server.

The children never see expected outputs: only the program, its own tests' inputs and the nonce. Tests of one job
run in processes forked from one launcher (or in the launcher), never tests of two jobs (two samples); a launcher
killed at a timeout is replaced by a fresh one for the remaining tests.

Compiled-code cache: the first child of a job that compiles the program stores ``marshal.dumps`` of the code
object in the job's ``code`` memfd (after every sandbox layer is on); later children of the same job load it
from there instead of compiling again (the job process copies the first child's memfd into the next one's with
``copy_file_range``). The job process never reads that memfd into its memory, so it never parses anything a
program could have written; a child that finds the blob unusable (absent, another source, not loadable) just
compiles. Every launcher closes the descriptor right after loading or storing the code, before any test process
exists. The nonce is not a secret from the program (it can scan its memory for it); it only keeps a premature exit
from looking like success. What a forged record can claim is bounded by the worker: an output it could have
printed anyway, never ``setup_failed`` after ``ready``, never a huge integer, never the end of a test (one process
per submission: the end of a test only as its own value or failure, and never before ``run``).
"""

from __future__ import annotations

import atexit
import builtins
import fcntl
import io
import json
import marshal
import math
import os
import resource
import signal
import sys
import threading
import time
import traceback
import types

from . import limits, seccomp_bpf
from .records import decode_big_ints
from . import landlock as _landlock

RESULT_FD = 3
_MAIN: dict | None = None  # the program's __main__ namespace, made by the launcher (see _launch_tests)
CODE_FD = None  # the job's compiled-code memfd after setup (see the module docstring), when the worker gives one
_CODE_MAGIC = b"MCcode2\0"
#: imported by a job's launcher, before its sandbox layers, when the program's source names them (and by the
#: program's own import in each test otherwise): rarely used modules kept out of the worker (why: the comment under
#: ``worker.STDLIB_PREIMPORT``)
ON_DEMAND_IMPORT = ("cmath", "decimal", "fractions", "hashlib", "statistics", "unicodedata")
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
    """Stage 2, once the job is known: rlimits, uid, landlock, environment (in this order); seccomp is stage 3, in
    each test's own process (:func:`_test_process`)."""
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
    # the seccomp filter goes on in each test's process (it forbids fork, which this launcher needs)
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
        _import_on_demand(spec["code"])
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
    try:
        code = _compile(spec, nonce, spec["start"])  # a compile error ends this child (compile_error record)
        _launch_tests(spec, code, nonce, libc)
    except BaseException:
        pass
    os._exit(121)


def _import_on_demand(source: str) -> None:
    """Import the :data:`ON_DEMAND_IMPORT` modules that ``source`` names (a substring match: a mention in a comment
    imports one for nothing), as the worker imports the others: before the uid drop, from the trusted library."""
    for name in ON_DEMAND_IMPORT:
        if name in source and name not in sys.modules:
            try:
                __import__(name)
            except Exception:
                pass  # the program's own import will say why


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
    try:  # the key of the cached code: the source itself (no hash module needed in every launcher)
        raw = source.encode("utf-8", "surrogatepass")
        key = len(raw).to_bytes(8, "little") + raw
    except BaseException:
        key = None
    code = _cached_code(key)
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
    _store_code(code, key, spec["limits"]["file_size_bytes"])
    return code


def _cached_code(key):
    """The code object a previous child of this job stored for the same source, or None."""
    if CODE_FD is None or key is None:
        return None
    try:
        size = os.fstat(CODE_FD).st_size
        head = len(_CODE_MAGIC) + len(key)
        if size <= head:
            return None
        data = os.pread(CODE_FD, size, 0)
        if data[:head] != _CODE_MAGIC + key:
            return None
        code = marshal.loads(memoryview(data)[head:])
        return code if isinstance(code, types.CodeType) else None
    except BaseException:
        return None


def _store_code(code, key, file_size_limit: int) -> None:
    """Store ``code`` for the later children of this job (first compiling child only; never past
    RLIMIT_FSIZE, whose SIGXFSZ would kill this child)."""
    if CODE_FD is None or key is None:
        return
    try:
        if os.fstat(CODE_FD).st_size:
            return
        data = _CODE_MAGIC + key + marshal.dumps(code)
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


# --- the launcher: one fresh process per test --------------------------------------------------------------

def _launch_tests(spec: dict, code, nonce: str, libc) -> None:
    """This process (the launcher, L) never runs the program: per test it forks a fresh process (T) from its own
    state, in which nothing of any earlier test exists (no module, global, builtin, thread, buffered output, file,
    limit or CPU time of it), and T runs the program once. Each T is forked one test ahead and waits, fully
    sandboxed, for its test (its fork and set-up overlap the previous test's run), then L releases it.

    Per test, from the job process on the control pipe: ``b"n"`` (the test's input is in the stdin memfd), then a
    fresh secret line, read only after the test's T exists, so that its program never knows it (a T forked later
    holds only secrets of tests already over). L's own records, ``\\n<secret> {"s": "start", "i", "p": T's pid,
    "c": T's CPU seconds at its release}`` and ``\\n<secret> {"s": "exit", "i", "w": wait status, "clean": bool}``,
    are therefore unforgeable: the job process times and kills T by them and ends each test on its "exit" record.
    Between tests L empties its temp dir (``clean`` false: a program's files could not all be removed, and the job
    process starts a fresh child for the rest)."""
    global _MAIN
    start, n = spec["start"], spec["n_tests"]
    seccomp = bool(spec["layers"].get("seccomp"))
    me = os.getpid()
    # made once here, never used here: each test process gets a copy as fresh as a new interpreter's (so does the
    # stdio the launcher set up before "ready")
    _MAIN = _main_namespace(spec["tmpdir"])
    if spec.get("per_submission"):
        _run_submission(spec, code, nonce, libc, seccomp)
    test_cpu = int(math.ceil(float(spec["limits"]["per_test_cpu_seconds"]))) + 1
    ahead = _fork_test_process(spec, code, nonce, libc, me, test_cpu, seccomp)
    for i in range(start, n):
        if os.read(CTL_FD, 1) != b"n":
            os._exit(0)  # the job process is done with this child (the T forked ahead dies with it)
        pid, go = ahead
        cpu0 = _cpu_of(pid)
        try:
            os.write(go, i.to_bytes(8, "little"))
        except OSError:
            pass  # it is gone: its exit status says how
        os.close(go)
        secret = _read_line(CTL_FD)
        if secret is None:
            os._exit(0)
        _emit_l(secret, {"s": "start", "i": i, "p": pid, "c": cpu0})
        ahead = _fork_test_process(spec, code, nonce, libc, me, test_cpu, seccomp) if i + 1 < n else None
        _, status = os.waitpid(pid, 0)
        clean = _empty_cwd()
        _emit_l(secret, {"s": "exit", "i": i, "w": status, "clean": clean})
        if not clean:
            os._exit(0)
    os._exit(0)


def _run_submission(spec: dict, code, nonce: str, libc, seccomp: bool) -> None:
    """Call mode, one process per submission (LeetCode's judge): this process runs the program itself, the module
    once and then every remaining test, one after another, each as a call on a fresh ``Solution()``, module state
    kept between the calls (:func:`_run_call_tests`). No test process is forked (there is no earlier test whose
    state a fork would leave behind), so no launcher record is needed either: each test ends on the program's own
    record for it (untrusted: it can only claim a value the program could have returned), and how the process ended
    comes from the fork server's wait status. The job process puts every remaining test in the stdin memfd (one
    JSON line each) and sends ``b"n"``, and nothing after it; this process then closes the control pipe and puts
    on the last layer, the seccomp filter (no fork), as a test process does. Never returns."""
    if os.read(CTL_FD, 1) != b"n":
        os._exit(0)  # the job process is done with this child
    try:
        os.close(CTL_FD)
        if seccomp:
            seccomp_bpf.install(seccomp_bpf.program_for(os.getpid()), libc)
    except BaseException:  # the program must not run: the job process reports the exit before "run" as a
        os._exit(EXIT_SETUP)  # sandbox failure, never a pass
    try:
        _emit(nonce, {"s": "run"})  # the program runs from here on (what it writes could be forged)
        _run_call_tests(code, spec, _MAIN, nonce, spec["start"])
    except BaseException:
        pass
    os._exit(1)


def _fork_test_process(spec, code, nonce, libc, launcher, test_cpu, seccomp):
    """Fork the next test process; it sets itself up and waits for its test index on a pipe of its own. Returns
    (its pid, the pipe's write end)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(w)
        _test_process(spec, code, nonce, libc, launcher, test_cpu, seccomp, r)
    os.close(r)
    return pid, w


def _cpu_of(pid: int) -> float:
    """Process ``pid``'s CPU seconds (0.0 if it cannot be read)."""
    try:
        return round(_clock_gettime(((~pid) << 3) | 2), 6)
    except BaseException:
        return 0.0


def _read_line(fd: int) -> bytes | None:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 64)
        if not chunk:
            return None
        buf += chunk
    return bytes(buf[:-1])


def _emit_l(secret: bytes, rec: dict) -> None:
    """A record of the launcher. The leading newline ends whatever partial line a program left on the pipe."""
    data = b"\n" + secret + b" " + _json_dumps(rec, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(RESULT_FD, view):]


def _empty_cwd() -> bool:
    """Remove everything in the launcher's working directory (the child's temp dir); whether it is empty now."""
    from . import tree

    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        names = os.listdir(fd)
        for name in names:
            if tree._remove_at(fd, name, 1_000_000) is not None:
                return False
        return not os.listdir(fd)
    except BaseException:
        return False
    finally:
        os.close(fd)


def _test_process(spec: dict, code, nonce: str, libc, launcher: int, test_cpu: int, seccomp: bool, go: int):
    """In T, forked by the launcher; never returns. Sandbox stage 3 (its CPU limit, death with the launcher, the
    seccomp filter, which forbids any further fork), then it waits for its test index on ``go`` and runs the
    program once: ``python solution.py`` with the test's input (stdin mode) or one call of the function (call
    mode). Exit code 0: it ended normally (call mode: its value is in an ``ok`` record); 1: an exception (the
    record says which); 3: MemoryError."""
    failed = None
    try:
        os.close(CTL_FD)  # the launcher's control pipe (and the secrets still in it) stay out of reach
        resource.setrlimit(resource.RLIMIT_CPU, (test_cpu, test_cpu + 1))
        limits.die_with_parent(libc, launcher)
        if seccomp:
            seccomp_bpf.install(seccomp_bpf.program_for(os.getpid()), libc)
    except BaseException as e:  # the program must not run: a failed test, never a pass
        failed = f"sandbox: the test process could not be set up: {type(e).__name__}: {e}"[:MAX_ERR]
    g = _MAIN  # the launcher's fresh __main__ (this process's own copy) and its fresh stdio on the job's memfds
    if not failed and spec["mode"] == "stdin":
        try:
            for fd, backup in zip((STDIN_FD, STDOUT_FD, STDERR_FD), BACKUP_FDS):
                os.dup2(backup, fd, inheritable=False)
        except BaseException as e:
            failed = f"sandbox: the test process could not be set up: {type(e).__name__}: {e}"[:MAX_ERR]
    try:
        data = os.read(go, 8)
        os.close(go)
    except BaseException:
        os._exit(EXIT_SETUP)
    if len(data) != 8:
        os._exit(0)  # the launcher is gone, or had no test for it
    i = int.from_bytes(data, "little")
    if failed:
        try:
            _emit(nonce, {"i": i, "s": "end" if spec["mode"] == "stdin" else "exception", "r": "exception",
                          "e": failed})
        finally:
            os._exit(EXIT_SETUP)
    try:
        if spec["mode"] == "stdin":
            _run_stdin_test(code, g, nonce, i)
        else:
            _run_call_test(code, spec, g, nonce, i)
    except BaseException:
        pass
    os._exit(1)


EXIT_OK, EXIT_EXCEPTION, EXIT_MEMORY, EXIT_SETUP = 0, 1, 3, 120
_EXIT_OF = {"ok": EXIT_OK, "exception": EXIT_EXCEPTION, "memory": EXIT_MEMORY}


def _run_stdin_test(code, g: dict, nonce: str, i: int) -> None:
    """One run of a stdin program in the fresh namespace ``g``, as ``python solution.py < input`` (non-daemon
    threads joined, ``atexit`` handlers run, streams flushed), then the record ``{"i", "s": "end", "r", "e"}`` and
    the matching exit code."""
    status, err = _run_main(code, g)
    _emit(nonce, {"i": i, "s": "end", "r": status, "e": err})
    os._exit(_EXIT_OF[status])


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


def _call_setup(spec: dict, g: dict):
    """(argument types, return type) of the job; the default ``ListNode``/``TreeNode`` classes put in ``g`` where
    the signature uses them and the program defines none."""
    arg_types, ret_type = spec.get("arg_types") or {}, spec.get("return_type")
    if "ListNode" in arg_types.values() or ret_type == "ListNode":
        g.setdefault("ListNode", _ListNode)
    if "TreeNode" in arg_types.values() or ret_type == "TreeNode":
        g.setdefault("TreeNode", _TreeNode)
    return arg_types, ret_type


def _run_module(code, g: dict):
    """Run the module in ``g``; None, or the failing ``(record, exit code)``."""
    try:
        exec(code, g)
    except MemoryError:
        return {"s": "memory", "e": "MemoryError at module level"}, EXIT_MEMORY
    except BaseException:
        return {"s": "exception", "e": "at module level: " + _exc_text()}, EXIT_EXCEPTION
    return None


def _stdin_bytes() -> bytes:
    """What the job process put in the stdin memfd (the test's arguments); the memfd is emptied, so the program's
    stdin is empty."""
    size = os.fstat(STDIN_FD).st_size
    data = os.pread(STDIN_FD, size, 0) if size else b""
    os.ftruncate(STDIN_FD, 0)
    return data


def _parse_test(line: bytes):
    """One test's arguments from their JSON line (``{"args": [...], "kwargs": {...}}``; integers past the int-digit
    limit as ``{"__mc_bigint__": hex}``), or what parsing raised (then the test fails with it: :func:`_call_once`)."""
    try:
        test = json.loads(line) if line else {}
        return decode_big_ints(test) if b"__mc_bigint__" in line else test
    except BaseException as e:
        return e


def _call_once(factory, test, g: dict, arg_types: dict, ret_type) -> tuple[dict, int]:
    """One call on ``factory()`` (a fresh ``Solution()``) with the arguments of ``test`` (:func:`_parse_test`; an
    exception instead: what reading it raised). Returns the record (``{"s": "ok", "v": <JSON text>}`` or
    ``{"s": "exception"|"memory"|"unserialisable", "e"}``) and the exit code that goes with it."""
    try:
        if isinstance(test, BaseException):
            raise test
        args = [_convert_in(a, arg_types.get(str(k)), g) for k, a in enumerate(test.get("args", []))]
        kwargs = {k: _convert_in(v, arg_types.get(k), g) for k, v in (test.get("kwargs") or {}).items()}
        value = factory()(*args, **kwargs)
    except MemoryError:
        return {"s": "memory", "e": "MemoryError"}, EXIT_MEMORY
    except BaseException:
        return {"s": "exception", "e": _exc_text()}, EXIT_EXCEPTION
    try:
        if ret_type == "ListNode":
            value = _from_linked(value)
        elif ret_type == "TreeNode":
            value = _from_tree(value)
        return {"s": "ok", "v": _dumps(value)}, EXIT_OK
    except MemoryError:
        return {"s": "memory", "e": "MemoryError while serialising"}, EXIT_MEMORY
    except BaseException:
        return {"s": "unserialisable", "e": f"return value of type {type(value).__name__} "
                                            f"is not JSON-serialisable: {_exc_text(300)}"}, EXIT_EXCEPTION


def _no_function(fn_name: str) -> tuple[dict, int]:
    return {"s": "exception", "e": f"NameError: no function or Solution method {fn_name!r}"}, EXIT_EXCEPTION


def _run_call_test(code, spec: dict, g: dict, nonce: str, i: int) -> None:
    """One call-based test in a fresh process (a process per test): the module runs, then one call of the function
    with this test's arguments (:func:`_call_once`). One record ``{"i", ...}``, then the matching exit code."""
    arg_types, ret_type = _call_setup(spec, g)
    try:
        test = _parse_test(_stdin_bytes())
    except BaseException as e:
        test = e
    rec = _run_module(code, g)
    if rec is None:
        factory = _resolve(g, spec["fn_name"])
        rec = _call_once(factory, test, g, arg_types, ret_type) if factory else _no_function(spec["fn_name"])
    _emit(nonce, {"i": i, **rec[0]})
    _finish(rec[1])


def _run_call_tests(code, spec: dict, g: dict, nonce: str, i: int) -> None:
    """Every call-based test of this child in this one process, as LeetCode's judge runs a submission: the module
    runs once (its time counts for the first test), then per test one call on a fresh ``Solution()``, module state
    kept between the calls. The tests (``i`` on) are the lines of the stdin memfd, read before the module runs (the
    program's stdin is empty). Per test: stdout and stderr emptied, one record ``{"i", ..., "c": CPU seconds at
    its end}``. Then exit 0. A module that fails to run answers the first test."""
    arg_types, ret_type = _call_setup(spec, g)
    try:
        lines = _stdin_bytes().split(b"\n")
    except BaseException as e:
        lines = [e]
    failed = _run_module(code, g)
    if failed is None and _resolve(g, spec["fn_name"]) is None:
        failed = _no_function(spec["fn_name"])
    if failed is not None:
        _emit(nonce, {"i": i, **failed[0], "c": _cpu()})
        _finish(failed[1])
    factory = _resolve(g, spec["fn_name"])
    for k, line in enumerate(lines):
        test = line if isinstance(line, BaseException) else _parse_test(line)
        try:  # the previous call's output is not this one's (and never adds up to the output limit)
            _flush()
            for fd in (STDOUT_FD, STDERR_FD):
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            pass
        rec, _code = _call_once(factory, test, g, arg_types, ret_type)
        _flush()
        _emit(nonce, {"i": i + k, **rec, "c": _cpu()})
    _finish(EXIT_OK)


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
