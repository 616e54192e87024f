"""Node-wide concurrency: several processes (like verl's RewardLoopWorkers) share ``node_slots`` sandbox
slots. Measured by counting, not by timing: every slot holder increments a shared counter (under a lock)
while it holds its slot, and a sampler counts the live sandboxed children (by uid) on the machine."""

import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from microcoder_ext.reward import Engine, EngineConfig, evaluate_response
from microcoder_ext.reward.concurrency import (LocalSlots, NodeSlots, SlotsUnavailable, _cgroup_cpu_limit,
                                               available_cores)
from host_load import hang_guard

# its own uid range: above the default engine's (60600 + slots: the real launches that make test runs beside this
# suite), below conftest's (60700..)
UID_BASE = 60610 + 3 * (os.getpid() % 13)

# one "RewardLoopWorker": an engine, THREADS threads, each scoring PER_THREAD sleeping programs; every slot
# holder counts itself in the shared counter file while it holds the slot
PROCESS = r"""
import fcntl, json, os, sys, threading
from microcoder_ext.reward import Engine, EngineConfig, evaluate_response
cfg = json.loads(sys.argv[1])
eng = Engine(EngineConfig(**cfg["engine"]))
slots = eng.slots()
acquire, release = slots.acquire, slots.release

def bump(delta):
    fd = os.open(cfg["counter"], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cur, peak = map(int, os.pread(fd, 64, 0).split())
        cur += delta
        data = b"%d %d" % (cur, max(peak, cur))
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)

def counted_acquire(timeout=None):
    k = acquire(timeout)
    if k is not None:
        bump(+1)
    return k

def counted_release(k):
    bump(-1)
    release(k)

slots.acquire, slots.release = counted_acquire, counted_release
gt = json.dumps({"inputs": ["ok\n"], "outputs": ["ok\n"]})
code = "```python\nimport time\ntime.sleep(%s)\nprint(input())\n```" % cfg["sleep"]
verdicts = []

def work():
    for _ in range(cfg["per_thread"]):
        verdicts.append(evaluate_response(code, gt, engine=eng).verdict)

threads = [threading.Thread(target=work) for _ in range(cfg["threads"])]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"verdicts": verdicts, "workers": eng._started, "node_wide": slots.node_wide}))
eng.close()
"""


def run_node(tmp_path, *, processes, threads, per_thread, node_slots, slots_dir, live_uids, sleep=0.3):
    counter = tmp_path / "counter"
    counter.write_text("0 0")
    sbx_tmp = tempfile.mkdtemp(prefix="mc-test-conc-")
    os.chmod(sbx_tmp, 0o711)
    engine = dict(workers=0, timeout=2.0, memory_mb=512, uid=UID_BASE, node_slots=node_slots,
                  slots_dir=slots_dir, tmp_root=sbx_tmp)
    cfg = json.dumps({"engine": engine, "counter": str(counter), "threads": threads, "per_thread": per_thread,
                      "sleep": sleep})
    samples, stop = [], threading.Event()
    hi = UID_BASE + max(node_slots, 2) * 4  # generous: anything of ours, even a wrongly assigned uid

    def sample():
        while not stop.is_set():
            samples.append(live_uids(UID_BASE, hi))
            time.sleep(0.003)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        procs = [subprocess.Popen([sys.executable, "-c", PROCESS, cfg], stdout=subprocess.PIPE, text=True)
                 for _ in range(processes)]
        outs = [p.communicate(timeout=hang_guard(120))[0] for p in procs]
    finally:
        stop.set()
        sampler.join()
        subprocess.run(["rm", "-rf", sbx_tmp])
    results = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    current, peak = map(int, counter.read_text().split())
    return results, current, peak, samples


