"""Hostile programs: none may score, none may end as sandbox_error (which masks the sample from the loss),
none may leave a process or a file behind, and the engine keeps serving afterwards."""

import json
import os
import socket
import threading

import pytest

from microcoder_ext.core import verdicts as V

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
    "read_training_data": "print(open('/work/shared/data/leetcode-v0.2.0-train.jsonl.gz','rb').read(10))",
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


def _snapshot():
    return set(os.listdir("/tmp")) | {"/dev/shm/" + x for x in os.listdir("/dev/shm")}


@pytest.mark.parametrize("name", sorted(STDIN_PROGRAMS) + sorted(CALL_PROGRAMS))
def test_hostile_program_never_scores(name, run, engine, listener, secret_file, sandbox_pids, monkeypatch):
    monkeypatch.setenv("MC_TEST_SECRET", SECRET)  # a secret in the host environment
    if name in STDIN_PROGRAMS:
        code = STDIN_PROGRAMS[name].replace("__PORT__", str(listener)).replace("__SECRET_FILE__", repr(secret_file))
        gt = STDIN
    else:
        code, gt = CALL_PROGRAMS[name], CALL
    before = _snapshot()
    r = run(code, gt)
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)
    assert r.score == 0.0
    assert sandbox_pids() == [], "a sandboxed process survived"
    created = _snapshot() - before
    assert not [c for c in created if "pwned" in c or c.startswith("mc-probe")], created
    for base in [os.path.join("/tmp", d) for d in os.listdir("/tmp") if d.startswith("microcoder-sbx-")]:
        assert os.listdir(base) == [], f"job dir left behind in {base}"


def test_the_same_programs_can_really_succeed_unsandboxed_baseline(listener, secret_file):
    """Guard against vacuous tests: outside the sandbox the file and socket attacks would work."""
    assert open(secret_file).read().strip() == SECRET
    with socket.create_connection(("127.0.0.1", listener), timeout=2) as s:
        assert s.recv(100).decode().strip() == SECRET


def test_engine_keeps_serving_after_attacks(run):
    r = run("print(input() and '7319882145')", STDIN)
    assert r.verdict == V.CORRECT, r.detail
    r = run("def f(x):\n    return '7319882145'", CALL)
    assert r.verdict == V.CORRECT, r.detail
