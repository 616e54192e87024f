"""``MicrocoderPPOTrainer``: OpenRLHF 0.11.2's synchronous ``PPOTrainer`` plus MicroCoder-GRPO's conditional
truncation mask and per-step temperature.

Started by ``python -m microcoder_ext.openrlhf.train`` (the launcher), which puts ``args.microcoder`` on OpenRLHF's
nested args (:mod:`microcoder_ext.openrlhf.settings`) and sets ``openrlhf.trainer.ppo_trainer.PPOTrainer =``
:data:`MicrocoderPPOTrainerRemote` before OpenRLHF's ``train()`` imports it. OpenRLHF then creates this class as its
single-controller Ray actor (``PPOTrainer.remote(pretrain, strategy, actor_group, critic_group, reward_group,
ref_group, vllm_engines, **generate_kwargs)``) and calls ``fit()``, which is OpenRLHF's, unchanged.

What runs where (sync mode; async / partial rollout are refused):

* **trainer actor** (this class): ``fit`` draws a batch with ``SamplesGenerator.generate_samples(
  **self.generate_kwargs)``, whose ``_dispatch_prompts_to_vllm`` builds ``SamplingParams(temperature=
  generate_kwargs["temperature"])`` for the vLLM actors; then ``train_step`` (overridden here, below).
* **vLLM actors** (``RolloutRayActor``): sample and score (our ``reward_func`` with one-hot ``mc_verdict_*``
  extra logs); nothing of ours runs there besides the reward.
* **policy / reference actors** (``PolicyModelActor.actor`` / ``ReferenceModelActor.model``, both an
  ``openrlhf.models.actor.Actor``): the log-prob temperature ``Actor.temperature`` divides the logits of every
  forward (old log-probs, reference log-probs and the PPO update). The trainer sets it through ``__ray_call__``
  with :func:`microcoder_ext.openrlhf.ray_calls.set_actor_temperature`; no class of theirs is patched.

``train_step(rollout_samples, global_step)``, per step ``t = global_step`` (0 for the first step):

1. (temperature control) the samples were drawn with ``self.generate_kwargs["temperature"]``; it must equal the
   controller's ``T_t`` (else ``RuntimeError``). When ``T_t`` differs from what the policy (and reference) actors
   were last given (always on the first step of a process, also after a resume), it is set there, one Ray round
   trip; otherwise nothing is sent.
2. OpenRLHF's ``train_step``: old (and reference) log-probs at ``T_t``, rewards, ``compute_advantages_and_returns``
   (``group_norm``), which (mask on) the trainer wrapped on its ``RemoteExperienceMaker`` **instance**: right after
   the advantages, :func:`microcoder_ext.openrlhf.advantage_mask.apply_truncation_mask` zeroes advantages and
   returns of the masked rows (coins of step ``t``, ``args.rollout.max_new_tokens`` as the length limit); then the
   experiences go to the policy actor's replay buffer and the PPO update runs.
3. (temperature control) diversity of the step's responses (response tokens of each sample, groups of
   ``n_samples_per_prompt`` consecutive samples as OpenRLHF lays them out) -> ``controller.update(t, ...)``; the
   next step samples with ``generate_kwargs["temperature"] = T_{t+1}``. A stage change is logged at INFO.
4. the step's status gains ``microcoder/*`` floats (verl's names): mask ``microcoder/masked_frac``,
   ``truncated_frac``, ``eligible_frac``, ``repeat_frac``, ``verdict/<v>``, ``verdict_missing_frac``,
   ``verdict_unknown_frac``; temperature ``microcoder/temperature``, ``temperature_stage``, ``temperature_next``,
   ``diversity/*``. OpenRLHF's wandb / TensorBoard loggers prefix them with ``train/``.

Checkpoints: ``save_logs_and_checkpoints`` adds ``client_states["microcoder"] = {"preset", "temperature":
controller.state_dict()}``, which the policy actor stores with its DeepSpeed checkpoint; ``init_checkpoint_states``
(called by ``fit`` before the first batch) restores the controller from it when resuming and samples the first
resumed step with ``T_{global_step}``; resuming without it logs a WARNING and starts from the configuration.

Preset ``mask_only``: only the mask; ``--rollout.temperature`` and the actors' temperature stay OpenRLHF's.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from microcoder_ext.openrlhf import guard

guard.check_openrlhf()  # before touching OpenRLHF internals: a changed OpenRLHF fails here with the guard's message

import ray  # noqa: E402
import torch  # noqa: E402
from openrlhf.trainer import ppo_trainer as _ppo_trainer  # noqa: E402
from openrlhf.utils.logging_utils import init_logger  # noqa: E402

from microcoder_ext.core.config import ConfigError, MaskConfig  # noqa: E402
from microcoder_ext.core.temperature import TemperatureController  # noqa: E402
from microcoder_ext.core.truncation import stop_token_ids  # noqa: E402
from microcoder_ext.openrlhf.advantage_mask import apply_truncation_mask  # noqa: E402
from microcoder_ext.openrlhf.ray_calls import set_actor_temperature  # noqa: E402
from microcoder_ext.openrlhf.settings import OpenRLHFSettings, settings_from_args  # noqa: E402

logger = init_logger(__name__)  # OpenRLHF's handler and format (the trainer actor's stdout)

#: key of our state in OpenRLHF's checkpoint ``client_states``
CLIENT_STATE_KEY = "microcoder"
_TOL = 1e-9


def _original_trainer_remote():
    """OpenRLHF's ``@ray.remote`` ``PPOTrainer`` (also if the launcher already swapped in ours)."""
    remote = _ppo_trainer.PPOTrainer
    cls = remote.__ray_metadata__.modified_class.__ray_actor_class__
    return getattr(cls, "_mc_original_remote", remote)


