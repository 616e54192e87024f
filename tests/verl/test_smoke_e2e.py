"""Real verl 0.9.1 training steps on the CPU: ``microcoder smoke verl`` runs ``python -m verl.trainer.main_ppo``.

Nothing of verl is replaced: TaskRunner, the FSDP2 actor (and reference) workers over gloo, TransferQueue, the agent
loop, the reward loop with the real sandboxed code reward, the trainer (verl's ``sync`` or our ``microcoder_sync``),
the weight sync and the checkpoints. Only the platform (``cpu``, public registry) and the generation engine
(``hf_cpu``, public registry) are ours. Every assertion reads what verl itself logged (its file logger,
``metrics.jsonl``: one line per step) or what the engine received (evidence), never a recorder of ours.

Four launches, shared by the tests (each ~1.5 min on 2 cores):

* ``grpo``: plain verl GRPO (default ``sync`` trainer), T = 1.2, one update per step, a 20-token budget;
* ``mc``: ``+recipe=microcoder`` with rho = 1, the same data/seed/model/budget, a staged schedule 1.2 -> 0.8 at
  step 3 and checkpoints at steps 2 and 3;
* ``mc_resume``: ``mc`` resumed from its step-2 checkpoint, running step 3 again;
* ``baseline2``: ``+recipe=grpo_baseline`` (reference model, KL loss) on 2 FSDP ranks (2 rollout replicas).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.slow]

BUDGET = 20  # tokens: about a third of the warm-started model's answers are cut
PROMPTS = 8
COMMON = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.n=4",
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
    "trainer.save_freq=-1",
]
MC = ["+recipe=microcoder"] + COMMON + [
    "microcoder.mask.rho=1.0",
    "microcoder.temperature.mode=staged",
    "microcoder.temperature.stages=[[0,1.2],[3,0.8]]",
    "microcoder.temperature.min_stage_steps=1",
    "trainer.save_freq=2",
]
BASELINE = ["+recipe=grpo_baseline"] + COMMON + ["trainer.save_freq=-1"]


def smoke(work: Path, launch: list[str], *opts: str, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(work), "--json",
           str(work / "report.json"), "--prompts", str(PROMPTS), *opts, "verl", *launch]
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


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


def sampler_temperatures(work: Path, step: int) -> set[float]:
    """Temperatures the engine sampled step ``step``'s responses at (generated with weight version step - 1)."""
    return {e["temperature"] for e in events(work, "generate") if e["version"] == step - 1}


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


def _close(a, b, tol=1e-6):
    return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)


# ------------------------------------------------------------------------------------------------ plain GRPO


def test_plain_grpo_trains_through_main_ppo(grpo):
    work, proc = grpo
    m = metrics(work)
    assert sorted(m) == [1, 2, 3]
    report = json.loads((work / "report.json").read_text())
    assert report["ok"] and report["framework"] == "verl" and len(report["steps"]) == 3
    assert "step" in proc.stdout and "substituted for this CPU run" in proc.stdout
    for step, row in m.items():
        assert not any(k.startswith("microcoder/") for k in row)  # verl's own trainer, nothing of ours
        # one update at ratio 1: token-mean loss = -(token-mean advantage), both as verl logged them
        assert _close(row["actor/pg_loss"], -row["critic/advantages/mean"]), (step, row["actor/pg_loss"])
        assert sampler_temperatures(work, step) == {1.2}
        assert row["training/rollout_probs_diff_max"] < 1e-4  # actor log-probs at the sampler's temperature
    assert any(row["critic/score/max"] > row["critic/score/min"] for row in m.values())  # rewards differ
    assert any(abs(row["actor/pg_loss"]) > 1e-4 for row in m.values()) and all(
        row["actor/grad_norm"] > 0 for row in m.values())


def test_weights_change_and_reach_the_engine(grpo):
    work, _ = grpo
    sent = {e["version"]: e["checksum"] for e in events(work, "weights_sent")}
    loaded = {e["version"]: e for e in events(work, "weights_loaded")}
    initial = events(work, "engine_loaded")[0]["checksum"]
    assert sorted(loaded) == [0, 1, 2, 3]  # the initial sync, then one per step
    assert loaded[0]["checksum"] == initial and not loaded[0]["changed"]
    for v in (1, 2, 3):
        assert loaded[v]["checksum"] == sent[v] and loaded[v]["changed"]
    assert len({loaded[v]["checksum"] for v in loaded}) == 4
    # every request of step s was served by the weights of the sync after step s - 1
    gens = events(work, "generate")
    assert {e["version"] for e in gens} == {0, 1, 2} and len(gens) == 3 * PROMPTS * 4


# ------------------------------------------------------------------------------------------------ MicroCoder


