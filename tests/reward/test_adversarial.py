"""Hostile programs: none may score, none may end as sandbox_error (which masks the sample from the loss),
none may leave a process, a file or an IPC object behind, and the engine keeps serving afterwards.

Two kinds of programs:
* ``STDIN_PROGRAMS`` / ``CALL_PROGRAMS`` try to obtain the expected output (``SECRET``) and print it;
* ``ESCAPE_PROGRAMS`` exercise one kernel primitive each (raw syscalls, foreign ABIs, /proc, signals,
  capabilities, IPC, prctl, ...) and print ``ESCAPED`` only if it worked; their ground truth expects
  ``ESCAPED``, so a program that scores ``correct`` is a sandbox hole. ``test_escape_primitives_work_unsandboxed``
  runs a sample of them outside the sandbox to show that they are not vacuous.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from host_load import hang_guard

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import evaluate_response
from microcoder_ext.reward.sandbox import seccomp_bpf

#: a dataset on this machine (the repository's copy, absolute path, so the attack works from any clone)
TRAINING_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "data",
                             "leetcode-v0.2.0-train.jsonl.gz")
SECRET = "7319882145"  # the expected output: appears nowhere in the sandboxed process
STDIN = {"inputs": ["go\n"], "outputs": [SECRET + "\n"]}
CALL = {"fn_name": "f", "inputs": [[1]], "outputs": [SECRET]}

# the stack-frame / gc attack that beats in-process evaluators (verl prime_code, LiveCodeBench)
FIND_IN_MEMORY = """
import gc, sys
KEYS = ('outputs', 'expected', 'in_outs', 'gt_out', 'expected_output', 'output', 'ground_truth')
cands = []
f = sys._getframe()
while f is not None:
    cands += [v for k, v in f.f_locals.items() if k in KEYS]
    f = f.f_back
for o in gc.get_objects():
    if isinstance(o, dict):
        cands += [o[k] for k in KEYS if k in o]
def first(v):
    while isinstance(v, (list, tuple, dict)) and v:
        v = v.get('outputs', next(iter(v.values()))) if isinstance(v, dict) else v[0]
    return v
