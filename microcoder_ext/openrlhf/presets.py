"""The ``--mc.preset`` choices of the OpenRLHF launcher, as data (no OpenRLHF import).

A preset is a list of :class:`Requirement` s on OpenRLHF's parsed arguments plus which MicroCoder parts run:

=================  ===========  =========================  ===========================================================
preset             mask         temperature                OpenRLHF settings (docs/paper.md; [INF] our choice)
=================  ===========  =========================  ===========================================================
``microcoder``     yes          ``--mc.temperature.*``     group_norm, no KL, clip 0.2/0.28, token-mean, our reward
``mask_only``      yes          OpenRLHF's (untouched)     none: only the mask is added
``dapo_baseline``  no           1.2 constant               group_norm, no KL, clip 0.2/0.28, token-mean, our reward
``grpo_baseline``  no           1.2 constant               group_norm, KL loss 0.001 (k3), clip 0.2/0.2, our reward
=================  ===========  =========================  ===========================================================

These mirror the verl recipes (``microcoder_ext/configs/recipe/*.yaml``): the same values and the same sources.
The launcher injects ``Requirement.flag`` before the user's flags; after OpenRLHF's argparse, a value that differs
from ``Requirement.value`` is a user flag contradicting the preset (an error naming the flag unless
``--mc.allow_override``, and never for ``overridable=False``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: the temperature of the baselines and of MicroCoder-GRPO's main runs (docs/paper.md#baselines)
PAPER_TEMPERATURE = 1.2


@dataclass(frozen=True)
class Requirement:
    """``args.<dest> == value`` after OpenRLHF's argparse (``dest`` dotted, e.g. ``algo.kl.init_coef``)."""

    dest: str
    value: Any
    #: argv tokens that set it (``()``: OpenRLHF's default already is ``value``)
    flag: tuple[str, ...]
    #: why the preset needs it (shown in errors and in the dry run)
    why: str
    #: False: a different value is refused even with ``--mc.allow_override``
    overridable: bool = True
    #: the first OpenRLHF release with this flag; before it OpenRLHF always behaves as ``value`` and has no flag, so
    #: the requirement holds by construction and nothing is passed (None: every supported release has the flag)
    since: str | None = None

    def applies_to(self, version: str) -> bool:
        """Whether OpenRLHF ``version`` has this setting as a flag (else it is fixed to ``value`` there)."""
        from packaging.version import Version

        return self.since is None or Version(version) >= Version(self.since)

    @property
    def option(self) -> str:
        """The OpenRLHF flag a user would pass for this setting."""
        return f"--{self.dest}"


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    requirements: tuple[Requirement, ...]
    #: apply the conditional truncation mask (our trainer)
    mask: bool
    #: the temperature controller (``--mc.temperature.*``) drives sampling and the actor's log-probs
    temperature_control: bool
    #: fill in ``--reward.remote_url`` with our code reward when the user gives none
    fill_reward: bool

    @property
    def uses_trainer(self) -> bool:
        """Runs :class:`microcoder_ext.openrlhf.trainer.MicrocoderPPOTrainer` (else OpenRLHF's own ``PPOTrainer``)."""
        return self.mask or self.temperature_control

    @property
    def refuses_async(self) -> bool:
        """Async / partial rollout would bypass our trainer (OpenRLHF then builds ``PPOTrainerAsync``) and train on
        samples drawn at an older temperature."""
        return self.uses_trainer


def _group_norm(why: str = "GRPO: (r - mean) / std over the n samples of a prompt (docs/paper.md#objective)"
                ) -> Requirement:
    return Requirement("algo.advantage.estimator", "group_norm", ("--algo.advantage.estimator", "group_norm"), why)


def _no_kl() -> tuple[Requirement, ...]:
    why = "no KL (beta = 0), neither in the reward nor as a loss (docs/paper.md#kl-and-clipping); no reference model"
    return (
        Requirement("algo.kl.init_coef", 0.0, ("--algo.kl.init_coef", "0"), why),
        Requirement("algo.kl.use_loss", False, (), why),
    )


def _clip(low: float, high: float, why: str) -> tuple[Requirement, ...]:
    return (
        Requirement("actor.eps_clip_low_high", (low, high), ("--actor.eps_clip_low_high", str(low), str(high)), why),
        # OpenRLHF ignores --actor.eps_clip once eps_clip_low_high is set: a changed value would be silently unused
        Requirement("actor.eps_clip", 0.2, (), f"ignored when --actor.eps_clip_low_high is set ({why})"),
        Requirement("actor.dual_clip", None, (), f"plain clipped objective ({why})"),
        Requirement("actor.policy_loss_type", "ppo", (), f"token-level PPO ratio ({why})"),
    )


