"""The mask as ``MicrocoderPPOTrainer`` wires it: :func:`install_truncation_mask` (what the trainer's ``__init__``
calls) on a real ``RemoteExperienceMaker``, then OpenRLHF's real ``compute_advantages_and_returns`` (group_norm,
n = 4) on real ``Experience`` objects: real rollout actor on vLLM's real CPU engine (the warm-started tiny model,
per-request sampling seeds) with our reward -> ``SamplesGenerator._process_response_into_experience`` ->
``split_rollout_samples`` (sets ``Experience.index``). Expected values are computed from what the engine produced.
The mask inside OpenRLHF's real training loop is tested end to end in ``test_smoke_e2e.py``.
"""

import copy

import pytest

# memory: the session's vLLM engine (its engine core and worker processes, a 1 GiB KV cache; tests/conftest.py)
pytestmark = [pytest.mark.openrlhf, pytest.mark.memory(4)]
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.core.config import MaskConfig  # noqa: E402
from microcoder_ext.openrlhf.advantage_mask import MASKED_KEY, apply_truncation_mask  # noqa: E402

from openrlhf_cases import M, N, group_rewards, make_flow, masked_at_rho_1, per_sample  # noqa: E402

PROMPTS = 2


@pytest.fixture(scope="module")
def flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs):
    """Runs the rollout once; ``flow.batches()`` rebuilds fresh pre-advantage micro batches of 3 from it."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    out = make_flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs, prompts=PROMPTS,
                    micro_batch=3)
    from types import SimpleNamespace

    strategy = SimpleNamespace(args=out.args)
    generator = SamplesGenerator(strategy, None, None, tiny_model.tokenizer, [])
    gen_kwargs = make_generate_kwargs(out.args)

    def maker():
        return RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tiny_model.tokenizer)

    def batches():
        samples = [generator._process_response_into_experience(r, **gen_kwargs) for g in out.responses for r in g]
        got = maker().split_rollout_samples(samples)  # micro batches of 3: they cut across the groups
        for b in got:
            b.kl = torch.zeros(b.action_mask.shape)  # what make_experience sets without a reference model
        return got

    out.maker, out.batches = maker, batches
    out.masked = [masked_at_rho_1(v, t, r) for v, t, r in out.facts]
    return out


def test_the_rollout_is_what_the_engine_answered(flow):
    batches = flow.batches()
    assert [len(b.sequences) for b in batches] == [3, 3, 2]
    assert per_sample(batches, lambda b, j: bool(b.truncated[j])) == [t for _, t, _ in flow.facts]
    assert per_sample(batches, lambda b, j: [v for v in V.ALL if b.info[f"mc_verdict_{v}"][j] == 1.0]) == \
        [[v] for v, _, _ in flow.facts]
    assert any(flow.masked) and not all(flow.masked)


def test_hook_wraps_the_instance_with_the_args_length_limit(flow):
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from microcoder_ext.openrlhf.trainer import TruncationMaskHook, install_truncation_mask

    original = RemoteExperienceMaker.compute_advantages_and_returns
    maker, other = flow.maker(), flow.maker()
    hook = install_truncation_mask(maker, MaskConfig(rho=1.0, m=M), flow.args)
    assert maker.compute_advantages_and_returns is hook and isinstance(hook, TruncationMaskHook)
    assert hook.max_response_length == flow.budget == flow.args.rollout.max_new_tokens
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

    assert per_sample(out, lambda b, j: b.info[MASKED_KEY][j].item()) == [float(x) for x in flow.masked]
    adv = per_sample(out, lambda b, j: b.advantages[j][b.action_mask[j].bool()])
    ret = per_sample(out, lambda b, j: b.returns[j][b.action_mask[j].bool()])
    last = per_sample(out, lambda b, j: b.advantages[j][b.action_mask[j].bool()][-1].item())
    for g, r in enumerate(group_rewards(flow.facts)):
        mean = r.mean()
        std = ((r - mean) ** 2).sum().div(len(r) - 1).sqrt()  # unbiased, as OpenRLHF's group_norm
        for k in range(N):
            i = g * N + k
            hand = ((r[k] - mean) / (std + 1e-9)).item()
            if flow.masked[i]:
                assert torch.all(adv[i] == 0) and torch.all(ret[i] == 0)
            else:  # untouched (incorrect, repeating, not truncated): GRPO of all four samples, masked ones included
                assert last[i] == pytest.approx(hand, abs=1e-6)
                assert torch.allclose(adv[i], torch.full_like(adv[i], hand), atol=1e-6)
                assert torch.allclose(ret[i], adv[i])  # group_norm: returns = advantages (gamma 1)

    n = len(flow.facts)
    m = hook.metrics
    assert m["microcoder/masked_frac"] == pytest.approx(sum(flow.masked) / n)
    assert m["microcoder/eligible_frac"] == pytest.approx(sum(flow.masked) / n)
    assert m["microcoder/truncated_frac"] == pytest.approx(sum(t for _, t, _ in flow.facts) / n)
    assert m["microcoder/repeat_frac"] == pytest.approx(sum(t and r for _, t, r in flow.facts) / n)
    for v in V.ALL:
        assert m[f"microcoder/verdict/{v}"] == pytest.approx(sum(x == v for x, _, _ in flow.facts) / n)
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
    assert hook.metrics["microcoder/eligible_frac"] == pytest.approx(sum(flow.masked) / len(flow.facts))


def test_coins_come_from_the_step_the_trainer_sets(flow):
    from microcoder_ext.openrlhf.trainer import install_truncation_mask

    cfg = MaskConfig(rho=0.5, m=M, seed=5)
    maker = flow.maker()
    hook = install_truncation_mask(maker, cfg, flow.args)
    seen = set()
    for step in range(12):  # one eligible row: all alike w.p. 2/4096
        hook.step = step
        via_hook = maker.compute_advantages_and_returns(flow.batches())
        direct = flow.maker().compute_advantages_and_returns(flow.batches())
        apply_truncation_mask(direct, cfg, step=step, max_response_length=flow.budget)  # cfg.generator(step) coins
        got = per_sample(via_hook, lambda b, j: b.info[MASKED_KEY][j].item())
        assert got == per_sample(direct, lambda b, j: b.info[MASKED_KEY][j].item())
        assert all(m == 0.0 or e for m, e in zip(got, flow.masked))
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
