"""``SMOKE=1`` of ``verl_recipes/slurm.sbatch`` run on this machine as on two SLURM nodes: the template's own Ray
bring-up (``ray start --head`` on the first node, ``ray start --address`` on the second, the wait until every GPU has
joined), each ``srun`` step replaced by a shim that runs its command here, then ``verl_recipes/train.sh`` with
``SMOKE=1``, which runs ``microcoder smoke --topology --ray-address`` of the recipe's launch against that cluster:
real ``main_ppo`` steps with vLLM's CPU build at the launch's 2 nodes x 1 GPU.

What is ours here: the ``srun`` shim (below) and the options a shared machine needs so that two raylets and the other
tests' Ray clusters do not collide (``RAY_START_ARGS`` / ``RAY_HEAD_ARGS``: the node address, an agent port chosen by
Ray, the cluster's own temp dir and auth token). The test stops what the template leaves running: its process group
and every process naming the cluster's temp dir.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from host_load import hang_guard

from microcoder_ext.process_tree import processes_naming
from microcoder_ext.smoke.ray_cluster import free_port
from microcoder_ext.verl.ray_resources import DEFAULT_STORAGE_UNITS, node_cpus_needed
from microcoder_ext.verl.smoke import ray_cpus

# memory: two ranks, two vLLM replicas, two raylets: as the 2-rank launch of tests/verl/test_smoke_e2e.py
pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.memory(10)]

ROOT = Path(__file__).resolve().parents[2]
SRUN = """#!/usr/bin/env bash
# srun --nodes=1 --ntasks=1 -w HOST CMD...: CMD on this machine
while [ $# -gt 0 ]; do
  case "$1" in --nodes=*|--ntasks=*) shift ;; -w) shift 2 ;; *) break ;; esac
done
exec "$@"
"""


def _stop(proc: subprocess.Popen, temp_dir: Path) -> list[int]:
    """Stop the template's process group and whatever names the cluster's temp dir; the pids that were left."""
    left = processes_naming(str(temp_dir))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(temp_dir, ignore_errors=True)
    return left


def test_sbatch_smoke_trains_on_the_templates_two_node_cluster(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "srun").chmod(0o755)
    temp_dir = Path(tempfile.mkdtemp(prefix="mcray-", dir="/tmp"))  # Ray's socket paths must stay short
    work, report = tmp_path / "work", tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_", "VERL_PLATFORM"))}
    env.update(
        PATH=f"{bin_dir}:{Path(sys.executable).parent}:{env.get('PATH', '')}", NODES="node0 node1",
        HEAD_IP="127.0.0.1", RAY_PORT=str(free_port()), GPUS_PER_NODE="1", SLURM_CPUS_PER_TASK=str(max(ray_cpus(1, 2), node_cpus_needed(1, 2, DEFAULT_STORAGE_UNITS))),
        RAY_START_ARGS="--node-ip-address=127.0.0.1 --dashboard-agent-listen-port=0 --disable-usage-stats",
        RAY_HEAD_ARGS=f"--temp-dir={temp_dir} --include-dashboard=false --ray-client-server-port={free_port()}",
        RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), SLURM_JOB_ID="77",
        SMOKE="1", SMOKE_WORKDIR=str(work), SMOKE_ARGS=f"--steps 2 --json {report}",
        ALGO="microcoder", MODEL="qwen3_1.7b", REPO=str(ROOT))
    proc = subprocess.Popen(["bash", str(ROOT / "verl_recipes" / "slurm.sbatch"), "trainer.val_before_train=false"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=hang_guard(1200))
    finally:
        left = _stop(proc, temp_dir)
    assert proc.returncode == 0, out[-6000:]
    assert "slurm.sbatch: Ray cluster has 2 of 2 GPUs" in out
    assert "SMOKE_ARGS=--topology\\ --ray-address\\ 127.0.0.1:" in out  # the line the template prints (%q)
    got = json.loads(report.read_text())
    assert got["ok"] and [s["step"] for s in got["steps"]] == [1, 2]
    subs = {s["what"]: s for s in got["substitutions"]}
    assert subs["Ray cluster"]["smoke"].startswith("the running cluster at 127.0.0.1:")
    assert "GPUs per node" not in subs and "nodes" not in subs  # 2 x 1 kept
    rows = [json.loads(line) for line in (work / "evidence.jsonl").read_text().splitlines()]
    # one vLLM replica and one trainer rank per node: both raylets served requests and sent weights, and after every
    # sync each replica holds what its rank sent
    served = {(e["engine"], e["node"]) for e in rows if e["event"] == "generate"}
    assert len({node for _, node in served}) == 2 and len({engine for engine, _ in served}) == 2, served
    senders = {e["node"] for e in rows if e["event"] == "weights_sent"}
    assert len(senders) == 2, senders
    loaded = {(e["engine"], e["sync"], e["shard"]): e["checksum"] for e in rows if e["event"] == "weights_loaded"}
    sent = [e for e in rows if e["event"] == "weights_sent"]
    assert len(sent) == 2 * 3  # 2 ranks x (the start + 2 steps)
    for e in sent:
        assert loaded[(e["sender"], e["sync"], e["rank"])] == e["checksum"]
    assert all(s["engine_synced"] for s in got["steps"])
    assert processes_naming(str(temp_dir)) == [], left
