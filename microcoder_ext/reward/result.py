"""The outcome of scoring one response, and its framework-facing dict form."""

from __future__ import annotations

import re
from dataclasses import dataclass

from microcoder_ext.core import verdicts as V

#: keys of :meth:`EvalResult.to_dict`, identical for every sample (verl stacks them per key)
RESULT_KEYS = ("score", "acc", "pass_rate", "verdict", "num_tests", "num_passed", "time_s", "detail")


#: the longest ``detail`` a result carries (characters, after escaping)
DETAIL_LIMIT = 300
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    ch = m.group()
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def safe_text(value, limit: int = DETAIL_LIMIT) -> str:
    """``value`` as text any host can write and show: valid UTF-8 (a lone surrogate becomes ``\\udcxx``), control
    characters, terminal escape sequences and bidi overrides escaped (``\\x1b``), at most ``limit`` characters
    (longer text keeps its beginning and its end)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > 4 * limit:
        text = text[: 2 * limit] + " ... " + text[-2 * limit:]
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = _CONTROL.sub(_escape, text)
    if len(text) <= limit:
        return text
    head = (limit - 5) // 2  # both ends: the start says where, the end usually what (an exception's message)
    return text[:head] + " ... " + text[-(limit - 5 - head):]


@dataclass
class EvalResult:
    verdict: str
    num_tests: int = 0
    num_passed: int = 0
    detail: str = ""
    time_s: float = 0.0  # wall-clock seconds spent scoring

    def __post_init__(self) -> None:
        # the program's own text (exception messages, stderr) reaches detail: make it safe to log anywhere
        self.detail = safe_text(self.detail)

    @property
    def score(self) -> float:
        """Binary: 1.0 only when every test passed."""
        return 1.0 if self.verdict == V.CORRECT else 0.0

    @property
    def pass_rate(self) -> float:
        """Passed / total tests (a lower bound when scoring stopped at the first failure)."""
        return self.num_passed / self.num_tests if self.num_tests else 0.0

    def to_dict(self) -> dict:
        return {"score": self.score, "acc": self.score, "pass_rate": float(self.pass_rate),
                "verdict": V.validate(self.verdict), "num_tests": int(self.num_tests),
                "num_passed": int(self.num_passed), "time_s": round(float(self.time_s), 4),
                "detail": safe_text(self.detail)}
