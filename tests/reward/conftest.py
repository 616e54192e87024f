"""Shared fixtures for the code-reward tests: one sandbox engine per session (short time limits).

The session engine is hermetic, so that other test runs on the same machine cannot disturb these checks
(nor be disturbed by them): its own node-slot directory, its own temp root and its own sandbox uid range
(``sandbox_pids`` counts processes of that range only, which is how a leftover sandboxed process is found
even after it was re-parented away from the engine).
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# support modules of this folder (hostile_host.py) are imported by their plain names
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from microcoder_ext.reward import Engine, EngineConfig, evaluate_response

#: sandbox uids of this session's engine: EngineConfig.uid + slot (slot < node_slots)
NODE_SLOTS = 2
UID_BASE = 60700 + 2 * (os.getpid() % 240)
SANDBOX_UID_MIN, SANDBOX_UID_MAX = UID_BASE, UID_BASE + NODE_SLOTS - 1


def private_dir(prefix: str, mode: int = 0o711) -> str:
    """A directory in /tmp (whose ancestors the sandbox uid can search, unlike pytest's 0700 tmp_path)."""
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, mode)
    return d


@pytest.fixture(scope="session")
def sandbox_dirs():
    dirs = {"tmp_root": private_dir("mc-test-sbx-"), "slots_dir": private_dir("mc-test-slots-", 0o700)}
    yield dirs
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)


def engine_config(sandbox_dirs, **kw) -> EngineConfig:
    base = dict(workers=2, timeout=1.0, memory_mb=512, uid=UID_BASE, node_slots=NODE_SLOTS, **sandbox_dirs)
    return EngineConfig(**{**base, **kw})


@pytest.fixture(scope="session")
def engine(sandbox_dirs):
    eng = Engine(engine_config(sandbox_dirs))
    report = eng.warmup()
    assert eng.fatal is None, eng.fatal
    assert report.get("seccomp") == "active", report
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def engine_factory(sandbox_dirs):
    """engine_factory(**config) -> a started hermetic Engine (closed at the end of the session)."""
    made = []

    def make(**kw):
        eng = Engine(engine_config(sandbox_dirs, **kw))
        eng.warmup()
        assert eng.fatal is None, eng.fatal
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close()


@pytest.fixture
def run(engine):
    """run(code, ground_truth, **opts) -> EvalResult; ``code`` is wrapped in a ```python fence."""

    def _run(code, gt, **opts):
        if not isinstance(gt, str):
            gt = json.dumps(gt)
        return evaluate_response(f"```python\n{code}\n```", gt, engine=engine, **opts)

    return _run


SUM_GT = {"inputs": ["1 2\n", "10 20\n", "5 5\n"], "outputs": ["3\n", "30\n", "10\n"]}
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.fixture
def sandbox_pids():
    return sandbox_processes


@pytest.fixture(scope="session")
def sandbox_uids():
    """(first, last) sandbox uid of this session's engines."""
    return SANDBOX_UID_MIN, SANDBOX_UID_MAX


def live_sandbox_processes(uid_min: int = SANDBOX_UID_MIN, uid_max: int = SANDBOX_UID_MAX):
    """(pid, uid) of live processes whose real uid is in ``[uid_min, uid_max]``.
    Zombies do not count: they are dead, only not yet reaped by whoever inherited them."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/status") as f:
                    zombie = False
                    for line in f:
                        if line.startswith("State:"):
                            zombie = line.split()[1] in ("Z", "X")
                        elif line.startswith("Uid:"):
                            uid = int(line.split()[1])
                            if uid_min <= uid <= uid_max and not zombie:
                                out.append((int(pid), uid))
                            break
            except (OSError, ValueError):
                pass
    return out


def sandbox_processes(uid_min: int = SANDBOX_UID_MIN, uid_max: int = SANDBOX_UID_MAX):
    """pids of live processes in this session's sandbox uid range (leftover children)."""
    return [pid for pid, _ in live_sandbox_processes(uid_min, uid_max)]


PF_EXITING = 0x4  #: /proc/<pid>/stat flags: the process is being torn down (killed or exiting; runs no more code)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists, is not a zombie and is not exiting."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X") and not int(fields[6]) & PF_EXITING


@pytest.fixture(scope="session")
def live_sandbox_uids():
    """``f(uid_min, uid_max) -> [uid, ...]``: uids of the sandboxed processes in that range that are running at the
    END of the scan. A scan of /proc is not a snapshot: a program that ended while the scan went on (its slot
    released, its uid given to the next program, read later in the same scan) would count twice; so every process
    found is checked again after the scan, and one that is gone, a zombie or exiting does not count. One uid per
    sandboxed child: the processes of one sample (its launcher and test processes) share its session, and count once."""
    def uids(lo: int, hi: int) -> list[int]:
        found = live_sandbox_processes(lo, hi)
        by_session = {}
        for pid, uid in found:
            sid = _session(pid)
            if sid is not None and _running(pid):
                by_session[sid] = uid
        return list(by_session.values())
    return uids


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(scope="session")
def default_engine(sandbox_dirs):
    """An engine with the DEFAULT configuration (time, memory, output limits, workers), hermetic only in its temp
    root, node-slot directory and sandbox uid range: what the hostile suites attack."""
    from microcoder_ext.reward import EngineConfig as _Config

    base = _Config()
    eng = Engine(_Config(uid=UID_BASE, node_slots=NODE_SLOTS, workers=base.workers, **sandbox_dirs))
    eng.warmup()
    assert eng.fatal is None, eng.fatal
    yield eng
    eng.close()


#: what one hostile program may cost the host (issue 16): no thread of the host frozen for longer than this (the
#: backtracking regex froze it for minutes), and RSS growth within 4x the default 16 MiB output cap
HOSTILE_STALL_LIMIT_MS = 500
HOSTILE_RSS_LIMIT_MB = 4 * 16


@pytest.fixture
def hostile(default_engine, sandbox_dirs, sandbox_uids):
    """hostile(code, ground_truth, engine=None, **options) -> ``hostile_host.Observation`` of one real call of the
    default-configuration engine (or ``engine``, one of this session's). Asserts what must hold for ANY program: a program verdict (never ``sandbox_error``),
    nothing left behind (files, processes, shared memory), no stall of the host's threads, bounded RSS growth; and,
    after the test, that the same engine still judges a correct and a wrong program right."""
    from hostile_host import assert_still_judges, observe

    def run(code, gt, engine=None, **options):
        obs = observe(engine or default_engine, code, gt, uid_range=sandbox_uids, tmp_root=sandbox_dirs["tmp_root"],
                      **options)
        print(obs)
        assert obs.verdict != "sandbox_error", obs
        assert not obs.leftovers, obs
        assert obs.max_stall_ms < HOSTILE_STALL_LIMIT_MS, obs
        assert obs.rss_growth_mb < HOSTILE_RSS_LIMIT_MB, obs
        return obs

    yield run
    assert_still_judges(default_engine)
