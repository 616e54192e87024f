"""Coding samples shared by the OpenRLHF mask and trainer tests (imported by name: conftest puts this folder on
``sys.path``; not a package, never ``tests.*``).

``CASES``: prompt -> (label, [(completion, verdict, truncated, repeating tail)]) for n = 4 samples per prompt with
``MAX_NEW`` response tokens (= bytes with conftest's byte tokenizer) and a repeat window of ``M`` tokens.
"""

import json

from microcoder_ext.core import verdicts as V

N = 4
MAX_NEW = 96  # tokens (= bytes with the byte tokenizer)
M = 4  # repeat window for these short responses
SUM_TESTS = json.dumps({"inputs": ["1 2\n", "10 20\n"], "outputs": ["3\n", "30\n"]})
CALL_TESTS = json.dumps({"inputs": [[2, 3], [5, 5]], "outputs": [6, 25], "fn_name": "mul"})
SUM = "a, b = map(int, input().split())\nprint(a + b)"
MUL = "def mul(a, b):\n    return a * b"
# non-periodic filler that pushes a response past MAX_NEW
FILLER = "\nWhy it works: input gives two numbers, we split them, convert each one and print the total quickly. " \
         "Complexity is constant; edge cases: negative values, zero, large inputs near the limits of int."


def fence(code):
    return f"```python\n{code}\n```"


CASES = {
    "Read two integers and print their sum.": (SUM_TESTS, [
        (fence(SUM) + FILLER, V.CORRECT, True, False),  # masked
        (fence("a, b = map(int, input().split())\nprint(a - b)") + FILLER, V.WRONG_ANSWER, True, False),  # incorrect
        ("```python\n" + "ab" * 80, V.NO_ANSWER, True, True),  # truncated, but the tail repeats
        (fence(SUM), V.CORRECT, False, False),
    ]),
    "Multiply two integers.": (CALL_TESTS, [
        ("Thinking it through." + FILLER, V.NO_ANSWER, True, False),  # masked only in non_incorrect
        (fence(MUL), V.CORRECT, False, False),
        (fence("def mul(a, b):\n    return a + b"), V.WRONG_ANSWER, False, False),
        (fence(MUL) + FILLER, V.CORRECT, True, False),  # masked
    ]),
}
#: a third prompt whose label is not JSON: every sample is sandbox_error
BROKEN_ROW = ("Print the answer (broken dataset row).", ("{not json", [
    (fence(SUM) + FILLER, V.SANDBOX_ERROR, True, False),  # masked only in non_incorrect
    (fence("print(3)"), V.SANDBOX_ERROR, False, False),
    ("no code", V.SANDBOX_ERROR, False, False),
    (fence("print(1)"), V.SANDBOX_ERROR, False, False),
]))


def masked_at_rho_1(verdict, truncated, repeating, mode="non_incorrect"):
    ok = verdict not in V.INCORRECT if mode == "non_incorrect" else verdict == V.CORRECT
    return truncated and ok and not repeating


def per_sample(batches, fn):
    """``fn(batch, row)`` for every sample of OpenRLHF ``Experience`` micro batches, in rollout order (``exp.index``)."""
    out = {}
    for b in batches:
        for j, i in enumerate(b.index):
            out[i] = fn(b, j)
    return [out[i] for i in range(len(out))]
