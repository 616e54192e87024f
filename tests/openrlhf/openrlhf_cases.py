"""The rollout shared by the OpenRLHF mask tests (imported by name: conftest puts this folder on ``sys.path``; not a
package, never ``tests.*``): the real ``RolloutRayActor`` on vLLM's real CPU engine answers the first ``PROMPTS``
bundled problems with ``N`` samples each (per-request sampling seeds ``SEEDS``), ``MAX_NEW`` response tokens at most.

With the warm-started tiny model (its typical answer is ~20 tokens with its EOS) that budget gives both kinds of stop:
responses that end with EOS and responses vLLM cuts at the budget (``finish_reason`` "length"); the verdicts mix
correct, wrong, non-compiling and unfinished programs. Every expectation of the tests is computed from what the
engine produced (:func:`sample_facts`), never from a script.
"""

import torch

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.masking import tail_repeats

N = 4
PROMPTS = 3
SEEDS = list(range(N))
MAX_NEW = 24  # tokens
M = 4  # repeat window for these short responses (2m = 8 tokens)


def masked_at_rho_1(verdict, truncated, repeating, mode="non_incorrect"):
    ok = verdict not in V.INCORRECT if mode == "non_incorrect" else verdict == V.CORRECT
    return truncated and ok and not repeating


def per_sample(batches, fn):
    """``fn(batch, row)`` for every sample of OpenRLHF ``Experience`` micro batches, in rollout order
    (``exp.index``)."""
    out = {}
    for b in batches:
        for j, i in enumerate(b.index):
            out[i] = fn(b, j)
    return [out[i] for i in range(len(out))]


def response_ids(b, j) -> torch.Tensor:
    """Row ``j``'s response token ids (``action_mask[t]`` flags ``sequences[t + 1]``)."""
    return b.sequences[j, 1:][b.action_mask[j].bool()]


def sample_facts(batches, m=M, repeat_check="block"):
    """Per sample in rollout order: ``(verdict, truncated, repeating)``: the one verdict our reward gave it (the
    one-hot ``mc_verdict_*`` info), OpenRLHF's ``Experience.truncated`` (vLLM's finish reason "length") and whether
    its tail repeats (the core check, window ``m``)."""
    verdicts = per_sample(batches, lambda b, j: [v for v in V.ALL if b.info[f"mc_verdict_{v}"][j] == 1.0])
    assert all(len(v) == 1 for v in verdicts), verdicts
    truncated = per_sample(batches, lambda b, j: bool(b.truncated[j]))
    tokens = per_sample(batches, response_ids)
    lengths = torch.tensor([t.numel() for t in tokens])
    padded = torch.nn.utils.rnn.pad_sequence(tokens, batch_first=True)
    repeating = tail_repeats(padded, lengths, m=m, repeat_check=repeat_check).tolist()
    return [(v[0], t, bool(r)) for v, t, r in zip(verdicts, truncated, repeating)]


def bundled_requests(tokenizer, k: int, split: str = "train") -> list[tuple[str, str]]:
    """``(prompt, label)`` of the first ``k`` bundled problems as OpenRLHF reads them (``--data.apply_chat_template``,
    the tests as JSON)."""
    from microcoder_ext.smoke.data import bundled_problems

    rows = [p.to_openrlhf_row() for p in bundled_problems(split)[:k]]
    return [(tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True), r["label"])
            for r in rows]


def make_flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs, *, prompts=PROMPTS,
              seeds=SEEDS, max_new=MAX_NEW, first=0, micro_batch=5):
    """Runs the rollout once (bundled problems ``first .. first + prompts``, one request per seed); ``flow.step()``
    rebuilds fresh post-advantage experiences from it."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator


    n = len(seeds)
    args = cli("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", str(n),
               "--algo.kl.init_coef", "0", "--actor.eps_clip_low_high", "0.2", "0.28",
               "--reward.remote_url", str(reward_files["reward_fns"]), "--data.max_len", "1024",
               "--rollout.max_new_tokens", str(max_new), "--rollout.batch_size", str(prompts),
               "--rollout.micro_batch_size", str(min(micro_batch, n * prompts)), "--actor.num_gpus_per_node", "1")
    tokenizer = tiny_model.tokenizer
    requests = bundled_requests(tokenizer, first + prompts)[first:]
    responses = rollout_responses(args, requests, seeds)
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

    flow = SimpleNamespace(args=args, step=step, responses=responses, n=n)
    flow.facts = sample_facts(step())
    return flow


def group_rewards(facts, n=N):
    """Per prompt group, the rewards of its ``n`` samples (1.0 for ``correct``, else 0.0)."""
    r = [1.0 if v == V.CORRECT else 0.0 for v, _, _ in facts]
    return [torch.tensor(r[i:i + n]) for i in range(0, len(r), n)]
