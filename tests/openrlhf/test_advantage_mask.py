"""The conditional truncation mask on real OpenRLHF 0.11.2 ``Experience`` objects from the real engine:

real argparse (``group_norm``) -> real ``RolloutRayActor`` on vLLM's real CPU engine (the warm-started tiny model,
per-request sampling seeds) with our reward file -> ``generate_responses`` (3 bundled problems x 4 samples, some cut at
``--rollout.max_new_tokens``, some ending with EOS) -> ``SamplesGenerator._process_response_into_experience`` ->
``RemoteExperienceMaker.split_rollout_samples`` (``Experience.concat_experiences``, micro batches of 5 that cut
across groups) -> real ``compute_advantages_and_returns`` -> :func:`apply_truncation_mask` -> replay-buffer round
trip -> real ``PolicyLoss`` (token-level, clip-higher). Every expected value is computed from what the engine
produced (``openrlhf_cases.sample_facts``).
"""

import copy

import pytest

# memory: the session's vLLM engine (its engine core and worker processes, a 1 GiB KV cache; tests/conftest.py)
pytestmark = [pytest.mark.openrlhf, pytest.mark.memory(4)]
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.core.config import MaskConfig  # noqa: E402
from microcoder_ext.core.masking import conditional_truncation_mask  # noqa: E402
from microcoder_ext.openrlhf.advantage_mask import MASKED_KEY, apply_truncation_mask, response_tokens  # noqa: E402

from openrlhf_cases import (  # noqa: E402
    M, N, ended_with_eos, group_rewards, make_flow, masked_at_rho_1, per_sample, response_length, sample_facts)


@pytest.fixture(scope="module")
def flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs):
    return make_flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs)


def expected_mask(flow, mode):
    return [masked_at_rho_1(v, trunc, rep, mode) for v, trunc, rep in flow.facts]


def test_rollout_has_what_the_mask_needs(flow, tiny_model):
    """The engine's answers: both kinds of stop, correct and incorrect verdicts, and rows the mask is for."""
    batches = flow.step()
    assert [len(b.sequences) for b in batches] == [5, 5, 2]  # micro batches cut across groups
    eos = tiny_model.tokenizer.eos_token_id
    tokens = per_sample(batches, response_tokens)
    truncated = [t for _, t, _ in flow.facts]
    # OpenRLHF's flag (vLLM finish_reason "length") is "used the whole budget without ending in EOS"
    assert truncated == [t.numel() == flow.budget and int(t[-1]) != eos for t in tokens]
    assert any(truncated) and not all(truncated)
    assert all(int(t[-1]) == eos for t, cut in zip(tokens, truncated) if not cut)
    verdicts = {v for v, _, _ in flow.facts}
    assert V.CORRECT in verdicts and verdicts & V.INCORRECT
    assert any(expected_mask(flow, "non_incorrect"))
    assert per_sample(batches, lambda b, j: int(b.response_length[j])) == [t.numel() for t in tokens]


