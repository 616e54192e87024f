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
    assert out.stdout.split() == ["6", "2", "7", "1", "24"], out.stdout + out.stderr
    # the script's own default, on this machine
    out = bash('echo "$TEST_JOBS $CORES $TOTAL_MB"')
    jobs, cores, total_mb = map(int, out.stdout.split())
    assert jobs == min(3 * cores, total_mb // 3072) or jobs == 1


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


FAKE_PYTHON = r"""#!/bin/bash
# a stand-in interpreter for run_all.sh's scheduling only: it builds "venvs", installs nothing and runs no test;
# every venv build and every lane appends "<start|end> <epoch ns> <what>" to $FAKE_EVENTS. A build ends with the
# re-install of the checkout (a venv of its own) or with the check of its pins (an overlay: compat/venv.sh)
here=$(dirname "$(dirname "$0")")
venv=$(basename "$here")
now() { date +%s%N; }
built() { if [ -f "$here/building" ]; then rm "$here/building"; echo "end $(now) build:$venv" >>"$FAKE_EVENTS"; fi; }
case "$1 $2" in
  "-m venv") dir=${!#}; echo "start $(now) build:$(basename "$dir")" >>"$FAKE_EVENTS"
             mkdir -p "$dir/bin" "$dir/site"; cp "$0" "$dir/bin/python"; touch "$dir/building" ;;
  "-m pip")
    case "$*" in
      *--no-deps*-e*) built ;;
      *install\ --help*) ;;
      *) sleep "$FAKE_BUILD_S" ;;
    esac ;;
  "-c "*sysconfig*) echo "$here/site" ;;  # an overlay's site-packages and its base's
  "- "*.txt) exec __PYTHON__ "$@" ;;      # compat/venv.sh's comparison of two constraint files
  "- "*) built ;;                          # an overlay's check of its pins, the check of the base's editable install
  "-m pytest") echo "start $(now) lane:$venv" >>"$FAKE_EVENTS"; sleep "$FAKE_LANE_S"
               echo "end $(now) lane:$venv" >>"$FAKE_EVENTS"; echo "1 passed" ;;
  *) exec __PYTHON__ "$@" ;;  # the real interpreter of this test: run_all.sh's own -c scripts
esac
"""


def test_venv_builds_and_lanes_share_the_slots_and_the_main_suites_go_first(tmp_path):
    """run_all.sh itself, its interpreter a stand-in that only sleeps (FAKE_PYTHON; OpenRLHF's venv build runs
    DeepSpeed, so its suite is left out): on a fresh cache, with 3 slots,
    at no moment do more than 3 venv builds and lanes run; every main lane starts before any release lane; every
    lane runs once; a release venv is built only while a slot stays free for each main venv not ready yet; an
    overlay venv (TRL 1.15.0 over TRL's) is built only once its base is."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.replace("__PYTHON__", sys.executable))
    fake.chmod(0o755)
    events = tmp_path / "events"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHON": str(fake), "MICROCODER_CACHE": str(tmp_path / "c"),
           "SUITES": "verl trl verl-0.9.0 trl-1.15.0", "TEST_JOBS": "3", "FAKE_EVENTS": str(events),
           "FAKE_BUILD_S": "1", "FAKE_LANE_S": "1", "LOAD_SAMPLE_S": "1", "TEST_LOGS": str(tmp_path / "logs"),
           "MICROCODER_TEST_MEMORY_DIR": str(tmp_path), "MICROCODER_TEST_MEMORY_GB": "16"}
    proc = subprocess.run(["bash", str(RUN_ALL)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows = [line.split() for line in events.read_text().splitlines()]  # (start | end, ns, build: | lane: venv)
    running = peak = 0
    for kind, _, _ in sorted(rows, key=lambda r: (int(r[1]), r[0] == "start")):  # an end before a start at a tie
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak <= 3, rows
    suite = {w: w.split(":")[1][len("venv-"):].rsplit("-", 1)[0] for _, _, w in rows}  # venv-NAME-KEY -> NAME
    lanes = [(int(t), suite[w]) for k, t, w in rows if k == "start" and w.startswith("lane:")]
    main = sorted(t for t, name in lanes if not any(c.isdigit() for c in name))
    release = [t for t, name in lanes if any(c.isdigit() for c in name)]
    assert len(main) == 6 and len(release) == 2, lanes  # verl: 5 lanes (the host lane alone, at the end), TRL 1
    assert main[-2] < min(release), lanes  # every main lane but the solo one starts before any release lane
    builds = sorted(suite[w] for k, _, w in rows if k == "start" and w.startswith("build:"))
    assert builds == ["trl", "trl-1.15.0", "verl", "verl-0.9.0"], builds  # each venv built once (a fresh cache)
    at = {(k, suite[w]): int(t) for k, t, w in rows if w.startswith("build:")}
    assert at["end", "trl"] <= at["start", "trl-1.15.0"] < at["end", "trl-1.15.0"], rows
    assert "peak load" in proc.stderr and "verl-host" in proc.stderr.split("lanes:")[-1]
