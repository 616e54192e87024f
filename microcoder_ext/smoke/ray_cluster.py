"""A Ray cluster of several raylets on this machine, one per node a launch declares: what a multi-node
``microcoder smoke --topology`` runs the launch against.

It is brought up the way ``verl_recipes/slurm.sbatch`` brings up its cluster on SLURM nodes, with ``srun`` replaced
by local processes: ``ray start --head --port P --num-cpus C --num-gpus G --block`` for the first node, then
``ray start --address HEAD:P --num-cpus C --num-gpus G --block`` for every other one, then a wait until the cluster
has every node's GPUs. Each raylet gets the run's environment (the CPU platform, vLLM's CPU settings, the evidence
file), so every Ray worker it starts has it, as the template's ``srun`` steps pass the batch environment on.

What it starts, it stops: each ``ray start --block`` runs in a process group of its own; :meth:`LocalCluster.stop`
sends SIGTERM to each group (``ray start --block`` then stops the Ray processes it started), waits, and kills what
is left of those groups and any process whose command line names the cluster's own temp dir. Never ``ray stop``,
which stops every Ray cluster of the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from microcoder_ext.process_tree import processes_naming

#: seconds to wait for every raylet to join (Ray's own node start-up takes 5-30 s each on a busy 2-core machine)
JOIN_TIMEOUT_S = 600.0


class ClusterStartError(RuntimeError):
    """A raylet of the local cluster did not start or join (the message quotes its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_command() -> list[str]:
    """The ``ray`` CLI of this Python (the venv's ``bin/ray``, else ``python -m`` Ray's CLI module)."""
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    return [found] if found else [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


@dataclass
class LocalCluster:
    """A running local cluster: ``address`` (``host:port`` of its head, for ``RAY_ADDRESS``)."""

    address: str
    temp_dir: Path
    log_dir: Path
    token: str  #: the cluster's own authentication token (Ray's token auth, on every node and client)
    procs: list = field(default_factory=list)

    @property
    def client_env(self) -> dict:
        """What a driver's environment needs to join: ``RAY_ADDRESS`` and the token."""
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop exactly what :func:`start` started (see the module's docstring)."""
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for pid in processes_naming(str(self.temp_dir)):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def start(nnodes: int, gpus_per_node: int, cpus_per_node: int, env: dict, log_dir: Path,
          timeout_s: float = JOIN_TIMEOUT_S) -> LocalCluster:
    """Start ``nnodes`` raylets of ``gpus_per_node`` logical GPUs and ``cpus_per_node`` CPUs each; return once the
    cluster has all ``nnodes * gpus_per_node`` GPUs (raises :class:`ClusterStartError` after ``timeout_s``, having
    stopped what it started)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    # Ray's socket paths live under its temp dir and must stay short (a Unix socket path has ~107 bytes)
    temp_dir = Path(tempfile.mkdtemp(prefix="mcray-", dir="/tmp"))
    port = free_port()
    address = f"127.0.0.1:{port}"
    # Ray turns token auth on for a head that finds ~/.ray/auth_token, but not for a node joining it: every node and
    # client of this cluster gets the cluster's own token instead
    cluster = LocalCluster(address=address, temp_dir=temp_dir, log_dir=log_dir, token=secrets.token_hex(32))
    ray = ray_command()
    common = ["--num-cpus", str(cpus_per_node), "--num-gpus", str(gpus_per_node), "--block",
              "--dashboard-agent-listen-port", "0", "--disable-usage-stats"]
    head = [*ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", f"--temp-dir={temp_dir}",
            "--include-dashboard=false", f"--ray-client-server-port={free_port()}", *common]
    child_env = {**{k: v for k, v in env.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token",
                 "RAY_AUTH_TOKEN": cluster.token}
    try:
        cluster.procs.append(_spawn(head, child_env, log_dir / "ray-node0.log"))
        _wait_for(lambda: _listening(port), timeout_s, cluster, "the head's GCS port")
        for node in range(1, nnodes):
            worker = [*ray, "start", f"--address={address}", "--node-ip-address=127.0.0.1", *common]
            cluster.procs.append(_spawn(worker, child_env, log_dir / f"ray-node{node}.log"))

        def joined() -> bool:
            try:
                return missing_nodes(node_gpus(address, child_env), nnodes, gpus_per_node) is None
            except ClusterStartError:
                return False

        _wait_for(joined, timeout_s, cluster, f"{nnodes} nodes with {gpus_per_node} GPUs each", poll_s=3.0)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def node_gpus(address: str, env: dict, timeout_s: float = 120.0) -> list[float]:
    """The Ray (logical) GPUs of each alive node of the cluster at ``address``, asked from a child process with
    ``env`` (its auth token); raises :class:`ClusterStartError` when the cluster cannot be reached."""
    host, _, port = address.rpartition(":")
    # Ray's client retries an address where nothing listens for minutes
    why = _connect_error(host or "127.0.0.1", port, timeout_s=10.0)
    if why:
        raise ClusterStartError(f"cannot reach the Ray cluster at {address} (host:port of its head): {why}")
    probe = [sys.executable, "-c",
             "import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR'); "
             "print(json.dumps([n['Resources'].get('GPU', 0) for n in ray.nodes() if n['Alive']]))", address]
    try:
        got = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ClusterStartError(f"no answer from the Ray cluster at {address} within {timeout_s:.0f} s") from None
    lines = got.stdout.strip().splitlines()
    if got.returncode != 0 or not lines:
        tail = "\n".join((got.stderr or got.stdout).strip().splitlines()[-5:])
        raise ClusterStartError(f"cannot reach the Ray cluster at {address}:\n{tail}")
    return [float(g) for g in json.loads(lines[-1])]


def missing_nodes(gpus: list[float], nnodes: int, gpus_per_node: int) -> str | None:
    """What a cluster of nodes with ``gpus`` (per node) lacks for ``nnodes`` x ``gpus_per_node`` ranks (verl places
    one pool of ``gpus_per_node`` GPUs on each of ``nnodes`` nodes), or None."""
    fit = sum(1 for g in gpus if g >= gpus_per_node)
    if fit >= nnodes:
        return None
    have = ", ".join(f"{g:g}" for g in gpus) or "none"
    return (f"{fit} of its {len(gpus)} node(s) have {gpus_per_node} GPUs (GPUs per node: {have}); the launch "
            f"declares {nnodes} node(s) x {gpus_per_node} GPUs (trainer.nnodes x trainer.n_gpus_per_node)")


def _spawn(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _connect_error(host: str, port: int | str, timeout_s: float) -> str | None:
    """Why no TCP connection to ``host``:``port`` opened within ``timeout_s`` (refused, unknown host, not a port),
    or None when one did."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except (OSError, ValueError) as e:
        return str(e)


def _listening(port: int) -> bool:
    """Whether something on this machine accepts TCP connections on ``port`` (within 1 s)."""
    return _connect_error("127.0.0.1", port, timeout_s=1.0) is None


def _wait_for(ready, timeout_s: float, cluster: LocalCluster, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        dead = [p for p in cluster.procs if p.poll() is not None]
        if dead:
            raise ClusterStartError(f"a raylet exited (status {dead[0].returncode}) before the cluster had {what}; "
                                    f"its log:\n{_tail(cluster, cluster.procs.index(dead[0]))}")
        try:
            if ready():
                return
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() > deadline:
            raise ClusterStartError(f"the local Ray cluster did not have {what} within {timeout_s:.0f} s; the last "
                                    f"raylet's log:\n{_tail(cluster, len(cluster.procs) - 1)}")
        time.sleep(poll_s)


def _tail(cluster: LocalCluster, node: int, lines: int = 30) -> str:
    try:
        text = (cluster.log_dir / f"ray-node{node}.log").read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