@pytest.mark.parametrize("mode", ["non_incorrect", "correct_only"])
@pytest.mark.parametrize("repeat_check", ["block", "periodic"])
def test_rho1_masks_exactly_the_eligible_rows(flow, mode, repeat_check):
    batches = flow.step()
    before = copy.deepcopy(batches)
    cfg = MaskConfig(rho=1.0, m=M, mode=mode, repeat_check=repeat_check)
    metrics = apply_truncation_mask(batches, cfg, step=7, max_response_length=flow.budget)

    want = [masked_at_rho_1(v, t, r, mode) for v, t, r in sample_facts(before, M, repeat_check)]
    assert per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item()) == [float(w) for w in want]
    zeroed = 0  # masked rows that had a non-zero advantage (a group with equal rewards has none)
    for b, ref in zip(batches, before):
        assert torch.equal(b.action_mask, ref.action_mask)  # masked rows stay in the token-mean denominator
        for j, i in enumerate(b.index):
            if want[i]:
                zeroed += bool(ref.advantages[j][b.action_mask[j]].abs().min() > 0)
                assert torch.all(b.advantages[j] == 0) and torch.all(b.returns[j] == 0)
            else:  # untouched: OpenRLHF's own values, bit for bit
                assert torch.equal(b.advantages[j], ref.advantages[j]) and torch.equal(b.returns[j], ref.returns[j])

    # a masked row had a non-zero advantage unless its whole group had equal rewards
    rewards = group_rewards(flow.facts)
    assert zeroed == sum(w and bool(rewards[i // N].std() > 0) for i, w in enumerate(want))
    # unmasked rows keep the group statistics of all four samples (masked ones included): hand GRPO
    adv = per_sample(batches, lambda b, j: b.advantages[j][b.action_mask[j]])
    for g, r in enumerate(rewards):
        grpo = (r - r.mean()) / (r.std() + 1e-9)
        for k in range(N):
            i = g * N + k
            assert torch.allclose(adv[i], torch.full_like(adv[i], 0.0 if want[i] else grpo[k].item()), atol=1e-6)

    n = len(flow.facts)
    assert metrics["microcoder/masked_frac"] == pytest.approx(sum(want) / n)
    assert metrics["microcoder/truncated_frac"] == pytest.approx(sum(t for _, t, _ in flow.facts) / n)
    assert metrics["microcoder/eligible_frac"] == metrics["microcoder/masked_frac"]
    repeating = [r for _, _, r in sample_facts(before, M, repeat_check)]
    assert metrics["microcoder/repeat_frac"] == pytest.approx(sum(r and t for (_, t, _), r in
                                                                  zip(flow.facts, repeating)) / n)
    for v in V.ALL:
        assert metrics[f"microcoder/verdict/{v}"] == pytest.approx(sum(x == v for x, _, _ in flow.facts) / n)
    assert metrics["microcoder/verdict_missing_frac"] == metrics["microcoder/verdict_unknown_frac"] == 0.0


def test_rho0_masks_nothing(flow):
    batches = flow.step()
    before = copy.deepcopy(batches)
    metrics = apply_truncation_mask(batches, MaskConfig(rho=0.0, m=M), step=0)
    for b, ref in zip(batches, before):
        assert torch.equal(b.advantages, ref.advantages) and torch.equal(b.returns, ref.returns)
        assert b.info[MASKED_KEY].tolist() == [0.0] * len(b.sequences)
    assert metrics["microcoder/masked_frac"] == 0.0
    assert metrics["microcoder/eligible_frac"] == pytest.approx(sum(expected_mask(flow, "non_incorrect"))
                                                                / len(flow.facts))


def test_disabled_mask_touches_nothing(flow):
    batches = flow.step()
    before = copy.deepcopy(batches)
    assert apply_truncation_mask(batches, MaskConfig(enable=False, rho=1.0, m=M), step=0) == {}
    for b, ref in zip(batches, before):
        assert torch.equal(b.advantages, ref.advantages)
        assert b.info[MASKED_KEY].tolist() == [0.0] * len(b.sequences)


def _masks(flow, cfg, step, reverse=False):
    batches = flow.step()
    if reverse:  # experiences arriving in another order (async rollout): same sample -> same coin
        batches = batches[::-1]
    apply_truncation_mask(batches, cfg, step=step)
    return per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item())


def test_coins_are_per_step_and_resume_safe(flow):
    cfg = MaskConfig(rho=0.5, m=M, seed=3)
    runs = {s: _masks(flow, cfg, s) for s in range(12)}  # one eligible row: all alike w.p. 2/4096
    resumed = MaskConfig(rho=0.5, m=M, seed=3)  # a fresh config after a restart, same step numbers
    for s in (2, 5):
        assert _masks(flow, resumed, s) == runs[s]
        assert _masks(flow, resumed, s, reverse=True) == runs[s]
    eligible = expected_mask(flow, "non_incorrect")
    for mask in runs.values():
        assert all(e or not m for m, e in zip(mask, eligible))  # only eligible rows are ever masked
    assert len({tuple(m) for m in runs.values()}) > 1  # the coins change with the step

    # the same decision as the core function on the same rows and coins (rollout order)
    batches = flow.step()
    toks = per_sample(batches, response_tokens)
    lengths = torch.tensor([t.numel() for t in toks])
    padded = torch.nn.utils.rnn.pad_sequence(toks, batch_first=True)
    core = conditional_truncation_mask(padded, lengths, flow.budget, [v for v, _, _ in flow.facts], rho=0.5, m=M,
                                       generator=cfg.generator(4))
    assert [float(x) for x in core.tolist()] == runs[4]


@pytest.mark.parametrize("policy", ["score", "keep", "error"])
def test_missing_verdict_follows_the_policy(flow, policy):
    batches = flow.step(drop_verdicts=True)
    cfg = MaskConfig(rho=1.0, m=M, missing_verdict=policy)
    if policy == "error":
        with pytest.raises(RuntimeError, match="mc_verdict_"):
            apply_truncation_mask(batches, cfg, step=0)
        return
    metrics = apply_truncation_mask(batches, cfg, step=0)
    got = per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item())
    if policy == "score":  # score >= correct_score -> correct, else wrong_answer
        want = [trunc and v == V.CORRECT and not rep for v, trunc, rep in flow.facts]
    else:
        want = [False] * len(flow.facts)
    assert got == [float(w) for w in want]
    assert metrics["microcoder/verdict_missing_frac"] == 1.0


def test_ambiguous_verdict_is_never_masked(flow):
    batches = flow.step()
    i = expected_mask(flow, "non_incorrect").index(True)  # a row masked at rho=1 otherwise
    b = next(b for b in batches if i in b.index)
    j = b.index.index(i)
    other = V.WRONG_ANSWER if flow.facts[i][0] != V.WRONG_ANSWER else V.CORRECT
    b.info[f"mc_verdict_{other}"][j] = 1.0  # a second verdict: ambiguous
    metrics = apply_truncation_mask(batches, MaskConfig(rho=1.0, m=M), step=0)
    assert b.info[MASKED_KEY][j].item() == 0.0
    assert metrics["microcoder/verdict_unknown_frac"] == pytest.approx(1 / len(flow.facts))


def test_policy_loss_zero_gradient_for_masked_rows_which_stay_in_the_denominator(flow):
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch, split_experience_batch
    from openrlhf.utils.loss_utils import _optimizer_step_loss_norm

    batches = flow.step()
    apply_truncation_mask(batches, MaskConfig(rho=1.0, m=M), step=0)
    batch = make_experience_batch([it for b in batches for it in split_experience_batch(b)])  # replay buffer
    # the replay buffer keeps info values as per-sample lists (0-d tensors); ppo_actor logs them as rates
    masked = torch.stack(list(batch.info[MASKED_KEY])).bool()
    assert masked.tolist() == expected_mask(flow, "non_incorrect")
    mask = batch.action_mask.bool()
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(mask.shape, generator=g) - 0.1
    loss_fn = PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28, token_level_loss=True)
    norm = _optimizer_step_loss_norm([mask], None, 1, 1)  # the trainer's normaliser: all response tokens
    assert norm["batch_num_tokens"].item() == mask.sum().item()

    for kwargs in ({}, {"batch_num_tokens": norm["batch_num_tokens"], "dp_size": 1}):
        log_probs = (old + 0.05 * torch.randn(mask.shape, generator=g)).requires_grad_()
        loss = loss_fn(log_probs, old, batch.advantages, action_mask=mask, **kwargs)[0]
        loss.backward()
        grad = log_probs.grad
        assert torch.all(grad[masked] == 0)
        live = [i for i in range(len(masked)) if not masked[i] and batch.advantages[i][mask[i]].abs().sum() > 0]
        assert live  # a group with mixed rewards and an unmasked row
        assert [grad[i][mask[i]].abs().sum().item() > 0 for i in live] == [True] * len(live), grad.abs().sum(-1)
        # the denominator counts the masked rows' tokens: same loss as the unmasked rows' sum over ALL tokens
        kept = ~masked
        sub = loss_fn(log_probs[kept].detach(), old[kept], batch.advantages[kept], action_mask=mask[kept])[0]
        assert loss.item() == pytest.approx(sub.item() * mask[kept].sum().item() / mask.sum().item(), rel=1e-5)


