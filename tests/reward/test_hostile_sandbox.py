"""Hostile programs against the SANDBOX side of the reward and the host around it, through the real engine in its
default configuration (``hostile`` fixture: a program verdict, never ``sandbox_error``; nothing left behind; no stall
of the host; bounded RSS; the engine still judges afterwards).

Classes (issue 16): a program that lifts its own CPU limit; resources outside the rlimits (memfds, the temp dir's size
and inodes, nice and real-time scheduling); clean-up that a program can break (deep, wide, unreadable trees,
symlinks), and stale directories of other engines; ``sandbox_error`` for things a program did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from microcoder_ext.core import verdicts as V
from microcoder_ext.reward import evaluate_response
from microcoder_ext.reward.sandbox import tree
from host_load import hang_guard


def stdin_gt(outputs, inputs=None):
    outputs = [outputs] if isinstance(outputs, str) else list(outputs)
    return json.dumps({"inputs": inputs or [""] * len(outputs), "outputs": outputs})


def call_gt(expected, fn="f"):
    return json.dumps({"fn_name": fn, "inputs": [[1]], "outputs": [expected]})


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"
RAISE_CPU = "import resource\n_s, _h = resource.getrlimit(resource.RLIMIT_CPU)\nresource.setrlimit(resource.RLIMIT_CPU, (_h, _h))\n"

# ------------------------------------------------------------------------------------------------ 2. CPU limit


@pytest.fixture(scope="module")
def lenient_wall(engine_factory):
    """1 CPU s per test and a 60 s wall clock: only the CPU limit can stop a busy program in time."""
    return engine_factory(timeout=1.0, wall_timeout=60.0)


def test_a_program_that_raises_its_soft_cpu_limit_still_times_out(hostile, lenient_wall):
    obs = hostile(RAISE_CPU + BURN.format(s=2.5) + "print(3)\n", stdin_gt("3\n"), engine=lenient_wall)
    assert (obs.score, obs.verdict) == (0.0, V.TIMEOUT) and "CPU time limit 1 s" in obs.detail, obs


def test_the_cpu_budget_is_per_test_and_cannot_be_lifted_in_any_test(hostile, lenient_wall):
    # tests 1-2 use 0.6 s each (within budget; a job-wide budget would count them together), test 3 lifts its limit
    # and burns 2.5 s: only test 3 fails
    code = ("import sys\nn = int(sys.stdin.readline())\n" + RAISE_CPU
            + BURN.format(s="(0.6 if n < 3 else 2.5)") + "print(n)\n")
    obs = hostile(code, stdin_gt(["1\n", "2\n", "3\n"], ["1\n", "2\n", "3\n"]), engine=lenient_wall)
    assert (obs.score, obs.verdict) == (0.0, V.TIMEOUT) and "test 3/3: CPU time limit" in obs.detail, obs


def test_call_mode_cpu_limit_cannot_be_lifted(hostile, lenient_wall):
    code = RAISE_CPU + "def f(x):\n" + "".join("    " + line + "\n" for line in BURN.format(s=2.5).splitlines()) \
        + "    return 1\n"
    obs = hostile(code, call_gt(1), engine=lenient_wall)
    assert (obs.score, obs.verdict) == (0.0, V.TIMEOUT) and "CPU time limit" in obs.detail, obs


MARK = ("import os\nif os.listdir('.'):\n    print('left over:', os.listdir('.'))\nelse:\n    open('mark', 'w').close()\n"
        "    {change}\n    print(input())\n")


@pytest.mark.parametrize("change", [
    "pass",
    "import resource; s, h = resource.getrlimit(resource.RLIMIT_CPU); resource.setrlimit(resource.RLIMIT_CPU, (h, h))",
    "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))",
    "import resource; resource.setrlimit(resource.RLIMIT_STACK, (1 << 20, 1 << 20))",
    "os.nice(5)",
    "os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))",
    "os.makedirs('d/e/f'); os.chmod('d/e', 0); os.symlink('/etc', 'link'); os.chmod('.', 0o500)",
], ids=["nothing", "cpu", "address_space", "stack", "nice", "scheduler", "files"])
def test_nothing_a_test_changes_reaches_the_next(hostile, change):
    obs = hostile(MARK.format(change=change), stdin_gt(["1\n", "2\n", "3\n"], ["1\n", "2\n", "3\n"]))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs  # every test found an empty temp dir


# ------------------------------------------------------------------------------------------------ 5. resources

RESOURCE_PROBES = {
    # anonymous shared memory that RLIMIT_AS does not count
    "memfd": ("import os\ntry:\n    os.memfd_create('x')\n    print('made')\nexcept OSError:\n    print('denied')\n",
              "denied"),
    "memfd_many_pages": ("import os, mmap\nn = 0\ntry:\n    for _ in range(56):\n        fd = os.memfd_create('x')\n"
                         "        os.ftruncate(fd, 16 << 20)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n", "0"),
    # a 1 GiB file in the temp dir in one call (RAM when /tmp is a tmpfs)
    "fallocate_1gib": ("import os\nfd = os.open('big', os.O_CREAT | os.O_WRONLY)\ntry:\n"
                       "    os.posix_fallocate(fd, 0, 1 << 30)\n    print('allocated')\nexcept OSError as e:\n"
                       "    print('refused')\n", "refused"),
    # many files each below RLIMIT_FSIZE: the quota bounds their sum
    "many_files": ("import os\ndone = 0\ntry:\n    for i in range(64):\n        with open(f'f{i}', 'wb') as f:\n"
                   "            f.write(b'x' * (4 << 20))\n        done += 1\nexcept OSError:\n    pass\n"
                   "print('bounded' if done < 20 else done)\n", "bounded"),
    "many_inodes": ("import os\nn = 0\ntry:\n    while n < 100000:\n        os.mkdir(f'd{n}')\n        n += 1\n"
                    "except OSError:\n    pass\nprint('bounded' if n < 10000 else n)\n", "bounded"),
    "nice_and_realtime": (
        "import os, resource\nres = []\n"
        "res.append(resource.getrlimit(resource.RLIMIT_NICE) == (0, 0))\n"
        "res.append(resource.getrlimit(resource.RLIMIT_RTPRIO) == (0, 0))\n"
        "res.append(resource.getrlimit(resource.RLIMIT_RTTIME) == (0, 0))\n"
        "for f in (lambda: os.setpriority(os.PRIO_PROCESS, 0, -5), lambda: os.nice(-1),\n"
        "          lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)),\n"
        "          lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1)),\n"
        "          lambda: resource.setrlimit(resource.RLIMIT_NICE, (40, 40))):\n"
        "    try:\n        f()\n        res.append(False)\n    except (OSError, ValueError):\n        res.append(True)\n"
        "print('bounded' if all(res) else res)\n", "bounded"),
    "dev_shm_write": ("try:\n    open('/dev/shm/mc-hostile', 'w').write('x' * 100)\n    print('wrote')\n"
                      "except OSError:\n    print('denied')\n", "denied"),
}


@pytest.mark.parametrize("name", sorted(RESOURCE_PROBES))
def test_resources_outside_the_rlimits_are_bounded(hostile, name):
    code, want = RESOURCE_PROBES[name]
    obs = hostile(code, stdin_gt(want + "\n"))
    assert (obs.score, obs.verdict) == (1.0, V.CORRECT), obs  # the program itself saw the limit


def test_filling_the_temp_dir_costs_the_host_nothing_after_the_job(hostile):
    code = ("import os\ntry:\n    with open('fill', 'wb') as f:\n        while True:\n"
            "            f.write(b'x' * (1 << 20))\nexcept OSError:\n    pass\nprint(1)\n")
    obs = hostile(code, stdin_gt("2\n"))  # hostile(): shared memory (tmpfs pages) is released after the job
    assert (obs.score, obs.verdict) == (0.0, V.WRONG_ANSWER), obs


def test_the_quota_layer_is_reported_active(default_engine):
    report = default_engine.warmup()
    assert report.get("tmp_quota") == "active", report


NO_MOUNT_SCRIPT = """
import json, os, sys
from microcoder_ext.reward import Engine, EngineConfig, evaluate_response
root, slots, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
eng = Engine(EngineConfig(workers=1, timeout=2.0, memory_mb=512, uid=uid, node_slots=1, tmp_root=root,
                          slots_dir=slots))