def _token_mean() -> Requirement:
    # OpenRLHF 0.11.0/0.11.1 have no --actor.loss_agg_mode: PolicyLoss aggregates token-mean there, always (with the
    # "ppo" policy loss the clip requirement pins)
    return Requirement("actor.loss_agg_mode", "token-mean", ("--actor.loss_agg_mode", "token-mean"),
                       "token-mean loss aggregation [INF] (docs/paper.md#kl-and-clipping)", since="0.11.2")


def _temperature(value: float) -> Requirement:
    return Requirement("rollout.temperature", float(value), ("--rollout.temperature", repr(float(value))),
                       "all three methods train at a constant T = 1.2 (docs/paper.md#baselines)")


_CLIP_HIGHER = "clip-higher 0.2 / 0.28, DAPO / DeepCoder GRPO+ values [INF] (docs/paper.md#kl-and-clipping)"


def _build() -> dict[str, Preset]:
    microcoder = Preset(
        name="microcoder",
        summary="MicroCoder-GRPO: GRPO without KL, clip 0.2/0.28, token-mean, temperature controller, code reward, "
                "conditional truncation mask",
        requirements=(_group_norm(), *_no_kl(), *_clip(0.2, 0.28, _CLIP_HIGHER), _token_mean()),
        mask=True, temperature_control=True, fill_reward=True,
    )
    mask_only = Preset(
        name="mask_only",
        summary="only the conditional truncation mask; estimator, loss, KL, temperature and reward stay yours",
        requirements=(), mask=True, temperature_control=False, fill_reward=False,
    )
    dapo = Preset(
        name="dapo_baseline",
        summary="the paper's DAPO baseline: GRPO without KL, clip 0.2/0.28, T 1.2, code reward, no mask",
        requirements=(_group_norm(), *_no_kl(), *_clip(0.2, 0.28, _CLIP_HIGHER), _token_mean(),
                      _temperature(PAPER_TEMPERATURE)),
        mask=False, temperature_control=False, fill_reward=True,
    )
    kl_why = ("'GRPO with KL' (docs/paper.md#baselines); coefficient not stated, 0.001 with the k3 (low-variance) "
              "estimator as verl's defaults [INF]")
    grpo = Preset(
        name="grpo_baseline",
        summary="the paper's GRPO baseline: GRPO with KL loss 0.001 (k3), clip 0.2/0.2, T 1.2, code reward, no mask",
        requirements=(
            _group_norm(),
            Requirement("algo.kl.use_loss", True, ("--algo.kl.use_loss",), kl_why),
            Requirement("algo.kl.init_coef", 0.001, ("--algo.kl.init_coef", "0.001"), kl_why),
            Requirement("algo.kl.estimator", "k3", ("--algo.kl.estimator", "k3"), kl_why),
            *_clip(0.2, 0.2, "symmetric clip eps = 0.2 (docs/paper.md#baselines; value [INF])"),
            _token_mean(),
            _temperature(PAPER_TEMPERATURE),
        ),
        mask=False, temperature_control=False, fill_reward=True,
    )
    return {p.name: p for p in (microcoder, mask_only, dapo, grpo)}


PRESETS: dict[str, Preset] = _build()
DEFAULT_PRESET = "microcoder"


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown --mc.preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def temperature_requirement(value: float) -> Requirement:
    """The ``microcoder`` preset's rollout temperature: the controller's first temperature, never overridable
    (sampling and the actor's log-probs must use the controller's value; set ``--mc.temperature.*`` instead)."""
    return Requirement(
        "rollout.temperature", float(value), ("--rollout.temperature", repr(float(value))),
        "the training temperature is set by --mc.temperature.* (sampling and log-probs use the same value every "
        "step, docs/paper.md#objective); set --mc.temperature.value instead",
        overridable=False,
    )


def has(args: Any, dest: str) -> bool:
    """Whether OpenRLHF's parsed ``args`` have ``dest`` (a flag of the installed release)."""
    try:
        lookup(args, dest)
    except AttributeError:
        return False
    return True


def lookup(args: Any, dest: str) -> Any:
    """``args.a.b.c`` for ``dest = "a.b.c"`` on OpenRLHF's nested namespace."""
    obj = args
    for part in dest.split("."):
        obj = getattr(obj, part)
    return obj


def same_value(actual: Any, expected: Any) -> bool:
    """Equality as the preset means it: floats within 1e-9, sequences element-wise (argparse gives lists)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return False
        return all(same_value(a, e) for a, e in zip(actual, expected))
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return actual is expected if isinstance(expected, bool) or expected is None else actual == expected
    if isinstance(expected, (int, float)):
        return isinstance(actual, (int, float)) and not isinstance(actual, bool) and abs(actual - expected) <= 1e-9
    return actual == expected