def test_processes_share_the_node_slots(tmp_path, live_sandbox_uids):
    slots_dir = tempfile.mkdtemp(prefix="mc-test-slots-")
    try:
        results, current, peak, samples = run_node(tmp_path, processes=3, threads=3, per_thread=2, node_slots=2,
                                                   slots_dir=slots_dir, live_uids=live_sandbox_uids)
    finally:
        subprocess.run(["rm", "-rf", slots_dir])
    assert all(r["node_wide"] for r in results)
    assert all(v == "correct" for r in results for v in r["verdicts"]), results
    assert sum(len(r["verdicts"]) for r in results) == 18
    assert current == 0
    # 9 threads in 3 processes wanted a sandbox at once; never more than 2 held a slot
    assert peak == 2, peak
    jobs = [[u for u in s if u < UID_BASE + 2] for s in samples]  # UID_BASE + 2: a worker's start-up probe
    live = max(len(s) for s in jobs)
    assert 1 <= live <= 2, live
    # the slot picks the uid: two programs running at the same time never share one
    assert all(len(s) == len(set(s)) for s in jobs)
    assert {u for s in samples for u in s} <= {UID_BASE, UID_BASE + 1, UID_BASE + 2}
    # lazy pools: a process starts workers only as it needs them (at most its slot share)
    assert all(1 <= r["workers"] <= 2 for r in results), results


def test_without_node_slots_the_same_load_oversubscribes(tmp_path, live_sandbox_uids):
    """Control for the test above: with per-process limits only, the counter does see more holders."""
    results, current, peak, _samples = run_node(tmp_path, processes=3, threads=2, per_thread=1, node_slots=0,
                                                slots_dir=None, live_uids=live_sandbox_uids, sleep=0.8)
    assert not any(r["node_wide"] for r in results)
    assert current == 0
    assert peak > 2, peak


def test_slots_exclusive_across_open_files_and_freed_when_holder_dies(tmp_path):
    d = str(tmp_path / "slots")
    a, b = NodeSlots(2, d), NodeSlots(2, d)  # two open files per slot: behaves like two processes
    ka, kb = a.acquire(1), b.acquire(1)
    assert {ka, kb} == {0, 1}
    assert a.acquire(0.05) is None and b.acquire(0.05) is None
    a.release(ka)
    assert b.acquire(1) == ka
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom microcoder_ext.reward.concurrency import NodeSlots\n"
        "s = NodeSlots(3, sys.argv[1])\nprint(s.acquire(5), flush=True)\ntime.sleep(60)\n"), d],
        stdout=subprocess.PIPE, text=True)
    try:
        k = int(holder.stdout.readline())
        assert k == 2
        c = NodeSlots(3, d)
        b.release(0)
        b.release(1)
        assert {c.acquire(1), c.acquire(1)} == {0, 1}
        assert c.acquire(0.05) is None  # slot 2 is held by the other process
        holder.kill()
        holder.wait()
        assert c.acquire(2) == 2  # freed by the kernel when its holder died
    finally:
        holder.kill()
        holder.wait()


def test_waiters_in_one_process_get_slots_released_by_another_thread(tmp_path):
    s = NodeSlots(1, str(tmp_path / "slots"))
    k = s.acquire(1)
    got = []
    waiters = [threading.Thread(target=lambda: got.append(s.acquire(120))) for _ in range(3)]  # far above a load
    for t in waiters:
        t.start()
    for _ in range(3):  # each release goes to exactly one waiting thread
        s.release(k)
        deadline = time.monotonic() + 60  # polled: a bound far above a loaded machine's
        while s.held() == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert s.held() == 1
        k = 0
    for t in waiters:
        t.join(120)
    assert got == [0, 0, 0]


@pytest.mark.parametrize("attack", ["symlink", "foreign_owner", "world_writable", "file"])
def test_unsafe_slot_directory_is_refused(tmp_path, attack):
    target = tmp_path / "real"
    target.mkdir(mode=0o700)
    path = tmp_path / "slots"
    if attack == "symlink":
        path.symlink_to(target)
    elif attack == "foreign_owner":
        path.mkdir(mode=0o700)
        os.chown(path, 60599, 60599)
    elif attack == "world_writable":
        path.mkdir()
        os.chmod(path, 0o777)
    else:
        path.write_text("")
    with pytest.raises(SlotsUnavailable):
        NodeSlots(2, str(path))
    eng = Engine(EngineConfig(node_slots=2, slots_dir=str(path)))
    assert isinstance(eng.slots(), LocalSlots)  # falls back to a per-process limit (and logs it)
    eng.close()


