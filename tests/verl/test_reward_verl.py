"""Real verl 0.9.1: load_reward_manager with reward.custom_reward_function.path=pkg://microcoder_ext.reward,
then the naive manager's run_single on 1-row DataProtos shaped like AgentLoopWorker._compute_score's."""

import json

import numpy as np
import pytest

import verl  # noqa: F401  (a missing framework fails, never skips)
import torch
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402

GT = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})
RESPONSES = {
    "correct": "Here:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "wrong_answer": "```python\nprint(0)\n```",
    "no_answer": "```python\nprint(",
}


class CharTokenizer:
    """Decodes ids as characters (enough for the naive manager)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids if int(i) > 0)


def _config(name):
    return OmegaConf.create({"reward": {
        "custom_reward_function": {"path": "pkg://microcoder_ext.reward", "name": name, "reward_kwargs": {}},
        "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": "x"}},
        "reward_model": {"enable": False}, "sandbox_fusion": None, "num_workers": 1}})


def _row(text, gt=GT, pad=8):
    ids = [ord(c) for c in text] + [0] * pad
    resp = torch.tensor([ids])
    prompt = torch.tensor([[1, 2]])
    mask = torch.cat([torch.ones(1, 2), torch.tensor([[1] * len(text) + [0] * pad])], dim=1).long()
    return DataProto.from_dict(
        tensors={"prompts": prompt, "responses": resp, "attention_mask": mask},
        non_tensors={"data_source": np.array(["code"], dtype=object),
                     "reward_model": np.array([{"ground_truth": gt, "style": "rule"}], dtype=object),
                     "extra_info": np.array([{"index": 0}], dtype=object)})


@pytest.mark.parametrize("fn_name", ["compute_score", "compute_score_async"])
def test_naive_manager_scores_with_our_compute_score(fn_name):
    rm = load_reward_manager(_config(fn_name), CharTokenizer())
    infos = []
    for verdict, text in RESPONSES.items():
        out = rm.loop.run_until_complete(rm.run_single(_row(text)))
        info = out["reward_extra_info"]
        assert info["verdict"] == verdict, info
        assert out["reward_score"] == (1.0 if verdict == "correct" else 0.0)
        infos.append(info)
    bad = rm.loop.run_until_complete(rm.run_single(_row(RESPONSES["correct"], gt="{broken")))
    assert bad["reward_extra_info"]["verdict"] == "sandbox_error" and bad["reward_score"] == 0.0
    infos.append(bad["reward_extra_info"])
    # verl stacks reward_extra_info per key over infos[0].keys(): every sample must have the same keys
    keys = list(infos[0])
    assert all(list(i) == keys for i in infos)
    stacked = {k: np.array([i[k] for i in infos]) for k in keys}
    assert stacked["score"].dtype.kind == "f" and stacked["num_tests"].dtype.kind == "i"


def test_a_bad_setting_reaches_verl_as_an_error(monkeypatch):
    """verl's manager does not swallow what the reward raises: a setting no sample can be judged with stops the
    step with its reason, where a verdict would have trained on zeros."""
    from microcoder_ext.reward import RewardSetupError, reset_engine

    reset_engine()
    monkeypatch.setenv("MICROCODER_REWARD_CALL_PROCESS", "bogus")
    try:
        rm = load_reward_manager(_config("compute_score"), CharTokenizer())
        with pytest.raises(RewardSetupError, match="MICROCODER_REWARD_CALL_PROCESS"):
            rm.loop.run_until_complete(rm.run_single(_row(RESPONSES["correct"])))
    finally:
        reset_engine()
