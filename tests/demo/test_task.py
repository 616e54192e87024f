"""The demo task (microcoder_ext.bundled.demonstrations): each family's plausible wrong solution fails through the
real sandboxed reward on every problem, the reference passes, and the demonstrations mix both for train problems only."""

from __future__ import annotations

from collections import Counter

import pytest

from microcoder_ext.bundled import answer, load_problems, split_problems
from microcoder_ext.core import verdicts as V
from microcoder_ext.bundled.demonstrations import WRONG_BODIES, demonstrations, wrong_answer
from microcoder_ext.reward import evaluate_response


@pytest.fixture(scope="module")
def problems():
    return load_problems()


def test_every_family_has_a_wrong_solution(problems):
    assert set(WRONG_BODIES) == {p.extra["family"] for p in problems}


def test_wrong_solutions_fail_and_references_pass_on_every_problem(problems):
    misjudged = []
    for p in problems:
        gt = p.tests
        ref = evaluate_response(answer(p), gt, {"fn_name": p.fn_name}, timeout=5)
        bad = evaluate_response(wrong_answer(p), gt, {"fn_name": p.fn_name}, timeout=5)
        if ref.verdict != V.CORRECT or bad.verdict != V.WRONG_ANSWER:
            misjudged.append((p.id, ref.verdict, bad.verdict, bad.detail[:80]))
    assert misjudged == []


def test_demonstrations_mix_both_for_train_problems_only(problems):
    train, held = split_problems(problems)
    pairs = demonstrations(train, seed=3)
    assert len(pairs) == 2 * len(train)
    kinds = Counter("wrong" if a == wrong_answer(p) else "right" for p in train for m, a in pairs
                    if m[0]["content"] == p.prompt_text())
    assert kinds == {"right": len(train), "wrong": len(train)}
    assert pairs != demonstrations(train, seed=4)  # the seed orders them
    with pytest.raises(ValueError, match="held-back"):
        demonstrations(train + held[:1])