def test_mask_zeroes_eligible_advantages_in_the_real_loss(grpo, mc):
    g, m = metrics(grpo[0]), metrics(mc[0])
    for step, row in m.items():
        assert _close(row["actor/pg_loss"], -row["critic/advantages/mean"]), step
        # rho = 1: every truncated non-incorrect response is masked
        assert _close(row["microcoder/masked_frac"], row["microcoder/eligible_frac"])
    assert any(row["microcoder/masked_frac"] > 0 for row in m.values())
    # Mask off (plain GRPO) vs on, same data, seed, model, T and a deterministic engine: the runs see the same
    # rollouts until the first step whose loss differs, and that difference comes from masked advantages.
    first = None
    for step in sorted(set(g) & set(m)):
        for key in ("critic/score/mean", "response_length/mean", "response_length/clip_ratio"):
            assert _close(g[step][key], m[step][key]), (step, key)  # same rollouts so far
        if not _close(g[step]["actor/pg_loss"], m[step]["actor/pg_loss"]):
            first = step
            break
    assert first is not None, "the mask never changed the loss"
    assert m[first]["microcoder/masked_frac"] > 0
    assert not _close(g[first]["critic/advantages/mean"], m[first]["critic/advantages/mean"])


def test_truncation_follows_the_engine(mc):
    """core.truncation: truncated = whole budget used and no EOS at the end, which is exactly what the engine
    reported as finish_reason "length"."""
    work, _ = mc
    m = metrics(work)
    for step, row in m.items():
        gens = [e for e in events(work, "generate") if e["version"] == step - 1]
        cut = sum(e["finish"] == "length" for e in gens) / len(gens)
        assert _close(row["microcoder/truncated_frac"], cut), step
    assert any(e["finish"] == "length" for e in events(work, "generate"))


def test_staged_temperature_switches_sampler_and_logprobs(mc):
    work, _ = mc
    m = metrics(work)
    assert [m[s]["microcoder/temperature"] for s in (1, 2, 3)] == [1.2, 1.2, 0.8]
    assert [sampler_temperatures(work, s) for s in (1, 2, 3)] == [{1.2}, {1.2}, {0.8}]
    for s in (1, 2, 3):  # the actor's old log-probs were computed at the temperature the engine sampled at
        assert m[s]["training/rollout_probs_diff_max"] < 1e-4
        assert m[s]["microcoder/temperature_unverified_frac"] == 0.0


def test_logprob_check_discriminates_a_temperature_mismatch(mc):
    """The same check would have failed loudly with log-probs at 1.2 for samples drawn at 0.8."""
    import torch
    from transformers import AutoModelForCausalLM

    report = json.loads((mc[0] / "report.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(report["model"]["path"]).eval()
    ids = torch.randint(10, 300, (4, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits.float()
    gap = (torch.softmax(logits / 0.8, -1) - torch.softmax(logits / 1.2, -1)).abs().amax(-1)
    observed = max(row["training/rollout_probs_diff_max"] for row in metrics(mc[0]).values())
    assert float(gap.median()) > 100 * observed


def test_checkpoint_resume_restores_the_controller_and_repeats_the_step(mc, mc_resume):
    a, b = metrics(mc[0]), metrics(mc_resume[0])
    assert sorted(b) == [3]  # resumed after step 2
    for key in ("microcoder/temperature", "microcoder/temperature_stage", "microcoder/masked_frac",
                "critic/score/mean", "critic/advantages/mean", "actor/pg_loss", "response_length/mean"):
        assert _close(a[3][key], b[3][key], 1e-5), key
    assert sampler_temperatures(mc_resume[0], 3) == {0.8}
    log = (mc_resume[0] / "main_ppo.log").read_text()
    assert "temperature controller restored" in log
    assert (mc[0] / "checkpoints" / "global_step_2" / "microcoder_temperature.json").is_file()


# ------------------------------------------------------------------------------------------------ baseline, 2 ranks


def test_reference_model_kl_on_two_fsdp_ranks(baseline2):
    work, _ = baseline2
    m = metrics(work)
    assert sorted(m) == [1, 2]
    for row in m.values():
        assert "actor/kl_loss" in row and "timing_s/ref" in row
        assert row["training/rollout_probs_diff_max"] < 1e-4
    assert m[2]["actor/kl_loss"] > 0  # the policy moved away from the reference after step 1
    engines = {e["engine"] for e in events(work, "engine_loaded")}
    assert engines == {"hf_cpu_server_0", "hf_cpu_server_1"}
    sent = {}
    for e in events(work, "weights_sent"):
        sent.setdefault(e["version"], set()).add(e["checksum"])
    for e in events(work, "weights_loaded"):
        assert sent[e["version"]] == {e["checksum"]}  # both replicas got the same (full) weights
    assert sampler_temperatures(work, 1) == {1.2}


def test_a_failing_step_exits_1_with_verls_own_error(tmp_path):
    reward = tmp_path / "broken_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                      "    raise RuntimeError('reward exploded on purpose')\n")
    proc = smoke(tmp_path / "work", GRPO[:-2] + [f"reward.custom_reward_function.path={reward}",
                                                  "trainer.save_freq=-1"], "--steps", "1")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "reward exploded on purpose" in proc.stdout + proc.stderr
    assert "FAILED" in proc.stderr
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert not report["ok"] and report["exit_code"] == 1 and "reward exploded on purpose" in report["error"]