def test_slot_directory_and_files_are_private(tmp_path):
    d = tmp_path / "fresh"
    s = NodeSlots(2, str(d))
    s.release(s.acquire(1))
    assert stat.S_IMODE(os.stat(d).st_mode) & 0o077 == 0
    for f in os.listdir(d):
        st = os.lstat(d / f)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077 == 0


def test_engine_is_lazy_and_starts_workers_on_demand(tmp_path):
    out = subprocess.run([sys.executable, "-c", (
        "import os\nimport microcoder_ext.reward as r\nfrom microcoder_ext.reward import compute_score\n"
        "def ppid(p):\n    try:\n        return open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()[1]\n"
        "    except OSError:\n        return None\n"
        "print(len([p for p in os.listdir('/proc') if p.isdigit() and ppid(p) == str(os.getpid())]))\n")],
        capture_output=True, text=True, timeout=hang_guard(60))
    assert out.stdout.strip() == "0", out  # importing the reward function starts nothing
    sbx_tmp = tempfile.mkdtemp(prefix="mc-test-conc-")
    os.chmod(sbx_tmp, 0o711)
    eng = Engine(EngineConfig(timeout=2.0, uid=UID_BASE, node_slots=2, slots_dir=str(tmp_path / "s"),
                              tmp_root=sbx_tmp))
    try:
        assert eng._started == 0 and not eng._all
        r = evaluate_response("```python\nprint(input())\n```", json.dumps({"inputs": ["a\n"], "outputs": ["a\n"]}),
                              engine=eng)
        assert r.verdict == "correct", r.detail
        assert eng._started == 1  # one call, one worker (not one per core)
    finally:
        eng.close()
        subprocess.run(["rm", "-rf", sbx_tmp])


def test_available_cores_respects_affinity_and_env(monkeypatch):
    n = available_cores()
    assert 1 <= n <= len(os.sched_getaffinity(0))
    q = _cgroup_cpu_limit()
    assert q is None or q > 0
    monkeypatch.setenv("MICROCODER_REWARD_NODE_SLOTS", "3")
    cfg = EngineConfig.from_env()
    assert cfg.slot_count() == 3
    assert Engine(cfg).size == 3
    monkeypatch.setenv("MICROCODER_REWARD_NODE_SLOTS", "0")
    eng = Engine(EngineConfig.from_env())
    assert isinstance(eng.slots(), LocalSlots) and eng.slots().count == n


def test_local_slots_basics():
    s = LocalSlots(2)
    a, b = s.acquire(1), s.acquire(1)
    assert {a, b} == {0, 1} and s.acquire(0.01) is None
    s.release(a)
    assert s.acquire(0.01) == a
    s.close()
    assert s.acquire(0.01) is None


def test_idle_workers_retire_and_close_wakes_slot_waiters(tmp_path):
    sbx_tmp = tempfile.mkdtemp(prefix="mc-test-conc-")
    os.chmod(sbx_tmp, 0o711)
    eng = Engine(EngineConfig(timeout=2.0, uid=UID_BASE, node_slots=1, workers=3, slots_dir=str(tmp_path / "s"),
                              tmp_root=sbx_tmp, worker_idle_timeout=0.0))
    gt = json.dumps({"inputs": ["a\n"], "outputs": ["a\n"]})
    try:
        eng.warmup(3)
        assert eng._started == 3
        r = evaluate_response("```python\nprint(input())\n```", gt, engine=eng)
        assert r.verdict == "correct", r.detail
        assert eng._started == 1 and len(eng._all) == 1  # the two idle ones retired, the last used stays
        k = eng.slots().acquire(1)  # hold the only slot: the next call waits for it ...
        out = []
        t = threading.Thread(target=lambda: out.append(evaluate_response("```python\nprint(input())\n```", gt,
                                                                         engine=eng)))
        t.start()
        time.sleep(0.2)
        eng.close()  # ... until the engine closes
        t.join(120)  # far above a loaded machine's
        assert not t.is_alive() and out[0].verdict == "sandbox_error", out
        assert k == 0
    finally:
        eng.close()
        subprocess.run(["rm", "-rf", sbx_tmp])
