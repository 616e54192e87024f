"""The SLURM templates (verl_recipes/slurm.sbatch, openrlhf_recipes/slurm.sbatch): bash syntax, the same #SBATCH
defaults, and DRY_RUN=1 with a fake SLURM environment: the srun / ray start commands for the job's nodes, then the
recipe's own dry run (verl: the composed and validated config; OpenRLHF: its parsed arguments) with NNODES set from
the job. ``scontrol`` is not installed here: a shim on PATH expands the node list, or NODES= overrides it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from host_load import hang_guard

ROOT = Path(__file__).resolve().parents[2]
VERL_SBATCH = ROOT / "verl_recipes" / "slurm.sbatch"
OPENRLHF_SBATCH = ROOT / "openrlhf_recipes" / "slurm.sbatch"


def sbatch_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.startswith("#SBATCH")]


def fake_slurm(tmp_path: Path, nodes: list[str], **extra) -> dict:
    """A batch step's environment: SLURM_* of a job on ``nodes`` and an ``scontrol`` shim that expands its list."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "scontrol"
    shim.write_text('#!/usr/bin/env bash\n[ "$1 $2" = "show hostnames" ] || exit 9\n'
                    f'[ "$3" = "gpu-a[01-{len(nodes):02d}]" ] || exit 8\n'
                    + "".join(f"echo {n}\n" for n in nodes))
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_", "NODES", "HEAD_IP"))}
    env.update(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST=f"gpu-a[01-{len(nodes):02d}]",
               SLURM_JOB_NUM_NODES=str(len(nodes)), SLURM_CPUS_PER_TASK="64", SLURM_SUBMIT_DIR=str(ROOT),
               PATH=f"{bin_dir}:{Path(sys.executable).parent}:{env.get('PATH', '')}", DRY_RUN="1")
    env.update(extra)
    return env


def sbatch(path: Path, env: dict, *args, cwd=None) -> subprocess.CompletedProcess:
    # sbatch runs a spooled copy from another directory: run from a directory outside the checkout
    return subprocess.run(["bash", str(path), *args], env=env, capture_output=True, text=True, timeout=hang_guard(300),
                          cwd=cwd or "/")


def test_templates_parse_and_share_sbatch_defaults():
    for path in (VERL_SBATCH, OPENRLHF_SBATCH):
        r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, (path, r.stderr)
        # sbatch reads #SBATCH lines only before the first command
        lines = path.read_text().splitlines()
        first_cmd = next(i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith("#"))
        assert all(i < first_cmd for i, ln in enumerate(lines) if ln.startswith("#SBATCH")), path
    assert sbatch_lines(VERL_SBATCH) == sbatch_lines(OPENRLHF_SBATCH)
    assert "#SBATCH --ntasks-per-node=1" in sbatch_lines(VERL_SBATCH)
    header = VERL_SBATCH.read_text()
    for model in ("qwen3_1.7b", "qwen3_4b_instruct", "ds_8b"):
        assert model in header
    assert "ESTIMATES, not measured" in header


