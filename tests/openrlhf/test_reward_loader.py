"""OpenRLHF 0.11.2's own loader for ``--reward.remote_url <file>.py`` (``openrlhf/utils/agent.py:196-205``) on both
of our reward files, and its per-sample call path (``SingleTurnAgentExecutor.execute`` -> ``_fetch_rewards_via_func``,
``asyncio.to_thread`` with lists of length 1, ``openrlhf/utils/agent.py:286-325``). ``execute`` generates with the
real ``RolloutRayActor.generate`` on vLLM's real CPU engine (conftest's ``rollout_engine``); a known program is scored
through ``_fetch_rewards_via_func`` itself, OpenRLHF's call of the reward."""

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

# memory: the session's vLLM engine (its engine core and worker processes, a 1 GiB KV cache; tests/conftest.py)
pytestmark = [pytest.mark.openrlhf, pytest.mark.memory(4)]
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from openrlhf.utils.agent import SingleTurnAgentExecutor  # noqa: E402

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.openrlhf.reward import response_text, reward_func  # noqa: E402

GT = json.dumps({"inputs": ["1 2\n", "4 5\n"], "outputs": ["3\n", "9\n"]})
CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def execute(engine, executor, tokenizer, prompt, label, max_tokens=24, max_length=1024):
    """``SingleTurnAgentExecutor.execute`` with the real rollout actor as its ``llm_engine`` (seeded sampling)."""
    from vllm import SamplingParams

    sp = SamplingParams(temperature=1.0, max_tokens=max_tokens, min_tokens=1, skip_special_tokens=False, seed=0)
    return engine.run(executor.execute(prompt, label, sp, max_length, tokenizer, engine.actor))


def chat(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True)


def response(out) -> list[int]:
    start, end = out["action_ranges"][0]
    return out["observation_tokens"][start:end]


@pytest.mark.parametrize("which", ["reward_fns", "in_wheel"])
def test_openrlhf_loads_reward_file(which, reward_files):
    path = reward_files[which]
    modules_before = set(sys.modules)
    for endpoints in (str(path), [str(path)]):  # the CLI gives a comma-split list; a bare str is accepted too
        executor = SingleTurnAgentExecutor(endpoints)
        assert executor.reward_func is reward_func  # the shim re-exports the adapter, nothing else
    # loaded with spec_from_file_location("reward_func", path): not registered as a module
    assert "reward_func" not in sys.modules
    assert set(sys.modules) - modules_before <= {"microcoder_ext.openrlhf.openrlhf_reward"}


def test_in_wheel_shim_is_the_installed_module(reward_files):
    spec = importlib.util.find_spec("microcoder_ext.openrlhf.openrlhf_reward")
    assert Path(spec.origin).resolve() == reward_files["in_wheel"].resolve()


@pytest.mark.parametrize("which", ["reward_fns", "in_wheel"])
def test_executor_scores_through_loaded_file(which, reward_files, tokenizer, make_prompt):
    """A known correct program, scored by OpenRLHF's own call of the loaded file (``_fetch_rewards_via_func``)."""
    executor = SingleTurnAgentExecutor([str(reward_files[which])])
    prompt = make_prompt("Add two integers.")
    [out] = asyncio.run(executor._fetch_rewards_via_func([prompt + "Here it is:\n" + CORRECT + "<|im_end|>"],
                                                         [prompt], [GT]))
    assert out["rewards"].tolist() == [1.0] and out["scores"].tolist() == [1.0]
    assert out["extra_logs"]["mc_verdict_correct"].tolist() == [1.0]
    assert out["extra_logs"]["num_tests"].tolist() == [2.0] and out["extra_logs"]["pass_rate"].tolist() == [1.0]


def test_executor_passes_decoded_query_with_special_tokens(reward_files, rollout_engine, tiny_model, monkeypatch):
    """What reward_func really receives: [decode(prompt + response) with special tokens], [prompt], [label]."""
    calls = []

    def spy(queries, prompts, labels, **kwargs):
        calls.append((queries, prompts, labels, kwargs))
        return reward_func(queries, prompts, labels, **kwargs)

    executor = SingleTurnAgentExecutor([str(reward_files["reward_fns"])])
    monkeypatch.setattr(executor, "reward_func", spy)
    tokenizer = tiny_model.tokenizer
    prompt = chat(tokenizer, "Add two integers.")
    out = execute(rollout_engine, executor, tokenizer, prompt, GT, max_tokens=64)
    (queries, prompts, labels, kwargs), = calls
    assert queries == [tokenizer.decode(out["observation_tokens"], skip_special_tokens=False)]
    assert queries[0].startswith(prompt) and prompts == [prompt] and labels == [GT] and kwargs == {}
    if not out["truncated"]:  # the engine's answer ended with EOS, which the query keeps
        assert queries[0].endswith(tokenizer.eos_token)
    assert out["reward"].tolist() == reward_func(queries, prompts, labels)["rewards"].tolist()


def test_openrlhf_swallows_reward_exceptions(tmp_path, rollout_engine, tiny_model):
    """Why reward_func must be total (notes §1 failure mode 1): OpenRLHF logs the exception and leaves reward None,
    which only fails later, far from the cause. Guards the assumption; ours never raises (test_reward_total.py)."""
    bad = tmp_path / "raising_reward.py"
    bad.write_text("def reward_func(queries, prompts, labels, **kwargs):\n    raise RuntimeError('boom')\n")
    tokenizer = tiny_model.tokenizer
    out = execute(rollout_engine, SingleTurnAgentExecutor([str(bad)]), tokenizer, chat(tokenizer, "x"), GT)
    assert out["reward"] is None and out["scores"] is None and out["extra_logs"] == {}


def test_length_stopped_response_is_truncated_and_unjudged(reward_files, rollout_engine, tiny_model):
    """Four tokens are too few for any fenced program: vLLM stops by length and the reward runs nothing."""
    tokenizer = tiny_model.tokenizer
    executor = SingleTurnAgentExecutor([str(reward_files["reward_fns"])])
    out = execute(rollout_engine, executor, tokenizer, chat(tokenizer, "Add."), GT, max_tokens=4)
    assert out["truncated"] is True and len(response(out)) == 4
    assert out["reward"].tolist() == [0.0]
    assert out["extra_logs"][f"mc_verdict_{V.NO_ANSWER}"].tolist() == [1.0]


def test_left_truncated_prompt_still_finds_the_response(reward_files, rollout_engine, tiny_model, monkeypatch):
    """A prompt longer than max_length - max_tokens is cut on the left (``openrlhf/utils/agent.py:227-239``), so the
    query no longer starts with the prompt: the response is found after the last assistant header instead."""
    seen = []
    executor = SingleTurnAgentExecutor([str(reward_files["reward_fns"])])
    monkeypatch.setattr(executor, "reward_func", lambda q, p, lab: seen.append((q, p)) or reward_func(q, p, lab))
    tokenizer = tiny_model.tokenizer
    prompt = chat(tokenizer, "Add two integers. " + "Background story. " * 200)
    assert len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) > 512 - 24
    out = execute(rollout_engine, executor, tokenizer, prompt, GT, max_tokens=24, max_length=512)
    (queries, prompts), = seen
    assert len(out["observation_tokens"]) <= 512
    answer = tokenizer.decode(response(out), skip_special_tokens=False)
    assert not queries[0].startswith(prompts[0]) and queries[0].endswith(answer)
    assert response_text(queries[0], prompts[0]).strip() == response_text(prompts[0] + answer, prompts[0]).strip()