_OriginalPPOTrainerRemote = _original_trainer_remote()
#: the class behind OpenRLHF's Ray decorator (Ray refuses subclasses of an ``ActorClass``)
_OriginalPPOTrainer = _OriginalPPOTrainerRemote.__ray_metadata__.modified_class.__ray_actor_class__


class TruncationMaskHook:
    """Replaces ``experience_maker.compute_advantages_and_returns`` (the **instance** attribute, no class patch) by
    OpenRLHF's method followed by :func:`apply_truncation_mask`.

    The trainer sets :attr:`step` before each step; :attr:`metrics` holds the last call's ``microcoder/*`` metrics.
    """

    def __init__(self, experience_maker: Any, cfg: MaskConfig, *, max_response_length: int | None = None,
                 max_len: int | None = None, stop_token_ids: tuple[int, ...] = ()):
        original = experience_maker.compute_advantages_and_returns
        if isinstance(original, TruncationMaskHook):
            raise RuntimeError("microcoder mask: compute_advantages_and_returns is already wrapped")
        self.cfg = cfg
        self.max_response_length = max_response_length
        self.max_len = max_len
        self.stop_token_ids = tuple(stop_token_ids)
        self.step = 0
        self.metrics: dict[str, float] = {}
        self.original: Callable = original
        functools.update_wrapper(self, original)
        experience_maker.compute_advantages_and_returns = self

    def __call__(self, experiences):
        experiences = self.original(experiences)
        self.metrics = apply_truncation_mask(experiences, self.cfg, step=self.step,
                                             max_response_length=self.max_response_length, max_len=self.max_len,
                                             stop_token_ids=self.stop_token_ids)
        return experiences


def install_truncation_mask(experience_maker: Any, cfg: MaskConfig, args: Any,
                            stop_token_ids: tuple[int, ...] = ()) -> TruncationMaskHook:
    """Wrap a ``RemoteExperienceMaker`` as the trainer does: budget ``args.rollout.max_new_tokens`` if set, else
    ``args.data.max_len`` minus the prompt; ``stop_token_ids`` = the tokenizer's and the model's EOS ids."""
    max_new = getattr(args.rollout, "max_new_tokens", None)
    max_len = getattr(getattr(args, "data", None), "max_len", None)
    return TruncationMaskHook(experience_maker, cfg, max_response_length=int(max_new) if max_new else None,
                              max_len=int(max_len) if max_len else None, stop_token_ids=stop_token_ids)


