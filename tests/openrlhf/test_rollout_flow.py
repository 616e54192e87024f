"""End to end through the real OpenRLHF 0.11.2 rollout and advantage code, with only vLLM faked:

CLI args (real argparse, ``--reward.remote_url reward_fns/openrlhf_reward.py``) -> real ``RolloutRayActor``
(``SingleTurnAgentExecutor`` loads our reward file) -> ``generate_responses`` for 3 prompts x 4 samples ->
``SamplesGenerator._process_response_into_experience`` -> ``RemoteExperienceMaker.split_rollout_samples``
(``Experience.concat_experiences``) -> ``split_experience_batch`` round trip -> ``compute_advantages_and_returns``
with ``group_norm`` (GRPO).
"""

import json
import math

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402

N = 4  # samples per prompt
MAX_NEW = 160  # tokens (= bytes here)
SUM_TESTS = json.dumps({"inputs": ["1 2\n", "10 20\n"], "outputs": ["3\n", "30\n"]})
CALL_TESTS = json.dumps({"inputs": [[2, 3], [5, 5]], "outputs": [6, 25], "fn_name": "mul"})


def fence(code):
    return f"```python\n{code}\n```"


SUM = "a, b = map(int, input().split())\nprint(a + b)"
# prompt text -> (label, [(completion, expected verdict, finish reason)])
CASES = {
    "Read two integers and print their sum.": (SUM_TESTS, [
        ("Sum them.\n" + fence(SUM), V.CORRECT, "stop"),
        (fence("a, b = map(int, input().split())\nprint(a - b)"), V.WRONG_ANSWER, "stop"),
        ("Let me think. " * 8 + "```python\n# " + "the plan is long " * 20 + "\n" + SUM + "\n```", V.NO_ANSWER,
         "length"),
        (fence("while True:\n    pass"), V.TIMEOUT, "stop"),
    ]),
    "Multiply two integers.": (CALL_TESTS, [
        ("def mul(a, b):\n    return a * b\n" + fence("def mul(a, b):\n    return a * b"), V.CORRECT, "stop"),
        (fence("def mul(a, b):\n    return a / 0"), V.RUNTIME_ERROR, "stop"),
        (fence("def mul(a, b)\n    return a * b"), V.COMPILE_ERROR, "stop"),
        (fence("class Solution:\n    def mul(self, a, b):\n        return a * b"), V.CORRECT, "stop"),
    ]),
    "Print the answer (broken dataset row).": ("{not json", [
        (fence(SUM), V.SANDBOX_ERROR, "stop"),
        (fence("print(3)"), V.SANDBOX_ERROR, "stop"),
        ("no code at all", V.SANDBOX_ERROR, "stop"),
        (fence("print(1)"), V.SANDBOX_ERROR, "stop"),
    ]),
}


def _args(cli, reward_file):
    return cli("--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", str(N),
               "--algo.kl.init_coef", "0", "--actor.eps_clip_low_high", "0.2", "0.28",
               "--reward.remote_url", str(reward_file), "--data.max_len", "1024",
               "--rollout.max_new_tokens", str(MAX_NEW), "--rollout.batch_size", str(len(CASES)),
               "--rollout.micro_batch_size", "5", "--actor.num_gpus_per_node", "1")


@pytest.fixture(scope="module")
def rollout(cli, reward_files, tokenizer, rollout_responses, make_generate_kwargs, make_prompt):
    """Runs the rollout once; returns what each stage produced."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    args = _args(cli, reward_files["reward_fns"])
    script = {make_prompt(p): [c for c, _, _ in samples] for p, (_, samples) in CASES.items()}
    actor, responses = rollout_responses(args, script, [(make_prompt(p), label) for p, (label, _) in CASES.items()], N)
    strategy = SimpleNamespace(args=args)
    generator = SamplesGenerator(strategy, None, None, tokenizer, [])
    experiences = [generator._process_response_into_experience(r, **make_generate_kwargs(args))
                   for group in responses for r in group]
    maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(args.algo.kl.init_coef), strategy,
                                  tokenizer)
    return SimpleNamespace(args=args, actor=actor, responses=responses, experiences=experiences, maker=maker,
                           tokenizer=tokenizer)


def _expected():
    return [(label, completion, verdict, finish) for _, (label, samples) in CASES.items()
            for completion, verdict, finish in samples]


def _response_text(exp, tokenizer):
    ids = exp.sequences[0, 1:][exp.action_mask[0].bool()].tolist()
    return tokenizer.decode(ids, skip_special_tokens=True)


def test_actor_loaded_our_reward_file(rollout, reward_files):
    from microcoder_ext.openrlhf.reward import reward_func

    assert rollout.args.reward.remote_url == [str(reward_files["reward_fns"])]  # comma-split list
    assert rollout.actor.executor.__class__.__name__ == "SingleTurnAgentExecutor"
    assert rollout.actor.executor.reward_func is reward_func
    assert len(rollout.actor.llm.requests) == N * len(CASES)


def test_each_sample_gets_its_verdict(rollout):
    reference_keys = None
    for exp, (label, completion, verdict, finish) in zip(rollout.experiences, _expected(), strict=True):
        text = _response_text(exp, rollout.tokenizer)
        assert completion.startswith(text), (text, completion)
        assert exp.labels == [label]
        want = 1.0 if verdict == V.CORRECT else 0.0
        assert exp.rewards.tolist() == [want] and exp.scores.tolist() == [want], (verdict, text)
        assert exp.truncated.tolist() == [finish == "length"], verdict
        info = {k: v.tolist() for k, v in exp.info.items()}
        assert info["reward"] == [want] and info["score"] == [want]
        onehot = {k: v for k, v in info.items() if k.startswith("mc_verdict_")}
        assert onehot == {f"mc_verdict_{v}": [1.0 if v == verdict else 0.0] for v in V.ALL}, (verdict, text)
        assert all(t.dtype == torch.float32 and t.shape == (1,) for k, t in exp.info.items()
                   if k != "response_clip_ratio")
        reference_keys = reference_keys or list(exp.info)
        assert list(exp.info) == reference_keys  # failure mode 2 of the notes: same keys for every sample
    assert {"pass_rate", "num_tests", "response_clip_ratio"} <= set(reference_keys)


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
    merged = torch.cat([b.rewards for b in batches])
    assert merged.tolist() == [1.0 if v == V.CORRECT else 0.0 for _, _, v, _ in _expected()]
    assert torch.cat([b.truncated for b in batches]).tolist() == [f == "length" for *_, f in _expected()]
    for key in (f"mc_verdict_{v}" for v in V.ALL):
        assert torch.cat([b.info[key] for b in batches]).tolist() == [
            1.0 if v == key[len("mc_verdict_"):] else 0.0 for _, _, v, _ in _expected()]

    out = rollout.maker.compute_advantages_and_returns(batches)
    # GRPO: (r - mean) / (std + 1e-9) per prompt, unbiased std; the scalar sits on every response token
    want = []
    for _, (_, samples) in CASES.items():
        r = torch.tensor([1.0 if v == V.CORRECT else 0.0 for _, v, _ in samples])
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
    assert want[:4] == pytest.approx([1.5, -0.5, -0.5, -0.5]) and want[8:] == [0.0] * 4
    assert all(math.isfinite(x) for x in got)

    # replay buffer path: split per sample, re-batch (fails if a sample lacks a key the others have)
    items = [item for b in out for item in split_experience_batch(b)]
    batch = make_experience_batch(items)
    assert len(batch.sequences) == len(items) == N * len(CASES)
    assert all(len(v) == len(items) for v in batch.info.values())
    assert isinstance(batch, Experience)
