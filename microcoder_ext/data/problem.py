"""The one record every source is converted to, and how it is written for verl and OpenRLHF.

A :class:`Problem` holds the statement, the tests as a ground truth that :mod:`microcoder_ext.reward` reads
(``{"inputs": [...], "outputs": [...], "fn_name"?: str, <options>}``, see ``reward/ground_truth.py``) and the
metadata the filters and the evaluation break down by. Units: ``date`` is an ISO day ``YYYY-MM-DD`` (the contest /
release date), ``difficulty`` one of :data:`DIFFICULTIES`, ``platform`` lower case (``leetcode``, ``atcoder``,
``codeforces``, ``codechef``, ...).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

DIFFICULTIES = ("easy", "medium", "hard")

#: the instruction appended to every statement (the reward extracts the last complete ```python block)
INSTRUCTION_CALL = ("Complete the function below. Return the whole solution in one ```python code block.")
INSTRUCTION_STDIN = ("Read the input from standard input and write the answer to standard output. Return the whole "
                     "program in one ```python code block.")


@dataclass
class Problem:
    id: str  # unique within its source, e.g. "leetcode/two-sum", "lcb/abc387_a"
    source: str  # dataset name, e.g. "leetcodedataset", "livecodebench", "code_contests", "microcoder"
    statement: str
    tests: dict  # ground truth for microcoder_ext.reward (JSON-serialisable)
    title: str = ""
    starter_code: str = ""
    difficulty: str | None = None  # easy | medium | hard
    platform: str | None = None
    date: str | None = None  # YYYY-MM-DD
    solutions: list[str] = field(default_factory=list)  # reference solutions (Python), if the source has any
    extra: dict = field(default_factory=dict)  # anything else worth keeping (JSON-serialisable)

    @property
    def fn_name(self) -> str | None:
        return self.tests.get("fn_name") if isinstance(self.tests, dict) else None

    def prompt_text(self) -> str:
        """The user message: statement, starter code (call-based) and the answer-format instruction."""
        parts = [self.statement.strip()]
        if self.starter_code.strip():
            parts.append(f"```python\n{self.starter_code.rstrip()}\n```")
        parts.append(INSTRUCTION_CALL if self.fn_name else INSTRUCTION_STDIN)
        return "\n\n".join(parts)

    def metadata(self) -> dict:
        """``extra_info`` / JSONL metadata: id, title, source, difficulty, platform, date, fn_name, + ``extra``."""
        meta = {"id": self.id, "title": self.title, "source": self.source, "difficulty": self.difficulty,
                "platform": self.platform, "date": self.date, "fn_name": self.fn_name}
        meta.update(self.extra)
        return meta

    def to_verl_row(self, index: int, split: str = "train") -> dict:
        """A row of verl's RL parquet (``verl.utils.dataset.rl_dataset.RLHFDataset``): chat ``prompt``,
        ``data_source``, ``ability``, ``reward_model.ground_truth`` (JSON text) and ``extra_info``."""
        info = {**self.metadata(), "split": split, "index": index}
        return {
            "data_source": f"microcoder/{self.source}",
            "prompt": [{"role": "user", "content": self.prompt_text()}],
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(self.tests)},
            "extra_info": info,
        }

    def to_openrlhf_row(self) -> dict:
        """A line of OpenRLHF JSONL as ``openrlhf_recipes/train.sh`` reads it (``--data.input_key prompt
        --data.label_key label --data.apply_chat_template``): chat ``prompt``, ``label`` = the tests as JSON text
        (read by ``microcoder_ext.openrlhf.reward``), ``datasource`` (OpenRLHF's eval breakdown key) + metadata."""
        return {"prompt": [{"role": "user", "content": self.prompt_text()}], "label": json.dumps(self.tests),
                "datasource": f"microcoder/{self.source}", **{f"meta_{k}": v for k, v in self.metadata().items()}}

    def to_dict(self) -> dict:
        return asdict(self)
