"""The bundled problems (``problems.jsonl``, Apache-2.0, written for microcoder-ext; see ``README.md``): 80 easy
call-based Python problems used by the CPU quickstart (``microcoder_ext.trl.quickstart``) and by ``microcoder smoke``
when a launch's own data cannot be read locally."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

DATA = Path(__file__).resolve().parent / "problems.jsonl"
SPLITS = ("train", "heldout")


def load_problems(path: str | Path = DATA) -> list:
    """The bundled problems as :class:`~microcoder_ext.data.problem.Problem` records (``extra.split``)."""
    from microcoder_ext.data.problem import Problem

    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if isinstance(row.get("tests"), str):
                    row["tests"] = json.loads(row["tests"])
                out.append(Problem(**row))
    return out


def split_problems(problems: Sequence) -> tuple[list, list]:
    """``(train, heldout)`` by ``extra.split``."""
    train = [p for p in problems if p.extra.get("split") == "train"]
    held = [p for p in problems if p.extra.get("split") == "heldout"]
    return train, held


def messages(problem) -> list[dict]:
    """The chat prompt of a problem: one user message."""
    return [{"role": "user", "content": problem.prompt_text()}]


def answer(problem) -> str:
    """The reference answer a model is warm-started on: the reference solution in one fenced block."""
    return f"```python\n{problem.solutions[0].rstrip()}\n```"
