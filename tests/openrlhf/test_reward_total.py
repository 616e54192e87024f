"""``reward_func`` is total (never raises, never returns None) and always returns the same keys with float
tensors, whatever it is given; and what it returns for hostile labels goes through OpenRLHF's own conversion
(``SamplesGenerator._process_response_into_experience``) and merge (``Experience.concat_experiences``)."""

import json
import math
import time
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.openrlhf.reward import reward_func  # noqa: E402

PROMPT = "<|im_start|>user\nAdd two integers.<|im_end|>\n<|im_start|>assistant\n"
SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
GT = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
KEYS = ["pass_rate", "num_tests"] + [f"mc_verdict_{v}" for v in V.ALL]


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str")

    __repr__ = __str__


MALFORMED_LABELS = {
    "none": None, "empty": "", "not_json": "{not json", "text": "print 3", "json_null": "null", "json_list": "[]",
    "json_obj": "{}", "json_number": "42", "int": 42, "float_nan": float("nan"), "bytes": b'{"inputs": []}',
    "length_mismatch": json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n"]}),
    "inputs_not_list": json.dumps({"inputs": "1 2\n", "outputs": "3\n"}),
    "fn_name_not_str": json.dumps({"inputs": [[1]], "outputs": [1], "fn_name": 7}),
    "lcb_bad_testtype": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "carrier pigeon"}]),
    "deeply_nested": "[" * 100_000 + "]" * 100_000, "huge_garbage": "x" * 5_000_000,
    "checker_not_code": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"], "checker": "def check(:"}),
    "set": {1, 2}, "object": Unprintable(),
}


def _check(out, n):
    assert isinstance(out, dict) and set(out) == {"rewards", "scores", "extra_logs"}
    for key in ("rewards", "scores"):
        assert isinstance(out[key], torch.Tensor) and out[key].dtype == torch.float32 and out[key].shape == (n,)
    logs = out["extra_logs"]
    assert list(logs) == KEYS
    for v in logs.values():
        assert isinstance(v, torch.Tensor) and v.dtype == torch.float32 and v.shape == (n,)
        assert all(math.isfinite(x) for x in v.tolist())
    onehot = torch.stack([logs[f"mc_verdict_{v}"] for v in V.ALL])
    assert onehot.sum(0).tolist() == [1.0] * n
    return [V.ALL[i] for i in onehot.argmax(0).tolist()]


@pytest.mark.parametrize("name", list(MALFORMED_LABELS))
def test_malformed_label_is_sandbox_error(name):
    verdicts = _check(reward_func([PROMPT + SUM], [PROMPT], [MALFORMED_LABELS[name]]), 1)
    assert verdicts == [V.SANDBOX_ERROR]


@pytest.mark.parametrize("queries,prompts,labels,n", [
    ([None], [None], [None], 1),
    ([123], [PROMPT], [GT], 1),
    ([b"```python\nprint(3)\n```"], [b"bytes prompt"], [GT], 1),
    ([""], [""], [""], 1),
    ([PROMPT + SUM, PROMPT + SUM], [PROMPT], [], 2),  # ragged lists
    ([], [], [], 0),
    (None, None, None, 0),
    ((PROMPT + SUM,), (PROMPT,), (GT,), 1),  # tuples
    (PROMPT + SUM, PROMPT, GT, 1),  # bare strings, not lists
    ([Unprintable()], [Unprintable()], [GT], 1),
    (["```python\nprint('\ud800')\n```"], [""], [GT], 1),  # lone surrogate
    ([PROMPT + SUM], [{"role": "user"}], [GT], 1),  # a prompt that is not a string
], ids=["none_items", "int_query", "bytes", "empty_strings", "ragged", "empty_lists", "none_lists", "tuples",
        "bare_strings", "unprintable", "surrogate", "dict_prompt"])
def test_odd_arguments_never_raise(queries, prompts, labels, n):
    _check(reward_func(queries, prompts, labels), n)


def test_extra_kwargs_are_ignored():
    assert _check(reward_func([PROMPT + SUM], [PROMPT], [GT], step=3, extra="x"), 1) == [V.CORRECT]


def test_huge_inputs_are_fast_and_total():
    t0 = time.process_time()  # this process's CPU seconds: reading the responses, which a loaded machine does not add to
    cases = [
        (PROMPT + "thinking " * 1_000_000, GT, V.NO_ANSWER),  # 9 MB, no code block
        (PROMPT + "```python\nprint(1)\n```\n" * 50_000 + SUM, GT, V.CORRECT),  # 50k blocks, the last one counts
        (PROMPT + "```python\n" + "x = 1\n" * 500_000, GT, V.NO_ANSWER),  # 3 MB unterminated block
        (PROMPT + SUM, json.dumps({"inputs": ["1 2\n"] * 20_000, "outputs": ["4\n"] * 20_000}), V.WRONG_ANSWER),
    ]
    for query, label, verdict in cases:
        assert _check(reward_func([query], [PROMPT], [label]), 1) == [verdict]
    assert time.process_time() - t0 < 60


def test_batched_call_keeps_order():
    """The pre-0.9.5 batched contract (one call, many samples) still works: per-sample tensors in input order."""
    queries = [PROMPT + SUM, PROMPT + "```python\nprint(4)\n```", PROMPT + "no code", PROMPT + SUM]
    out = reward_func(queries, [PROMPT] * 4, [GT, GT, GT, "{bad"])
    assert _check(out, 4) == [V.CORRECT, V.WRONG_ANSWER, V.NO_ANSWER, V.SANDBOX_ERROR]
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_hostile_labels_survive_openrlhf_conversion_and_merge(tokenizer):
    """Each reward output, as SingleTurnAgentExecutor stores it, through OpenRLHF's tensor conversion and concat."""
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    args = SimpleNamespace(algo=SimpleNamespace(advantage=SimpleNamespace(is_correction_level="off")))
    generator = SamplesGenerator(SimpleNamespace(args=args), None, None, tokenizer, [])
    prompt_ids = tokenizer(text=PROMPT, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(text=SUM, add_special_tokens=False)["input_ids"]
    experiences = []
    labels = {"valid": GT, **{k: MALFORMED_LABELS[k] for k in ("none", "not_json", "length_mismatch", "int")}}
    for label in labels.values():
        out = reward_func([PROMPT + SUM], [PROMPT], [label])
        response = {"prompt": PROMPT, "label": label, "images": None, "mm_train_inputs": None,
                    "observation_tokens": prompt_ids + response_ids,
                    "action_ranges": [(len(prompt_ids), len(prompt_ids) + len(response_ids))],
                    "rollout_log_probs": None, "truncated": False,
                    "reward": out["rewards"], "scores": out["scores"], "extra_logs": out["extra_logs"]}
        experiences.append(generator._process_response_into_experience(response, max_len=2048))
    merged = Experience.concat_experiences(experiences, tokenizer.pad_token_id)
    assert merged.rewards.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert merged.info[f"mc_verdict_{V.SANDBOX_ERROR}"].tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert all(len(v) == len(labels) for v in merged.info.values())