def test_verl_two_node_dry_run_validates_the_recipe(tmp_path):
    env = fake_slurm(tmp_path, ["gpu-a01", "gpu-a02"], ALGO="microcoder", MODEL="ds_8b",
                     TRAIN="/data/train.parquet", VAL="/data/val.parquet", WANDB_API_KEY="k")
    r = sbatch(VERL_SBATCH, env, "trainer.total_training_steps=500")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    expected = [
        "+ srun --nodes=1 --ntasks=1 -w gpu-a01 hostname --ip-address",
        "slurm.sbatch: FRAMEWORK=verl NNODES=2 GPUS_PER_NODE=8 head=gpu-a01 RAY_ADDRESS=gpu-a01:6379",
        "+ srun --nodes=1 --ntasks=1 -w gpu-a01 ray start --head --node-ip-address=gpu-a01 --port=6379 "
        "--num-cpus 64 --num-gpus 8 --dashboard-host=0.0.0.0 --block &",
        "+ srun --nodes=1 --ntasks=1 -w gpu-a02 ray start --address gpu-a01:6379 --num-cpus 64 --num-gpus 8 --block &",
        "+ python3 -c '<wait until the Ray cluster at gpu-a01:6379 has 16 GPUs, at most 600s>'",
        f"+ NNODES=2 GPUS_PER_NODE=8 ALGO=microcoder MODEL=ds_8b DRY_RUN=1 bash {ROOT}/verl_recipes/train.sh "
        "trainer.total_training_steps=500",
    ]
    lines = out.splitlines()
    positions = [lines.index(e) for e in expected]  # each printed, in this order
    assert positions == sorted(positions)
    # verl_recipes/train.sh's own dry run: the composed config for 2 nodes, TP 2, the 16K token budget, validated
    assert "trainer.nnodes=2 trainer.n_gpus_per_node=8" in out
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in out
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=36864" in out
    assert "ok    verl validate_config (as main_ppo calls it)" in out
    # the extra argument comes after the recipe's own (the last one wins)
    assert "trainer.test_freq=20 trainer.total_training_steps=500" in out


def _openrlhf_python() -> str:
    """The OpenRLHF test venv's python, built (first use) and pointed at this checkout by compat/venv.sh, as
    tests/run_all.sh does for the OpenRLHF suite; a failure to build it fails the test."""
    r = subprocess.run(["bash", "-c", f'source "{ROOT}/compat/venv.sh" && ensure_venv openrlhf'],
                       capture_output=True, text=True, env={**os.environ, "ROOT": str(ROOT)})
    assert r.returncode == 0, f"could not build the OpenRLHF test venv:\n{r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()[-1]


