"""The mask as ``MicrocoderPPOTrainer`` wires it: :func:`install_truncation_mask` (what the trainer's ``__init__``
calls) on a real ``RemoteExperienceMaker``, then OpenRLHF's real ``compute_advantages_and_returns`` (group_norm,
n = 4) on real ``Experience`` objects: real rollout actor (vLLM faked) with our reward ->
``SamplesGenerator._process_response_into_experience`` -> ``split_rollout_samples`` (sets ``Experience.index``).
The end-to-end run inside the real ``train_step`` is in ``test_trainer.py``.
"""

import copy

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.core.config import MaskConfig  # noqa: E402
from microcoder_ext.openrlhf.advantage_mask import MASKED_KEY, apply_truncation_mask  # noqa: E402

from openrlhf_cases import CASES, MAX_NEW, M, N, masked_at_rho_1, per_sample  # noqa: E402

EXPECTED = [s for _, (_, samples) in CASES.items() for s in samples]
MASKED = [masked_at_rho_1(v, trunc, rep) for _, v, trunc, rep in EXPECTED]


@pytest.fixture(scope="module")
def flow(cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt):
    """Runs the rollout once; ``flow.batches()`` rebuilds fresh pre-advantage micro batches from it."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    args = cli("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", str(N),
               "--algo.kl.init_coef", "0", "--reward.remote_url", str(reward_files["reward_fns"]),
               "--data.max_len", "1024", "--rollout.max_new_tokens", str(MAX_NEW),
               "--rollout.batch_size", str(len(CASES)), "--rollout.micro_batch_size", "3",
               "--actor.num_gpus_per_node", "1")
    script = {make_prompt(p): [c for c, *_ in samples] for p, (_, samples) in CASES.items()}
    _, responses = rollout_responses(args, script, [(make_prompt(p), label) for p, (label, _) in CASES.items()], N)
    strategy = SimpleNamespace(args=args)
    generator = SamplesGenerator(strategy, None, None, tokenizer, [])
    gen_kwargs = make_generate_kwargs(args)

    def maker():
        return RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tokenizer)

    def batches():
        samples = [generator._process_response_into_experience(r, **gen_kwargs) for g in responses for r in g]
        out = maker().split_rollout_samples(samples)  # micro batches of 3: they cut across the groups
        for b in out:
            b.kl = torch.zeros(b.action_mask.shape)  # what make_experience sets without a reference model
        return out

    return SimpleNamespace(args=args, maker=maker, batches=batches)


def test_the_rollout_is_what_the_cases_say(flow):
    batches = flow.batches()
    assert [len(b.sequences) for b in batches] == [3, 3, 2]
    assert per_sample(batches, lambda b, j: bool(b.truncated[j])) == [t for _, _, t, _ in EXPECTED]
    assert per_sample(batches, lambda b, j: [v for v in V.ALL if b.info[f"mc_verdict_{v}"][j] == 1.0]) == \
        [[v] for _, v, _, _ in EXPECTED]


def test_hook_wraps_the_instance_with_the_args_length_limit(flow):
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from microcoder_ext.openrlhf.trainer import TruncationMaskHook, install_truncation_mask

    original = RemoteExperienceMaker.compute_advantages_and_returns
    maker, other = flow.maker(), flow.maker()
    hook = install_truncation_mask(maker, MaskConfig(rho=1.0, m=M), flow.args)
    assert maker.compute_advantages_and_returns is hook and isinstance(hook, TruncationMaskHook)
    assert hook.max_response_length == MAX_NEW == flow.args.rollout.max_new_tokens
    assert RemoteExperienceMaker.compute_advantages_and_returns is original  # the class is untouched
    assert other.compute_advantages_and_returns.__func__ is original  # so is every other instance
    assert hook.__name__ == "compute_advantages_and_returns"
    # make_experience_batch calls it through the instance (guard.check_openrlhf checks that source line)
    with pytest.raises(RuntimeError, match="already wrapped"):
        install_truncation_mask(maker, MaskConfig(), flow.args)


def test_rho1_masks_after_real_group_norm(flow):
    from microcoder_ext.openrlhf.trainer import install_truncation_mask

    maker = flow.maker()
    hook = install_truncation_mask(maker, MaskConfig(rho=1.0, m=M), flow.args)
    hook.step = 11
    out = maker.compute_advantages_and_returns(flow.batches())

    assert per_sample(out, lambda b, j: b.info[MASKED_KEY][j].item()) == [float(x) for x in MASKED]
    adv = per_sample(out, lambda b, j: b.advantages[j][b.action_mask[j].bool()])
    ret = per_sample(out, lambda b, j: b.returns[j][b.action_mask[j].bool()])
    last = per_sample(out, lambda b, j: b.advantages[j][b.action_mask[j].bool()][-1].item())
    for g, (_, (_, samples)) in enumerate(CASES.items()):
        r = torch.tensor([1.0 if v == V.CORRECT else 0.0 for _, v, _, _ in samples])
        mean = r.mean()
        std = ((r - mean) ** 2).sum().div(len(r) - 1).sqrt()  # unbiased, as OpenRLHF's group_norm
        for k in range(N):
            i = g * N + k
            hand = ((r[k] - mean) / (std + 1e-9)).item()
            if MASKED[i]:
                assert torch.all(adv[i] == 0) and torch.all(ret[i] == 0)
            else:  # untouched (incorrect, repeating, not truncated): GRPO of all four samples, masked ones included
                assert last[i] == pytest.approx(hand, abs=1e-6)
                assert torch.allclose(adv[i], torch.full_like(adv[i], hand), atol=1e-6)
                assert torch.allclose(ret[i], adv[i])  # group_norm: returns = advantages (gamma 1)
    assert [round(x, 3) for x in last[:4]] == [0.0, -0.866, -0.866, 0.866]

    n = len(EXPECTED)
    m = hook.metrics
    assert m["microcoder/masked_frac"] == pytest.approx(3 / n)
    assert m["microcoder/eligible_frac"] == pytest.approx(3 / n)
    assert m["microcoder/truncated_frac"] == pytest.approx(5 / n)
    assert m["microcoder/repeat_frac"] == pytest.approx(1 / n)
    assert m["microcoder/verdict/correct"] == pytest.approx(4 / n)
    assert m["microcoder/verdict/wrong_answer"] == pytest.approx(2 / n)
    assert m["microcoder/verdict/no_answer"] == pytest.approx(2 / n)
    assert m["microcoder/verdict_missing_frac"] == m["microcoder/verdict_unknown_frac"] == 0.0


def test_rho0_masks_nothing(flow):
    from microcoder_ext.openrlhf.trainer import install_truncation_mask

    plain = flow.maker().compute_advantages_and_returns(flow.batches())
    maker = flow.maker()
    hook = install_truncation_mask(maker, MaskConfig(rho=0.0, m=M), flow.args)
    out = maker.compute_advantages_and_returns(flow.batches())
    for b, ref in zip(out, plain):
        assert torch.equal(b.advantages, ref.advantages) and torch.equal(b.returns, ref.returns)
        assert b.info[MASKED_KEY].tolist() == [0.0] * len(b.sequences)
    assert hook.metrics["microcoder/masked_frac"] == 0.0
    assert hook.metrics["microcoder/eligible_frac"] == pytest.approx(3 / len(EXPECTED))


def test_coins_come_from_the_step_the_trainer_sets(flow):
    from microcoder_ext.openrlhf.trainer import install_truncation_mask

    cfg = MaskConfig(rho=0.5, m=M, seed=5)
    maker = flow.maker()
    hook = install_truncation_mask(maker, cfg, flow.args)
    seen = set()
    for step in range(6):
        hook.step = step
        via_hook = maker.compute_advantages_and_returns(flow.batches())
        direct = flow.maker().compute_advantages_and_returns(flow.batches())
        apply_truncation_mask(direct, cfg, step=step, max_response_length=MAX_NEW)  # cfg.generator(step) coins
        got = per_sample(via_hook, lambda b, j: b.info[MASKED_KEY][j].item())
        assert got == per_sample(direct, lambda b, j: b.info[MASKED_KEY][j].item())
        assert all(m == 0.0 or e for m, e in zip(got, MASKED))
        for b, ref in zip(via_hook, direct):
            assert torch.equal(b.advantages, ref.advantages)
        seen.add(tuple(got))
    assert len(seen) > 1  # the coins change with the step


def test_disabled_mask_config(flow):
    from microcoder_ext.openrlhf.trainer import install_truncation_mask

    maker = flow.maker()
    hook = install_truncation_mask(maker, MaskConfig(enable=False, rho=1.0, m=M), flow.args)
    before = copy.deepcopy(flow.maker().compute_advantages_and_returns(flow.batches()))
    out = maker.compute_advantages_and_returns(flow.batches())
    for b, ref in zip(out, before):
        assert torch.equal(b.advantages, ref.advantages)
    assert hook.metrics == {}
