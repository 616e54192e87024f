"""Write ``problems.jsonl``: the quickstart's bundled easy problems (Apache-2.0, written for microcoder-ext).

    python -m microcoder_ext.bundled.generate      # rewrites problems.jsonl next to this file

Ten families of one-line functions, each with a constant K in the statement ("Return x plus 7."), eight
instances per family (K = 2..9). For every family two values of K are held back: those 20 problems are never
trained on, so their pass rate measures whether what was learnt transfers to unseen instances of the same
families. Each line is ``microcoder_ext.data.problem.Problem.to_dict()`` with ``tests`` as a dict (so
``microcoder data prepare --source problems.jsonl`` reads it) and ``extra = {"family", "k", "split"}``; the
tests are call-based (``{"inputs": [{"x": 3}, ...], "outputs": [...], "fn_name": ...}``), five per problem, chosen
so that the same function with any other constant in 1..10 fails at least one of them, and
``solutions[0]`` is the reference solution (it passes them: ``tests/trl/test_quickstart.py`` checks).
Deterministic: the same file every run.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATH = HERE / "problems.jsonl"
KS = tuple(range(2, 10))

# name, argument, statement template, body template, input maker, expected output
FAMILIES = [
    ("add_k", "x", "Return x plus {k}.", "x + {k}", lambda r: r.randint(-20, 20), lambda x, k: x + k),
    ("sub_k", "x", "Return x minus {k}.", "x - {k}", lambda r: r.randint(-20, 20), lambda x, k: x - k),
    ("mul_k", "x", "Return x times {k}.", "x * {k}", lambda r: r.randint(-20, 20), lambda x, k: x * k),
    ("mod_k", "x", "Return the remainder of x divided by {k}.", "x % {k}", lambda r: r.randint(0, 50),
     lambda x, k: x % k),
    ("div_k", "x", "Return True if x is divisible by {k}, else False.", "x % {k} == 0",
     lambda r: r.randint(0, 40), lambda x, k: x % k == 0),
    ("first_k", "xs", "Return the first {k} elements of the list xs.", "xs[:{k}]",
     lambda r: [r.randint(0, 9) for _ in range(r.randint(0, 12))], lambda xs, k: xs[:k]),
    ("last_k", "s", "Return the last {k} characters of the string s.", "s[-{k}:]",
     lambda r: "".join(r.choice("abcdefgh") for _ in range(r.randint(1, 12))), lambda s, k: s[-k:]),
    ("repeat_k", "s", "Return the string s repeated {k} times.", "s * {k}",
     lambda r: "".join(r.choice("abc") for _ in range(r.randint(0, 3))), lambda s, k: s * k),
    ("count_k", "xs", "Return how many times {k} appears in the list xs.", "xs.count({k})",
     lambda r: [r.randint(0, 9) for _ in range(r.randint(0, 12))], lambda xs, k: xs.count(k)),
    ("greater_k", "xs", "Return the elements of the list xs that are greater than {k}, in order.",
     "[v for v in xs if v > {k}]", lambda r: [r.randint(0, 12) for _ in range(r.randint(0, 10))],
     lambda xs, k: [v for v in xs if v > k]),
]
TESTS_PER_PROBLEM = 5


def held_back(family_index: int) -> tuple[int, int]:
    """The two K values held back for a family: they rotate, so every K is trained on in other families."""
    return KS[family_index % len(KS)], KS[(family_index + 4) % len(KS)]


def pinning_inputs(make, expect, k: int, rng: random.Random) -> list:
    """``TESTS_PER_PROBLEM`` distinct inputs on which the answer for ``k`` differs from the answer for every other
    constant in 1..10, so a solution with the wrong constant fails (the first draw that does, seeded)."""
    while True:
        inputs: list = []
        while len(inputs) < TESTS_PER_PROBLEM:
            v = make(rng)
            if v not in inputs:
                inputs.append(v)
        if all(any(expect(v, k) != expect(v, other) for v in inputs) for other in range(1, 11) if other != k):
            return inputs


def problems() -> list[dict]:
    from microcoder_ext.data.problem import Problem

    out = []
    for fi, (name, arg, statement, body, make, expect) in enumerate(FAMILIES):
        for k in KS:
            inputs = pinning_inputs(make, expect, k, random.Random(f"{name}-{k}"))
            tests = {"inputs": [{arg: v} for v in inputs], "outputs": [expect(v, k) for v in inputs],
                     "fn_name": name}
            split = "heldout" if k in held_back(fi) else "train"
            p = Problem(id=f"quickstart/{name}/{k}", source="quickstart", statement=statement.format(k=k),
                        tests=tests, title=f"{name} (K={k})", starter_code=f"def {name}({arg}):",
                        difficulty="easy", solutions=[f"def {name}({arg}):\n    return {body.format(k=k)}\n"],
                        extra={"family": name, "k": k, "split": split})
            out.append(p.to_dict())
    return out


def main() -> int:
    rows = problems()
    PATH.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    held = sum(r["extra"]["split"] == "heldout" for r in rows)
    print(f"wrote {PATH}: {len(rows)} problems ({len(rows) - held} train, {held} held back)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