def test_openrlhf_dry_run_with_nodes_override(tmp_path):
    py = _openrlhf_python()
    env = fake_slurm(tmp_path, ["n1", "n2"], ALGO="microcoder", MODEL="qwen3_4b_instruct",
                     TRAIN="/data/train.jsonl", VAL="/data/val.jsonl", NODES="n1 n2", HEAD_IP="10.0.0.1")
    env.pop("SLURM_JOB_NODELIST")
    env["PATH"] = f"{Path(py).parent}:{env['PATH']}"
    r = sbatch(OPENRLHF_SBATCH, env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "slurm.sbatch: FRAMEWORK=openrlhf NNODES=2 GPUS_PER_NODE=8 head=n1 RAY_ADDRESS=10.0.0.1:6379" in out
    assert "hostname --ip-address" not in out  # HEAD_IP given
    worker = "+ srun --nodes=1 --ntasks=1 -w n2 ray start --address 10.0.0.1:6379 --num-cpus 64 --num-gpus 8 --block &"
    assert worker in out
    assert f"bash {ROOT}/openrlhf_recipes/train.sh\n" in out
    # openrlhf_recipes/train.sh's dry run: OpenRLHF parsed and validated the 2-node arguments
    assert "OK: OpenRLHF's argument validation passed" in out
    for flag, value in (("--actor.num_nodes", "2"), ("--vllm.num_engines", "16"), ("--vllm.tensor_parallel_size", "1")):
        assert any(ln.split()[:2] == [flag, value] for ln in out.splitlines()), flag


@pytest.fixture()
def stub_repo(tmp_path):
    """A checkout whose train.sh only reports what it was given (the template's own logic, fast)."""
    repo = tmp_path / "repo"
    for fw in ("verl_recipes", "openrlhf_recipes"):
        (repo / fw).mkdir(parents=True)
        shutil.copy(ROOT / fw / "slurm.sbatch", repo / fw / "slurm.sbatch")
        (repo / fw / "train.sh").write_text(
            f'echo "{fw}/train.sh NNODES=$NNODES GPUS_PER_NODE=$GPUS_PER_NODE DRY_RUN=$DRY_RUN ALGO=$ALGO '
            'RAY_ADDRESS=$RAY_ADDRESS HYDRA_FULL_ERROR=$HYDRA_FULL_ERROR '
            'TOKENIZERS_PARALLELISM=$TOKENIZERS_PARALLELISM '
            'PYTHONUNBUFFERED=$PYTHONUNBUFFERED NCCL_DEBUG=$NCCL_DEBUG NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-} '
            'WANDB_API_KEY=${WANDB_API_KEY:-} args=$* | SMOKE=${SMOKE:-} SMOKE_ARGS=${SMOKE_ARGS:-}"\n')
    return repo


def test_single_node_environment_and_refusals(tmp_path, stub_repo):
    env = fake_slurm(tmp_path, ["gpu-a01"], SLURM_SUBMIT_DIR=str(stub_repo), ALGO="grpo_baseline",
                     GPUS_PER_NODE="4", NCCL_SOCKET_IFNAME="ib0", WANDB_API_KEY="secret")
    r = sbatch(stub_repo / "openrlhf_recipes" / "slurm.sbatch", env, "--x", "a b")
    assert r.returncode == 0, r.stderr
    assert "ray start --address" not in r.stdout  # one node: the head only
    assert "--num-gpus 4 --dashboard-host=0.0.0.0 --block &" in r.stdout
    assert ("openrlhf_recipes/train.sh NNODES=1 GPUS_PER_NODE=4 DRY_RUN=1 ALGO=grpo_baseline RAY_ADDRESS=gpu-a01:6379 "
            "HYDRA_FULL_ERROR=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME=ib0 "
            "WANDB_API_KEY=secret args=--x a b") in r.stdout
    assert "bash " + str(stub_repo / "openrlhf_recipes" / "train.sh") + " --x a\\ b" in r.stdout

    verl = stub_repo / "verl_recipes" / "slurm.sbatch"
    r = sbatch(verl, {**env, "FRAMEWORK": "megatron"})
    assert r.returncode == 2 and "unknown FRAMEWORK 'megatron'" in r.stderr
    r = sbatch(verl, {**env, "SLURM_JOB_NUM_NODES": "3"})
    assert r.returncode == 2 and "1 node names for SLURM_JOB_NUM_NODES=3" in r.stderr
    no_job = {k: v for k, v in env.items() if k != "SLURM_JOB_NODELIST"}
    r = sbatch(verl, no_job)
    assert r.returncode == 2 and "not inside a SLURM job" in r.stderr
    r = sbatch(verl, {**env, "SLURM_SUBMIT_DIR": str(tmp_path), "REPO": str(tmp_path / "nowhere")})
    assert r.returncode == 2 and "train.sh not found" in r.stderr


def test_verl_refuses_a_node_with_fewer_cpus_than_verl_holds(tmp_path, stub_repo):
    """verl waits with no time limit for its Ray placements (3 CPUs and a GPU per rank for its resource pool, 1 CPU
    per transfer queue actor, one free to place the rest: microcoder_ext/verl/ray_resources.py), so a job whose
    --cpus-per-task falls short would hold its GPUs doing nothing: the template refuses it before Ray starts, naming
    the value that fixes it."""
    verl = stub_repo / "verl_recipes" / "slurm.sbatch"
    env = fake_slurm(tmp_path, ["gpu-a01"], SLURM_SUBMIT_DIR=str(stub_repo), ALGO="microcoder", GPUS_PER_NODE="8")
    r = sbatch(verl, {**env, "SLURM_CPUS_PER_TASK": "16"})
    assert r.returncode == 2 and "ray start" not in r.stdout, r.stdout
    assert "Ray would get 16 CPUs per node (SLURM_CPUS_PER_TASK), short of the 34 that verl needs" in r.stderr
    assert "Submit with --cpus-per-task=34 or more" in r.stderr
    r = sbatch(verl, {**env, "SLURM_CPUS_PER_TASK": "34"})
    assert r.returncode == 0, r.stderr
    # fewer storage units (the launch's own override) need fewer CPUs: 24 + 2 + the controller + 1 free
    r = sbatch(verl, {**env, "SLURM_CPUS_PER_TASK": "28"}, "transfer_queue.backend.SimpleStorage.num_data_storage_units=2")
    assert r.returncode == 0, r.stderr
    # OpenRLHF places its own actors: not checked by this rule
    r = sbatch(stub_repo / "openrlhf_recipes" / "slurm.sbatch", {**env, "SLURM_CPUS_PER_TASK": "16"})
    assert r.returncode == 0, r.stderr
    # two nodes: the 8 units round robin, 4 on each
    (tmp_path / "two").mkdir()
    two = fake_slurm(tmp_path / "two", ["gpu-a01", "gpu-a02"], SLURM_SUBMIT_DIR=str(stub_repo), ALGO="microcoder",
                     GPUS_PER_NODE="8")
    r = sbatch(verl, {**two, "SLURM_CPUS_PER_TASK": "29"})
    assert r.returncode == 2 and "short of the 30 that verl needs" in r.stderr
    assert sbatch(verl, {**two, "SLURM_CPUS_PER_TASK": "30"}).returncode == 0


def test_smoke_path_prints_the_smoke_against_the_jobs_cluster(tmp_path, stub_repo):
    """SMOKE=1: the same Ray bring-up (site options of RAY_START_ARGS on every node, RAY_HEAD_ARGS on the head), then
    train.sh runs `microcoder smoke --topology --ray-address` against it (its run: tests/verl/test_slurm_smoke.py);
    with DRY_RUN=1 the smoke line is printed and train.sh validates the launch as without SMOKE."""
    verl = stub_repo / "verl_recipes" / "slurm.sbatch"
    env = fake_slurm(tmp_path, ["gpu-a01", "gpu-a02"], SLURM_SUBMIT_DIR=str(stub_repo), ALGO="microcoder",
                     HEAD_IP="10.0.0.1", SMOKE="1", SMOKE_ARGS="--steps 2", RAY_START_ARGS="--node-ip-address=10.0.0.1",
                     RAY_HEAD_ARGS="--temp-dir=/tmp/r --include-dashboard=false")
    r = sbatch(verl, env, "trainer.test_freq=5")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert ("+ srun --nodes=1 --ntasks=1 -w gpu-a01 ray start --head --node-ip-address=10.0.0.1 --port=6379 --num-cpus 64 "
            "--num-gpus 8 --dashboard-host=0.0.0.0 --node-ip-address=10.0.0.1 --temp-dir=/tmp/r --include-dashboard=false "
            "--block &") in out
    assert ("+ srun --nodes=1 --ntasks=1 -w gpu-a02 ray start --address 10.0.0.1:6379 --num-cpus 64 --num-gpus 8 "
            "--node-ip-address=10.0.0.1 --block &") in out
    smoke_args = f"--topology --ray-address 10.0.0.1:6379 --workdir {stub_repo}/smoke-4242 --steps 2"
    assert "+ SMOKE=1 SMOKE_ARGS=" + smoke_args.replace(" ", "\\ ") + " NNODES=2 GPUS_PER_NODE=8" in out
    assert "verl_recipes/train.sh NNODES=2 GPUS_PER_NODE=8 DRY_RUN=1" in out and "| SMOKE=0 SMOKE_ARGS=" in out
    r = sbatch(verl, {**env, "SMOKE_WORKDIR": "/shared/smoke"})
    assert "--workdir\\ /shared/smoke\\ --steps" in r.stdout
    r = sbatch(stub_repo / "openrlhf_recipes" / "slurm.sbatch", env)
    assert r.returncode == 2 and "SMOKE=1 runs verl launches only so far" in r.stderr
