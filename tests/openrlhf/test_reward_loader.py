"""OpenRLHF 0.11.2's own loader for ``--reward.remote_url <file>.py`` (``openrlhf/utils/agent.py:196-205``) on both
of our reward files, and its per-sample call path (``SingleTurnAgentExecutor.execute`` -> ``_fetch_rewards_via_func``,
``asyncio.to_thread`` with lists of length 1, ``openrlhf/utils/agent.py:286-325``)."""

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from openrlhf.utils.agent import SingleTurnAgentExecutor  # noqa: E402

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.openrlhf.reward import reward_func  # noqa: E402

GT = json.dumps({"inputs": ["1 2\n", "4 5\n"], "outputs": ["3\n", "9\n"]})
CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


class Engine:
    """The ``llm_engine`` argument of ``AgentExecutorBase.execute``: ``RolloutRayActor.generate``'s signature."""

    def __init__(self, tokenizer, text, finish_reason="stop"):
        self.tokenizer, self.text, self.finish_reason = tokenizer, text, finish_reason

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        ids = self.tokenizer(text=self.text, add_special_tokens=False)["input_ids"]
        if self.finish_reason == "stop":
            ids = ids + [self.tokenizer.eos_token_id]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=self.text, logprobs=None,
                                                        finish_reason=self.finish_reason)])


def execute(executor, tokenizer, prompt, label, text, finish_reason="stop", max_tokens=512, max_length=1024):
    sp = SimpleNamespace(max_tokens=max_tokens, logprobs=None)
    engine = Engine(tokenizer, text, finish_reason)
    return asyncio.run(executor.execute(prompt, label, sp, max_length, tokenizer, engine))


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
    executor = SingleTurnAgentExecutor([str(reward_files[which])])
    prompt = make_prompt("Add two integers.")
    out = execute(executor, tokenizer, prompt, GT, "Here it is:\n" + CORRECT)
    assert out["reward"].tolist() == [1.0] and out["scores"].tolist() == [1.0]
    assert out["truncated"] is False
    assert out["extra_logs"]["mc_verdict_correct"].tolist() == [1.0]
    assert out["extra_logs"]["num_tests"].tolist() == [2.0] and out["extra_logs"]["pass_rate"].tolist() == [1.0]


def test_executor_passes_decoded_query_with_special_tokens(reward_files, tokenizer, make_prompt, monkeypatch):
    """What reward_func really receives: [decode(prompt + response) with special tokens], [prompt], [label]."""
    calls = []

    def spy(queries, prompts, labels, **kwargs):
        calls.append((queries, prompts, labels, kwargs))
        return reward_func(queries, prompts, labels, **kwargs)

    executor = SingleTurnAgentExecutor([str(reward_files["reward_fns"])])
    monkeypatch.setattr(executor, "reward_func", spy)
    prompt = make_prompt("Add two integers.")
    out = execute(executor, tokenizer, prompt, GT, CORRECT)
    (queries, prompts, labels, kwargs), = calls
    assert queries == [prompt + CORRECT + "<|im_end|>"] and prompts == [prompt] and labels == [GT] and kwargs == {}
    assert out["reward"].tolist() == [1.0]


def test_openrlhf_swallows_reward_exceptions(tmp_path, tokenizer, make_prompt):
    """Why reward_func must be total (notes §1 failure mode 1): OpenRLHF logs the exception and leaves reward None,
    which only fails later, far from the cause. Guards the assumption; ours never raises (test_reward_total.py)."""
    bad = tmp_path / "raising_reward.py"
    bad.write_text("def reward_func(queries, prompts, labels, **kwargs):\n    raise RuntimeError('boom')\n")
    out = execute(SingleTurnAgentExecutor([str(bad)]), tokenizer, make_prompt("x"), GT, CORRECT)
    assert out["reward"] is None and out["scores"] is None and out["extra_logs"] == {}


def test_length_stopped_response_is_truncated_and_unjudged(reward_files, tokenizer, make_prompt):
    executor = SingleTurnAgentExecutor([str(reward_files["reward_fns"])])
    out = execute(executor, tokenizer, make_prompt("Add."), GT, "```python\na, b = map(int, inp", "length")
    assert out["truncated"] is True
    assert out["reward"].tolist() == [0.0]
    assert out["extra_logs"][f"mc_verdict_{V.NO_ANSWER}"].tolist() == [1.0]


def test_left_truncated_prompt_still_finds_the_response(reward_files, tokenizer, make_prompt, monkeypatch):
    """A prompt longer than max_length - max_tokens is cut on the left (``openrlhf/utils/agent.py:227-239``), so the
    query no longer starts with the prompt: the response is found after the last assistant header instead."""
    seen = []
    executor = SingleTurnAgentExecutor([str(reward_files["reward_fns"])])
    monkeypatch.setattr(executor, "reward_func", lambda q, p, lab: seen.append((q, p)) or reward_func(q, p, lab))
    prompt = make_prompt("Add two integers. " + "Background story. " * 60)
    out = execute(executor, tokenizer, prompt, GT, CORRECT, max_tokens=256, max_length=512)
    (queries, prompts), = seen
    assert not queries[0].startswith(prompts[0]) and queries[0].endswith(CORRECT + "<|im_end|>")
    assert out["reward"].tolist() == [1.0]