def model_stop_token_ids(pretrain: str, tokenizer: Any) -> tuple[int, ...]:
    """The tokenizer's EOS id and the model's ``generation_config.json`` EOS ids (vLLM stops at both)."""
    model_eos = None
    try:
        from transformers import GenerationConfig

        model_eos = GenerationConfig.from_pretrained(pretrain).eos_token_id
    except Exception:  # no generation_config.json: the tokenizer's EOS is what the engine stops at
        pass
    return stop_token_ids(getattr(tokenizer, "eos_token_id", None), model_eos)


def _refuse_async(args: Any) -> None:
    train = args.train
    for flag in ("async_enable", "partial_rollout_enable"):
        if getattr(train, flag, False):
            raise ConfigError(
                f"microcoder-ext: --train.{flag} is not supported: OpenRLHF's async trainer bypasses "
                "MicrocoderPPOTrainer and trains on batches sampled at an older temperature. Run in sync mode"
            )


def rollout_diversity_inputs(rollout_samples, n_samples_per_prompt: int):
    """``(tokens, mask, groups)`` for :meth:`TemperatureController.update` from a step's rollout samples.

    ``tokens``/``mask``: ``(B, L)``, each row the span from the first to the last response token of a sample
    (``sequences[j, 1:]`` under ``action_mask[j]``, which is shifted by one; a multi-turn mask with holes keeps
    them, so no n-gram spans an observation), right-padded. ``groups``: ``n_samples_per_prompt`` consecutive samples
    per group, OpenRLHF's layout (a prompt's samples arrive together, dynamic filtering drops whole prompts,
    ``compute_advantages_and_returns`` reshapes to ``(-1, n)``); if the prompts say otherwise, the samples are
    grouped by prompt text instead (warned once).
    """
    rows, masks, prompts = [], [], []
    for exp in rollout_samples:
        batch = int(exp.sequences.shape[0])
        exp_prompts = list(getattr(exp, "prompts", None) or [])
        for j in range(batch):
            seq, mask = exp.sequences[j, 1:].to("cpu"), exp.action_mask[j].to("cpu").bool()
            idx = torch.nonzero(mask).flatten()
            span = slice(int(idx[0]), int(idx[-1]) + 1) if idx.numel() else slice(0, 0)
            rows.append(seq[span])
            masks.append(mask[span])
            prompts.append(exp_prompts[j] if len(exp_prompts) == batch else None)
    n = max(int(n_samples_per_prompt), 1)
    groups: list = [i // n for i in range(len(rows))]
    if all(p is not None for p in prompts):
        mixed = any(prompts[i] != prompts[i - 1] for i in range(1, len(prompts)) if groups[i] == groups[i - 1])
        if mixed:
            global _WARNED_LAYOUT
            if not _WARNED_LAYOUT:
                _WARNED_LAYOUT = True
                logger.warning("microcoder: a group of %d consecutive rollout samples mixes prompts (OpenRLHF's "
                               "sample layout changed?); diversity groups samples by prompt text instead", n)
            groups = list(prompts)
    if not rows:
        return torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, 0, dtype=torch.bool), groups
    pad = torch.nn.utils.rnn.pad_sequence
    return pad(rows, batch_first=True), pad(masks, batch_first=True), groups


_WARNED_LAYOUT = False


