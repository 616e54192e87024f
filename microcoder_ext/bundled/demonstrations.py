"""The warm-start demonstrations of the bundled problems (:mod:`microcoder_ext.bundled`: 10 families x 8 constants;
60 trained on, 20 held back): the task of ``microcoder demo`` and of the TRL quickstart, read by
:func:`microcoder_ext.smoke.model.prepare_model` when it warm-starts the tiny model.

A warm start on reference solutions alone leaves RL little to select: the model is already as right as it will get,
or wrong in ways no sample of it avoids. So the demonstrations **mix**, for every train problem, the reference
solution with one plausible wrong one: the family's typical slip (``x - K`` for "x plus K", ``xs[K:]`` for "the
first K elements", ...), with the problem's own constant. The warm-started model then writes both, about half
each, on train and held-back problems alike; the execution reward tells them apart, and what RL reinforces (the
right operation for each kind of statement) carries over to the held-back constants. Held-back problems are never
in the demonstrations.
"""

from __future__ import annotations

import random
from typing import Sequence

from microcoder_ext.bundled import answer, messages

#: family -> the body of the plausible wrong solution (``{k}``: the problem's constant). Each fails at least one
#: test of every problem of its family (tests/demo/test_task.py runs them through the real reward).
WRONG_BODIES = {
    "add_k": "x - {k}",
    "sub_k": "{k} - x",
    "mul_k": "x + {k}",
    "mod_k": "x // {k}",
    "div_k": "x % {k} != 0",
    "first_k": "xs[{k}:]",
    "last_k": "s[:{k}]",
    "repeat_k": "s * ({k} + 1)",
    "count_k": "len(xs) - xs.count({k})",
    "greater_k": "[v for v in xs if v >= {k}]",
}


def family(problem) -> str:
    return problem.extra["family"]


def wrong_solution(problem) -> str:
    """The family's plausible wrong solution of ``problem`` (same signature, the problem's own constant)."""
    body = WRONG_BODIES[family(problem)].format(k=problem.extra["k"])
    return f"{problem.starter_code.rstrip()}\n    return {body}\n"


def wrong_answer(problem) -> str:
    """:func:`wrong_solution` as a model answer (one fenced block, like :func:`microcoder_ext.bundled.answer`)."""
    return f"```python\n{wrong_solution(problem).rstrip()}\n```"


def demonstrations(problems: Sequence, *, wrong_per_correct: int = 1, seed: int = 0) -> list[tuple[list[dict], str]]:
    """``(messages, answer)`` warm-start pairs: per problem its reference and ``wrong_per_correct`` copies of its
    wrong answer, shuffled with ``seed``. Pass the **train** problems only."""
    if any(p.extra.get("split") == "heldout" for p in problems):
        raise ValueError("held-back problems must not be in the demonstrations")
    pairs = []
    for p in problems:
        pairs.append((messages(p), answer(p)))
        pairs += [(messages(p), wrong_answer(p))] * wrong_per_correct
    random.Random(seed).shuffle(pairs)
    return pairs
