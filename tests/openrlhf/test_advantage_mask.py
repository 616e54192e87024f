"""The conditional truncation mask on real OpenRLHF 0.11.2 ``Experience`` objects, only vLLM faked:

real argparse (``group_norm``) -> real ``RolloutRayActor`` with our reward file -> ``generate_responses`` (3 prompts x
4 samples, some cut at ``--rollout.max_new_tokens``) -> ``SamplesGenerator._process_response_into_experience`` ->
``RemoteExperienceMaker.split_rollout_samples`` (``Experience.concat_experiences``, micro batches of 5 that cut
across groups) -> real ``compute_advantages_and_returns`` -> :func:`apply_truncation_mask` -> replay-buffer round
trip -> real ``PolicyLoss`` (token-level, clip-higher).
"""

import copy

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.core.config import MaskConfig  # noqa: E402
from microcoder_ext.core.masking import conditional_truncation_mask  # noqa: E402
from microcoder_ext.openrlhf.advantage_mask import MASKED_KEY, apply_truncation_mask, response_tokens  # noqa: E402

from openrlhf_cases import (  # noqa: E402
    BROKEN_ROW, CASES as _CASES, FILLER, MAX_NEW, M, N, SUM, SUM_TESTS, fence, masked_at_rho_1, per_sample)

CASES = {**_CASES, BROKEN_ROW[0]: BROKEN_ROW[1]}
EXPECTED = [s for _, (_, samples) in CASES.items() for s in samples]


def expected_mask(mode):
    return [masked_at_rho_1(v, trunc, rep, mode) for _, v, trunc, rep in EXPECTED]


