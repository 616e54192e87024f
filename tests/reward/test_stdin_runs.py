"""Each test of a job runs in a fresh process (forked by the job's launcher, which never runs the program): a fresh
``__main__``, stdio, builtins, ``sys.modules``, threads and exit handlers, an empty temp dir, its own limits. The
counter ``sys.modules['_mc_runs']`` below would survive from one run to the next only inside one process: every
run must see itself as the first."""

import json

from microcoder_ext.core import verdicts as V

COUNT = "import sys\nruns = sys.modules.setdefault('_mc_runs', [])\nruns.append(1)\n"
N = 4
FRESH = {"inputs": ["x\n"] * N, "outputs": ["1\n"] * N}  # every run in a fresh process
SHARED = {"inputs": ["x\n"] * N, "outputs": [f"{k}\n" for k in range(1, N + 1)]}  # k-th run of one process


def test_no_run_sees_an_earlier_one(run):
    assert run(COUNT + "print(len(runs))", FRESH).verdict == V.CORRECT
    r = run(COUNT + "print(len(runs))", SHARED, stop_on_first_failure=False)
    assert r.verdict == V.WRONG_ANSWER and r.num_passed == 1, r.detail  # only the first run is the first


def test_every_run_gets_a_fresh_namespace_stdin_and_builtins(run):
    code = COUNT + (
        "assert 'seen' not in globals()\n"
        "seen = True\n"
        "import builtins\n"
        "assert not hasattr(builtins, 'planted') and builtins.input is builtins.__dict__['input']\n"
        "builtins.planted = 1\n"
        "builtins.print = None\n"  # a later run must get the real print back
        "import sys\n"
        "data = open(0).read()\n"  # closes fd 0 when collected
        "assert data == 'x\\n', repr(data)\n"
        "sys.stdout.write(str(len(runs)) + '\\n')\n"
        "sys.stdout.flush()\n"
        "import os; os.close(1); os.close(2)\n")
    r = run(code, FRESH)
    assert r.verdict == V.CORRECT, r.detail


def test_exit_handlers_and_threads_run_as_at_interpreter_exit(run):
    code = COUNT + (
        "import atexit, sys, threading\n"
        "out = []\n"
        "atexit.register(lambda: sys.stdout.write(' '.join(out) + '\\n'))\n"
        "threading.Thread(target=lambda: out.append(str(len(runs)))).start()\n")
    r = run(code, FRESH)
    assert r.verdict == V.CORRECT, r.detail


def test_exit_codes_per_run(run):
    assert run("print(input() and 1); exit()", FRESH).verdict == V.CORRECT
    assert run("import sys; print(1); sys.exit(0)", FRESH).verdict == V.CORRECT
    gt = {"inputs": ["1\n", "2\n", "3\n", "4\n"], "outputs": ["1\n", "2\n", "3\n", "4\n"]}
    r = run("import sys; n = input(); print(n); sys.exit(n == '3')", gt, stop_on_first_failure=False)
    assert r.verdict == V.RUNTIME_ERROR and r.num_passed == 3, r.detail
    r = run("import os, sys; n = input(); print(n); sys.stdout.flush(); os._exit(0)", gt)
    assert r.verdict == V.CORRECT, r.detail  # ended by os._exit(0) after writing its output: its output counts


def test_what_a_run_leaves_behind_never_reaches_the_next(run):
    # a daemon thread still running, a resource limit lowered, a stdio descriptor replaced, os._exit(0)
    for leave in ("import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()",
                  "import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))",
                  "import os\nos.dup2(os.open('/dev/null', os.O_RDONLY), 7)",
                  "import os, sys\nsys.stdout.flush()\nos._exit(0)"):
        code = COUNT + "print(len(runs))\n" + leave
        r = run(code, FRESH, stop_on_first_failure=False)
        assert r.verdict == V.CORRECT and r.num_passed == N, (leave, r.detail)


def test_failures_in_the_middle_are_judged_per_test(run):
    gt = {"inputs": ["1\n", "2\n", "3\n", "4\n"], "outputs": ["1\n", "2\n", "3\n", "4\n"]}
    r = run("n = input()\nprint(n if n != '2' else 'no')", gt, stop_on_first_failure=False)
    assert r.verdict == V.WRONG_ANSWER and r.num_passed == N - 1, r.detail
    r = run("n = input()\nif n == '2':\n    while True: pass\nprint(n)", gt, stop_on_first_failure=False)
    assert r.verdict == V.TIMEOUT and r.num_passed == N - 1, r.detail
    r = run("n = input()\nif n == '3':\n    x = [0] * (1 << 62)\nprint(n)", gt, stop_on_first_failure=False)
    assert r.verdict == V.MEMORY_LIMIT and r.num_passed == N - 1, r.detail


def test_output_cap_is_per_test(run):
    gt = {"inputs": ["1\n", "2\n"], "outputs": ["a\n", "b" * 5000 + "\n"], }
    code = "n = int(input())\nprint('a' if n == 1 else 'b' * 5000)"
    assert run(code, gt).verdict == V.CORRECT
    code = "n = int(input())\nprint('a' * (1 << 26) if n == 1 else 'b' * 5000)"
    # 5 s of CPU (11 s wall) instead of the session's 1 s: on a loaded 2-core machine, writing 64 MiB once took
    # longer than the 3 s wall-clock limit, which is not what this test is about
    r = run(code, gt, stop_on_first_failure=False, timeout=5.0)
    assert r.verdict == V.WRONG_ANSWER and r.num_passed == 1, r.detail
    assert "output" in r.detail, r.detail


def test_output_over_the_cap_in_one_test_does_not_leak_into_the_next(run):
    # the run over the 16 MiB cap is cut off with part of its output still in its stdout buffer: that buffer dies
    # with its process (in one shared process it was flushed into the next test's output)
    gt = {"inputs": ["1\n", "2\n"], "outputs": ["a\n", "b\n"]}
    code = "n = int(input())\nprint('a' * ((1 << 24) + 4000) if n == 1 else 'b')"
    r = run(code, gt, stop_on_first_failure=False, timeout=5.0)
    assert r.num_passed == 1 and "test 1/2" in r.detail, r.detail


def test_big_inputs_reach_every_run(run):
    big = " ".join(str(k) for k in range(200000)) + "\n"
    gt = {"inputs": [big, "1 2\n", big], "outputs": [f"{sum(range(200000))}\n", "3\n", f"{sum(range(200000))}\n"]}
    r = run("print(sum(map(int, input().split())))", json.dumps(gt))
    assert r.verdict == V.CORRECT, r.detail
