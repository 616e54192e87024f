"""Optional remote backend: a SandboxFusion service (bytedance/SandboxFusion) runs the code, we judge.

Select it with ``compute_score(..., backend="sandbox_fusion", sandbox_fusion_url="http://host:8080")``
(verl ``reward_kwargs``) or MICROCODER_REWARD_BACKEND=sandbox_fusion + MICROCODER_SANDBOX_FUSION_URL.
Same interface as the local :class:`~microcoder_ext.reward.engine.Engine` (the
:class:`~microcoder_ext.reward.backends.Backend` protocol: ``evaluate(code, suite)`` -> ``EvalResult``,
``close()``, ``backend``), same verdicts. Like the local engine it depends only on the shared ``judge``
module, never on another backend.

API subset used: ``POST {url}/run_code`` with ``{"language": "python", "code", "run_timeout",
"compile_timeout", "files": {name: base64}}``, answered with ``{"status": "Success"|"Failed"|"SandboxError",
"message", "run_result": {"status": "Finished"|"Error"|"TimeLimitExceeded", "return_code", "stdout",
"stderr", "execution_time"}}``. SandboxFusion's ``python`` runner writes the files into a fresh temp dir
and runs ``python <code file>`` there.

Batching: one request runs up to ``batch_size`` tests of one completion. Its ``code`` is our fixed
driver (:data:`DRIVER`); the files carry the solution, a call runner and the batch's *inputs* -- never an
expected output. The driver runs the solution once per stdin test (a subprocess with rlimits, a wall
clock, output to a size-capped file) or, for call-based tests, a runner process that calls the function
for each test and restarts after a crash, and prints one JSON report tagged with a per-request nonce.
With ``stop_on_first_failure`` no further batch is sent after a failing one.

Judging stays here: the report's outputs go through :func:`~microcoder_ext.reward.judge.judge` (the same
comparison as the local engine); SandboxFusion's own judging (``/submit``, its lower-casing, relative tolerances, ...) is not
used. The report is untrusted (the program shares the remote sandbox with the driver and can forge it),
which is harmless because it can only claim outputs, and outputs are checked against expectations the
remote side never sees.

Status mapping: transport failures (connection refused, HTTP errors, timeouts, a body that is not
SandboxFusion's) and ``status == "SandboxError"`` are retried (``retries`` times, exponential backoff) and
then give ``sandbox_error``, never ``wrong_answer``. A request that ran but whose report is missing or
invalid (the program killed or stopped the driver, or the run hit its time budget) is blamed on the
program (``runtime_error`` / ``timeout``), otherwise a program could mask itself as an infrastructure
failure. Bounded: each request's ``run_timeout`` is the batch's wall-clock budget plus a margin and the
HTTP timeout a bit more; at most ``concurrency`` requests per process at once.

Configuration (constructor or environment):
  url          MICROCODER_SANDBOX_FUSION_URL          base URL of the service
  batch_size   MICROCODER_SANDBOX_FUSION_BATCH        tests per request (default 16)
  retries      MICROCODER_SANDBOX_FUSION_RETRIES      retries of a failed request (default 2)
  concurrency  MICROCODER_SANDBOX_FUSION_CONCURRENCY  requests in flight per process (default 32)
  timeout, memory_mb, output_limit, stop_on_first_failure: as for the local engine (MICROCODER_REWARD_*)
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from microcoder_ext.core import verdicts as V

from .ground_truth import TestSuite
from .judge import MiB, _env, encode_big_ints, judge, output_cap
from .result import EvalResult
from .sandbox import child as _child

log = logging.getLogger("microcoder_ext.reward")

_STATUSES = frozenset({"ok", "exception", "memory", "timeout", "output_limit", "compile_error", "unserialisable",
                       "signal"})

# The remote driver (stdlib only, any Python >= 3.8). argv-free: everything comes from mc_spec.json.
DRIVER = r'''
import json, math, os, resource, signal, subprocess, sys, time
spec = json.load(open("mc_spec.json"))
nonce, mode, n = spec["nonce"], spec["mode"], len(spec["tests"])
per_test, mem, caps = float(spec["timeout"]), int(spec["memory_mb"]) << 20, spec["caps"]
wall = 2 * per_test + 1

def limits(fsize, cpu):
    def apply():
        os.setsid()
        for res, v in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CORE, 0)):
            try:
                resource.setrlimit(res, (v, v))
            except (ValueError, OSError):
                pass
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    return apply

def status_of(rc, err):
    if rc == 0:
        return "ok", None
    if rc < 0:
        sig = -rc
        if sig == signal.SIGXCPU:
            return "timeout", "CPU time limit"
        if sig == signal.SIGXFSZ:
            return "output_limit", "output limit"
        return "signal", "killed by signal %d" % sig
    if "MemoryError" in err:
        return "memory", "MemoryError"
    return "exception", (err.strip().splitlines() or ["exit code %d" % rc])[-1][-300:]

def run(argv, stdin_path, cap, cpu, budget):
    with open(stdin_path, "rb") as fin, open("mc_out", "wb") as fout, open("mc_err", "wb") as ferr:
        p = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr, preexec_fn=limits(cap + 1, cpu))
        try:
            rc = p.wait(timeout=budget)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        if timed_out:
            p.wait()
            rc = None
    out = open("mc_out", "rb").read(cap + 2)
    err = open("mc_err", "rb").read()[-2000:].decode("utf-8", "replace")
    return rc, out, err

results = []
if mode == "stdin":
    try:
        compile(open("solution.py", "rb").read(), "solution.py", "exec")
        compiled = None
    except BaseException as e:
        compiled = "%s: %s" % (type(e).__name__, e)
    for i, inp in enumerate(spec["tests"]):
        if compiled is not None:
            results.append({"i": i, "status": "compile_error", "error": compiled[-300:]})
            break
        with open("mc_in", "wb") as f:
            f.write(inp.encode("utf-8", "surrogateescape"))
        rc, out, err = run([sys.executable, "solution.py"], "mc_in", caps[i], int(math.ceil(per_test)), wall)
        rec = {"i": i, "stderr": err[-300:]}
        if rc is None:
            rec.update(status="timeout", error="wall-clock limit")
        elif len(out) > caps[i]:
            rec.update(status="output_limit", error="output exceeds %d bytes" % caps[i])
        else:
            st, e = status_of(rc, err)
            rec.update(status=st, error=e)
            if st == "ok":
                rec["stdout"] = out.decode("utf-8", "replace")
        results.append(rec)
else:
    start, cap = 0, max(caps)
    open("mc_in", "wb").close()
    while start < n:
        if os.path.exists("mc_records"):
            os.unlink("mc_records")
        left = n - start
        rc, _out, err = run([sys.executable, "mc_runner.py", str(start)], "mc_in", cap * left + 4096,
                            int(math.ceil(per_test * left)), wall * left)
        got, last = {}, None
        if os.path.exists("mc_records"):
            for line in open("mc_records", "rb").read().decode("utf-8", "replace").splitlines():
                if not line.startswith(nonce + " "):
                    continue
                try:
                    r = json.loads(line[len(nonce) + 1:])
                except ValueError:
                    continue
                if isinstance(r, dict) and r.get("i") == start + len(got):
                    got[r["i"]] = r
                    last = r.get("s")
        for i in sorted(got):
            r = got[i]
            results.append({"i": i, "status": r.get("s"), "value": r.get("v"), "error": r.get("e")})
        nxt = start + len(got)
        if nxt < n and last not in ("memory", "compile_error"):
            if rc is None:
                results.append({"i": nxt, "status": "timeout", "error": "wall-clock limit", "stderr": err[-300:]})
            else:
                st, e = status_of(rc, err)
                if st == "ok":
                    st, e = "exception", "process exited (code 0) before returning a result"
                results.append({"i": nxt, "status": st, "error": e, "stderr": err[-300:]})
            nxt += 1
        if last in ("memory", "compile_error"):
            break
        start = nxt
sys.stdout.write("\n" + nonce + " " + json.dumps({"results": results}) + "\n")
'''

_RUNNER_MAIN = r'''
import json, math, os, resource, sys

def _decode(v):
    if isinstance(v, dict):
        if len(v) == 1 and "__mc_bigint__" in v:
            return int(v["__mc_bigint__"], 16)
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v

def main():
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    sys.setrecursionlimit(100000)
    spec = json.load(open("mc_spec.json"))
    start, nonce = int(sys.argv[1]), spec["nonce"]
    tests = _decode(spec["tests"])
    fd = os.open("mc_records", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode

    def emit(rec):
        os.write(fd, (nonce + " " + json.dumps(rec, separators=(",", ":")) + "\n").encode("utf-8", "replace"))

    arg_types, ret_type = spec.get("arg_types") or {}, spec.get("return_type")
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    if "ListNode" in arg_types.values() or ret_type == "ListNode":
        g["ListNode"] = _ListNode
    if "TreeNode" in arg_types.values() or ret_type == "TreeNode":
        g["TreeNode"] = _TreeNode
    try:
        code = compile(open("solution.py", "rb").read(), "solution.py", "exec")
    except BaseException as e:
        emit({"i": start, "s": "compile_error", "e": ("%s: %s" % (type(e).__name__, e))[-300:]})
        os._exit(1)
    try:
        exec(code, g)
    except MemoryError:
        emit({"i": start, "s": "memory", "e": "MemoryError at module level"})
        os._exit(1)
    except BaseException as e:
        emit({"i": start, "s": "exception", "e": ("at module level: %s: %s" % (type(e).__name__, e))[-300:]})
        os._exit(1)
    factory = _resolve(g, spec["fn_name"])
    if factory is None:
        emit({"i": start, "s": "exception", "e": "NameError: no function or Solution method %r" % spec["fn_name"]})
        os._exit(1)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    for i in range(start, len(tests)):
        t = tests[i]
        try:
            args = [_convert_in(a, arg_types.get(str(k)), g) for k, a in enumerate(t.get("args", []))]
            kwargs = {k: _convert_in(v, arg_types.get(k), g) for k, v in (t.get("kwargs") or {}).items()}
            ru = resource.getrusage(resource.RUSAGE_SELF)
            soft = int(math.ceil(ru.ru_utime + ru.ru_stime + float(spec["timeout"])))
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
            value = factory()(*args, **kwargs)
        except MemoryError:
            emit({"i": i, "s": "memory", "e": "MemoryError"})
            os._exit(1)
        except BaseException as e:
            emit({"i": i, "s": "exception", "e": ("%s: %s" % (type(e).__name__, e))[-300:]})
            continue
        try:
            if ret_type == "ListNode":
                value = _from_linked(value)
            elif ret_type == "TreeNode":
                value = _from_tree(value)
            text = dumps(value)
        except MemoryError:
            emit({"i": i, "s": "memory", "e": "MemoryError while serialising"})
            os._exit(1)
        except BaseException as e:
            emit({"i": i, "s": "unserialisable", "e": "return value of type %s is not JSON-serialisable"
                                                      % type(value).__name__})
            continue
        emit({"i": i, "s": "ok", "v": text})
    sys.stdout.flush()
    os._exit(0)

main()
'''


def _runner_source() -> str:
    """The call runner: the local sandbox's value conversions (ListNode/TreeNode, Solution methods) plus
    a small main loop, so that both backends call functions the same way."""
    helpers = [_child._ListNode, _child._TreeNode, _child._to_linked, _child._to_tree, _child._from_linked,
               _child._from_tree, _child._convert_in, _child._resolve]
    return "\n\n".join(inspect.getsource(h) for h in helpers) + "\n" + _RUNNER_MAIN


@dataclass
class SandboxFusionConfig:
    url: str = ""
    batch_size: int = 16
    retries: int = 2
    concurrency: int = 32
    timeout: float = 5.0
    memory_mb: int = 2048
    output_limit: int = 16 * MiB
    stop_on_first_failure: bool = True
    request_margin: float = 10.0  # seconds added to a batch's budget for start-up and transfer
    http_slack: float = 15.0  # seconds the HTTP client waits beyond the run budget (queueing, transfer)

    @classmethod
    def from_env(cls, url: str | None = None) -> "SandboxFusionConfig":
        return cls(url=url or _env("MICROCODER_SANDBOX_FUSION_URL", ""),
                   batch_size=_env("MICROCODER_SANDBOX_FUSION_BATCH", 16, int),
                   retries=_env("MICROCODER_SANDBOX_FUSION_RETRIES", 2, int),
                   concurrency=_env("MICROCODER_SANDBOX_FUSION_CONCURRENCY", 32, int),
                   timeout=_env("MICROCODER_REWARD_TIMEOUT", 5.0, float),
                   memory_mb=_env("MICROCODER_REWARD_MEMORY_MB", 2048, int),
                   output_limit=_env("MICROCODER_REWARD_OUTPUT_LIMIT", 16 * MiB, int))


class SandboxUnavailable(RuntimeError):
    """The service did not run the request (after retries)."""


class SandboxFusionEngine:
    """Runs code on a SandboxFusion service; thread-safe; judges locally."""

    backend = "sandbox_fusion"

    def __init__(self, config: SandboxFusionConfig | None = None, **overrides):
        cfg = config or SandboxFusionConfig()
        self.config = SandboxFusionConfig(**{**asdict(cfg), **overrides})
        if not self.config.url:
            raise ValueError("SandboxFusion backend needs a URL (sandbox_fusion_url= or MICROCODER_SANDBOX_FUSION_URL)")
        self.url = self.config.url.rstrip("/") + "/run_code"
        self.size = self.config.concurrency
        self._sem = threading.BoundedSemaphore(max(1, self.config.concurrency))
        self._runner_b64 = base64.b64encode(_runner_source().encode()).decode()
        self.fatal = None
        self.layers = {"backend": "sandbox_fusion", "url": self.config.url}
        self.pid = os.getpid()
        self.requests = 0

    def warmup(self, n: int | None = None) -> dict:
        return self.layers

    def close(self) -> None:
        pass

    # --- scoring ---------------------------------------------------------------------------------
    def evaluate(self, code: str, suite: TestSuite, *, timeout: float | None = None, memory_mb: int | None = None,
                 stop_on_first_failure: bool | None = None) -> EvalResult:
        t0 = time.monotonic()
        cfg = self.config
        n = len(suite.tests)
        timeout = float(suite.time_limit or timeout or cfg.timeout)
        memory_mb = int(suite.memory_limit_mb or memory_mb or cfg.memory_mb)
        stop_first = cfg.stop_on_first_failure if stop_on_first_failure is None else stop_on_first_failure
        program = (suite.setup_code.rstrip("\n") + "\n\n" + code) if suite.setup_code else code
        passed, first_fail = 0, None
        try:
            for lo in range(0, n, max(1, cfg.batch_size)):
                hi = min(n, lo + max(1, cfg.batch_size))
                for i, msg in self._run_batch(program, suite, lo, hi, timeout, memory_mb):
                    ok, verdict, detail = judge(suite.tests[i], msg, suite)
                    if ok:
                        passed += 1
                    elif first_fail is None or i < first_fail[0]:
                        first_fail = (i, verdict, detail)
                if first_fail is not None and (stop_first or first_fail[1] == V.COMPILE_ERROR):
                    break
        except SandboxUnavailable as e:
            return EvalResult(V.SANDBOX_ERROR, n, passed, f"SandboxFusion: {e}"[:300], time.monotonic() - t0)
        if first_fail is not None:
            i, verdict, detail = first_fail
            res = EvalResult(verdict, n, passed, f"test {i + 1}/{n}: {detail}")
        elif passed == n:
            res = EvalResult(V.CORRECT, n, passed, f"all {n} tests passed")
        else:
            res = EvalResult(V.SANDBOX_ERROR, n, passed, f"only {passed} of {n} tests reported")
        res.time_s = time.monotonic() - t0
        return res

    def _cap(self, expected) -> int:
        return output_cap(expected, self.config.output_limit)

    def _run_batch(self, program: str, suite: TestSuite, lo: int, hi: int, timeout: float, memory_mb: int):
        """Run tests ``lo..hi-1`` remotely; yields ``(index, worker-style result message)``."""
        nonce = os.urandom(16).hex()
        tests = suite.tests[lo:hi]
        spec = {"nonce": nonce, "mode": suite.mode, "timeout": timeout, "memory_mb": memory_mb,
                "fn_name": suite.fn_name, "arg_types": suite.arg_types, "return_type": suite.return_type,
                "tests": [t.input for t in tests] if suite.mode == "stdin" else [encode_big_ints(t.input) for t in tests],
                "caps": [self._cap(t.expected) for t in tests]}
        files = {"solution.py": base64.b64encode(program.encode("utf-8", "surrogateescape")).decode(),
                 "mc_spec.json": base64.b64encode(json.dumps(spec).encode()).decode()}
        if suite.mode != "stdin":
            files["mc_runner.py"] = self._runner_b64
        budget = (hi - lo) * (2 * timeout + 1) + self.config.request_margin
        body = {"language": "python", "code": DRIVER, "run_timeout": budget, "compile_timeout": 10, "files": files}
        resp = self._post(body, budget + self.config.http_slack)
        run = resp.get("run_result") or {}
        report = _find_report(run.get("stdout"), nonce)
        got = {}
        if report is not None:
            for rec in report:
                if isinstance(rec, dict) and isinstance(rec.get("i"), int) and 0 <= rec["i"] < hi - lo:
                    got.setdefault(rec["i"], rec)
        for k in range(hi - lo):
            rec = got.get(k)
            if rec is None:
                # the request ran (no SandboxError) but this test has no result: the driver was stopped,
                # killed or ran out of time -- with the program as the only suspect
                if run.get("status") == "TimeLimitExceeded" or resp.get("status") == "TimeLimitExceeded":
                    yield lo + k, {"status": "timeout", "error": "the run exceeded its time budget"}
                else:
                    yield lo + k, {"status": "exception", "error": "no result for this test (the program "
                                                                  "disturbed the test driver)"}
                return  # a missing result ends the batch: later ones are not trustworthy either
            yield lo + k, _clean_record(rec, suite.mode)

    def _post(self, body: dict, timeout: float) -> dict:
        data = json.dumps(body).encode()
        last = "no attempt"
        for attempt in range(self.config.retries + 1):
            if attempt:
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
            with self._sem:
                self.requests += 1
                req = urllib.request.Request(self.url, data=data, headers={"Content-Type": "application/json"},
                                             method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=timeout) as r:
                        raw = r.read(256 << 20)
                except urllib.error.HTTPError as e:
                    last = f"HTTP {e.code}"
                    continue
                except (urllib.error.URLError, OSError, TimeoutError) as e:
                    last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
                    continue
            try:
                resp = json.loads(raw)
            except ValueError:
                last = "response is not JSON"
                continue
            if not isinstance(resp, dict) or resp.get("status") not in ("Success", "Failed", "SandboxError"):
                last = f"unexpected response {str(resp)[:100]!r}"
                continue
            if resp["status"] == "SandboxError":
                last = f"SandboxError: {str(resp.get('message'))[:200]}"
                continue
            return resp
        raise SandboxUnavailable(f"{last} (after {self.config.retries + 1} attempts)")


def _find_report(stdout, nonce: str):
    if not isinstance(stdout, str):
        return None
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce + " "):
            try:
                rep = json.loads(line[len(nonce) + 1:])
            except (ValueError, RecursionError):
                return None
            res = rep.get("results") if isinstance(rep, dict) else None
            return res if isinstance(res, list) else None
    return None


def _clean_record(rec: dict, mode: str) -> dict:
    """A worker-style result message from an untrusted report entry (types checked)."""
    status = rec.get("status")
    if status not in _STATUSES:
        return {"status": "exception", "error": f"invalid status {str(status)[:50]!r} in the report"}
    msg = {"status": status, "error": rec.get("error") if isinstance(rec.get("error"), str) else None}
    if isinstance(rec.get("stderr"), str):
        msg["stderr"] = rec["stderr"][-300:]
    if status == "ok":
        key = "stdout" if mode == "stdin" else "value"
        if not isinstance(rec.get(key), str):
            return {"status": "exception", "error": f"no {key} in the report"}
        msg[key] = rec[key]
    return msg


def run_timeout_for(n_tests: int, timeout: float) -> float:
    """Wall-clock budget of a request of ``n_tests`` tests (for sizing a service's limits)."""
    return n_tests * (2 * timeout + 1)


__all__ = ["DRIVER", "SandboxFusionConfig", "SandboxFusionEngine", "SandboxUnavailable", "run_timeout_for"]
