"""Data and the colocated-path reward manager of ``test_verdict_path.py`` (kept in one file because verl's reward
loop workers, separate Ray processes, load the reward manager from this file by path).

The problem is LeetCodeDataset v0.2.0 (newfacade/LeetCodeDataset, MIT) train row ``defanging-an-ip-address``,
copied here (only the fields :func:`microcoder_ext.reward.leetcode.ground_truth_from_row` reads, and the query)
together with its conversion, so the tests never read ``../shared``.
"""

from __future__ import annotations

import json

import numpy as np
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager


LEETCODE_ROW = {
    "task_id": "defanging-an-ip-address",
    "entry_point": "Solution().defangIPaddr",
    "prompt": (
        "from typing import *\n\nfrom functools import *\nfrom collections import *\nfrom itertools import *\n"
        "from heapq import *\nfrom bisect import *\nfrom string import *\nfrom operator import *\nfrom math import *\n"
        "import math\nimport datetime\ninf = float('inf')\n"
    ),
    "completion": (
        "class Solution:\n    def defangIPaddr(self, address: str) -> str:\n        return address.replace('.', '[.]')\n"
    ),
    "input_output": [
        {"input": 'address = "1.1.1.1"', "output": '"1[.]1[.]1[.]1"'},
        {"input": 'address = "255.100.50.0"', "output": '"255[.]100[.]50[.]0"'},
    ],
    "query": (
        'Given a valid (IPv4) IP address, return a defanged version of that IP address.\nA defanged\xa0IP address'
        '\xa0replaces every period "." with "[.]".\n\xa0\nPlease complete the following python code precisely:\n'
        "```python\nclass Solution:\n    def defangIPaddr(self, address: str) -> str:\n```"
    ),
}
#: ``ground_truth_from_row(LEETCODE_ROW)`` as JSON (verl's ``reward_model.ground_truth``)
GROUND_TRUTH = json.dumps({
    "fn_name": "defangIPaddr",
    "inputs": [{"address": "1.1.1.1"}, {"address": "255.100.50.0"}],
    "outputs": ["1[.]1[.]1[.]1", "255[.]100[.]50[.]0"],
    "setup_code": LEETCODE_ROW["prompt"],
})

#: the dataset row as verl's RLHFDataset hands it to the agent loop (parquet columns + uid/index)
PROMPT_ROW = {
    "data_source": "newfacade/LeetCodeDataset",
    "raw_prompt": [{"role": "user", "content": LEETCODE_ROW["query"]}],
    "reward_model": {"style": "rule", "ground_truth": GROUND_TRUTH},
    "extra_info": {"index": 0, "task_id": LEETCODE_ROW["task_id"]},
    "index": 0,
}

_CORRECT = (
    "```python\nclass Solution:\n    def defangIPaddr(self, address: str) -> str:\n"
    "        return address.replace('.', '[.]')\n```"
)
_WRONG = _CORRECT.replace("'[.]'", "'(.)'")
_EXPLANATION = (
    "\n\nEvery period becomes [.] while the digits stay as they are, so the defanged address keeps its order; "
    "for example 1.1.1.1 turns into 1[.]1[.]1[.]1 and nothing else changes."
)
_UNFINISHED = (
    "Let me think step by step. Split the address on the periods, then join the parts again:\n"
    "```python\nclass Solution:\n    def defangIPaddr(self, address: str) -> str:\n"
    "        parts = address.split('.')\n        # joining with [.] puts the brackets between every pair of parts\n"
    "        return '[.]'.join(parts)\n"
)

#: (name, full model output, stopped by EOS, expected verdict, expected masked with rho=1 / mode non_incorrect).
#: Outputs that did not stop are cut at rollout.response_length tokens, as verl's SingleTurnAgentLoop cuts them.
RESPONSES = [
    ("truncated_correct", "Here is a solution:\n" + _CORRECT + _EXPLANATION, False, "correct", True),
    ("truncated_wrong", "Here is a solution:\n" + _WRONG + _EXPLANATION, False, "wrong_answer", False),
    ("truncated_no_code_block", _UNFINISHED, False, "no_answer", True),
    ("finished_correct", _CORRECT, True, "correct", False),
]

#: texts the test tokenizer is trained on
TOKENIZER_CORPUS = [LEETCODE_ROW["query"], *(text for _, text, *_ in RESPONSES)]

_GROUND_TRUTH_BY_PROMPT = {LEETCODE_ROW["query"]: (PROMPT_ROW["data_source"], GROUND_TRUTH)}


class PromptKeyedRewardManager(NaiveRewardManager):
    """verl's naive reward manager for the colocated-reward path.

    ``PPOTrainer._compute_reward_colocate`` (verl 0.9.1 ``trainer/ppo/v1/trainer_base.py:1529-1581``) hands the
    reward loop only ``prompts``, ``responses``, ``attention_mask`` and ``raw_prompt``: no ``data_source``, no
    ``reward_model.ground_truth``, so the naive manager itself raises ``KeyError: 'data_source'`` there. This
    subclass recovers both from the prompt text, then runs the naive manager unchanged (our ``compute_score``).
    """

    async def run_single(self, data):
        data = data[-1:]
        if "data_source" not in data.non_tensor_batch:
            prompt = list(data.non_tensor_batch["raw_prompt"][0])[-1]["content"]
            data_source, ground_truth = _GROUND_TRUTH_BY_PROMPT[prompt]
            data.non_tensor_batch["data_source"] = np.array([data_source], dtype=object)
            data.non_tensor_batch["reward_model"] = np.array(
                [{"style": "rule", "ground_truth": ground_truth}], dtype=object
            )
        return await super().run_single(data)
