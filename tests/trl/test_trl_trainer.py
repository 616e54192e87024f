"""MicrocoderGRPOTrainer inside TRL 1.16's real GRPO step on CPU (tiny random Qwen2, byte tokenizer, no download).

Generation is steered only through TRL's own options: ``GRPOConfig.generation_kwargs`` with a transformers
``sequence_bias`` (EOS and a looping token favoured), so a seeded batch holds completions that end with EOS, completions
truncated at ``max_completion_length`` and truncated completions stuck in a loop. Verdicts come from a
:class:`CodeReward` whose scoring step is scripted (ours, not TRL's)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.config import ConfigError
from microcoder_ext.trl.reward import CodeReward
from microcoder_ext.trl.trainer import STATE_FILE, MicrocoderGRPOTrainer

_spec = importlib.util.spec_from_file_location("trl_conftest", Path(__file__).with_name("conftest.py"))
_c = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_c)
grpo_args, tiny_qwen2 = _c.grpo_args, _c.tiny_qwen2

M = 2  # repeat window for the tests (the paper's 128 needs 256-token completions)
G = 2  # num_generations


class ScriptedReward(CodeReward):
    """CodeReward whose per-completion results come from ``script`` (verdict per row, cycled); score 1.0 = correct."""

    def __init__(self, script):
        super().__init__()
        self.script = list(script)

    def _score(self, completions, kwargs):
        out = []
        for i in range(len(completions)):
            v = self.script[i % len(self.script)]
            out.append({"score": 1.0 if v == V.CORRECT else 0.0, "verdict": v, "pass_rate": 0.0, "num_tests": 1,
                        "detail": "scripted"})
        return out


def steering(tokenizer):
    eos, x = tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("a")
    return {"sequence_bias": {(eos,): 3.0, (x,): 3.0, (x, x): 50.0}}


def dataset(n=4):
    return Dataset.from_list([{"prompt": f"p{i}:", "tests": "{}"} for i in range(n)])


def make_trainer(tmp_path, tokenizer, *, reward=None, microcoder=None, preset="microcoder", seed=0, model=None,
                 **args):
    args.setdefault("generation_kwargs", steering(tokenizer))
    return MicrocoderGRPOTrainer(
        model=model or tiny_qwen2(tokenizer, seed), reward_funcs=[reward or CodeReward()],
        args=grpo_args(tmp_path, preset, **args), train_dataset=dataset(), processing_class=tokenizer,
        microcoder=microcoder)


def local_batch(n_prompts=4):
    return [{"prompt": f"p{i}:", "tests": "{}"} for i in range(n_prompts) for _ in range(G)]


def hand_advantages(scores):
    r = torch.tensor(scores, dtype=torch.float32).view(-1, G)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True)  # Bessel, as TRL's nanstd
    return ((r - mean) / (std + 1e-4)).view(-1)


def hand_conditions(ids, mask, eos, m=M):
    """Per row: (truncated = no EOS within max_completion_length, repeating = o[-m:] == o[-2m:-m])."""
    out = []
    for row, mk in zip(ids.tolist(), mask.tolist()):
        toks = [t for t, k in zip(row, mk) if k]
        truncated = eos not in toks and len(toks) == len(row)
        repeating = truncated and len(toks) >= 2 * m and toks[-m:] == toks[-2 * m:-m]
        out.append((truncated, repeating))
    return out


SCRIPT = [V.CORRECT, V.WRONG_ANSWER, V.NO_ANSWER, V.CORRECT, V.RUNTIME_ERROR, V.NO_ANSWER, V.CORRECT, V.TIMEOUT]


@pytest.mark.parametrize("rho", [1.0, 0.0])
def test_mask_zeroes_exactly_the_hand_computed_rows(tmp_path, tokenizer, rho):
    reward = ScriptedReward(SCRIPT)
    trainer = make_trainer(tmp_path, tokenizer, reward=reward, microcoder={"mask": {"rho": rho, "m": M}})
    trainer.model.train()
    torch.manual_seed(1)
    out = trainer._generate_and_score_completions(local_batch())

    ids, mask = out["completion_ids"], out["completion_mask"]
    cond = hand_conditions(ids, mask, tokenizer.eos_token_id)
    kinds = {(t, r) for t, r in cond}
    assert (False, False) in kinds and (True, False) in kinds and (True, True) in kinds, cond  # the batch has all
    scores = [1.0 if v == V.CORRECT else 0.0 for v in SCRIPT]
    expected = hand_advantages(scores)
    masked_rows = []
    for i, ((trunc, rep), v) in enumerate(zip(cond, SCRIPT)):
        if rho == 1.0 and trunc and v not in V.INCORRECT and not rep:
            expected[i] = 0.0
            masked_rows.append(i)
    assert torch.allclose(out["advantages"], expected, atol=1e-5), (out["advantages"], expected, cond)
    # masked rows keep their tokens in the loss denominator
    assert int(out["num_items_in_batch"]) == int(mask.sum())
    assert (mask.sum(dim=1) > 0).all()
    # untouched: truncated-but-repeating rows and truncated incorrect rows keep TRL's advantage
    untouched = [i for i, ((t, r), v) in enumerate(zip(cond, SCRIPT)) if t and (r or v in V.INCORRECT)]
    assert untouched
    for i in untouched:
        assert out["advantages"][i] == pytest.approx(float(hand_advantages(scores)[i]), abs=1e-5)
    if rho == 1.0:
        assert masked_rows, cond  # the seeded batch masks something

    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    n = len(SCRIPT)
    assert metrics["microcoder/masked_frac"] == pytest.approx(len(masked_rows) / n)
    assert metrics["microcoder/truncated_frac"] == pytest.approx(sum(t for t, _ in cond) / n)
    assert metrics["microcoder/truncated_frac"] == pytest.approx(metrics["completions/clipped_ratio"])
    assert metrics["microcoder/repeat_frac"] == pytest.approx(sum(r for _, r in cond) / n)
    assert metrics["microcoder/verdict/correct"] == pytest.approx(3 / n)
    assert metrics["microcoder/verdict_missing_frac"] == 0.0


def test_mask_coins_follow_the_step_generator(tmp_path, tokenizer):
    """rho=0.5: the masked rows are the eligible rows whose coin from cfg.mask.generator(step) is below rho."""
    from microcoder_ext.core.config import MaskConfig

    script = [V.CORRECT, V.NO_ANSWER]  # both non-incorrect; unequal rewards: every advantage is +-0.707
    trainer = make_trainer(tmp_path, tokenizer, reward=ScriptedReward(script),
                           microcoder={"mask": {"rho": 0.5, "m": M, "seed": 7}})
    trainer.model.train()
    trainer.state.global_step = 3
    torch.manual_seed(1)
    out = trainer._generate_and_score_completions(local_batch())
    cond = hand_conditions(out["completion_ids"], out["completion_mask"], tokenizer.eos_token_id)
    coins = torch.rand(len(cond), generator=MaskConfig(rho=0.5, m=M, seed=7).generator(3))
    masked = [t and not r and float(u) < 0.5 for (t, r), u in zip(cond, coins)]
    assert any(masked) and not all(masked)
    expected = hand_advantages([1.0, 0.0] * 4)
    expected[torch.tensor(masked)] = 0.0
    assert torch.allclose(out["advantages"], expected, atol=1e-5)
    assert trainer._metrics["train"]["microcoder/masked_frac"][-1] == pytest.approx(sum(masked) / len(cond))


def test_without_code_reward_the_score_policy_decides(tmp_path, tokenizer):
    def flat(prompts, completions, **kw):
        return [1.0] * len(completions)

    trainer = MicrocoderGRPOTrainer(
        model=tiny_qwen2(tokenizer), reward_funcs=[flat], args=grpo_args(tmp_path, generation_kwargs=steering(
            tokenizer)), train_dataset=dataset(), processing_class=tokenizer, microcoder={"mask": {"rho": 1.0, "m": M}})
    trainer.model.train()
    torch.manual_seed(1)
    trainer._generate_and_score_completions(local_batch())
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    assert metrics["microcoder/verdict_missing_frac"] == 1.0
    assert metrics["microcoder/verdict/correct"] == 1.0  # score 1.0 >= correct_score
    with pytest.raises(ConfigError, match="no CodeReward among reward_funcs"):
        MicrocoderGRPOTrainer(model=tiny_qwen2(tokenizer), reward_funcs=[flat], args=grpo_args(tmp_path),
                              train_dataset=dataset(), processing_class=tokenizer,
                              microcoder={"mask": {"missing_verdict": "error"}})


def test_refuses_trl_mask_all_and_bad_config(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match="mask_truncated_completions=True"):
        make_trainer(tmp_path, tokenizer, mask_truncated_completions=True)
    with pytest.raises(ConfigError, match=r"microcoder.mask: rho must be a probability"):
        make_trainer(tmp_path, tokenizer, microcoder={"mask": {"rho": 2}})
    with pytest.raises(ConfigError, match="unknown key"):
        make_trainer(tmp_path, tokenizer, microcoder={"mask": {"rhoo": 0.1}})
    # mask off: TRL's own truncation mask is the user's business
    trainer = make_trainer(tmp_path, tokenizer, mask_truncated_completions=True,
                           microcoder={"mask": {"enable": False}})
    assert not trainer.mc_mask_enabled


# ---------------------------------------------------------------------------------------------- temperature


def manual_logps(model, ids, attention, keep, temperature):
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -keep - 1:-1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids[:, -keep:].unsqueeze(-1)).squeeze(-1)


def test_temperature_reaches_generation_and_logprobs(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer, steps_per_generation=2,
                           microcoder={"temperature": {"mode": "constant", "value": 0.7}})
    assert trainer.args.temperature == 1.2  # the preset's; the controller overrides it for training
    assert trainer.generation_config.temperature == 0.7 and trainer.temperature == 0.7
    assert trainer.mc_logprob_temperatures() == [0.7]

    seen = []
    original = trainer.model.generate

    def recording_generate(*a, **kw):
        seen.append(kw["generation_config"].temperature)
        return original(*a, **kw)

    trainer.model.generate = recording_generate
    trainer.model.train()
    out = trainer._generate_and_score_completions(local_batch(2))
    assert seen == [0.7]
    assert trainer._metrics["train"]["microcoder/temperature"] == [0.7]

    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    keep = out["completion_ids"].shape[1]
    trainer.model.eval()
    with torch.no_grad():
        got, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, keep)
    valid = out["completion_mask"].bool()
    want = manual_logps(trainer.model, ids, attention, keep, 0.7)
    assert torch.allclose(got[valid], want[valid], atol=1e-4)
    assert not torch.allclose(got[valid], manual_logps(trainer.model, ids, attention, keep, 1.2)[valid], atol=1e-3)

    # evaluation keeps TRL's own temperature, training resumes with the buffer's
    seen.clear()
    trainer._prepare_inputs(local_batch(2))  # eval mode: generates at args.temperature
    assert seen == [1.2] and trainer.mc_logprob_temperatures() == [1.2]
    trainer.model.train()
    trainer._buffered_inputs = [out, out]
    trainer._step = 1  # not a regeneration step: the buffered completions (sampled at 0.7) are reused
    trainer._prepare_inputs(local_batch(2))
    assert seen == [1.2] and trainer.mc_logprob_temperatures() == [0.7] and trainer.generation_config.temperature == 0.7


def test_staged_schedule_switches_at_a_regeneration_boundary(tmp_path, tokenizer):
    """steps_per_generation=2: regenerations at steps 0, 2, ..., 22; the stage starting at step 21 applies from the
    regeneration at step 22, and step 21 trains on the step-20 buffer with its temperature."""
    from transformers import TrainerCallback

    trainer = make_trainer(tmp_path, tokenizer, per_device_train_batch_size=2, steps_per_generation=2,
                           max_steps=23, max_completion_length=4, reward=ScriptedReward([V.CORRECT, V.NO_ANSWER]),
                           microcoder={"temperature": {"mode": "staged",
                                                                     "stages": [[0, 0.6], [21, 1.4]]}})
    generations = []
    original = trainer.model.generate

    def recording_generate(*a, **kw):
        generations.append((trainer.state.global_step, kw["generation_config"].temperature))
        return original(*a, **kw)

    trainer.model.generate = recording_generate
    at_loss = {}

    class Record(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # after the step's loss; global_step already counts it
            at_loss[state.global_step - 1] = (trainer.mc_logprob_temperatures()[0], trainer.temperature)

    trainer.add_callback(Record())
    trainer.train()
    assert [s for s, _ in generations] == list(range(0, 23, 2))
    assert {t for s, t in generations if s <= 20} == {0.6} and dict(generations)[22] == 1.4
    assert at_loss[21] == (0.6, 0.6) and at_loss[22] == (1.4, 1.4) and at_loss[20] == (0.6, 0.6)
    temps = [h["microcoder/temperature"] for h in trainer.state.log_history if "microcoder/temperature" in h]
    assert 0.6 in temps and 1.4 in temps


# ---------------------------------------------------------------------------------------------- loss settings


@pytest.mark.parametrize("preset,beta,high", [("microcoder", 0.0, 0.28), ("dapo_baseline", 0.0, 0.28),
                                              ("grpo_baseline", 0.001, 0.2), ("mask_only", 0.0, 0.2)])
def test_preset_loss_settings_reach_trl(tmp_path, tokenizer, preset, beta, high):
    path = tmp_path / "tiny"  # with KL, TRL loads the reference model from the policy's path
    tiny_qwen2(tokenizer).save_pretrained(path)
    trainer = make_trainer(tmp_path, tokenizer, preset=preset, model=str(path))
    assert (trainer.beta, trainer.epsilon_low, trainer.epsilon_high, trainer.loss_type) == (beta, 0.2, high, "dapo")
    assert trainer.scale_rewards == "group" and trainer.mask_truncated_completions is False
    assert (trainer.ref_model is None) == (beta == 0.0)  # no KL: no reference model
    if trainer.mc_temperature is not None:  # the controller's temperature on the policy's log-prob head
        assert trainer.mc_logprob_temperatures() == [1.2] * (2 if beta else 1)
    if beta:  # ... and on the reference model's
        trainer.mc_set_temperature(0.9)
        assert trainer.mc_logprob_temperatures() == [0.9] * len(trainer._mc_cells)


def test_clipped_ratio_behaves_as_0_2_and_0_28(tmp_path, tokenizer):
    trainer = make_trainer(tmp_path, tokenizer)
    trainer.model.train()
    out = trainer._generate_and_score_completions(local_batch(2))
    trainer.model.eval()  # eval: the dapo normaliser is num_items_in_batch / num_processes
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    keep = out["completion_ids"].shape[1]
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, keep)
    # per row: (ratio, advantage) -> the clipped surrogate -min(r A, clip(r, 0.8, 1.28) A)
    cases = [(1.5, 1.0, -1.28), (1.1, 1.0, -1.1), (0.5, -1.0, 0.8), (1.5, -1.0, 1.5)]
    ratio = torch.tensor([c[0] for c in cases]).unsqueeze(1)
    inputs = dict(out, advantages=torch.tensor([c[1] for c in cases]),
                  old_per_token_logps=logps - torch.log(ratio))
    mask = out["completion_mask"].float()
    with torch.no_grad():
        loss = trainer._compute_loss(trainer.model, inputs)
    expected = sum(c[2] * float(mask[i].sum()) for i, c in enumerate(cases)) / float(mask.sum())
    assert float(loss) == pytest.approx(expected, rel=1e-4)


# ---------------------------------------------------------------------------------------------- end to end


def test_train_logs_microcoder_metrics_and_checkpoints_the_controller(tmp_path, tokenizer):
    temperature = {"mode": "auto", "value": 1.0, "target_steps": 2, "window": 20, "min_interval": 20}
    trainer = make_trainer(tmp_path, tokenizer, max_steps=2, save_strategy="steps", save_steps=1,
                           microcoder={"mask": {"m": M}, "temperature": temperature})
    trainer.train()
    logged = [h for h in trainer.state.log_history if "microcoder/masked_frac" in h]
    assert len(logged) == 2
    for key in ("microcoder/truncated_frac", "microcoder/temperature", "microcoder/diversity/distinct4",
                "microcoder/verdict/no_answer", "reward", "completions/clipped_ratio"):
        assert key in logged[0], key
    state = trainer.mc_temperature.state_dict()
    ckpt = Path(trainer.args.output_dir) / "checkpoint-2"
    saved = json.loads((ckpt / STATE_FILE).read_text())
    assert saved["temperature"] == json.loads(json.dumps(state)) and saved["global_step"] == 2
    assert saved["temperature"]["last_step"] == 1 and len(saved["temperature"]["target_samples"]) == 2

    resumed = make_trainer(tmp_path, tokenizer, max_steps=3, save_strategy="no",
                           microcoder={"mask": {"m": M}, "temperature": temperature})
    assert resumed.mc_temperature.state_dict()["last_step"] is None
    resumed.train(resume_from_checkpoint=str(ckpt))
    after = resumed.mc_temperature.state_dict()
    assert after["last_step"] == 2  # restored (last_step 1) and then observed step 2
    assert after["target"] == pytest.approx(state["target"]) and not math.isnan(after["target"])


def test_lora_trains_with_the_controller_on_the_base_models_head(tmp_path, tokenizer):
    from peft import LoraConfig

    trainer = MicrocoderGRPOTrainer(
        model=tiny_qwen2(tokenizer), reward_funcs=[ScriptedReward([V.CORRECT, V.NO_ANSWER])],
        args=grpo_args(tmp_path, max_steps=1, generation_kwargs=steering(tokenizer)), train_dataset=dataset(),
        processing_class=tokenizer, peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        microcoder={"mask": {"m": M}, "temperature": {"value": 0.8}})
    assert trainer.mc_logprob_temperatures() == [0.8]
    trainer.train()
    assert any("microcoder/masked_frac" in h for h in trainer.state.log_history)


def test_eos_exactly_at_the_budget_finished_cut_at_the_budget_truncated(tmp_path, tokenizer):
    """core.truncation, as in the verl and OpenRLHF adapters: a completion of exactly max_completion_length tokens
    whose last one is EOS finished (not masked); one of that length without EOS was cut (masked, rho 1)."""
    reward = ScriptedReward([V.CORRECT])
    trainer = make_trainer(tmp_path, tokenizer, reward=reward, microcoder={"mask": {"rho": 1.0, "m": M}})
    L = trainer.max_completion_length
    eos, a = tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("a")
    b = tokenizer.convert_tokens_to_ids("b")
    ids = torch.tensor([[a] * (L - 1) + [eos],  # EOS at the budget: finished
                        ([a, b, b, a] * L)[:L],  # cut at the budget; its last 2m tokens do not repeat
                        [a, b] + [eos] + [tokenizer.pad_token_id] * (L - 3),  # short, finished
                        [a] * (L - 1) + [eos]])
    mask = torch.ones_like(ids)
    mask[2, 3:] = 0
    trainer.mc_reward.last_verdicts = [V.CORRECT] * 4
    out = {"completion_ids": ids, "completion_mask": mask, "advantages": torch.tensor([1.0, 1.0, -1.0, -1.0])}
    metrics = trainer._mc_apply_mask(out, step=1)
    assert out["advantages"].tolist() == [1.0, 0.0, -1.0, -1.0]
    assert metrics["microcoder/truncated_frac"] == 0.25 and metrics["microcoder/masked_frac"] == 0.25