class MicrocoderPPOTrainer(_OriginalPPOTrainer):
    """OpenRLHF's ``PPOTrainer`` + the conditional truncation mask + the per-step temperature controller."""

    _mc_original_remote = _OriginalPPOTrainerRemote

    def __init__(self, pretrain, strategy, actor_model_group, critic_model_group, reward_model_group,
                 reference_model_group, vllm_engines, **generate_kwargs):
        guard.check_openrlhf()  # this Ray actor may run another OpenRLHF installation than the driver
        args = strategy.args
        self.mc: OpenRLHFSettings = settings_from_args(args)  # fails clearly without the launcher
        cfg = self.mc.config
        _refuse_async(args)
        controller = None
        if self.mc.temperature_control:
            tcfg = cfg.temperature
            if tcfg.mode == "auto" and tcfg.start == "probe":
                raise ConfigError(
                    "microcoder-ext: --mc.temperature.start probe is not run inside OpenRLHF: run `microcoder "
                    "temperature probe` on the model, then set --mc.temperature.start value and "
                    "--mc.temperature.value <recommended>"
                )
            controller = TemperatureController(tcfg)
            t0 = controller.temperature(0)
            for what, value in (("args.rollout.temperature", args.rollout.temperature),
                                ("generate_kwargs['temperature']", generate_kwargs.get("temperature", t0))):
                if value is None or not math.isclose(float(value), t0, abs_tol=_TOL):
                    raise ConfigError(
                        f"microcoder-ext: {what}={value} disagrees with the temperature controller's first "
                        f"temperature {t0:g} (--mc.temperature.*). The controller is the one source of the training "
                        "temperature (vLLM sampling and the actors' log-probs); the launcher sets "
                        "--rollout.temperature from it"
                    )

        super().__init__(pretrain, strategy, actor_model_group, critic_model_group, reward_model_group,
                         reference_model_group, vllm_engines, **generate_kwargs)

        self._mc_mask: TruncationMaskHook | None = None
        if self.mc.mask and cfg.mask.enable:
            self._mc_mask = install_truncation_mask(self.experience_maker, cfg.mask, args,
                                                    model_stop_token_ids(pretrain, getattr(self, "tokenizer", None)))
        self.mc_temperature: TemperatureController | None = controller
        #: the log-prob temperature last set on the policy/reference actors (None: not set by us yet)
        self._mc_model_temperature: float | None = None
        if controller is not None:
            self.generate_kwargs["temperature"] = controller.temperature(0)
        m = cfg.mask
        logger.info(
            "microcoder: preset %s; mask %s; temperature %s", self.mc.preset,
            f"on (rho={m.rho:g}, m={m.m}, mode={m.mode}, repeat_check={m.repeat_check})" if self._mc_mask else "off",
            f"controller ({cfg.temperature.mode}: "
            + ", ".join(f"{p['temperature']:g} from step {p['step']}" for p in controller.plan()) + ")"
            if controller is not None else f"OpenRLHF's --rollout.temperature={args.rollout.temperature}",
        )

    # ------------------------------------------------------------------ per step

    def train_step(self, rollout_samples, global_step: int):
        step = int(global_step)
        if self.mc_temperature is not None:
            expected = self.mc_temperature.temperature(step)
            used = self.generate_kwargs.get("temperature")
            if used is None or not math.isclose(float(used), expected, abs_tol=_TOL):
                raise RuntimeError(
                    f"microcoder: step {step}'s samples were drawn at generate_kwargs['temperature']={used} but the "
                    f"controller's temperature for the step is {expected:g}; their log-probs would be computed at "
                    "another temperature than they were sampled with"
                )
            self.mc_set_model_temperature(expected)
        if self._mc_mask is not None:
            self._mc_mask.step = step
            self._mc_mask.metrics = {}

        status, next_step = super().train_step(rollout_samples, global_step)

        if self._mc_mask is not None:
            status.update({k: float(v) for k, v in self._mc_mask.metrics.items()})
        if self.mc_temperature is not None:
            status.update(self._mc_update_temperature(rollout_samples, step))
        return status, next_step

    def mc_set_model_temperature(self, temperature: float, *, force: bool = False) -> bool:
        """Give the policy (and reference) actors' ``Actor.temperature`` = ``temperature``; a no-op (no Ray round
        trip) when it is what they were last given. Returns whether it was sent."""
        t = float(temperature)
        if not force and self._mc_model_temperature is not None and math.isclose(self._mc_model_temperature, t,
                                                                                   abs_tol=_TOL):
            return False
        groups = [("policy", self.actor_model_group), ("reference", self.reference_model_group)]
        refs, names = [], []
        for name, group in groups:
            if group is None:
                continue
            group_refs = group.async_run_method("__ray_call__", set_actor_temperature, t)
            refs += group_refs
            names += [name] * len(group_refs)
        got = ray.get(refs)
        wrong = [f"{n}: {g}" for n, g in zip(names, got) if not math.isclose(float(g), t, abs_tol=_TOL)]
        if wrong:
            raise RuntimeError(f"microcoder: set the log-prob temperature {t:g} but the actors report {wrong}")
        previous, self._mc_model_temperature = self._mc_model_temperature, t
        logger.info("microcoder: log-prob temperature %s -> %g on %d %s actor(s)",
                    "(initial)" if previous is None else f"{previous:g}", t, len(names),
                    " + ".join(dict.fromkeys(names)))
        return True

    def _mc_update_temperature(self, rollout_samples, step: int) -> dict[str, float]:
        tokens, mask, groups = rollout_diversity_inputs(rollout_samples, self.args.rollout.n_samples_per_prompt)
        update = self.mc_temperature.update(step, tokens, groups, mask=mask)
        nxt = self.mc_temperature.temperature(step + 1)
        self.generate_kwargs["temperature"] = nxt
        if update.changed:
            logger.info("microcoder: temperature %g -> %g from step %d (%s)", update.temperature,
                        update.next_temperature, step + 1, update.reason)
        return {k: float(v) for k, v in update.metrics.items()}

    # ------------------------------------------------------------------ checkpoints

    def mc_state_dict(self) -> dict:
        """What goes into the checkpoint's ``client_states["microcoder"]`` (plain values)."""
        return {
            "preset": self.mc.preset,
            "temperature": self.mc_temperature.state_dict() if self.mc_temperature is not None else None,
        }

    def save_logs_and_checkpoints(self, global_step: int, logs_dict=None, client_states=None) -> None:
        # in place: fit() passes the same dict to save_best_checkpoint afterwards
        client_states = {} if client_states is None else client_states
        client_states[CLIENT_STATE_KEY] = self.mc_state_dict()
        return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)

    def init_checkpoint_states(self):
        states = super().init_checkpoint_states()
        step = int(states.get("global_step", 0) or 0)
        saved = states.get(CLIENT_STATE_KEY) or {}
        if saved.get("preset") is not None and saved.get("preset") != self.mc.preset:
            logger.warning("microcoder: resuming a checkpoint of preset %s with preset %s", saved["preset"],
                           self.mc.preset)
        if self.mc_temperature is not None:
            if step > 0:
                if saved.get("temperature") is not None:
                    self.mc_temperature.load_state_dict(saved["temperature"])
                    logger.info("microcoder: temperature controller restored from the checkpoint (step %d)", step)
                else:
                    logger.warning(
                        "microcoder: resuming at step %d without client_states[%r] (checkpoint of another trainer?): "
                        "the temperature controller starts from its configuration%s", step, CLIENT_STATE_KEY,
                        " (auto mode: earlier stage changes are lost)" if self.mc_temperature.mode == "auto" else "",
                    )
            # the first step fit() runs is global_step (train_step returns global_step + 1)
            self.generate_kwargs["temperature"] = self.mc_temperature.temperature(step)
        return states


_options = dict(getattr(_OriginalPPOTrainerRemote, "_default_options", None) or {})
#: what the launcher assigns to ``openrlhf.trainer.ppo_trainer.PPOTrainer`` (same Ray options as OpenRLHF's)
MicrocoderPPOTrainerRemote = ray.remote(**_options)(MicrocoderPPOTrainer) if _options else ray.remote(
    MicrocoderPPOTrainer)
