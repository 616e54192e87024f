"""``GRPOConfig`` presets for MicroCoder-GRPO and its baselines on TRL 1.15-1.16.

=================  =====  ===========  ======================================================================
preset             mask   temperature  GRPOConfig settings (docs/paper.md; [INF] = our inference)
=================  =====  ===========  ======================================================================
``microcoder``     yes    controller   beta 0 (no KL, no reference model), clip 0.2 / 0.28, loss ``dapo``
                                       (token-mean), ``scale_rewards="group"``, entropy 0, temperature 1.2
``dapo_baseline``  no     1.2 const.   the same GRPOConfig, no mask
``grpo_baseline``  no     1.2 const.   beta 0.001 (KL to the reference model), clip 0.2 / 0.2, rest as above
``mask_only``      yes    TRL's        TRL's defaults (GRPOConfig untouched) + our mask
=================  =====  ===========  ======================================================================

Sources, value by value:

* ``beta=0.0``: the paper's β0 = 0 (docs/paper.md#objective, docs/paper.md#kl-and-clipping). TRL then loads no
  reference model (``GRPOTrainer.__init__``: ``if self.beta == 0.0: self.ref_model = None``).
* ``epsilon=0.2``, ``epsilon_high=0.28``: clip-higher; the paper gives no values ([NS]); we use DAPO's / DeepCoder
  GRPO+'s ([INF], docs/paper.md#kl-and-clipping). TRL: ``epsilon_low = args.epsilon``,
  ``epsilon_high = args.epsilon_high``, ``coef_2 = clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)`` in
  ``_compute_loss``.
* ``loss_type="dapo"``: token-mean ([INF], docs/paper.md#kl-and-clipping). In TRL 1.16 ``dapo`` divides the summed
  per-token loss by the number of completion tokens of the whole (global, accumulated) generation batch
  (``num_items_in_batch``); ``bnpo`` would normalise per local micro-batch and ``grpo`` per sequence. Masked rows
  keep their tokens in that count (zero advantage, ``completion_mask`` untouched), as the paper's mask requires
  (docs/paper.md#conditional-truncation-mask).
* ``scale_rewards="group"``: GRPO's z-score within the group of ``num_generations`` (docs/paper.md#objective).
* ``mask_truncated_completions=False``: TRL's own truncation mask drops *every* truncated completion from the loss
  (DeepCoder's "Mask All"); the conditional mask replaces it (docs/paper.md#conditional-truncation-mask).
* ``entropy_coef=0.0``: no entropy bonus ([INF], docs/paper.md#kl-and-clipping).
* ``temperature=1.2``: the paper's main runs and baselines (docs/paper.md#baselines). With the
  ``microcoder`` preset the temperature controller (``microcoder.temperature.*``) sets the temperature at every
  regeneration; the value here is only what a plain ``GRPOTrainer`` would use.
* ``grpo_baseline``: the paper's "GRPO" baseline has a KL term of unspecified coefficient ([NS]) and a symmetric clip;
  ``beta=0.001`` is TRL's documented DeepSeek-R1 value (``GRPOConfig.beta`` docstring) [INF].

Everything else (batch sizes, learning rate, ``max_completion_length``, ``num_generations``, ``use_cpu``, ``bf16``,
``report_to``, LoRA) is the caller's: pass it as keyword overrides. ``GRPOConfig()`` defaults to bf16, which fails on
CPU: pass ``use_cpu=True`` or ``bf16=False`` there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the temperature of the paper's main runs and of its baselines (docs/paper.md#baselines)
PAPER_TEMPERATURE = 1.2

_NO_KL_CLIP_HIGHER = {
    "beta": 0.0,
    "epsilon": 0.2,
    "epsilon_high": 0.28,
    "loss_type": "dapo",
    "scale_rewards": "group",
    "mask_truncated_completions": False,
    "entropy_coef": 0.0,
    "temperature": PAPER_TEMPERATURE,
}


#: the instance attribute of a :func:`microcoder_grpo_config` GRPOConfig that names its preset
PRESET_ATTR = "_microcoder_preset"


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    #: GRPOConfig keyword arguments the preset sets (the caller's overrides win)
    grpo: dict = field(default_factory=dict)
    #: apply the conditional truncation mask (``microcoder.mask.enable``)
    mask: bool = True
    #: the temperature controller drives sampling and log-probs (``MicrocoderGRPOTrainer(temperature_control=...)``)
    temperature_control: bool = True


PRESETS: dict[str, Preset] = {
    "microcoder": Preset(
        "microcoder", "MicroCoder-GRPO: no KL, clip 0.2/0.28, token-mean, conditional mask, temperature controller",
        dict(_NO_KL_CLIP_HIGHER), mask=True, temperature_control=True),
    "dapo_baseline": Preset(
        "dapo_baseline", "the paper's DAPO baseline: no KL, clip 0.2/0.28, token-mean, T=1.2, no mask",
        dict(_NO_KL_CLIP_HIGHER), mask=False, temperature_control=False),
    "grpo_baseline": Preset(
        "grpo_baseline", "the paper's GRPO baseline: KL beta=0.001, clip 0.2/0.2, token-mean, T=1.2, no mask",
        {**_NO_KL_CLIP_HIGHER, "beta": 0.001, "epsilon_high": 0.2}, mask=False, temperature_control=False),
    "mask_only": Preset(
        "mask_only", "TRL's GRPOConfig defaults plus the conditional truncation mask",
        {}, mask=True, temperature_control=False),
}


def preset_settings(preset: str = "microcoder") -> dict[str, Any]:
    """The GRPOConfig keyword arguments of ``preset`` (a copy)."""
    return dict(_preset(preset).grpo)


def _preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; one of {', '.join(PRESETS)}") from None


def microcoder_grpo_config(preset: str = "microcoder", **overrides: Any):
    """A ``trl.GRPOConfig`` with the preset's settings (module doc); ``overrides`` are any GRPOConfig arguments and win.

    >>> cfg = microcoder_grpo_config(output_dir="out", use_cpu=True, bf16=False, report_to="none")
    >>> (cfg.beta, cfg.epsilon, cfg.epsilon_high, cfg.loss_type)
    (0.0, 0.2, 0.28, 'dapo')

    A preset's mask / temperature switches are on :data:`PRESETS` (``PRESETS[preset].mask``,
    ``.temperature_control``), for :class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer`, which applies them;
    the config carries its preset's name (:data:`PRESET_ATTR`), from which the trainer takes its
    ``temperature_control`` default (:func:`preset_temperature_control`). Nothing of TRL is changed: any other
    ``GRPOTrainer`` trains the config's GRPOConfig settings alone, without the mask and the controller (for
    ``microcoder`` that is ``dapo_baseline``).
    """
    from trl import GRPOConfig

    p = _preset(preset)
    config = GRPOConfig(**{**p.grpo, **overrides})
    setattr(config, PRESET_ATTR, p.name)  # an instance attribute: not a GRPOConfig field, not saved by to_dict()
    return config


def preset_temperature_control(config: Any) -> bool:
    """Whether :class:`~microcoder_ext.trl.trainer.MicrocoderGRPOTrainer` runs the temperature controller by default
    for ``config``: its preset's switch for a :func:`microcoder_grpo_config` config, else True."""
    preset = getattr(config, PRESET_ATTR, None)
    return PRESETS[preset].temperature_control if preset in PRESETS else True