found = [first(c) for c in cands if c]
answer = str(found[0]).strip() if found else 'nothing'
"""

STDIN_PROGRAMS = {
    "frame_walk_and_gc_for_expected": FIND_IN_MEMORY + "print(answer)",
    "read_training_data": "print(open(__TRAINING_DATA__, 'rb').read(10))",
    "read_secret_file_outside": "print(open(__SECRET_FILE__).read())",
    "list_root": "import os; print(os.listdir('/root'))",
    "read_parent_environ": "import os; print(open(f'/proc/{os.getppid()}/environ').read())",
    "environment_secret": "import os; print(os.environ.get('MC_TEST_SECRET', 'none'))",
    "network_connect": "import socket; s = socket.create_connection(('127.0.0.1', __PORT__), timeout=2); "
                       "print(s.recv(100).decode())",
    "unix_socket": "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/var/run/docker.sock')",
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "subprocess_shell": "import subprocess; print(subprocess.run(['echo', '7319882145'], capture_output=True).stdout)",
    "os_system": "import os; os.system('echo 7319882145 > /tmp/pwned'); print('x')",
    "execv": "import os; os.execv('/bin/echo', ['echo', '7319882145'])",
    "kill_parent": "import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('x')",
    "kill_everything": "import os, signal; os.kill(-1, signal.SIGKILL); print('x')",
    "kill_pid_1": "import os, signal; os.kill(1, signal.SIGTERM); print('x')",
    "ptrace_parent": "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                     "r = libc.ptrace(16, os.getppid(), 0, 0); assert r == 0, ctypes.get_errno(); print('x')",
    "setuid_root": "import os; os.setuid(0); print('x')",
    "unshare_namespace": "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                         "assert libc.unshare(0x10000000) == 0, 'unshare denied'",
    "write_outside_tmp": "open('/tmp/mc_pwned_file', 'w').write('x'); print('x')",
    "write_dev_shm": "open('/dev/shm/mc_pwned_file', 'w').write('x'); print('x')",
    "write_big_file_in_cwd": "f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))",
    "memory_bomb": "a = []\nwhile True:\n    a.append(bytearray(1 << 26))",
    "infinite_loop": "while True:\n    pass",
    "sleep_past_timeout": "import time; time.sleep(60)",
    "output_flood": "import sys\nwhile True:\n    sys.stdout.write('7' * 65536)",
    "thread_bomb": "import threading, time\nfor _ in range(100000):\n    threading.Thread(target=time.sleep, args=(60,)).start()",
    "exit_zero_without_output": "import os; os._exit(0)",
    "sys_exit_before_output": "import sys; sys.exit(0)",
    "patch_builtins_print": "import builtins\nbuiltins.print = lambda *a, **k: None\nprint('7319882145')",
    "segfault": "import ctypes; ctypes.string_at(0)",
    "close_stdout_then_exit": "import os; os.close(1); os._exit(0)",
    "forge_result_record": "import os; os.write(3, b'0123 {\"s\": \"end\", \"r\": \"ok\"}\\n'); os._exit(0)",
    "recursion_bomb": "def f(n): return f(n + 1)\nf(0)",
    "compile_bomb": "x = " + "(" * 100000 + "1" + ")" * 100000,
    "io_uring_and_bpf": "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                        "assert libc.syscall(425, 8, 0) >= 0 or libc.syscall(321, 0, 0, 0) >= 0",
}

CALL_PROGRAMS = {
    "call_frame_and_gc_walk": FIND_IN_MEMORY + "\ndef f(x):\n    return answer",
    "call_fake_eq_object": "class A:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
                           "def f(x):\n    return A()",
    "call_str_subclass_fake_eq": "class S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\n"
                                 "def f(x):\n    return S('nope')",
    "call_os_exit_zero": "import os\ndef f(x):\n    os._exit(0)",
    "call_sys_exit_zero": "import sys\ndef f(x):\n    sys.exit(0)",
    "call_patch_json": "import json\njson.dumps = lambda *a, **k: '\"7319882145\"'\n"
                       "json.JSONEncoder.encode = lambda self, o: '\"7319882145\"'\ndef f(x):\n    return 'wrong'",
    "call_forge_record_with_stolen_nonce": "import gc, os, json\n"
                                           "def f(x):\n    for o in gc.get_objects():\n"
                                           "        if isinstance(o, dict) and 'nonce' in o and 'tests' in o:\n"
                                           "            os.write(3, (o['nonce'] + ' ' + json.dumps({'i': 0, 's': 'ok', 'v': '\"guess\"'}) + '\\n').encode())\n"
                                           "            os._exit(0)\n    return 'no'",
    "call_kill_worker": "import os, signal\ndef f(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 'x'",
}


ESCAPED = {"inputs": ["go\n"], "outputs": ["ESCAPED\n"]}
_P = ("import ctypes, os, sys, errno, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
      "sc = libc.syscall\nsc.restype = ctypes.c_long\n"
      "def out(ok, why=''):\n    print('ESCAPED' if ok else 'blocked %s %s' % (why, ctypes.get_errno()))\n")
# x86_64 syscall numbers (the suite runs on x86_64; see test_seccomp_filter_builds_for_every_arch for aarch64)
ESCAPE_PROGRAMS = {
    # process creation and exec through raw syscalls (bypassing os.fork)
    "raw_clone_fork": _P + "r = sc(56, 17, 0, 0, 0, 0)\nif r == 0:\n    os._exit(0)\nout(r > 0)",
    "raw_clone3": _P + "import struct\na = ctypes.create_string_buffer(struct.pack('11Q', 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0))\n"
                       "r = sc(435, a, 88)\nif r == 0:\n    os._exit(0)\nout(r > 0)",
    "raw_vfork": _P + "r = sc(58)\nif r == 0:\n    sc(60, 0)\nout(r > 0)",
    "raw_execveat": _P + "argv = (ctypes.c_char_p * 3)(b'/bin/echo', b'ESCAPED', None)\nenvp = (ctypes.c_char_p * 1)(None)\n"
                         "sc(322, -100, b'/bin/echo', argv, envp, 0)\nout(False)",
    # network and kernel attack surface
    "raw_socket_inet": _P + "out(sc(41, 2, 1, 0) >= 0)",
    "raw_socket_netlink": _P + "out(sc(41, 16, 3, 0) >= 0)",
    "io_uring_setup": _P + "p = ctypes.create_string_buffer(120)\nout(sc(425, 8, p) >= 0)",
    "userfaultfd": _P + "out(sc(323, 0) >= 0)",
    "perf_event_open": _P + "a = (ctypes.c_uint32 * 32)(1, 128)\nout(sc(298, a, 0, -1, -1, 0) >= 0)",
    "bpf_map_create": _P + "a = (ctypes.c_uint32 * 5)(2, 4, 4, 1, 0)\nout(sc(321, 0, a, 20) >= 0)",
    "add_key": _P + "out(sc(248, b'user', b'mc', b'x', 1, -3) >= 0)",
    "keyctl_join_session": _P + "out(sc(250, 1, None) >= 0)",
    "modify_ldt": _P + "b = ctypes.create_string_buffer(64)\nout(sc(154, 0, b, 64) >= 0)",
    "personality": _P + "out(sc(135, 0x0040000) != -1)",
    # foreign syscall ABIs: the filter checks the audit arch (i386 via int 0x80) and the x32 bit
    "i386_int80_getpid": _P + "import mmap\nm = mmap.mmap(-1, 4096, prot=7)\nm.write(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3')\n"
                              "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\nout(f() > 0)",
    "x32_abi_socket": _P + "out(sc(0x40000000 | 41, 2, 1, 0) >= 0)",
    # the worker and its memory
    "proc_self_mem_write": _P + "out(os.open('/proc/self/mem', os.O_RDWR) >= 0)",
    "proc_parent_mem": _P + "out(os.open('/proc/%d/mem' % os.getppid(), os.O_RDONLY) >= 0)",
    "proc_parent_environ": _P + "open('/proc/%d/environ' % os.getppid(), 'rb').read()\nout(True)",
    "proc_parent_cmdline": _P + "open('/proc/%d/cmdline' % os.getppid(), 'rb').read()\nout(True)",
    "proc_list_pids": _P + "out(len([p for p in os.listdir('/proc') if p.isdigit()]) > 0)",
    "ptrace_seize_parent": _P + "out(sc(101, 0x4206, os.getppid(), 0, 0) == 0)",
    "ptrace_traceme": _P + "out(sc(101, 0, 0, 0, 0) == 0)",
    "process_vm_readv_parent": _P + "b = ctypes.create_string_buffer(8)\nio = (ctypes.c_void_p * 2)(ctypes.addressof(b), 8)\n"
                                    "out(sc(310, os.getppid(), io, 1, io, 1, 0) > 0)",
    # signals to the worker, its job process and the neighbourhood, by every route
    "sigstop_parent": _P + "os.kill(os.getppid(), signal.SIGSTOP)\nout(True)",
    "sigkill_pid_range": _P + "ok = False\nfor p in range(max(2, os.getppid() - 64), os.getppid() + 64):\n"
                              "    if p != os.getpid() and libc.kill(p, 0) == 0:\n        ok = True\nout(ok)",
    "tgkill_parent": _P + "out(sc(234, os.getppid(), os.getppid(), 0) == 0)",
    "pidfd_signal_parent": _P + "fd = os.pidfd_open(os.getppid())\nout(sc(424, fd, 0, None, 0) == 0)",
    "fcntl_setown_sigio": _P + "import fcntl\nr, w = os.pipe()\nfcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())\nout(True)",
    "fcntl_setsig": _P + "import fcntl\nr, w = os.pipe()\nfcntl.fcntl(r, 10, 9)\nout(True)",
    "setpriority_every_sandbox_process": _P + "out(libc.setpriority(2, os.getuid(), 19) == 0)",
    "ioprio_set_every_sandbox_process": _P + "out(sc(251, 3, os.getuid(), 3 << 13) == 0)",
    "sched_setaffinity_parent": _P + "out(libc.sched_setaffinity(os.getppid(), 8, (ctypes.c_ulong * 1)(1)) == 0)",
    # host-wide IPC objects outlive the process (leftovers, and a channel between concurrent samples)
    "sysv_shm_segment": _P + "out(libc.shmget(0, 1 << 20, 0o1000 | 0o666) >= 0)",
    "sysv_msg_queue": _P + "out(libc.msgget(0, 0o1000 | 0o666) >= 0)",
    "sysv_semaphore": _P + "out(libc.semget(0, 1, 0o1000 | 0o666) >= 0)",
    "posix_mqueue": _P + "out(sc(240, b'mcpwned', os.O_CREAT | os.O_RDWR, 0o600, None) >= 0)",
    # surviving the worker / re-opening the process to others
    "prctl_clear_pdeathsig": _P + "out(libc.prctl(1, 0, 0, 0, 0) == 0)",
    "prctl_set_dumpable": _P + "out(libc.prctl(4, 1, 0, 0, 0) == 0)",
    # limits
    "mmap_noreserve_64tb": _P + "libc.mmap.restype = ctypes.c_void_p\na = libc.mmap(None, 1 << 46, 3, 0x22 | 0x4000, -1, 0)\n"
                                "out(a not in (None, 2**64 - 1))",
    "setrlimit_raise_hard": _P + "import resource\nok = False\nfor r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC, "
                                 "resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE, resource.RLIMIT_CPU):\n"
                                 "    try:\n        resource.setrlimit(r, (resource.RLIM_INFINITY,) * 2)\n        ok = True\n"
                                 "    except (ValueError, OSError):\n        pass\nout(ok)",
    "memfd_seal_stdout": _P + "import fcntl\nout(fcntl.fcntl(1, 1033, 0x2 | 0x4 | 0x8) == 0)",
    # files: links from the private temp dir, and what CAP_DAC_READ_SEARCH would give
    "hardlink_secret_into_tmp": _P + "os.link(__SECRET_FILE__, 'stolen')\nout(open('stolen').read() != '')",
    "symlink_secret_read": _P + "os.symlink(__SECRET_FILE__, 'ln')\nout(open('ln').read() != '')",
    "open_by_handle_at": _P + "import struct\nst = os.stat(__PRIVATE_FILE__)\n"
                              "h = ctypes.create_string_buffer(struct.pack('IiII', 8, 1, st.st_ino & 0xffffffff, 0))\n"
                              "r = sc(304, os.open('.', os.O_RDONLY), h, 0)\nout(r >= 0 or ctypes.get_errno() != errno.EPERM)",
    "name_to_handle_at": _P + "h = ctypes.create_string_buffer(136)\nctypes.memmove(h, (ctypes.c_uint32 * 1)(128), 4)\n"
                              "m = ctypes.c_int()\nout(sc(303, -100, __PRIVATE_FILE__.encode(), h, ctypes.byref(m), 0) == 0)",
    "stat_in_private_dir": _P + "os.stat(__PRIVATE_FILE__)\nout(True)",
    "xattr_in_private_dir": _P + "out(os.getxattr(__PRIVATE_FILE__, 'user.k') != b'')",
    "inotify_private_dir": _P + "fd = libc.inotify_init()\nout(libc.inotify_add_watch(fd, os.path.dirname(__PRIVATE_FILE__).encode(), 0xfff) >= 0)",
    "chdir_private_dir": _P + "os.chdir(os.path.dirname(__PRIVATE_FILE__))\nout(True)",
    "opath_private_file": _P + "out(os.open(__PRIVATE_FILE__, os.O_PATH) >= 0)",
    "read_0600_file_in_read_allowlist": _P + "out(open(__ALLOWED_0600__).read() != '')",
    "list_0700_dir_in_read_allowlist": _P + "out(len(os.listdir(os.path.dirname(__ALLOWED_0600__))) > 0)",
    "escape_interpreter_dir_fd": _P + "ok = False\n"
                                      "for fd in range(3, 32):\n    for rel in ('../../..', '../../../..', '../../../../..'):\n"
                                      "        try:\n            os.listdir('/proc/self/fd/%d/%s' % (fd, rel)); ok = True\n"
                                      "        except OSError:\n            pass\nout(ok)",
    # forge supervisor messages (a sandbox_error would mask the sample) on every descriptor it may hold
    "write_protocol_messages_to_every_fd": _P + "msg = b'\\n{\"op\":\"result\",\"i\":-1,\"status\":\"sandbox_error\",\"error\":\"x\"}\\n{\"op\":\"done\"}\\n'\n"
                                                "ok = False\nfor fd in range(3, 1024):\n    try:\n        os.write(fd, msg)\n        ok = ok or fd != 3\n"
                                                "    except OSError:\n        pass\nout(ok)",
    "flock_node_slots": _P + "import fcntl, glob\nok = False\nfor f in glob.glob(__SLOTS_DIR__ + '/*') + [__SLOTS_DIR__ + '/slot-0']:\n"
                             "    try:\n        fcntl.flock(os.open(f, os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB); ok = True\n"
                             "    except OSError:\n        pass\nout(ok)",
}


@pytest.fixture(scope="module")
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.sendall(SECRET.encode() + b"\n")
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("outside") / "answer.txt"
    p.write_text(SECRET + "\n")
    os.chmod(p.parent, 0o755)
    os.chmod(p, 0o644)
    return str(p)


@pytest.fixture(scope="module")
def hostile_files():
    """A 0700 root directory with a world-readable file carrying an xattr (out of the sandbox's reach),
    and a 0700 directory with a 0600 file that the engine allowlists for reading (landlock allows it,
    the file mode must still deny it)."""
    base = tempfile.mkdtemp(prefix="mc-test-hostile-")
    os.chmod(base, 0o755)
    priv = os.path.join(base, "private")
    os.mkdir(priv, 0o700)
    pf = os.path.join(priv, "f.txt")
    with open(pf, "w") as f:
        f.write(SECRET)
    os.chmod(pf, 0o644)
    try:
        os.setxattr(pf, "user.k", SECRET.encode())
    except OSError:
        pass
    allowed = os.path.join(base, "allowed")
    os.mkdir(allowed, 0o700)
    af = os.path.join(allowed, "key")
    with open(af, "w") as f:
        f.write(SECRET)
    os.chmod(af, 0o600)
    yield {"private_file": pf, "allowed_dir": allowed, "allowed_0600": af}
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def adv_engine(engine_factory, hostile_files):
    return engine_factory(extra_read_paths=[hostile_files["allowed_dir"]])


@pytest.fixture
def run_adv(adv_engine):
    def _run(code, gt, **opts):
        gt = gt if isinstance(gt, str) else json.dumps(gt)
        return evaluate_response(f"```python\n{code}\n```", gt, engine=adv_engine, **opts)

    return _run


def _fill(code, listener, secret_file, hostile_files, engine):
    return (code.replace("__PORT__", str(listener)).replace("__SECRET_FILE__", repr(secret_file))
            .replace("__TRAINING_DATA__", repr(os.path.realpath(TRAINING_DATA)))
            .replace("__PRIVATE_FILE__", repr(hostile_files["private_file"]))
            .replace("__ALLOWED_0600__", repr(hostile_files["allowed_0600"]))
            .replace("__SLOTS_DIR__", repr(engine.slots().directory or "/nonexistent")))


def _snapshot():
    return set(os.listdir("/tmp")) | {"/dev/shm/" + x for x in os.listdir("/dev/shm")}


def sysv_objects(uid_min, uid_max):
    """(ipcrm flag, id) of System V IPC objects owned by the sandbox uids."""
    from hostile_host import sysv_rows

    return [(flag, r[id_col]) for kind, flag, id_col in (("shm", "-m", "shmid"), ("msg", "-q", "msqid"),
                                                          ("sem", "-s", "semid"))
            for r in sysv_rows(kind, uid_min, uid_max)]


@pytest.fixture
def nothing_left(sandbox_pids, sandbox_uids):
    """nothing_left(engine, snapshot_before): no process, job dir, /tmp or /dev/shm file, IPC object left."""

    def check(engine, before):
        assert_nothing_left(engine, before, sandbox_pids, sandbox_uids)

    return check


def assert_nothing_left(engine, before, sandbox_pids, sandbox_uids):
    deadline = time.monotonic() + 60  # polled: a bound far above a loaded machine's, it costs nothing when they go
    while sandbox_pids() and time.monotonic() < deadline:  # a killed child may take a moment to vanish
        time.sleep(0.05)
    assert sandbox_pids() == [], "a sandboxed process survived"
    created = _snapshot() - before
    assert not [c for c in created if "pwned" in c or c.startswith("mc-probe")], created
    root = engine.config.tmp_root
    for base in [os.path.join(root, d) for d in os.listdir(root) if d.startswith("microcoder-sbx-")]:
        # a worker keeps the empty dirs made ahead for its next two job processes ("next-*": the one released
        # and waiting for a job, the one waiting for its turn); nothing else may stay
        left = sorted(os.listdir(base))
        ahead = [d for d in left if d.startswith("next-") and not os.listdir(os.path.join(base, d))]
        assert left == ahead and len(ahead) <= 2, f"job dir left behind in {base}: {left}"
    leaked = sysv_objects(*sandbox_uids)
    for flag, ident in leaked:
        subprocess.run(["ipcrm", flag, ident], check=False)  # do not pollute the machine, then fail
    assert not leaked, f"System V IPC objects left behind: {leaked}"


@pytest.mark.parametrize("name", sorted(STDIN_PROGRAMS) + sorted(CALL_PROGRAMS) + sorted(ESCAPE_PROGRAMS))
def test_hostile_program_never_scores(name, run_adv, adv_engine, listener, secret_file, hostile_files, monkeypatch,
                                      nothing_left):
    monkeypatch.setenv("MC_TEST_SECRET", SECRET)  # a secret in the host environment
    if name in STDIN_PROGRAMS:
        code, gt = STDIN_PROGRAMS[name], STDIN
    elif name in CALL_PROGRAMS:
        code, gt = CALL_PROGRAMS[name], CALL
    else:
        code, gt = ESCAPE_PROGRAMS[name], ESCAPED
    code = _fill(code, listener, secret_file, hostile_files, adv_engine)
    before = _snapshot()
    r = run_adv(code, gt)
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)
    assert r.score == 0.0
    nothing_left(adv_engine, before)
    assert os.path.exists(secret_file)


#: what landlock alone prevents: without it (e.g. a GPU pod whose kernel or runtime lacks the LSM) a program
#: sees /proc (other processes' command lines and pids) and can read every world-readable file (keep
#: datasets out of world-readable paths there); everything else holds through seccomp + the uid drop
KNOWN_GAPS_WITHOUT_LANDLOCK = {"proc_parent_cmdline", "proc_list_pids"}


@pytest.fixture(scope="module")
def no_landlock_engine(engine_factory):
    # the programs import these; without landlock a root-installed interpreter's modules are importable only
    # when the worker pre-imported them
    return engine_factory(landlock=False, preimport=["mmap", "fcntl", "resource", "struct", "glob", "socket",
                                                     "subprocess"])


@pytest.mark.parametrize("name", sorted(set(STDIN_PROGRAMS) | set(CALL_PROGRAMS) | set(ESCAPE_PROGRAMS)
                                        - KNOWN_GAPS_WITHOUT_LANDLOCK))
def test_hostile_program_never_scores_without_landlock(name, no_landlock_engine, listener, secret_file, hostile_files,
                                                       monkeypatch, nothing_left):
    assert no_landlock_engine.layers.get("landlock") == "disabled"
    monkeypatch.setenv("MC_TEST_SECRET", SECRET)
    programs = {**STDIN_PROGRAMS, **CALL_PROGRAMS, **ESCAPE_PROGRAMS}
    gt = STDIN if name in STDIN_PROGRAMS else CALL if name in CALL_PROGRAMS else ESCAPED
    code = _fill(programs[name], listener, secret_file, hostile_files, no_landlock_engine)
    before = _snapshot()
    r = evaluate_response(f"```python\n{code}\n```", json.dumps(gt), engine=no_landlock_engine)
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)
    nothing_left(no_landlock_engine, before)


ESCAPE_BASELINE = ["raw_clone_fork", "raw_socket_inet", "modify_ldt", "i386_int80_getpid", "fcntl_setown_sigio",
                   "prctl_clear_pdeathsig", "stat_in_private_dir", "xattr_in_private_dir", "read_0600_file_in_read_allowlist",
                   "proc_parent_cmdline", "symlink_secret_read"]


def test_escape_primitives_work_unsandboxed(listener, secret_file, hostile_files, adv_engine, tmp_path):
    """Guard against vacuous tests: outside the sandbox these primitives do work on this machine."""
    assert open(secret_file).read().strip() == SECRET
    with socket.create_connection(("127.0.0.1", listener), timeout=2) as s:
        assert s.recv(100).decode().strip() == SECRET
    for name in ESCAPE_BASELINE:
        code = _fill(ESCAPE_PROGRAMS[name], listener, secret_file, hostile_files, adv_engine)
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                             timeout=hang_guard(3))
        assert out.stdout.split()[:1] == ["ESCAPED"], (name, out.stdout, out.stderr[-500:])


def test_seccomp_filter_builds_for_every_arch():
    for arch in ("x86_64", "aarch64"):
        prog = seccomp_bpf.build(12345, arch)
        assert len(prog) % 8 == 0 and len(prog) // 8 < 4096


# --- attacks on the protocol and on the worker's memory ----------------------------------------------------

STEAL_NONCE_AND_FORGE_SETUP_FAILURE = (
    "import sys, os\nf = sys._getframe()\nwhile f is not None and 'nonce' not in f.f_locals:\n    f = f.f_back\n"
    "n = f.f_locals['nonce'] if f is not None else 'none'\n"
    "os.write(3, (n + ' {\"s\":\"setup_failed\",\"e\":\"forged\"}\\n').encode())\nos._exit(0)\n")


def test_forged_setup_failure_cannot_mask_the_sample(run_adv):
    """The program can read its nonce (same process as the driver) and forge any record; a forged
    'setup_failed' would turn a wrong program into sandbox_error, which masks it from the loss."""
    r = run_adv(STEAL_NONCE_AND_FORGE_SETUP_FAILURE, STDIN)
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)
    body = "\n".join("    " + line for line in STEAL_NONCE_AND_FORGE_SETUP_FAILURE.splitlines())
    r = run_adv("def f(x):\n" + body, CALL)
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)


FORGE_HUGE_INTEGERS = (
    "import sys, os\nf = sys._getframe()\nwhile f is not None and 'nonce' not in f.f_locals:\n    f = f.f_back\n"
    "n = f.f_locals['nonce']\ndigits = '9' * (__DIGITS__)\n"
    "os.write(3, (n + ' {\"i\":' + digits + ',\"s\":\"ok\",\"v\":\"1\"}\\n').encode())\n"
    "os.write(3, (n + ' {\"i\":0,\"s\":\"ok\",\"v\":\"[' + digits + ']\"}\\n').encode())\nos._exit(0)\n")


def test_huge_integer_results_cannot_stall_the_worker_or_the_supervisor(run_adv):
    """Decimal-to-int conversion is quadratic: a forged record (stolen nonce) with a 4-million-digit
    index or value would take the job process or the supervisor (the trainer's reward thread) minutes."""
    code = "def f(x):\n" + "\n".join("    " + ln for ln in FORGE_HUGE_INTEGERS.replace("__DIGITS__", "4 << 20").splitlines())
    t0, cpu0 = time.monotonic(), time.process_time()
    r = run_adv(code, {"fn_name": "f", "inputs": [[1]], "outputs": [[7]]})
    assert r.verdict == V.WRONG_ANSWER, (r.verdict, r.detail)
    assert time.process_time() - cpu0 < 15  # the supervisor's CPU seconds (the load does not add to them)
    assert time.monotonic() - t0 < 120  # the job process's conversion would take minutes of CPU (far above a load)
    # a legitimately long integer answer still compares exactly (APPS-wrapped: the answer is [10**6000 + 7])
    gt = '{"fn_name": "f", "inputs": [[1]], "outputs": [[[1%s7]]]}' % ("0" * 5999)  # 10**6000 + 7
    r = run_adv("def f(x):\n    return [10 ** 6000 + 7]", gt)
    assert r.verdict == V.CORRECT, r.detail
    r = run_adv("def f(x):\n    return [10 ** 6000 + 8]", gt)
    assert r.verdict == V.WRONG_ANSWER, r.detail


def test_exceptions_injected_into_the_driver_are_not_infrastructure(run_adv):
    """A timer signal whose handler raises lands in the driver's own code after the call returns."""
    code = ("import signal\ndef h(*a):\n    raise KeyboardInterrupt('boom')\nsignal.signal(signal.SIGALRM, h)\n"
            "signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.00003)\ndef f(x):\n    return 'no'\n")
    for _ in range(3):
        r = run_adv(code, {**CALL, "inputs": [[1], [2], [3]], "outputs": [SECRET] * 3}, stop_on_first_failure=False)
        assert r.verdict in V.INCORRECT, (r.verdict, r.detail)


_PAD = "#" + "p" * 3000 + "\n"
VICTIM = _PAD * 10 + "# VICTIM" + "-BEGIN\nprint(" + repr(SECRET) + ")\n# VICTIM" + "-END\n" + _PAD * 10
# scans its own heap (a copy of the process it was forked from) for another job's code and runs it
THIEF = r"""
import ctypes, os, sys
data = sys.stdin.read()  # (kept: the control below looks for it)
libc = ctypes.CDLL(None)
libc.sbrk.restype = ctypes.c_void_p
end = libc.sbrk(0)
r, w = os.pipe()
def readable(a):
    try:
        os.write(w, (ctypes.c_char * 4096).from_address(a)); os.read(r, 4096); return True
    except OSError:
        return False
start = end - 4096
while readable(start - 4096):
    start -= 4096
mem = ctypes.string_at(start, end - start)
b, e = "-".join(["# VICTIM", "BEGIN"]).encode(), "-".join(["# VICTIM", "END"]).encode()
i, done = mem.find(b), False
while i >= 0 and not done:
    j = mem.find(e, i)
    cand = mem[i:j] if j > i else b""
    if b"print(" in cand and j - i < 200:
        try:
            src = cand.decode()
            if "\\n" in src:
                src = src.encode().decode("unicode_escape")
            exec(src.replace("\\'", "'").replace('\\"', '"')); done = True
        except Exception:
            pass
    i = mem.find(b, i + 1)
if not done:
    print("nothing", len(mem))
"""


def test_program_cannot_steal_an_earlier_solution_from_worker_memory(engine_factory):
    """A sandboxed child is a fork: it holds a copy of its parent's memory. A long-lived worker keeps
    freed copies of earlier jobs (e.g. a correct sibling solution of the same prompt) in its heap; the
    per-job process leaves only the current job there."""
    eng = engine_factory(workers=1)

    def run(code, gt):
        return evaluate_response(f"```python\n{code}\n```", json.dumps(gt), engine=eng)

    # control: the scanner finds text that is really in its process (here: the stdin data it has read; the
    # child itself gets its input through a memfd, never through its parent's memory)
    r = run(THIEF, {"inputs": [VICTIM], "outputs": [SECRET + "\n"]})
    assert r.verdict == V.CORRECT, ("the heap scanner does not work, the test below would be vacuous", r.detail)
    for _ in range(3):
        assert run(VICTIM, STDIN).verdict == V.CORRECT
        r = run(THIEF, STDIN)
        assert r.verdict in V.INCORRECT, (r.verdict, r.detail)


def test_child_that_tries_to_outlive_its_worker_is_killed(engine_factory, sandbox_pids):
    """The child tries to clear its parent-death signal, then sleeps; its worker is SIGKILLed mid-run
    (what the engine does to a worker that stops answering, or the OOM killer). The child runs in its own
    session, so only the parent-death signal (which seccomp keeps it from clearing) can end it."""
    eng = engine_factory(workers=1, timeout=10.0, uid_per_slot=False)  # shared uid: no clean-up by uid
    code = "import ctypes, time\nctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\ntime.sleep(60)\nprint('x')"
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", evaluate_response(f"```python\n{code}\n```",
                                                                            json.dumps(STDIN), engine=eng)))
    t.start()
    deadline = time.monotonic() + 60  # polled (bounds far above a loaded machine's, here and below)
    while not sandbox_pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sandbox_pids(), "the sandboxed child never started"
    time.sleep(0.3)  # let it run its prctl
    for w in list(eng._all):
        os.killpg(w.proc.pid, signal.SIGKILL)  # not w.kill(): nothing of the engine's own clean-up
    deadline = time.monotonic() + 60
    while sandbox_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_pids() == [], "the sandboxed child survived its worker"
    eng.close()
    t.join(300)
    deadline = time.monotonic() + 60
    while sandbox_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_pids() == [], "the sandboxed child survived its worker"
    assert out["r"].verdict != V.CORRECT