# ------------------------------------------------------------------------------------------------ EOS at the budget


@pytest.fixture(scope="module")
def eos_flow(flow, cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs):
    """One prompt of ``flow`` again with the budget set to the length L of its longest response that ended with EOS
    (seed ``a``) and a response of the same prompt that went on past L (seed ``b``): vLLM draws a seeded request's
    tokens from its own generator, so with budget L seed ``a`` ends with EOS exactly at the budget and seed ``b`` is
    cut there. The tests read which rows the engine answered so, they do not assume it."""
    eos = tiny_model.tokenizer.eos_token_id
    for g, group in enumerate(flow.responses):
        lengths = [response_length(r) for r in group]
        ended = [ended_with_eos(r, eos) for r in group]
        stopped = [k for k in range(len(group)) if ended[k]]
        if not stopped:
            continue
        a = max(stopped, key=lambda k: lengths[k])
        longer = [k for k in range(len(group))  # went on past L: longer, or cut by a budget of at least L
                  if lengths[k] > lengths[a] or (group[k]["truncated"] and lengths[k] >= lengths[a])]
        if longer:
            own = flow.seeds[g]
            seeds = [own[a], own[longer[0]]] + [s for k, s in enumerate(own) if k not in (a, longer[0])]
            out = make_flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs, prompts=1,
                            seeds=[seeds], max_new=lengths[a], temperature=flow.temperature, first=g)
            return out
    raise AssertionError("no prompt of the rollout has a response that ended with EOS and a longer one")