report = eng.warmup()
gt = json.dumps({"inputs": ["4\\n"], "outputs": ["8\\n"]})
out = {"fatal": eng.fatal, "report": report, "verdicts": {}}
for name, code in {"correct": "print(int(input()) * 2)",
                   "writes_temp_dir": "open('f', 'w').write('x')\\nprint(int(input()) * 2)",
                   "makes_a_dir": "import os\\nos.mkdir('d')\\nprint(int(input()) * 2)"}.items():
    r = evaluate_response(f"```python\\n{code}\\n```", gt, engine=eng)
    out["verdicts"][name] = [r.verdict, r.detail]
eng.close()
out["left_in_root"] = os.listdir(root)
print(json.dumps(out))
"""


def test_without_cap_sys_admin_the_temp_dir_is_read_only():
    """Where the worker may not mount (no CAP_SYS_ADMIN, as in an unprivileged container) there is no quota tmpfs:
    the engine still starts with every other layer, says the quota layer is unavailable, judges correct programs
    right, and a program's temp dir is read-only (a write is the program's runtime error, nothing reaches the host's
    temp root). The engine runs in a child whose capability bounding set lacks CAP_SYS_ADMIN (util-linux setpriv)."""
    root = tempfile.mkdtemp(prefix="mc-test-nomount-")
    os.chmod(root, 0o711)
    slots = tempfile.mkdtemp(prefix="mc-test-nomount-slots-")
    uid = 62000 + os.getpid() % 400
    try:
        proc = subprocess.run(["setpriv", "--bounding-set", "-sys_admin", "--", sys.executable, "-c", NO_MOUNT_SCRIPT,
                               root, slots, str(uid)], capture_output=True, text=True, timeout=hang_guard(120))
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        report = out["report"]
        assert out["fatal"] is None, out
        assert report["tmp_quota"].startswith("unavailable") and "read-only" in report["tmp_quota"], report
        assert {report[k] for k in ("uid_drop", "seccomp", "landlock", "rlimits")} == {"active"}, report
        verdicts = out["verdicts"]
        assert verdicts["correct"][0] == V.CORRECT, verdicts
        for name in ("writes_temp_dir", "makes_a_dir"):
            verdict, detail = verdicts[name]
            assert verdict == V.RUNTIME_ERROR and ("Permission denied" in detail or "Read-only" in detail), verdicts
        assert out["left_in_root"] == [], out
    finally:
        tree.remove_tree(root)
        tree.remove_tree(slots)


# ------------------------------------------------------------------------------------------------ 6. clean-up

DEEP_TREE = (
    "import os\nos.makedirs('a', exist_ok=True)\nd = os.open('a', os.O_RDONLY)\n"
    "for i in range({depth}):\n    os.mkdir('x', dir_fd=d)\n    n = os.open('x', os.O_RDONLY, dir_fd=d)\n"
    "    os.close(d)\n    d = n\n"
    "    if i % 100 == 0:\n        os.symlink('/', f'root{{i}}', dir_fd=d)\n        os.symlink('.', 'loop', dir_fd=d)\n"
    "        f = os.open('locked', os.O_CREAT | os.O_WRONLY, 0, dir_fd=d)\n        os.close(f)\n"
    "os.close(d)\n"
    "for path, mode in (('a/x/x', 0), ('a/x', 0o500), ('a', 0o100)):\n    os.chmod(path, mode)\n"
    "os.mkdir('wide')\nfor i in range(2000):\n    open(f'wide/{{i}}', 'w').close()\n"
    "os.chmod('wide', 0)\nprint({answer})\n")


@pytest.mark.parametrize("answer,verdict", [(3, V.CORRECT), (4, V.WRONG_ANSWER)], ids=["correct", "wrong"])
def test_a_deep_wide_unreadable_tree_does_not_break_clean_up(hostile, answer, verdict):
    obs = hostile(DEEP_TREE.format(depth=1500, answer=answer), stdin_gt("3\n"))
    assert obs.verdict == verdict, obs


def _deep(root: str, depth: int) -> None:
    d = os.open(root, os.O_RDONLY)
    for i in range(depth):
        os.mkdir("d", dir_fd=d)
        n = os.open("d", os.O_RDONLY, dir_fd=d)
        os.close(d)
        d = n
        if i % 500 == 0:
            os.symlink("/etc", "etc", dir_fd=d)
    os.close(d)


def test_remove_tree_survives_any_tree(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("precious")
    top = tmp_path / "t"
    top.mkdir()
    _deep(str(top), 5000)  # shutil.rmtree raises RecursionError far earlier
    wide = top / "wide"
    wide.mkdir()
    for i in range(20_000):
        (wide / str(i)).touch()
    for mode in (0, 0o100, 0o400, 0o500, 0o600):
        d = top / f"mode{mode:o}"
        d.mkdir()
        (d / "f").write_text("x")
        (d / "sub").mkdir()
        os.chmod(d / "f", 0)
        os.chmod(d, mode)
    os.symlink(outside, top / "to_outside")
    os.symlink(outside / "keep", top / "to_file")
    os.symlink("loop", top / "loop")
    os.mkdir(os.path.join(os.fsencode(top), b"bad-\xff\xfe-name"))
    t0 = time.monotonic()
    assert tree.remove_tree(str(top)) is None
    assert not top.exists() and (outside / "keep").read_text() == "precious", "a symlink was followed"
    assert time.monotonic() - t0 < 60


def test_remove_tree_reports_what_it_cannot_remove_and_never_raises(tmp_path):
    top = tmp_path / "t"
    (top / "sub").mkdir(parents=True)
    stuck = top / "sub" / "immutable"
    stuck.write_text("x")
    subprocess.run(["chattr", "+i", str(stuck)], check=True)
    try:
        why = tree.remove_tree(str(top))
        assert why and "could not be emptied" in why, why
        assert stuck.exists()
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert tree.remove_tree(str(top)) is None and not top.exists()
    assert tree.remove_tree(str(tmp_path / "never-existed")) is None


def test_start_up_survives_other_engines_leftovers(sandbox_dirs, engine_factory):
    """Base dirs of dead workers (not flocked) in the shared temp root: a deep tree is removed, one that cannot be
    removed stays, and neither stops a new engine from starting and judging."""
    root = sandbox_dirs["tmp_root"]
    deep = os.path.join(root, "microcoder-sbx-lk-deadworker1")
    os.mkdir(deep)
    _deep(deep, 3000)
    os.chmod(deep, 0)
    stuck = os.path.join(root, "microcoder-sbx-lk-deadworker2")
    os.makedirs(os.path.join(stuck, "job"))
    with open(os.path.join(stuck, "job", "f"), "w") as f:
        f.write("x")
    subprocess.run(["chattr", "+i", os.path.join(stuck, "job", "f")], check=True)
    try:
        eng = engine_factory()  # its workers start now, with the leftovers in place
        res = evaluate_response("```python\nprint(int(input()) * 2)\n```", stdin_gt(["4\n"], ["2\n"]), engine=eng)
        assert res.verdict == V.CORRECT, res
        assert not os.path.exists(deep)
    finally:
        subprocess.run(["chattr", "-i", os.path.join(stuck, "job", "f")], check=True)
        tree.remove_tree(stuck)


def test_a_job_dir_that_cannot_be_removed_stops_nothing(engine_factory, caplog):
    """Without the quota tmpfs (``tmp_quota_mb=0``) the workers' dirs are on the host: make the next job's dir
    impossible to remove. That job is still judged right, a warning is logged, and later jobs run."""
    root = tempfile.mkdtemp(prefix="mc-test-noquota-")  # its own temp root: the stuck dir is no other test's leftover
    os.chmod(root, 0o711)
    eng = engine_factory(tmp_quota_mb=0, workers=1, tmp_root=root)
    immutable = []
    try:
        assert eng.warmup().get("tmp_quota", "").startswith("unavailable"), "expected the read-only temp dir mode"
        base = next(w.hello["base"] for w in eng._all)
        deadline = time.monotonic() + 10
        while not (nxt := [os.path.join(base, n) for n in os.listdir(base) if n.startswith("next-")]):
            assert time.monotonic() < deadline, "no child dir prepared ahead"
            time.sleep(0.05)
        for d in nxt:
            f = os.path.join(d, ".stuck")
            open(f, "w").close()
            subprocess.run(["chattr", "+i", f], check=True)
            immutable.append(f)
        gt = stdin_gt(["4\n"], ["2\n"])
        with caplog.at_level("WARNING", logger="microcoder_ext.reward"):
            first = evaluate_response("```python\nprint(int(input()) * 2)\n```", gt, engine=eng)
        assert first.verdict == V.CORRECT, first
        assert any("could not remove" in r.getMessage() for r in caplog.records), caplog.text
        for _ in range(3):
            again = evaluate_response("```python\nprint(int(input()) * 2)\n```", gt, engine=eng)
            assert again.verdict == V.CORRECT, again
    finally:
        for f in immutable:
            subprocess.run(["chattr", "-i", f], check=False)
            tree.remove_tree(os.path.dirname(f))


# ------------------------------------------------------------------------------------------------ 8. program verdicts

PROGRAM_FAULTS = {
    "close_result_pipe_and_exit": ("import os\nos.close(3)\nprint(1)\nraise SystemExit(3)\n", V.RUNTIME_ERROR),
    "close_every_fd_then_print": ("import os\nos.closerange(0, 1024)\nprint(1)\n", V.RUNTIME_ERROR),
    "sigkill_itself": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", V.RUNTIME_ERROR),
    "sigstop_itself": ("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint(1)\n", V.TIMEOUT),
    "abort": ("import os\nos.abort()\n", V.RUNTIME_ERROR),
    "garbage_on_the_result_pipe": ("import os\nos.write(3, os.urandom(1 << 16) + b'\\n' * 50)\nprint(1)\n",
                                   V.WRONG_ANSWER),
    "forged_ready_and_setup_failed": (
        "import os\nfor s in ('ready', 'setup_failed'):\n"
        "    os.write(3, (os.urandom(16).hex() + ' {\"s\": \"' + s + '\", \"e\": \"boom\"}\\n').encode())\n"
        "print(1)\n", V.WRONG_ANSWER),
    "exhaust_descriptors": ("import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', 0))\n"
                            "except OSError:\n    pass\nraise SystemExit(1)\n", V.RUNTIME_ERROR),
    "fill_quota_then_crash": ("import os\ntry:\n    with open('f', 'wb') as f:\n        while True:\n"
                              "            f.write(b'x' * (1 << 20))\nexcept OSError:\n    pass\n"
                              "for i in range(100000):\n    try:\n        os.mkdir(f'd{i}')\n    except OSError:\n"
                              "        break\nraise ValueError('full')\n", V.RUNTIME_ERROR),
    "unreadable_tree_then_wrong": (DEEP_TREE.format(depth=1200, answer=5), V.WRONG_ANSWER),
    "chmod_its_temp_dir_away": ("import os\nos.chmod('.', 0)\nprint(1)\n", V.WRONG_ANSWER),
    "memory_then_crash": ("x = bytearray(1 << 40)\n", V.MEMORY_LIMIT),
    "thread_spins_after_main": ("import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\n"
                                "print(1)\n", V.TIMEOUT),
    "output_over_the_cap": ("import sys\nsys.stdout.write('1' * (40 << 20))\n", V.WRONG_ANSWER),
}


@pytest.mark.parametrize("name", sorted(PROGRAM_FAULTS))
def test_what_a_program_does_is_a_program_verdict(hostile, name):
    code, verdict = PROGRAM_FAULTS[name]
    obs = hostile(code, stdin_gt("2\n"), timeout=1.0)
    assert (obs.score, obs.verdict) == (0.0, verdict), obs


def test_call_mode_program_faults_are_program_verdicts(hostile):
    for code, verdict in (
        ("import os\ndef f(x):\n    os.close(3)\n    return 1\n", V.RUNTIME_ERROR),
        ("import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n", V.RUNTIME_ERROR),
        ("import os\ndef f(x):\n    os.write(3, b'garbage\\n' * 1000)\n    return 2\n", V.WRONG_ANSWER),
    ):
        obs = hostile(code, call_gt(1), timeout=1.0)
        assert (obs.score, obs.verdict) == (0.0, verdict), obs
