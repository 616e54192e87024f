"""The SandboxFusion backend against a stand-in service.

``FakeSandboxFusion`` is NOT SandboxFusion: it is a small HTTP server on 127.0.0.1, started by these
tests, that implements the subset of SandboxFusion's API the backend uses (``POST /run_code``, language
``python``: the base64 ``files`` are written into a fresh temp dir and ``python <code file>`` runs there
with ``run_timeout``; the answer has SandboxFusion's ``status`` / ``run_result`` shape). It runs the
code as a plain, unsandboxed subprocess, so only the test's own programs are sent to it. Fault
injection (HTTP 500, ``SandboxError``, hanging) stands in for an unreliable service.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import RewardSetupError, compute_score, evaluate_response, reset_engine
from microcoder_ext.reward.sandbox_fusion import SandboxFusionEngine

SECRET = "7319882145"


class FakeSandboxFusion:
    def __init__(self):
        self.bodies = []
        self.faults = []  # consumed one per request: "http500", "sandbox_error", "hang", "garbage"
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.bodies.append(body)
                    fault = fake.faults.pop(0) if fake.faults else None
                if self.path != "/run_code":
                    return self._send(404, {"detail": "Not Found"})
                if fault == "http500":
                    return self._send(500, {"detail": "Internal Server Error"})
                if fault == "sandbox_error":
                    return self._send(200, {"status": "SandboxError", "message": "isolation failed"})
                if fault == "garbage":
                    return self._send(200, {"hello": "world"})
                if fault == "hang":
                    time.sleep(body["run_timeout"] + 30)
                    return
                self._send(200, fake.run_code(body))

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def run_code(body):
        assert body["language"] == "python"
        d = tempfile.mkdtemp(prefix="fake-sf-")
        try:
            for name, b64 in (body.get("files") or {}).items():
                with open(os.path.join(d, name), "wb") as f:
                    f.write(base64.b64decode(b64))
            code_file = os.path.join(d, "tmp_code.py")
            with open(code_file, "w") as f:
                f.write(body["code"])
            t0 = time.monotonic()
            try:
                p = subprocess.run([sys.executable, code_file], cwd=d, input=(body.get("stdin") or "").encode(),
                                   capture_output=True, timeout=body.get("run_timeout", 10))
                run = {"status": "Finished", "return_code": p.returncode, "stdout": p.stdout.decode("utf-8", "replace"),
                       "stderr": p.stderr.decode("utf-8", "replace")}
            except subprocess.TimeoutExpired as e:
                run = {"status": "TimeLimitExceeded", "return_code": None,
                       "stdout": (e.stdout or b"").decode("utf-8", "replace"), "stderr": ""}
            run["execution_time"] = time.monotonic() - t0
            status = "Success" if run["status"] == "Finished" and run["return_code"] == 0 else "Failed"
            return {"status": status, "message": "", "compile_result": None, "run_result": run, "files": {}}
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake_sf():
    srv = FakeSandboxFusion()
    yield srv
    srv.close()


@pytest.fixture
def sf(fake_sf):
    fake_sf.bodies.clear()
    fake_sf.faults.clear()
    eng = SandboxFusionEngine(url=fake_sf.url, batch_size=4, timeout=1.0, memory_mb=512, retries=2, request_margin=2.0)

    def run(code, gt, **opts):
        return evaluate_response(f"```python\n{code}\n```", json.dumps(gt), engine=eng, **opts)

    run.engine = eng
    return run


STDIN_GT = {"inputs": [f"{i} {i}\n" for i in range(10)], "outputs": [f"{2 * i}\n" for i in range(10)]}
SUM = "a, b = map(int, input().split())\nprint(a + b)"


def test_stdin_correct_in_batches(sf, fake_sf):
    r = sf(SUM, STDIN_GT)
    assert r.verdict == V.CORRECT and r.num_passed == 10, r.detail
    assert len(fake_sf.bodies) == 3  # 10 tests, 4 per request
    for body in fake_sf.bodies:  # the expected outputs never leave the supervisor
        assert "18\\n" not in json.dumps(body)
        assert all(json.loads(base64.b64decode(body["files"]["mc_spec.json"])).get("outputs") is None for _ in [0])


def test_wrong_on_last_test_and_early_stop(sf, fake_sf):
    r = sf("a, b = map(int, input().split())\nprint(a + b + (a == 9))", STDIN_GT)
    assert r.verdict == V.WRONG_ANSWER and r.num_passed == 9 and "test 10/10" in r.detail, r.detail
    fake_sf.bodies.clear()
    r = sf("a, b = map(int, input().split())\nprint(a + b + (a == 1))", STDIN_GT)
    assert r.verdict == V.WRONG_ANSWER and "test 2/10" in r.detail
    assert len(fake_sf.bodies) == 1  # stopped after the failing batch


def test_judging_is_ours(sf):
    # SandboxFusion's own judge lower-cases; ours does not ("yes" for "Yes" fails unless yes/no token rules say so)
    assert sf("print('2.50')", {"inputs": [""], "outputs": ["2.5\n"]}).verdict == V.CORRECT  # float tolerance
    assert sf("print(True)", {"inputs": [""], "outputs": ["1\n"]}).verdict == V.WRONG_ANSWER
    assert sf("print(10**17 + 1)", {"inputs": [""], "outputs": [f"{10**17}\n"]}).verdict == V.WRONG_ANSWER


@pytest.mark.parametrize("code,verdict", [
    ("raise ValueError('x')", V.RUNTIME_ERROR),
    ("while True: pass", V.TIMEOUT),
    ("import time; time.sleep(30)", V.TIMEOUT),
    ("a = [bytearray(1 << 26) for _ in range(100)]", V.MEMORY_LIMIT),
    ("print(", V.COMPILE_ERROR),
    ("import sys\nwhile True:\n    sys.stdout.write('7' * 65536)", V.WRONG_ANSWER),
    ("import os; os._exit(0)", V.WRONG_ANSWER),
])
def test_stdin_verdicts(sf, code, verdict):
    # filling 512 MiB is real work: on a loaded machine (make test's lanes side by side) it can outlast the 3 s wall
    # limit of a 1 s test and end as a timeout; the memory case gets a 5 s test (13 s wall) to reach its limit
    opts = {"timeout": 5.0} if verdict == V.MEMORY_LIMIT else {}
    r = sf(code, {"inputs": ["1 1\n"], "outputs": ["2\n"]}, **opts)
    assert r.verdict == verdict, r.detail


CALL_GT = {"fn_name": "f", "inputs": [[i] for i in range(6)], "outputs": [i * i for i in range(6)]}


@pytest.mark.parametrize("code,verdict", [
    ("def f(x):\n    return x * x", V.CORRECT),
    ("class Solution:\n    def f(self, x):\n        return x * x", V.CORRECT),
    ("def f(x):\n    return x * x if x < 5 else 0", V.WRONG_ANSWER),
    ("def f(x):\n    return True if x == 1 else x * x", V.WRONG_ANSWER),
    ("def f(x):\n    if x == 5:\n        raise KeyError(x)\n    return x * x", V.RUNTIME_ERROR),
    ("import os\ndef f(x):\n    if x == 3:\n        os._exit(0)\n    return x * x", V.RUNTIME_ERROR),
    ("def f(x):\n    while x == 4:\n        pass\n    return x * x", V.TIMEOUT),
    ("class A:\n    def __eq__(self, o): return True\ndef f(x):\n    return A()", V.WRONG_ANSWER),
])
def test_call_verdicts(sf, code, verdict):
    r = sf(code, CALL_GT, stop_on_first_failure=False)
    assert r.verdict == verdict, r.detail


def test_call_crash_restarts_for_the_remaining_tests(sf):
    code = "import os\ndef f(x):\n    if x == 2:\n        os._exit(3)\n    return x * x"
    r = sf(code, CALL_GT, stop_on_first_failure=False)
    assert r.verdict == V.RUNTIME_ERROR and r.num_passed == 5, r.detail


def test_linked_list_and_big_ints(sf):
    gt = {"fn_name": "rev", "inputs": [[[1, 2, 3]]], "outputs": [[3, 2, 1]], "arg_types": {"0": "ListNode"},
          "return_type": "ListNode"}
    code = ("class Solution:\n    def rev(self, head):\n        prev = None\n        while head:\n"
            "            head.next, prev, head = prev, head, head.next\n        return prev")
    r = sf(code, gt)
    assert r.verdict == V.CORRECT, r.detail
    big = 10 ** 1000
    r = sf("def f(x):\n    return x + 1", {"fn_name": "f", "inputs": [[big]], "outputs": [big + 1]})
    assert r.verdict == V.CORRECT, r.detail


HOSTILE = {
    "kill_the_driver": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "stop_the_driver": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)",
    "forge_report_without_nonce": "import os\nos.write(1, b'\\n0123 {\"results\": [{\"i\": 0, \"status\": \"ok\", \"stdout\": \"x\"}]}\\n')",
    "forge_report_with_nonce_and_kill": (
        "import json, os, signal\nn = json.load(open('mc_spec.json'))['nonce']\n"
        "open('/proc/%d/fd/1' % os.getppid(), 'w').write('\\n' + n + ' ' + json.dumps({'results': [{'i': 0, "
        "'status': 'ok', 'stdout': 'guess\\n'}]}) + '\\n')\nos.kill(os.getppid(), signal.SIGKILL)"),
    "forge_invalid_status": (
        "import json, os, signal\nn = json.load(open('mc_spec.json'))['nonce']\n"
        "open('/proc/%d/fd/1' % os.getppid(), 'w').write('\\n' + n + ' ' + json.dumps({'results': [{'i': 0, "
        "'status': 'sandbox_error'}]}) + '\\n')\nos.kill(os.getppid(), signal.SIGKILL)"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_program_cannot_score_or_mask_itself(sf, name):
    """The remote driver shares the remote sandbox with the program: whatever it does to the driver or
    the report gives an incorrect verdict, never correct and never sandbox_error."""
    r = sf(HOSTILE[name], {"inputs": ["1\n"], "outputs": [SECRET + "\n"]})
    assert r.verdict in V.INCORRECT, (r.verdict, r.detail)


@pytest.mark.parametrize("faults,verdict", [
    (["http500", "sandbox_error"], V.CORRECT),  # retried
    (["http500"] * 3, V.SANDBOX_ERROR),
    (["sandbox_error"] * 3, V.SANDBOX_ERROR),
    (["garbage"] * 3, V.SANDBOX_ERROR),
])
def test_infrastructure_failures_are_sandbox_errors(sf, fake_sf, faults, verdict):
    fake_sf.faults[:] = faults
    r = sf(SUM, {"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert r.verdict == verdict, r.detail
    assert len(fake_sf.bodies) == min(len(faults) + 1, 3)


def test_hanging_service_is_bounded(fake_sf):
    fake_sf.faults[:] = ["hang"]
    eng = SandboxFusionEngine(url=fake_sf.url, timeout=0.2, retries=0, request_margin=0.5, http_slack=1.0)
    t0 = time.monotonic()
    r = evaluate_response(f"```python\n{SUM}\n```", json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}), engine=eng)
    assert r.verdict == V.SANDBOX_ERROR, r.detail
    assert time.monotonic() - t0 < 120  # the request's bound is ~2 s: far above a loaded machine's, far below a hang


def test_unreachable_service_is_a_sandbox_error():
    eng = SandboxFusionEngine(url="http://127.0.0.1:9", retries=1)
    r = evaluate_response(f"```python\n{SUM}\n```", json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}), engine=eng)
    assert r.verdict == V.SANDBOX_ERROR and "SandboxFusion" in r.detail, r.detail


def test_compute_score_selects_the_backend(fake_sf, monkeypatch):
    reset_engine()
    try:
        out = compute_score("x", f"```python\n{SUM}\n```", json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
                            backend="sandbox_fusion", sandbox_fusion_url=fake_sf.url)
        assert out["verdict"] == V.CORRECT and out["score"] == 1.0, out
        monkeypatch.setenv("MICROCODER_REWARD_BACKEND", "sandbox_fusion")
        monkeypatch.setenv("MICROCODER_SANDBOX_FUSION_URL", fake_sf.url)
        n = len(fake_sf.bodies)
        out = compute_score("x", f"```python\n{SUM}\n```", json.dumps({"inputs": ["1 2\n"], "outputs": ["4\n"]}))
        assert out["verdict"] == V.WRONG_ANSWER and len(fake_sf.bodies) == n + 1
        out = compute_score("x", f"```python\n{SUM}\n```", "{}", backend="nope")
        assert out["verdict"] == V.SANDBOX_ERROR
    finally:
        reset_engine()


def test_both_backends_implement_the_backend_interface(fake_sf):
    import inspect

    from microcoder_ext.reward import Backend, Engine, EngineConfig
    from microcoder_ext.reward import sandbox_fusion as sf_mod
    from microcoder_ext.reward.judge import judge

    local = Engine(EngineConfig())  # lazy: starts nothing
    remote = SandboxFusionEngine(url=fake_sf.url)
    try:
        for eng, name in ((local, "local"), (remote, "sandbox_fusion")):
            assert isinstance(eng, Backend) and eng.backend == name
            want = inspect.signature(Backend.evaluate).parameters
            got = inspect.signature(type(eng).evaluate).parameters
            assert [(p.name, p.kind) for p in got.values()] == [(p.name, p.kind) for p in want.values()]
    finally:
        local.close()
    # one judge for both backends (no per-backend copy of the comparison)
    assert Engine.judge is judge and sf_mod.judge is judge


def test_backend_registry(fake_sf, monkeypatch):
    from microcoder_ext.reward import backends

    reset_engine()
    try:
        a = backends.get_engine("sandbox_fusion", fake_sf.url)
        assert isinstance(a, SandboxFusionEngine) and backends.get_engine(" Sandbox_Fusion ", fake_sf.url) is a
        assert backends.get_engine("sandbox_fusion", fake_sf.url + "/") is not a  # one engine per URL
        monkeypatch.setattr(backends.os, "getpid", lambda: -1)  # as seen from a forked child
        assert backends.get_engine("sandbox_fusion", fake_sf.url) is not a
        monkeypatch.undo()
        with pytest.raises(RewardSetupError, match="unknown reward backend"):
            backends.get_engine("nope")
        monkeypatch.delenv("MICROCODER_SANDBOX_FUSION_URL", raising=False)
        with pytest.raises(RewardSetupError, match="needs sandbox_fusion_url"):
            backends.get_engine("sandbox_fusion")
    finally:
        reset_engine()
    assert backends.BACKENDS == ("local", "sandbox_fusion")