@pytest.mark.parametrize("stop_ids", ["eos", "none"])
def test_eos_exactly_at_the_budget_is_not_truncated(eos_flow, tiny_model, stop_ids):
    """core.truncation: a response that used the whole budget but ends with EOS finished on its own; one cut at the
    budget is truncated. With the stop ids the mask decides from the tokens; without them it falls back to
    OpenRLHF's own ``Experience.truncated`` (vLLM finish_reason "length"); both agree."""
    from microcoder_ext.core.truncation import truncated_rows

    batches = eos_flow.step()
    before = copy.deepcopy(batches)
    eos = tiny_model.tokenizer.eos_token_id
    budget = eos_flow.budget
    tokens = per_sample(batches, response_tokens)
    at_budget = [t.numel() == budget and int(t[-1]) == eos for t in tokens]  # used the whole budget, ended with EOS
    cut = [t.numel() == budget and int(t[-1]) != eos for t in tokens]  # used the whole budget, no EOS
    assert any(at_budget) and any(cut), [(t.numel(), int(t[-1])) for t in tokens]
    flags = per_sample(batches, lambda b, j: bool(b.truncated[j]))  # OpenRLHF's flag (vLLM's finish reason)
    assert flags == cut  # vLLM stops by length exactly there
    assert truncated_rows(tokens, budget, [eos]).tolist() == flags  # the one definition agrees with vLLM

    metrics = apply_truncation_mask(batches, MaskConfig(rho=1.0, m=M), step=0, max_response_length=budget,
                                    stop_token_ids=(eos,) if stop_ids == "eos" else ())
    want = expected_mask(eos_flow, "non_incorrect")
    assert not any(w for w, a in zip(want, at_budget) if a)  # EOS at the budget: finished, never masked
    assert per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item()) == [float(w) for w in want]
    assert metrics["microcoder/truncated_frac"] == pytest.approx(sum(flags) / len(flags))
    assert metrics["microcoder/masked_frac"] == pytest.approx(sum(want) / len(want))
    adv = per_sample(batches, lambda b, j: b.advantages[j][b.action_mask[j]])
    ref = per_sample(before, lambda b, j: b.advantages[j][b.action_mask[j]])
    assert all(torch.equal(adv[i], ref[i]) for i, a in enumerate(at_budget) if a)  # they keep their advantage


def test_the_trainer_hook_gets_the_models_stop_ids(eos_flow, tiny_model):
    """The trainer's wrapper (budget --rollout.max_new_tokens, stop ids from the tokenizer / generation config) on
    real experiences: the same decision."""
    from types import SimpleNamespace

    from microcoder_ext.openrlhf.trainer import install_truncation_mask, model_stop_token_ids

    batches = eos_flow.step()
    tokenizer = tiny_model.tokenizer
    stop = model_stop_token_ids(tiny_model.path, tokenizer)
    assert stop == (tokenizer.eos_token_id,)
    maker = SimpleNamespace(compute_advantages_and_returns=lambda exps: exps)
    hook = install_truncation_mask(maker, MaskConfig(rho=1.0, m=M), eos_flow.args, stop)
    assert hook.max_response_length == eos_flow.budget
    maker.compute_advantages_and_returns(batches)
    want = expected_mask(eos_flow, "non_incorrect")
    assert per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item()) == [float(w) for w in want]
