"""Real OpenRLHF 0.11.2 training steps on the CPU: ``microcoder smoke openrlhf`` runs OpenRLHF's own
``train_ppo_ray`` (or our launcher ``python -m microcoder_ext.openrlhf.train`` around it).

Nothing of OpenRLHF is replaced: argparse and validation, ``train()``, the Ray actors (``PPOTrainer`` /
``MicrocoderPPOTrainer``, ``PolicyModelActor``, ``ReferenceModelActor``, ``RolloutRayActor`` with
``SingleTurnAgentExecutor`` and our reward file), DeepSpeed ZeRO (on its CPU accelerator), ``PolicyLoss``, the weight
broadcast, TensorBoard logging, checkpoints and ``save_model``. Only the ``vllm`` / ``flash_attn`` libraries (exact-name
stand-ins; generation by the shared CPU engine) and four ``torch.cuda`` calls are ours
(:mod:`microcoder_ext.openrlhf.cpu`). Every assertion reads what OpenRLHF itself logged (its TensorBoard event files,
checkpoints, saved model) or what the stand-ins saw (evidence), never a recorder of ours.

Four launches, shared by the tests (each ~40-90 s on 2 cores):

* ``grpo``: plain GRPO through ``train_ppo_ray`` (``--reward.remote_url`` = our reward file), T = 1.0, one update
  per step, a 20-token budget, the data as a local file;
* ``mc``: ``--mc.preset microcoder`` through our launcher with rho = 1, the same data / seed / model / budget (the
  bundled problems, as the smoke run's fallback writes them), a staged schedule 1.0 -> 1.2 compressed into the run,
  ``--algo.advantage.is_correction_level token`` and a checkpoint at step 2;
* ``mc_resume``: ``mc`` resumed from that checkpoint, running step 3 again;
* ``recipe``: ``SMOKE=1 MODEL=qwen3_1.7b ALGO=grpo_baseline bash openrlhf_recipes/train.sh`` (reference model + KL
  loss, colocated with vLLM/DeepSpeed sleep, ZeRO-3, gradient checkpointing, eval and a checkpoint at the last step).

Step 1 is the same in every run (seeded processes, the deterministic engine, the same initial weights); later steps
are not across runs: OpenRLHF collects a step's experiences in completion order, so the update sums the same samples
in another order, a last bit of the bf16 weights can differ, and the engine (whose seeds follow the weights it
holds) samples other responses. So cross-run comparisons use step 1 (``grpo`` vs ``mc``) or a step after the same
checkpoint (``mc`` vs ``mc_resume``); every other check compares a run with its own evidence.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = [pytest.mark.openrlhf, pytest.mark.slow]
import openrlhf  # noqa: F401,E402  (a missing framework fails, never skips)
import torch  # noqa: E402

from microcoder_ext.core import verdicts as V  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 20
REWARD_FILE = str(ROOT / "microcoder_ext" / "openrlhf" / "openrlhf_reward.py")
COMMON = [
    "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "4",
    "--train.batch_size", "16",  # one update per step: the loss is at ratio 1
    "--rollout.max_new_tokens", str(BUDGET), "--vllm.num_engines", "1",
    "--actor.adam.lr", "1e-3", "--actor.lr_warmup_ratio", "0", "--actor.lr_scheduler", "constant",
]
MC = ["--mc.preset", "microcoder", "--mc.mask.rho", "1", "--mc.mask.m", "16",  # 2m > budget: never a repeat
      "--mc.temperature.mode", "staged", "--mc.temperature.stages", "[[0, 1.0], [100, 1.2]]",
      "--algo.advantage.is_correction_level", "token", "--ckpt.save_steps", "2",
      "--data.prompt_dataset", "microcoder/not-on-this-machine"] + COMMON
OPTS = ["--steps", "3", "--prompts", "4", "--max-samples", "4"]
TOL = 2e-3  # policy loss vs hand value: bf16 log-prob ratios (and IS weights) are 1 within ~1e-4


def smoke(work: Path, launch: list[str], *opts: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "microcoder_ext.cli", "smoke", "--workdir", str(work), "--json",
           str(work / "report.json"), *opts, "openrlhf", *launch]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def _check(name: str, work: Path, proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, f"smoke {name} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    return work, proc


def scalars(work: Path) -> dict[int, dict[str, float]]:
    """Every scalar OpenRLHF's TensorboardLogger wrote (``train/*``, ``eval/*``), per global step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[int, dict[str, float]] = {}
    runs = {p.parent for p in (work / "tensorboard").rglob("events.out.tfevents.*")}
    assert len(runs) == 1, runs
    acc = EventAccumulator(str(runs.pop()), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            out.setdefault(e.step, {})[tag] = e.value
    return out


def train_steps(work: Path) -> dict[int, dict[str, float]]:
    return {s: m for s, m in scalars(work).items() if "train/policy_loss" in m}


def events(work: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (work / "evidence.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == kind]


def gens(work: Path, version: int) -> list[dict]:
    """The engine's requests at weight version ``version`` (syncs so far: step s of a fresh run is version s - 1)."""
    return [e for e in events(work, "generate") if e["version"] == version]


def queries(work: Path, version: int) -> list[str]:
    return sorted(e["query"] for e in gens(work, version))


def hand_policy_loss(work: Path, version: int, mask: bool) -> float:
    """GRPO's token-mean loss at ratio 1 from the samples themselves: per prompt group (n = 4) the advantages
    (r - mean) / (std + 1e-9) of the rewards our reward returned (evidence), zeroed where MicroCoder's mask applies
    at rho = 1 (cut at the budget by the engine, verdict not incorrect; no repeat is possible below 2m tokens)."""
    reward = {e["query"]: e for e in events(work, "reward_func")}
    groups = defaultdict(list)
    for e in gens(work, version):
        groups[e["prompt"]].append(e)
    assert sorted(len(g) for g in groups.values()) == [4, 4, 4, 4]
    num = den = 0.0
    for samples in groups.values():
        r = torch.tensor([reward[e["query"]]["reward"] for e in samples])
        adv = (r - r.mean()) / (r.std() + 1e-9)
        for e, a in zip(samples, adv.tolist()):
            masked = mask and e["finish"] == "length" and reward[e["query"]]["verdict"] not in V.INCORRECT
            num += (0.0 if masked else a) * e["tokens"]
            den += e["tokens"]
    return -num / den


@pytest.fixture(scope="module")
def train_file(tmp_path_factory) -> Path:
    """The first 16 bundled train problems as an OpenRLHF JSONL (what the smoke run writes when it falls back)."""
    from microcoder_ext.smoke.data import bundled_problems

    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(p.to_openrlhf_row()) + "\n" for p in bundled_problems("train")[:16]))
    return path


@pytest.fixture(scope="module")
def grpo(tmp_path_factory, train_file):
    work = tmp_path_factory.mktemp("grpo")
    launch = ["--data.prompt_dataset", str(train_file), "--data.input_key", "prompt", "--data.label_key", "label",
              "--data.apply_chat_template", "--algo.advantage.estimator", "group_norm", "--algo.kl.init_coef", "0",
              "--reward.remote_url", REWARD_FILE, "--rollout.temperature", "1.0"] + COMMON
    return _check("grpo", work, smoke(work, launch, *OPTS))


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    work = tmp_path_factory.mktemp("mc")
    return _check("mc", work, smoke(work, MC, *OPTS))


@pytest.fixture(scope="module")
def mc_resume(tmp_path_factory, mc):
    ckpt = mc[0] / "ckpt"
    assert (ckpt / "_actor" / "global_step2").is_dir(), sorted(p.name for p in (ckpt / "_actor").iterdir())
    work = tmp_path_factory.mktemp("mc_resume")
    return _check("mc_resume", work, smoke(work, MC + ["--ckpt.load_enable", "--ckpt.path", str(ckpt)], *OPTS))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, train_file):
    work = tmp_path_factory.mktemp("recipe")
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "DRY_RUN")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", SMOKE="1",
               SMOKE_ARGS=f"--steps 2 --workdir {work} --json {work / 'report.json'}", MODEL="qwen3_1.7b",
               ALGO="grpo_baseline", TRAIN=str(train_file), VAL=str(train_file), CKPT_DIR=str(work / "unused"))
    proc = subprocess.run(["bash", str(ROOT / "openrlhf_recipes" / "train.sh"), "--actor.adam.lr", "1e-3"],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    return _check("recipe", work, proc)


# ------------------------------------------------------------------------------------------------ plain GRPO


def test_plain_grpo_trains_through_train_ppo_ray(grpo):
    work, proc = grpo
    m = train_steps(work)
    assert sorted(m) == [1, 2, 3]
    report = json.loads((work / "report.json").read_text())
    assert report["ok"] and report["framework"] == "openrlhf" and len(report["steps"]) == 3
    assert report["command"][2:3] == ["microcoder_ext.openrlhf.cpu.run"] and "train_ppo_ray" in report["command"]
    assert "substituted for this CPU run" in proc.stdout and "step 3/3 done" in proc.stdout
    for step, row in m.items():
        assert not any(k.startswith(("train/microcoder/", "train/mc_trunc")) for k in row)  # OpenRLHF's trainer
        assert "train/kl" in row and row["train/kl"] == 0.0  # no reference model (--algo.kl.init_coef 0)
        # one update at ratio 1: GRPO's token-mean loss from the rollouts themselves
        assert math.isclose(row["train/policy_loss"], hand_policy_loss(work, step - 1, mask=False), abs_tol=TOL)
        assert {e["temperature"] for e in gens(work, step - 1)} == {1.0}
        assert row["train/actor_grad_norm"] > 0
    assert any(row["train/rollout/reward_std"] > 0 for row in m.values())  # rewards differ within the batch


def test_weights_change_and_reach_the_engine(grpo):
    from safetensors.torch import load_file

    from microcoder_ext.smoke.engine import weights_checksum

    work, _ = grpo
    initial = events(work, "engine_loaded")[0]["checksum"]
    loaded = events(work, "weights_loaded")
    assert [e["version"] for e in loaded] == [1, 2, 3]  # one sync after each step
    sent = {e["seq"]: e["checksum"] for e in events(work, "weight_broadcast")}  # the trainer's side
    assert len(sent) == sum(e["tensors"] for e in loaded)
    for e in loaded:
        assert e["changed"]
        # every tensor the engine holds after loading is byte for byte what the policy actor broadcast
        assert e["held"] == [sent[e["first"] + i] for i in range(e["tensors"])]
    assert len({initial, *(e["checksum"] for e in loaded)}) == 4
    # the model OpenRLHF saved at the end (--ckpt.output_dir) is the one the engine serves after the last sync
    saved = load_file(str(work / "final" / "model.safetensors"))
    assert weights_checksum((n, saved[n]) for n in loaded[-1]["names"]) == loaded[-1]["checksum"]
    # every request of step s was served by the weights of the sync after step s - 1
    assert sorted({e["version"] for e in events(work, "generate")}) == [0, 1, 2]
    assert [len(gens(work, v)) for v in (0, 1, 2)] == [16, 16, 16]


# ------------------------------------------------------------------------------------------------ MicroCoder


def test_mask_zeroes_eligible_advantages_in_the_real_loss(grpo, mc):
    g, m = train_steps(grpo[0]), train_steps(mc[0])
    assert sorted(m) == [1, 2, 3]
    for step, row in m.items():
        # rho = 1: every truncated non-incorrect response is masked; OpenRLHF logs our info key as a rate too
        assert row["train/microcoder/masked_frac"] == row["train/microcoder/eligible_frac"]
        assert math.isclose(row["train/mc_trunc_masked"], row["train/microcoder/masked_frac"], abs_tol=1e-6)
        assert math.isclose(row["train/policy_loss"], hand_policy_loss(mc[0], step - 1, mask=True), abs_tol=TOL)
    assert m[1]["train/microcoder/masked_frac"] > 0
    # step 1: the same rollouts as plain GRPO (same data, seed, model, T, deterministic engine) ...
    assert queries(grpo[0], 0) == queries(mc[0], 0)
    with_mask, without = hand_policy_loss(mc[0], 0, mask=True), hand_policy_loss(mc[0], 0, mask=False)
    assert abs(with_mask - without) > 10 * TOL
    # ... but the masked advantages change the loss OpenRLHF computed
    assert math.isclose(g[1]["train/policy_loss"], without, abs_tol=TOL)
    assert abs(g[1]["train/policy_loss"] - m[1]["train/policy_loss"]) > 5 * TOL


def test_truncation_agrees_with_openrlhf_and_the_engine(mc):
    """core.truncation (whole budget used, no EOS at the end), OpenRLHF's own ``truncated`` flag (vLLM
    finish_reason "length") and the engine's finish reason agree on every response of every step."""
    work, _ = mc
    for step, row in train_steps(work).items():
        cut = [e["finish"] == "length" for e in gens(work, step - 1)]
        assert len(cut) == 16
        assert row["train/rollout/truncated_rate"] == pytest.approx(sum(cut) / 16, abs=1e-6)
        assert row["train/microcoder/truncated_frac"] == pytest.approx(sum(cut) / 16, abs=1e-6)
    every = events(work, "generate")
    assert any(e["finish"] == "length" for e in every)
    # the tiny model's typical answer is exactly BUDGET tokens with its EOS: finished at the budget, not truncated
    assert any(e["tokens"] == BUDGET and e["finish"] == "stop" for e in every)
    assert "truncated by token count and EOS but not by OpenRLHF" not in (work / "train_ppo_ray.log").read_text()


def test_staged_temperature_switches_sampler_and_logprobs(mc):
    work, _ = mc
    m = train_steps(work)
    assert [m[s]["train/microcoder/temperature"] for s in (1, 2, 3)] == pytest.approx([1.0, 1.2, 1.2])
    assert [{e["temperature"] for e in gens(work, s - 1)} for s in (1, 2, 3)] == [{1.0}, {1.2}, {1.2}]
    for s in (1, 2, 3):
        # OpenRLHF's own check: the engine's processed log-probs at the sampling temperature vs the policy actor's
        # old log-probs at Actor.temperature; ~0 only if the actor switched with the sampler
        assert all(e["logprobs"] for e in gens(work, s - 1))
        assert abs(m[s]["train/vllm_kl"]) < 1e-3, (s, m[s]["train/vllm_kl"])
        assert m[s]["train/is_filter_ratio"] == 0.0


def test_logprob_check_discriminates_a_temperature_mismatch(mc):
    """The same check (OpenRLHF's PolicyLoss vllm_kl) on the same model: samples drawn at 1.2 with log-probs at 1.2
    give ~0, with log-probs at 1.0 far more than anything the run logged."""
    from openrlhf.models.loss import PolicyLoss
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from microcoder_ext.smoke.engine import CpuEngine, SamplingSettings

    work, _ = mc
    path = json.loads((work / "report.json").read_text())["model"]["path"]
    engine = CpuEngine(path, dtype=torch.bfloat16, seed=0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    tok = AutoTokenizer.from_pretrained(path)
    prompt = list(tok.apply_chat_template([{"role": "user", "content": "Return x plus 3."}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"])
    loss_fn = PolicyLoss(is_correction_level="token")
    kls = {1.0: [], 1.2: []}
    for k in range(8):
        out = engine.generate(prompt, SamplingSettings(max_tokens=BUDGET, temperature=1.2, logprobs=True, seed=k))
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = model(ids).logits.float()[:, len(prompt) - 1:-1]
        target = ids[:, len(prompt):]
        rollout = torch.tensor([out.logprobs])
        mask = torch.ones_like(rollout, dtype=torch.bool)
        for t in kls:
            old = torch.log_softmax(logits / t, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
            kls[t].append(float(loss_fn(old, old, torch.zeros_like(old), action_mask=mask,
                                        rollout_log_probs=rollout)[3]))
    matched, mismatched = max(map(abs, kls[1.2])), sum(kls[1.0]) / len(kls[1.0])
    observed = max(abs(row["train/vllm_kl"]) for row in train_steps(work).values())
    assert matched < 1e-2 and mismatched > 20 * observed and mismatched > 5 * matched, (kls, observed)


def test_checkpoint_resume_restores_the_controller_and_repeats_the_step(mc, mc_resume):
    a, b = train_steps(mc[0]), train_steps(mc_resume[0])
    assert sorted(b) == [3]  # resumed after step 2
    for key in ("train/microcoder/temperature", "train/microcoder/temperature_stage",
                "train/microcoder/masked_frac", "train/microcoder/truncated_frac", "train/rollout/reward_mean",
                "train/rollout/response_length_mean", "train/policy_loss", "train/vllm_kl"):
        assert math.isclose(a[3][key], b[3][key], rel_tol=1e-5, abs_tol=1e-6), (key, a[3][key], b[3][key])
    # the engine got the checkpoint's weights (the resume sync) = what it held after step 2 in the first run ...
    first = {e["version"]: e["checksum"] for e in events(mc[0], "weights_loaded")}
    resumed = {e["version"]: e["checksum"] for e in events(mc_resume[0], "weights_loaded")}
    assert sorted(resumed) == [1, 2] and resumed[1] == first[2]
    # (the update itself matches up to float rounding only: OpenRLHF does not checkpoint the policy actor's torch
    # RNG, which shuffles the replay buffer, so the resumed step sums the same samples in another order)
    assert math.isclose(a[3]["train/actor_grad_norm"], b[3]["train/actor_grad_norm"], rel_tol=1e-2)
    # ... and sampled the same responses for step 3, at the restored stage's temperature
    assert queries(mc_resume[0], 1) == queries(mc[0], 2)
    assert {e["temperature"] for e in gens(mc_resume[0], 1)} == {1.2}
    assert "temperature controller restored from the checkpoint (step 2)" in (
        mc_resume[0] / "train_ppo_ray.log").read_text()
    # the controller state OpenRLHF stored with its DeepSpeed checkpoint
    [states] = (mc[0] / "ckpt" / "_actor" / "global_step2").glob("*model_states.pt")
    saved = torch.load(states, map_location="cpu", weights_only=False)
    assert saved["microcoder"]["preset"] == "microcoder" and saved["global_step"] == 2
    assert saved["microcoder"]["temperature"] is not None


# ------------------------------------------------------------------------------------------------ the recipe cell


def test_recipe_cell_with_a_reference_model_and_kl(recipe, grpo):
    work, proc = recipe
    m = scalars(work)
    train = {s: r for s, r in m.items() if "train/policy_loss" in r}
    assert sorted(train) == [1, 2]
    report = json.loads((work / "report.json").read_text())
    assert report["ok"] and report["model"]["family"] == "qwen3"
    for what in ("--ds.packing_samples", "--train.dynamic_batch_enable", "reference GPUs", "weight-sync backend"):
        assert what in proc.stdout, what
    # grpo_baseline: KL loss against OpenRLHF's ReferenceModelActor (absent without a reference, see grpo)
    # (positive at every step: the policy moved away from the reference; its step-to-step course is not monotone)
    assert all(row["train/kl"] > 0 for row in train.values())
    assert all(r["train/kl"] == 0.0 for r in train_steps(grpo[0]).values())
    assert {e["temperature"] for e in events(work, "generate") if e["version"] < 2} == {1.2}
    assert any(k.startswith("eval/") for k in m[2])  # the recipe's eval ran at the (substituted) last step
    assert (work / "ckpt" / "_actor" / "global_step2").is_dir()  # ZeRO-3 checkpoint, colocated and sleeping
    loaded = events(work, "weights_loaded")
    sent = {e["seq"]: e["checksum"] for e in events(work, "weight_broadcast")}
    assert [e["version"] for e in loaded] == [1, 2] and all(e["changed"] for e in loaded)
    assert all(e["held"] == [sent[e["first"] + i] for i in range(e["tensors"])] for e in loaded)
