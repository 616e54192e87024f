"""``microcoder_ext.smoke.ray_cluster``: the local multi-raylet cluster of a multi-node ``--topology`` smoke, with
Ray's real ``ray start`` (the runs against it: tests/verl/test_smoke_e2e.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from host_load import hang_guard

import ray  # noqa: F401  (a dependency of every framework venv: a missing one fails, never skips)

from microcoder_ext.process_tree import processes_naming
from microcoder_ext.smoke import ray_cluster

pytestmark = [pytest.mark.memory(2)]


def test_raylets_join_with_their_gpus_and_stop_leaves_nothing(tmp_path):
    env = {**os.environ, "MICROCODER_PROBE": "on-every-node"}
    cluster = ray_cluster.start(2, 3, 4, env, tmp_path / "logs")
    try:
        probe = """
import os, sys, ray
ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
nodes = [n for n in ray.nodes() if n["Alive"]]
print(len(nodes), int(ray.cluster_resources()["GPU"]), sorted(int(n["Resources"]["GPU"]) for n in nodes))

@ray.remote(num_gpus=1)
def env_of_a_worker():
    return os.environ.get("MICROCODER_PROBE")

print(set(ray.get([env_of_a_worker.remote() for _ in range(6)])))
"""
        got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=hang_guard(60),
                             env={**os.environ, **cluster.client_env})
        assert got.returncode == 0, got.stderr[-3000:]
        lines = got.stdout.splitlines()
        assert lines[-2] == "2 6 [3, 3]" and lines[-1] == "{'on-every-node'}", got.stdout
        assert processes_naming(str(cluster.temp_dir))  # its raylets, GCS, workers
        assert ray_cluster.node_gpus(cluster.address, {**os.environ, **cluster.client_env}) == [3.0, 3.0]
    finally:
        cluster.stop()
    assert all(p.poll() is not None for p in cluster.procs)
    assert processes_naming(str(cluster.temp_dir)) == []
    assert not cluster.temp_dir.exists()


def test_a_client_without_the_clusters_token_is_refused(tmp_path):
    cluster = ray_cluster.start(1, 1, 2, dict(os.environ), tmp_path / "logs")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64)
        got = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={cluster.address!r})"],
                             capture_output=True, text=True, timeout=hang_guard(30), env=env)
        assert got.returncode != 0 and "auth" in (got.stdout + got.stderr).lower()
    finally:
        cluster.stop()


def test_a_cluster_short_of_the_declared_nodes_is_named():
    """What ``--ray-address`` checks before main_ppo starts: verl places one pool of GPUs per node on each node."""
    assert ray_cluster.missing_nodes([4.0, 4.0], 2, 4) is None
    assert ray_cluster.missing_nodes([8.0, 4.0, 0.0], 2, 4) is None
    short = ray_cluster.missing_nodes([8.0, 2.0], 2, 4)
    assert short == ("1 of its 2 node(s) have 4 GPUs (GPUs per node: 8, 2); the launch declares 2 node(s) x 4 GPUs "
                     "(trainer.nnodes x trainer.n_gpus_per_node)")
    assert "GPUs per node: none" in ray_cluster.missing_nodes([], 1, 1)


def test_an_unreachable_cluster_is_an_error_not_a_hang():
    with pytest.raises(ray_cluster.ClusterStartError, match="cannot reach|no answer"):
        ray_cluster.node_gpus(f"127.0.0.1:{ray_cluster.free_port()}", dict(os.environ), timeout_s=120)