def test_thread_outliving_the_main_thread(run_adv, adv_engine, nothing_left):
    """The main thread exits alone (raw SYS_exit), a thread keeps the process alive and prints later."""
    before = _snapshot()
    code = ("import ctypes, threading, time, sys\n"
            "def later():\n    time.sleep(2)\n    print('7319882145')\n"
            "threading.Thread(target=later).start()\nctypes.CDLL(None).syscall(60, 0)\n")
    r = run_adv(code, STDIN)
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)
    nothing_left(adv_engine, before)


def test_symlinks_left_in_the_temp_dir_are_not_followed_by_cleanup(run_adv, adv_engine, secret_file, hostile_files,
                                                                     nothing_left):
    code = ("import os\nos.symlink(%r, 'a')\nos.symlink(%r, 'b')\nos.mkdir('d')\nos.symlink('/', 'd/root')\n"
            "os.chmod('d', 0)\nprint('x')" % (secret_file, os.path.dirname(hostile_files["private_file"])))
    before = _snapshot()
    r = run_adv(code, STDIN)
    assert r.verdict == V.WRONG_ANSWER, r.detail
    assert os.path.exists(secret_file) and os.path.exists(hostile_files["private_file"])
    nothing_left(adv_engine, before)


def test_engine_keeps_serving_after_attacks(run_adv, run):
    for runner in (run_adv, run):
        r = runner("print(input() and '7319882145')", STDIN)
        assert r.verdict == V.CORRECT, r.detail
        r = runner("def f(x):\n    return '7319882145'", CALL)
        assert r.verdict == V.CORRECT, r.detail


def test_read_training_data_attack_targets_a_real_file():
    """``read_training_data`` is vacuous unless the file it opens exists (the repository's copy of the data)."""
    assert os.path.isfile(TRAINING_DATA), f"{TRAINING_DATA} missing: bench/data ships it (see bench/data/README.md)"
    with open(TRAINING_DATA, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"  # unsandboxed, the attack's open() works
