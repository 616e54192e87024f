"""The OpenRLHF reward_func contract without OpenRLHF installed: total over samples, same keys, numeric tensors only;
a bad setting raises."""

import importlib.util
import json
import os

import pytest

import torch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GT = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})


def _load(path):
    spec = importlib.util.spec_from_file_location("mc_reward_file", path)  # as openrlhf/utils/agent.py does
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reward_func


@pytest.mark.parametrize("path", ["reward_fns/openrlhf_reward.py", "microcoder_ext/openrlhf/openrlhf_reward.py"])
def test_reward_func_is_total_with_identical_numeric_keys(path):
    reward_func = _load(os.path.join(ROOT, path))
    prompt = "<|im_start|>user\nadd<|im_end|>\n<|im_start|>assistant\n"
    cases = [(prompt + "```python\nprint(3)\n```<|im_end|>", prompt, GT, 1.0, "correct"),
             ("garbage prefix<|im_start|>assistant\n```python\nprint(3)\n```<|im_end|>", "other", GT, 1.0, "correct"),
             (prompt + "```python\nprint(4)\n```", prompt, GT, 0.0, "wrong_answer"),
             (prompt + "```python\nprint(", prompt, GT, 0.0, "no_answer"),
             (prompt + "```python\nprint(3)\n```", prompt, "{bad", 0.0, "sandbox_error"),
             (None, None, None, 0.0, None)]
    keys = None
    for q, p, label, want, verdict in cases:
        out = reward_func([q] if q is not None else [None], [p], [label])
        assert set(out) == {"rewards", "scores", "extra_logs"}
        assert out["rewards"].dtype == torch.float32 and out["rewards"].shape == (1,)
        assert out["rewards"].item() == want
        logs = out["extra_logs"]
        assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in logs.values())
        assert sum(v.item() for k, v in logs.items() if k.startswith("mc_verdict_")) == 1.0
        if verdict:
            assert logs[f"mc_verdict_{verdict}"].item() == 1.0
        keys = keys or list(logs)
        assert list(logs) == keys


@pytest.mark.parametrize("path", ["reward_fns/openrlhf_reward.py", "microcoder_ext/openrlhf/openrlhf_reward.py"])
def test_a_bad_setting_stops_the_run(path, monkeypatch):
    from microcoder_ext.reward import RewardSetupError, reset_engine

    reward_func = _load(os.path.join(ROOT, path))
    reset_engine()
    monkeypatch.setenv("MICROCODER_REWARD_CALL_PROCESS", "bogus")
    try:
        with pytest.raises(RewardSetupError, match="MICROCODER_REWARD_CALL_PROCESS"):
            reward_func(["```python\nprint(3)\n```"], [""], [GT])
    finally:
        reset_engine()
