"""The rollout shared by the OpenRLHF mask tests (imported by name: conftest puts this folder on ``sys.path``; not a
package, never ``tests.*``): the real ``RolloutRayActor`` on vLLM's real CPU engine answers the first ``PROMPTS``
bundled problems with ``N`` samples each (per-request sampling seeds) within a response budget, so that the rollout
holds what the mask needs: responses that end with EOS (some correct, some judged incorrect) and responses vLLM cuts
at the budget (``finish_reason`` "length").

The budget and the seeds come from the engine's own answers, not from constants: how the warm-started tiny model
answers depends on the machine that trained it (its floating-point kernels). On one CPU it answered in ~20 tokens
with some longer answers, and a fixed budget of 24 tokens gave both kinds of stop; on another, every answer at
temperature 1.0 took exactly 20 tokens (or 6), so no budget could cut a response and keep a correct one. A probe
rollout (``PROBE_SEEDS`` per prompt, ``PROBE_NEW`` tokens, at the first of ``TEMPERATURES`` that works) reads each
seeded response's length and verdict; :func:`choose_rollout` picks the budget and ``N`` seeds per prompt; the rollout
then runs with them. vLLM draws a seeded request's tokens from its own generator, so a response up to the budget is
the probe's and a longer one is cut there. Every expectation of the tests is computed from what the engine produced
in that rollout (:func:`sample_facts`), never from a script.
"""

import math

import torch

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.masking import tail_repeats

N = 4
PROMPTS = 3
PROBE_SEEDS = list(range(10))  # per prompt
PROBE_NEW = 64  # tokens: the probe rollout's budget, beyond the tiny model's answers
TEMPERATURES = (1.3, 1.0, 1.6)  # tried in turn; above 1.0 the tiny model's answers vary in length
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


def response_length(r: dict) -> int:
    """Tokens of a rollout response (its action range)."""
    return r["action_ranges"][0][1] - r["action_ranges"][0][0]


def ended_with_eos(r: dict, eos: int) -> bool:
    return not r["truncated"] and r["observation_tokens"][-1] == eos


def verdict_of(r: dict) -> str:
    """The verdict our reward file gave a rollout response (its one-hot ``mc_verdict_*`` extra logs)."""
    (v,) = [v for v in V.ALL if float(r["extra_logs"][f"mc_verdict_{v}"]) == 1.0]
    return v


def choose_rollout(groups: list[list[dict]], eos: int, n: int = N) -> tuple[int, list[list[int]]] | None:
    """From a probe's responses (per prompt, one per seed of ``PROBE_SEEDS``, budget ``PROBE_NEW``): the budget and
    the indices of ``n`` probed seeds per prompt for the rollout the tests read, or None. It needs a response that
    ends with EOS within the budget and is correct, one that ends and is judged incorrect, at least two cut at the
    budget, and a prompt with both kinds of stop. The budgets tried are one token past a length at which a probe
    response ended, where none ended exactly (a response that ends with EOS exactly at the budget is the separate case
    of ``eos_flow``); of those that give it, the one with the most cut responses, then the longest."""
    facts = [[(response_length(r) if ended_with_eos(r, eos) else math.inf, verdict_of(r)) for r in g] for g in groups]
    ended = {length for g in facts for length, _ in g if length != math.inf}
    best = None
    for b in sorted({length + 1 for length in ended} - ended):
        picks, cut, correct, incorrect, both = [], 0, 0, 0, 0
        for g in facts:
            kept_correct = [k for k, (length, v) in enumerate(g) if length <= b and v == V.CORRECT]
            kept_incorrect = [k for k, (length, v) in enumerate(g) if length <= b and v in V.INCORRECT]
            longer = [k for k, (length, _) in enumerate(g) if length > b]
            order = kept_correct[:1] + kept_incorrect[:1] + longer + list(range(len(g)))
            chosen = sorted(list(dict.fromkeys(order))[:n])
            picks.append(chosen)
            lengths = [g[k][0] for k in chosen]
            cut += sum(length > b for length in lengths)
            correct += sum(g[k][0] <= b and g[k][1] == V.CORRECT for k in chosen)
            incorrect += sum(g[k][0] <= b and g[k][1] in V.INCORRECT for k in chosen)
            both += min(lengths) <= b < max(lengths)
        if correct and incorrect and cut >= 2 and both:
            if best is None or (cut, b) >= (best[0], best[1]):
                best = (cut, b, picks)
    return None if best is None else (int(best[1]), best[2])


def make_flow(cli, reward_files, tiny_model, rollout_responses, make_generate_kwargs, *, prompts=PROMPTS,
              seeds=None, max_new=None, temperature=None, first=0, micro_batch=5):
    """Runs the rollout once (bundled problems ``first .. first + prompts``; ``seeds``: the per-request sampling seeds,
    one list per prompt) within ``max_new`` tokens at ``temperature``; all three None: chosen from a probe rollout
    (:func:`choose_rollout`). ``flow.step()`` rebuilds fresh post-advantage experiences from it; ``flow.budget``,
    ``flow.seeds`` and ``flow.temperature`` are what it ran with."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    def parse(n, budget, temp):
        return cli("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", str(n),
                   "--algo.kl.init_coef", "0", "--actor.eps_clip_low_high", "0.2", "0.28",
                   "--reward.remote_url", str(reward_files["reward_fns"]), "--data.max_len", "1024",
                   "--rollout.max_new_tokens", str(budget), "--rollout.batch_size", str(prompts),
                   "--rollout.temperature", str(temp),
                   "--rollout.micro_batch_size", str(min(micro_batch, n * prompts)), "--actor.num_gpus_per_node", "1")

    tokenizer = tiny_model.tokenizer
    requests = bundled_requests(tokenizer, first + prompts)[first:]
    if seeds is None:
        probes = []
        for temperature in TEMPERATURES:
            probe = rollout_responses(parse(len(PROBE_SEEDS), PROBE_NEW, temperature), requests,
                                      [PROBE_SEEDS] * len(requests))
            chosen = choose_rollout(probe, tokenizer.eos_token_id)
            probes.append((temperature, [[(response_length(r), ended_with_eos(r, tokenizer.eos_token_id),
                                           verdict_of(r)) for r in g] for g in probe]))
            if chosen is not None:
                max_new, picks = chosen
                seeds = [[PROBE_SEEDS[k] for k in p] for p in picks]
                break
        else:
            raise AssertionError(f"no budget and seeds give the rollout both kinds of stop and both verdicts; probes "
                                 f"(temperature, per prompt (length, ended with EOS, verdict)): {probes}")
    n = len(seeds[0])
    args = parse(n, max_new, temperature)
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

    flow = SimpleNamespace(args=args, step=step, responses=responses, n=n, budget=max_new, seeds=seeds,
                           temperature=temperature)
    flow.facts = sample_facts(step())
    return flow


def group_rewards(facts, n=N):
    """Per prompt group, the rewards of its ``n`` samples (1.0 for ``correct``, else 0.0)."""
    r = [1.0 if v == V.CORRECT else 0.0 for v, _, _ in facts]
    return [torch.tensor(r[i:i + n]) for i in range(0, len(r), n)]
