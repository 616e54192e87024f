"""verl's ``remote`` reward manager runs the (sync) reward function in ``num_cpus=1`` Ray actors: the engine
must start lazily inside the actor (no fork of the actor process), score, and leave no worker and no
sandboxed process behind once Ray shuts the actor down (which may not run atexit handlers)."""

import json
import os
import shutil
import tempfile
import time

import pytest

from microcoder_ext.reward import Engine, EngineConfig

import ray
from host_load import hang_guard, ray_init

pytestmark = pytest.mark.slow  # starts Ray

UID_BASE = 60650 + 3 * (os.getpid() % 16)  # its own uid range (conftest: 60700.., test_concurrency: 60600..)


def _our_processes(marker: str, uid_lo: int, uid_hi: int):
    """Live (non-zombie) processes that are ours: a sandbox worker whose argv names our temp root, or a
    sandboxed child running as one of our uids."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").split()[:1] in (["Z"], ["X"]):
            continue
        uid = int(fields["Uid"].split()[0])
        if marker in cmdline or uid_lo <= uid <= uid_hi:
            found.append((int(pid), uid, cmdline[:80]))
    return found


def _worker_leaders(marker: str):
    """pids of sandbox workers: session leaders whose argv names our temp root and whose parent does not
    (their job processes and sandboxed children, forked from them, share the argv; children lead sessions)."""
    ours = {pid for pid, _uid, _cmdline in _our_processes(marker, -1, -1)}
    out = []
    for pid in ours:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, sid = int(fields[1]), int(fields[3])
        except (OSError, ValueError, IndexError):
            continue
        if sid == pid and ppid not in ours:
            out.append(pid)
    return sorted(out)


def _reward_compute_worker():
    """verl's own actor for the ``remote`` reward manager when verl is installed, else the same shape."""
    try:
        from verl.experimental.reward_loop.reward_manager.remote import RewardComputeWorker
        return RewardComputeWorker
    except ImportError:
        @ray.remote(num_cpus=1)
        class RewardComputeWorker:
            def __init__(self, compute_score_fn):
                self.compute_score_fn = compute_score_fn

            def compute_score(self, **kwargs) -> dict:
                return self.compute_score_fn(**kwargs)

        return RewardComputeWorker


def test_compute_score_in_ray_actors_leaves_nothing_behind():
    tmp_root = tempfile.mkdtemp(prefix="mc-test-ray-")
    os.chmod(tmp_root, 0o711)
    slots_dir = tempfile.mkdtemp(prefix="mc-test-ray-slots-")
    env = {"MICROCODER_SANDBOX_UID": str(UID_BASE), "MICROCODER_REWARD_NODE_SLOTS": "2",
           "MICROCODER_REWARD_SLOTS_DIR": slots_dir, "MICROCODER_SANDBOX_TMPDIR": tmp_root,
           "MICROCODER_REWARD_TIMEOUT": "2"}
    try:
        _score_in_actors_then_shut_down(env, tmp_root, slots_dir)
    finally:
        for pid, _uid, _cmd in _our_processes(tmp_root, UID_BASE, UID_BASE + 2):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        shutil.rmtree(tmp_root, ignore_errors=True)
        shutil.rmtree(slots_dir, ignore_errors=True)


def _score_in_actors_then_shut_down(env, tmp_root, slots_dir):
    from microcoder_ext.reward import compute_score

    ray_init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    try:
        worker_cls = _reward_compute_worker()
        actors = [worker_cls.remote(compute_score) for _ in range(2)]  # like reward.num_workers=2
        gt = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
        extra = {"num_turns": None, "rollout_reward_scores": {}}

        def call(actor, code):
            return actor.compute_score.remote(data_source="code", solution_str=f"```python\n{code}\n```",
                                              ground_truth=gt, extra_info=extra)

        refs = [call(a, "a, b = map(int, input().split())\nprint(a + b)") for a in actors]
        refs += [call(actors[0], "print(3)"), call(actors[1], "import os\nos.fork()\nprint(3)")]
        ok1, ok2, bad, hostile = ray.get(refs, timeout=hang_guard(120))
        assert ok1["verdict"] == ok2["verdict"] == "correct" and ok1["score"] == 1.0, (ok1, ok2)
        assert bad["verdict"] == "wrong_answer" and bad["score"] == 0.0, bad
        assert hostile["verdict"] in ("runtime_error", "wrong_answer"), hostile
        leaders = _worker_leaders(tmp_root)
        assert 1 <= len(leaders) <= 2, leaders  # lazy: at most one worker per (single-threaded) actor
    finally:
        ray.shutdown()
    deadline = time.monotonic() + 120  # polled: a bound far above a loaded machine's
    left = _our_processes(tmp_root, UID_BASE, UID_BASE + 2)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _our_processes(tmp_root, UID_BASE, UID_BASE + 2)
    assert left == [], f"left behind after ray.shutdown(): {left}"
    # Ray SIGKILLs the actor's child processes, so the worker may not have removed its (empty) temp dir;
    # the next worker started on this temp root removes it (it is no longer flock'ed)
    stale = os.listdir(tmp_root)
    eng = Engine(EngineConfig(uid=UID_BASE, node_slots=2, slots_dir=slots_dir, tmp_root=tmp_root))
    try:
        eng.warmup(1)
        assert eng.fatal is None and not set(stale) & set(os.listdir(tmp_root)), (stale, os.listdir(tmp_root))
    finally:
        eng.close()
    assert os.listdir(tmp_root) == []
