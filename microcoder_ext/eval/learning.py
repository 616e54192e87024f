"""What a short training run learned, in the numbers of its learning bar (verl's ``microcoder demo`` and the TRL
quickstart): held-back pass rate before and after, training reward at the start and at the end."""

from __future__ import annotations

import statistics
from typing import Any


def summarize(steps: list[dict], heldout: list[dict], window: int = 10) -> dict:
    """Held-back pass rate before RL (step 0) and after (the last validation); training reward, mean of the first
    and of the last ``window`` steps."""
    out: dict[str, Any] = {}
    if heldout and heldout[0]["step"] == 0:
        out["heldout_before"] = heldout[0]["pass_rate"]
    if len(heldout) > 1:
        out["heldout_after"] = heldout[-1]["pass_rate"]
        out["heldout_after_step"] = heldout[-1]["step"]
    if "heldout_before" in out and "heldout_after" in out:
        out["heldout_change"] = out["heldout_after"] - out["heldout_before"]
    rewards = [r["reward"] for r in steps if r.get("reward") is not None]
    if rewards:
        k = min(window, max(1, len(rewards) // 2))
        out["reward_first"] = statistics.fmean(rewards[:k])
        out["reward_last"] = statistics.fmean(rewards[-k:])
        out["reward_change"] = out["reward_last"] - out["reward_first"]
        out["reward_window"] = k
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}