def make_flow(cases, cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt):
    """Runs the rollout of ``cases`` once; ``flow.step()`` rebuilds fresh post-advantage experiences from it."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    args = cli("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", str(N),
               "--algo.kl.init_coef", "0", "--actor.eps_clip_low_high", "0.2", "0.28",
               "--reward.remote_url", str(reward_files["reward_fns"]), "--data.max_len", "1024",
               "--rollout.max_new_tokens", str(MAX_NEW), "--rollout.batch_size", str(len(cases)),
               "--rollout.micro_batch_size", str(min(5, N * len(cases))), "--actor.num_gpus_per_node", "1")
    script = {make_prompt(p): [c for c, *_ in samples] for p, (_, samples) in cases.items()}
    _, responses = rollout_responses(args, script, [(make_prompt(p), label) for p, (label, _) in cases.items()], N)
    strategy = SimpleNamespace(args=args)
    gen_kwargs = make_generate_kwargs(args)
    generator = SamplesGenerator(strategy, None, None, tokenizer, [])
    maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tokenizer)

    def step(drop_verdicts=False):
        samples = [generator._process_response_into_experience(r, **gen_kwargs) for g in responses for r in g]
        if drop_verdicts:  # a user reward without our one-hot verdicts
            for s in samples:
                s.info = {k: v for k, v in s.info.items() if not k.startswith("mc_verdict_")}
        batches = maker.split_rollout_samples(samples)
        for b in batches:
            b.kl = torch.zeros(b.action_mask.shape)  # what make_experience sets without a reference model
        return maker.compute_advantages_and_returns(batches)

    return SimpleNamespace(args=args, step=step)


@pytest.fixture(scope="module")
def flow(cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt):
    return make_flow(CASES, cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt)


def test_rollout_matches_the_cases(flow):
    batches = flow.step()
    assert [len(b.sequences) for b in batches] == [5, 5, 2]  # micro batches cut across groups
    assert per_sample(batches, lambda b, j: bool(b.truncated[j])) == [t for _, _, t, _ in EXPECTED]
    got = per_sample(batches, lambda b, j: [v for v in V.ALL if b.info[f"mc_verdict_{v}"][j] == 1.0])
    assert got == [[v] for _, v, _, _ in EXPECTED]
    lengths = per_sample(batches, lambda b, j: response_tokens(b, j).numel())
    assert all((n == MAX_NEW) == t for n, (_, _, t, _) in zip(lengths, EXPECTED))
    assert lengths == per_sample(batches, lambda b, j: int(b.response_length[j]))


@pytest.mark.parametrize("mode", ["non_incorrect", "correct_only"])
@pytest.mark.parametrize("repeat_check", ["block", "periodic"])
def test_rho1_masks_exactly_the_eligible_rows(flow, mode, repeat_check):
    batches = flow.step()
    before = copy.deepcopy(batches)
    cfg = MaskConfig(rho=1.0, m=M, mode=mode, repeat_check=repeat_check)
    metrics = apply_truncation_mask(batches, cfg, step=7, max_response_length=MAX_NEW)

    want = expected_mask(mode)
    assert per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item()) == [float(w) for w in want]
    zeroed = 0  # masked rows that had a non-zero advantage (the all-sandbox_error group has none)
    for b, ref in zip(batches, before):
        assert torch.equal(b.action_mask, ref.action_mask)  # masked rows stay in the token-mean denominator
        for j, i in enumerate(b.index):
            if want[i]:
                zeroed += bool(ref.advantages[j][b.action_mask[j]].abs().min() > 0)
                assert torch.all(b.advantages[j] == 0) and torch.all(b.returns[j] == 0)
            else:  # untouched: OpenRLHF's own values, bit for bit
                assert torch.equal(b.advantages[j], ref.advantages[j]) and torch.equal(b.returns[j], ref.returns[j])

    assert zeroed == (2 if mode == "correct_only" else 3)
    # unmasked rows keep the group statistics of all four samples (masked ones included): hand GRPO
    adv = per_sample(batches, lambda b, j: b.advantages[j][b.action_mask[j]])
    for g, (_, (_, samples)) in enumerate(CASES.items()):
        r = torch.tensor([1.0 if v == V.CORRECT else 0.0 for _, v, _, _ in samples])
        grpo = (r - r.mean()) / (r.std() + 1e-9)
        for k in range(N):
            i = g * N + k
            assert torch.allclose(adv[i], torch.full_like(adv[i], 0.0 if want[i] else grpo[k].item()), atol=1e-6)

    n = len(EXPECTED)
    assert metrics["microcoder/masked_frac"] == pytest.approx(sum(want) / n)
    assert metrics["microcoder/truncated_frac"] == pytest.approx(sum(t for _, _, t, _ in EXPECTED) / n)
    assert metrics["microcoder/eligible_frac"] == metrics["microcoder/masked_frac"]
    assert metrics["microcoder/repeat_frac"] == pytest.approx(1 / n)
    for v in V.ALL:
        assert metrics[f"microcoder/verdict/{v}"] == pytest.approx(sum(x == v for _, x, _, _ in EXPECTED) / n)
    assert metrics["microcoder/verdict_missing_frac"] == metrics["microcoder/verdict_unknown_frac"] == 0.0


def test_rho0_masks_nothing(flow):
    batches = flow.step()
    before = copy.deepcopy(batches)
    metrics = apply_truncation_mask(batches, MaskConfig(rho=0.0, m=M), step=0)
    for b, ref in zip(batches, before):
        assert torch.equal(b.advantages, ref.advantages) and torch.equal(b.returns, ref.returns)
        assert b.info[MASKED_KEY].tolist() == [0.0] * len(b.sequences)
    assert metrics["microcoder/masked_frac"] == 0.0
    assert metrics["microcoder/eligible_frac"] == pytest.approx(sum(expected_mask("non_incorrect")) / len(EXPECTED))


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
    runs = {s: _masks(flow, cfg, s) for s in range(6)}
    resumed = MaskConfig(rho=0.5, m=M, seed=3)  # a fresh config after a restart, same step numbers
    for s in (2, 5):
        assert _masks(flow, resumed, s) == runs[s]
        assert _masks(flow, resumed, s, reverse=True) == runs[s]
    eligible = expected_mask("non_incorrect")
    for mask in runs.values():
        assert all(e or not m for m, e in zip(mask, eligible))  # only eligible rows are ever masked
    assert len({tuple(m) for m in runs.values()}) > 1  # the coins change with the step

    # the same decision as the core function on the same rows and coins (rollout order)
    batches = flow.step()
    toks = per_sample(batches, response_tokens)
    lengths = torch.tensor([t.numel() for t in toks])
    padded = torch.nn.utils.rnn.pad_sequence(toks, batch_first=True)
    core = conditional_truncation_mask(padded, lengths, MAX_NEW, [v for _, v, _, _ in EXPECTED], rho=0.5, m=M,
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
        want = [trunc and v == V.CORRECT and not rep for _, v, trunc, rep in EXPECTED]
    else:
        want = [False] * len(EXPECTED)
    assert got == [float(w) for w in want]
    assert metrics["microcoder/verdict_missing_frac"] == 1.0


def test_ambiguous_verdict_is_never_masked(flow):
    batches = flow.step()
    b = batches[0]
    j = b.index.index(0)  # truncated + correct: masked at rho=1 otherwise
    b.info["mc_verdict_no_answer"][j] = 1.0
    metrics = apply_truncation_mask(batches, MaskConfig(rho=1.0, m=M), step=0)
    assert b.info[MASKED_KEY][j].item() == 0.0
    assert metrics["microcoder/verdict_unknown_frac"] == pytest.approx(1 / len(EXPECTED))


def test_policy_loss_zero_gradient_for_masked_rows_which_stay_in_the_denominator(flow):
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch, split_experience_batch
    from openrlhf.utils.loss_utils import _optimizer_step_loss_norm

    batches = flow.step()
    apply_truncation_mask(batches, MaskConfig(rho=1.0, m=M), step=0)
    batch = make_experience_batch([it for b in batches for it in split_experience_batch(b)])  # replay buffer
    # the replay buffer keeps info values as per-sample lists (0-d tensors); ppo_actor logs them as rates
    masked = torch.stack(list(batch.info[MASKED_KEY])).bool()
    assert masked.tolist() == expected_mask("non_incorrect")
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
        assert live == [1, 2, 3, 5, 6]
        assert [grad[i][mask[i]].abs().sum().item() > 0 for i in live] == [True] * len(live), grad.abs().sum(-1)
        # the denominator counts the masked rows' tokens: same loss as the unmasked rows' sum over ALL tokens
        kept = ~masked
        sub = loss_fn(log_probs[kept].detach(), old[kept], batch.advantages[kept], action_mask=mask[kept])[0]
        assert loss.item() == pytest.approx(sub.item() * mask[kept].sum().item() / mask.sum().item(), rel=1e-5)


# ------------------------------------------------------------------------------------------------ EOS at the budget

#: completions of exactly MAX_NEW - 1 bytes: with the EOS the engine appends, the response is MAX_NEW tokens long
SUM_AT_BUDGET = (fence(SUM) + "\n" + FILLER)[:MAX_NEW - 1]
EOS_CASES = {
    "Read two integers and print their sum (at the budget).": (SUM_TESTS, [
        (SUM_AT_BUDGET, V.CORRECT, False, False),  # ends with EOS exactly at the budget: finished, never masked
        (SUM_AT_BUDGET + "!", V.CORRECT, True, False),  # one byte more: cut at the budget -> truncated, masked
        (fence(SUM), V.CORRECT, False, False),
        (fence("a, b = map(int, input().split())\nprint(a - b)"), V.WRONG_ANSWER, False, False),
    ]),
}


@pytest.fixture(scope="module")
def eos_flow(cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt):
    return make_flow(EOS_CASES, cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt)


@pytest.mark.parametrize("stop_ids", ["eos", "none"])
def test_eos_exactly_at_the_budget_is_not_truncated(eos_flow, tokenizer, stop_ids):
    """core.truncation: a response that used the whole budget but ends with EOS finished on its own; one cut at the
    budget is truncated. With the stop ids the mask decides from the tokens; without them it falls back to
    OpenRLHF's own ``Experience.truncated`` (vLLM finish_reason "length"); both agree."""
    from microcoder_ext.core.truncation import truncated_rows

    batches = eos_flow.step()
    before = copy.deepcopy(batches)
    eos = tokenizer.eos_token_id
    tokens = per_sample(batches, response_tokens)
    assert [t.numel() for t in tokens][:2] == [MAX_NEW, MAX_NEW]  # both used the whole budget ...
    assert [int(t[-1]) == eos for t in tokens][:2] == [True, False]  # ... one ended with EOS
    assert per_sample(batches, lambda b, j: bool(b.truncated[j])) == [False, True, False, False]  # OpenRLHF's flag
    assert truncated_rows(tokens, MAX_NEW, [eos]).tolist() == [False, True, False, False]  # the one definition

    metrics = apply_truncation_mask(batches, MaskConfig(rho=1.0, m=M), step=0, max_response_length=MAX_NEW,
                                    stop_token_ids=(eos,) if stop_ids == "eos" else ())
    assert per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item()) == [0.0, 1.0, 0.0, 0.0]
    assert metrics["microcoder/truncated_frac"] == pytest.approx(1 / 4)
    assert metrics["microcoder/masked_frac"] == pytest.approx(1 / 4)
    adv = per_sample(batches, lambda b, j: b.advantages[j][b.action_mask[j]])
    ref = per_sample(before, lambda b, j: b.advantages[j][b.action_mask[j]])
    assert torch.equal(adv[0], ref[0]) and ref[0].abs().min() > 0  # the EOS-at-budget row keeps its advantage
    assert torch.all(adv[1] == 0) and ref[1].abs().min() > 0


def test_the_trainer_hook_gets_the_models_stop_ids(eos_flow, tokenizer):
    """The trainer's wrapper (budget --rollout.max_new_tokens, stop ids from the tokenizer / generation config) on
    real experiences: the same decision."""
    from types import SimpleNamespace

    from microcoder_ext.openrlhf.trainer import install_truncation_mask, model_stop_token_ids

    batches = eos_flow.step()
    stop = model_stop_token_ids("no/such/model", tokenizer)
    assert stop == (tokenizer.eos_token_id,)
    maker = SimpleNamespace(compute_advantages_and_returns=lambda exps: exps)
    hook = install_truncation_mask(maker, MaskConfig(rho=1.0, m=M), eos_flow.args, stop)
    assert hook.max_response_length == MAX_NEW
    maker.compute_advantages_and_returns(batches)
    assert per_sample(batches, lambda b, j: b.info[MASKED_KEY][j].item()) == [0.0, 1.0, 0.0, 0.0]
