"""tests/run_all.sh's own decisions, through its functions (the script sourced: nothing run) and real pytest runs: a
lane that collected no tests fails with a clear message, a lane whose tests the command line deselected is only
reported; how many lanes and venv builds run at once on a machine; the peak load a lane's report names; and the
failure report of tests/conftest.py (the host's load and memory, what a timed-out child wrote)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_ALL = ROOT / "tests" / "run_all.sh"


def bash(script: str) -> subprocess.CompletedProcess:
    """``script`` in bash with run_all.sh sourced (its functions and settings; no venv, no lane started)."""
    return subprocess.run(["bash", "-c", f'. "{RUN_ALL}"\n{script}'], cwd=ROOT, capture_output=True, text=True)


def pytest_in(directory: Path, *args: str) -> tuple[int, Path]:
    """A real pytest run in ``directory``; returns its exit status and the path of its log."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(directory),
                           str(directory), *args], cwd=directory, capture_output=True, text=True)
    log = directory.parent / f"{directory.name}.log"
    log.write_text(proc.stdout + proc.stderr)
    return proc.returncode, log


def finish(rc: int, log: Path) -> subprocess.CompletedProcess:
    """run_all.sh's ``finish`` on a lane named ``trl`` that ended with ``rc`` and wrote ``log``; prints the run's
    status and whether a lane ran a test."""
    lane_log = log.parent / "logs" / "trl.log"
    lane_log.parent.mkdir(exist_ok=True)
    lane_log.write_text(log.read_text())
    return bash(f'LOGS="{lane_log.parent}"; LOAD_SAMPLES="$LOGS/load.samples"; echo "0 9.0" >"$LOAD_SAMPLES"\n'
                'declare -A LANE_OF_PID=([4242]=trl) LANE_T0=([trl]=0); SUMMARY=(); status=0; collected=0\n'
                f'finish 4242 {rc}\necho "status=$status collected=$collected"\nprintf "%s\\n" "${{SUMMARY[@]}}"')


def test_a_lane_that_collected_no_tests_fails_with_a_clear_message(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "test_nothing.py").write_text("X = 1  # a module without a test\n")
    rc, log = pytest_in(tmp_path / "empty")
    assert rc == 5, log.read_text()
    assert bash(f'lane_verdict 5 "{log}"').stdout.strip() == "empty"
    out = finish(rc, log)
    assert "status=1 collected=0" in out.stdout, out.stdout + out.stderr
    assert ("run_all: lane trl FAILED: it collected no tests (pytest exit 5; its files: tests/core tests/trl"
            in out.stderr)
    assert "a lane that runs nothing fails" in out.stderr
    assert "trl              exit 5 (empty)" in out.stdout


def test_a_lane_whose_tests_the_command_line_deselected_is_reported_not_failed(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "test_one.py").write_text("def test_one():\n    pass\n")
    rc, log = pytest_in(tmp_path / "one", "-k", "no_such_test")
    assert rc == 5, log.read_text()
    out = finish(rc, log)
    assert "status=0 collected=0" in out.stdout, out.stdout + out.stderr  # the run fails only if no lane ran a test
    assert "deselected every test it collected" in out.stderr
    rc, log = pytest_in(tmp_path / "one", "-k", "no_such_test", "--collect-only", "-q")  # the docs' collect-only form
    assert rc == 5 and bash(f'lane_verdict 5 "{log}"').stdout.strip() == "deselected", log.read_text()


def test_a_lane_that_ran_or_failed(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    rc, log = pytest_in(tmp_path / "ok")
    assert "status=0 collected=1" in finish(rc, log).stdout
    rc, log = pytest_in(tmp_path / "bad")
    out = finish(rc, log)
    assert rc == 1 and "status=1" in out.stdout and "exit 1 (failed)" in out.stdout, out.stdout


def test_lanes_and_venv_builds_at_once_fit_the_cores_and_the_memory():
    out = bash("for m in '2 24000' '2 8000' '16 24000' '1 2000' '8 256000'; do default_jobs $m; done")
    assert out.stdout.split() == ["4", "2", "7", "1", "16"], out.stdout + out.stderr
    # the script's own default, on this machine
    out = bash('echo "$TEST_JOBS $CORES $TOTAL_MB"')
    jobs, cores, total_mb = map(int, out.stdout.split())
    assert jobs == min(2 * cores, total_mb // 3072) or jobs == 1


def test_every_main_lane_is_ordered_and_every_lane_belongs_to_a_suite():
    out = bash('for s in $SUITES; do lanes_of "$s"; done; echo "|$LANE_ORDER|$SOLO_LANES"')
    lanes, order, solo = out.stdout.replace("\n", " ").split("|")
    main = {lane for lane in lanes.split() if not any(c.isdigit() for c in lane)} - set(solo.split())
    assert main == set(order.split()), (main, order)


def test_the_peak_load_of_a_lane_is_taken_over_its_own_time(tmp_path):
    samples = tmp_path / "load.samples"
    samples.write_text("0 1.5\n5 12.0\n10 3.0\n15 4.5\n20 2.0\n")
    out = bash(f'peak_load "{samples}" 10 20; peak_load "{samples}" 0 20; load_note 4.5 2; echo; load_note 3.9 2')
    lines = out.stdout.splitlines()
    assert lines[:2] == ["4.5", "12.0"], out.stdout + out.stderr
    assert lines[2] == "peak load 4.5 on 2 cores (2.2 per core, overloaded)"
    assert lines[3] == "peak load 3.9 on 2 cores (1.9 per core)"


def test_a_failure_report_names_the_load_and_what_a_timed_out_child_wrote(tmp_path):
    """Through pytest: a failed test's report ends with the host's load and memory; a child that outlived its hang
    guard adds its command and its output."""
    for name in ("conftest.py", "host_load.py"):
        (tmp_path / name).write_text((ROOT / "tests" / name).read_text())
    (tmp_path / "test_fails.py").write_text(
        "import subprocess\n"
        "def test_assert():\n    assert 1 == 2\n"
        "def test_child():\n"
        "    guard = 1\n"
        "    while True:  # a guard that the child outlives after it wrote its line, however loaded the machine\n"
        "        try:\n"
        "            subprocess.run(['bash', '-c', 'echo child started; exec sleep 600'], capture_output=True,\n"
        "                           text=True, timeout=guard)\n"
        "        except subprocess.TimeoutExpired as e:\n"
        "            if b'child started' in (e.output or b'') or guard > 100:\n"
        "                raise\n"
        "            guard *= 2\n"
        "def test_passes():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_fails.py"],
                          cwd=tmp_path, capture_output=True, text=True)
    out = proc.stdout
    assert proc.returncode == 1 and "2 failed, 1 passed" in out, out[-3000:] + proc.stderr[-2000:]
    assert out.count("host at failure") == 2, out
    assert out.count(" per core") == 2 and "GB available" in out
    assert "a child outlived its hang guard of " in out and "child started" in out
