"""The one error the reward raises: a setting or a host it cannot run with.

A bad *sample* (malformed tests, hostile code, a crashed worker) is scored, as verdict ``sandbox_error`` or a
program verdict, so one sample never stops a training run. A bad *setting* (an unknown backend or mode, a
number that does not parse) or a sandbox that cannot start on this host at all would give every sample
``sandbox_error``: a run that trains on zero rewards and looks healthy. Those raise :class:`RewardSetupError`,
through ``compute_score`` and the framework adapters, so the launch stops at its first reward call with the
reason.
"""

from __future__ import annotations


class RewardSetupError(ValueError):
    """The reward cannot run as configured here (raised, never turned into a verdict)."""
