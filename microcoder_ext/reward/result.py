"""The outcome of scoring one response, and its framework-facing dict form."""

from __future__ import annotations

from dataclasses import dataclass

from microcoder_ext.core import verdicts as V

#: keys of :meth:`EvalResult.to_dict`, identical for every sample (verl stacks them per key)
RESULT_KEYS = ("score", "acc", "pass_rate", "verdict", "num_tests", "num_passed", "time_s", "detail")


@dataclass
class EvalResult:
    verdict: str
    num_tests: int = 0
    num_passed: int = 0
    detail: str = ""
    time_s: float = 0.0  # wall-clock seconds spent scoring

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
                "detail": self.detail[:300]}
