"""End to end through the real OpenRLHF 0.11.2 rollout and advantage code on vLLM's real engine (its CPU build):

CLI args (real argparse, ``--reward.remote_url reward_fns/openrlhf_reward.py``) -> real ``RolloutRayActor``
(``SingleTurnAgentExecutor`` loads our reward file; its ``vllm.AsyncLLMEngine`` serves the warm-started tiny model)
-> ``generate_responses`` for 3 bundled problems x 4 samples (per-request sampling seeds) ->
``SamplesGenerator._process_response_into_experience`` -> ``RemoteExperienceMaker.split_rollout_samples``
(``Experience.concat_experiences``) -> ``split_experience_batch`` round trip -> ``compute_advantages_and_returns``
with ``group_norm`` (GRPO). Every expected value is computed from what the engine answered.
"""

import math

import pytest

# memory: the session's vLLM engine (its engine core and worker processes, a 1 GiB KV cache; tests/conftest.py)
pytestmark = [pytest.mark.openrlhf, pytest.mark.memory(4)]
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402

from openrlhf_cases import make_flow, sample_facts  # noqa: E402

N = 4  # samples per prompt


@pytest.fixture(scope="module")
def rollout(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs, rollout_engine):
    """Runs the rollout once; returns what each stage produced."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    flow = make_flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs)
    args, tokenizer = flow.args, tiny_model.tokenizer
    strategy = type("Strategy", (), {"args": args})()
    generator = SamplesGenerator(strategy, None, None, tokenizer, [])
    flow.experiences = [generator._process_response_into_experience(r, **make_generate_kwargs(args))
                        for group in flow.responses for r in group]
    flow.maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(args.algo.kl.init_coef), strategy,
                                       tokenizer)
    flow.actor, flow.tokenizer = rollout_engine.actor, tokenizer
    return flow


def test_actor_runs_vllms_engine_and_our_reward_file(rollout, reward_files):
    from vllm.v1.engine.async_llm import AsyncLLM

    from microcoder_ext.openrlhf.reward import reward_func

    assert rollout.args.reward.remote_url == [str(reward_files["reward_fns"])]  # comma-split list
    assert rollout.actor.executor.__class__.__name__ == "SingleTurnAgentExecutor"
    assert rollout.actor.executor.reward_func is reward_func
    assert type(rollout.actor.llm) is AsyncLLM  # vllm.AsyncLLMEngine is vLLM v1's AsyncLLM


def test_each_sample_gets_its_verdict(rollout):
    """Per sample, what reached the ``Experience`` is what the engine answered and our reward said of it."""
    eos = rollout.tokenizer.eos_token_id
    reference_keys = None
    responses = [r for group in rollout.responses for r in group]
    for exp, resp in zip(rollout.experiences, responses, strict=True):
        start, end = resp["action_ranges"][0]
        ids = resp["observation_tokens"][start:end]
        assert exp.sequences[0, 1:][exp.action_mask[0].bool()].tolist() == ids
        assert exp.labels == [resp["label"]]
        onehot = {k: v.tolist() for k, v in exp.info.items() if k.startswith("mc_verdict_")}
        verdicts = [k[len("mc_verdict_"):] for k, v in onehot.items() if v == [1.0]]
        assert len(verdicts) == 1 and set(onehot) == {f"mc_verdict_{v}" for v in V.ALL}, onehot
        want = 1.0 if verdicts[0] == V.CORRECT else 0.0
        assert exp.rewards.tolist() == [want] and exp.scores.tolist() == [want], verdicts
        # vLLM's finish reason "length": the whole budget used without ending in EOS
        cut = len(ids) == rollout.args.rollout.max_new_tokens and ids[-1] != eos
        assert exp.truncated.tolist() == [cut] == [resp["truncated"]]
        if not cut:
            assert ids[-1] == eos
        info = {k: v.tolist() for k, v in exp.info.items()}
        assert info["reward"] == [want] and info["score"] == [want]
        assert all(t.dtype == torch.float32 and t.shape == (1,) for k, t in exp.info.items()
                   if k != "response_clip_ratio")
        reference_keys = reference_keys or list(exp.info)
        assert list(exp.info) == reference_keys  # failure mode 2 of the notes: same keys for every sample
    assert {"pass_rate", "num_tests", "response_clip_ratio"} <= set(reference_keys)
    truncated = [r["truncated"] for r in responses]
    assert any(truncated) and not all(truncated)  # both kinds of stop occurred


def test_concat_split_and_group_norm_advantages(rollout):
    from openrlhf.trainer.ppo_utils.experience import Experience, make_experience_batch, split_experience_batch

    exps = rollout.experiences
    batches = rollout.maker.split_rollout_samples(exps)  # Experience.concat_experiences, micro batches of 5
    assert [len(b.sequences) for b in batches] == [5, 5, 2]
    for b in batches:
        n = len(b.sequences)
        assert all(len(v) == n for v in b.info.values()), {k: len(v) for k, v in b.info.items()}
        assert b.truncated.shape == b.rewards.shape == (n,)
        # what make_experience adds without a reference model (openrlhf/trainer/ppo_utils/experience_maker.py:213)
        b.kl = torch.zeros(b.action_mask.shape)
    facts = sample_facts(batches)
    merged = torch.cat([b.rewards for b in batches])
    assert merged.tolist() == [1.0 if v == V.CORRECT else 0.0 for v, _, _ in facts]
    assert torch.cat([b.truncated for b in batches]).tolist() == [t for _, t, _ in facts]
    for key in (f"mc_verdict_{v}" for v in V.ALL):
        assert torch.cat([b.info[key] for b in batches]).tolist() == [
            1.0 if v == key[len("mc_verdict_"):] else 0.0 for v, _, _ in facts]

    out = rollout.maker.compute_advantages_and_returns(batches)
    # GRPO: (r - mean) / (std + 1e-9) per prompt, unbiased std; the scalar sits on every response token
    want = []
    rewards = [1.0 if v == V.CORRECT else 0.0 for v, _, _ in facts]
    for g in range(0, len(rewards), N):
        r = torch.tensor(rewards[g:g + N])
        want += ((r - r.mean()) / (r.std() + 1e-9)).tolist()
    got = []
    for b in out:
        for j in range(len(b.sequences)):
            mask = b.action_mask[j].bool()
            adv = b.advantages[j][mask]
            last = int(mask.nonzero().max())
            assert torch.allclose(adv, adv[0].expand_as(adv))
            assert torch.all(b.advantages[j][last + 1:] == 0)  # right padding (prompt positions are masked in the loss)
            got.append(adv[0].item())
    assert got == pytest.approx(want, abs=1e-5)
    assert any(x != 0 for x in want)  # a group with mixed rewards
    assert all(math.isfinite(x) for x in got)

    # replay buffer path: split per sample, re-batch (fails if a sample lacks a key the others have)
    items = [item for b in out for item in split_experience_batch(b)]
    batch = make_experience_batch(items)
    assert len(batch.sequences) == len(items) == len(rollout.experiences)
    assert all(len(v) == len(items) for v in batch.info.values())
    assert isinstance(batch, Experience)
