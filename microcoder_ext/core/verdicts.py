"""Verdict vocabulary shared by the code reward (producer) and the truncation mask (consumer).

A verdict is a plain ``str`` so that it survives every framework boundary (verl's ``reward_extra_info``
numpy object arrays, JSON, Ray pickling). ``Verdict`` is a ``str`` enum: ``Verdict.CORRECT == "correct"``.

Classes of verdict:

* ``correct``      every test passed.
* INCORRECT        the extracted code ran and failed: ``wrong_answer, runtime_error, timeout, memory_limit,
                   compile_error``.
* ``no_answer``    no complete code block could be extracted (e.g. the response was truncated mid-block);
                   nothing was executed.
* ``sandbox_error`` infrastructure failure or malformed ground truth; says nothing about the code.

"Non-incorrect" (paper: ``non-incorrect(o_i)``) is every verdict outside INCORRECT.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable


class Verdict(str, Enum):
    CORRECT = "correct"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    COMPILE_ERROR = "compile_error"
    NO_ANSWER = "no_answer"
    SANDBOX_ERROR = "sandbox_error"

    def __str__(self) -> str:  # "correct", not "Verdict.CORRECT"
        return self.value


CORRECT = Verdict.CORRECT.value
WRONG_ANSWER = Verdict.WRONG_ANSWER.value
RUNTIME_ERROR = Verdict.RUNTIME_ERROR.value
TIMEOUT = Verdict.TIMEOUT.value
MEMORY_LIMIT = Verdict.MEMORY_LIMIT.value
COMPILE_ERROR = Verdict.COMPILE_ERROR.value
NO_ANSWER = Verdict.NO_ANSWER.value
SANDBOX_ERROR = Verdict.SANDBOX_ERROR.value

#: every valid verdict string, in a stable order (used for one-hot encodings)
ALL: tuple[str, ...] = tuple(v.value for v in Verdict)
#: the code ran and was judged wrong
INCORRECT: frozenset[str] = frozenset({WRONG_ANSWER, RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, COMPILE_ERROR})
#: everything that is not INCORRECT
NON_INCORRECT: frozenset[str] = frozenset(ALL) - INCORRECT


class UnknownVerdictError(ValueError):
    """A string outside the verdict vocabulary."""


def validate(verdict: object) -> str:
    """Return ``verdict`` as a plain ``str`` or raise :class:`UnknownVerdictError`."""
    if isinstance(verdict, Verdict):
        return verdict.value
    if isinstance(verdict, str) and verdict in _VALID:
        return verdict
    raise UnknownVerdictError(
        f"unknown verdict {verdict!r}; expected one of {', '.join(ALL)} (microcoder_ext.core.verdicts)"
    )


def validate_all(verdicts: Iterable[object]) -> list[str]:
    """Validate a sequence of verdicts; the error names the first bad index."""
    out = []
    for i, v in enumerate(verdicts):
        try:
            out.append(validate(v))
        except UnknownVerdictError as e:
            raise UnknownVerdictError(f"verdicts[{i}]: {e}") from None
    return out


def is_incorrect(verdict: object) -> bool:
    """True for verdicts where the code ran and failed."""
    return validate(verdict) in INCORRECT


def is_non_incorrect(verdict: object) -> bool:
    """True for ``correct``, ``no_answer`` and ``sandbox_error`` (the paper's ``non-incorrect``)."""
    return validate(verdict) not in INCORRECT


def is_correct(verdict: object) -> bool:
    return validate(verdict) == CORRECT


_VALID = frozenset(ALL)
