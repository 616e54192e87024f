"""``MicrocoderGRPOTrainer``: TRL 1.15-1.16's ``GRPOTrainer`` plus MicroCoder-GRPO's conditional truncation mask and
per-regeneration temperature (the same ``microcoder_ext.core`` code and ``microcoder/*`` metrics as the verl and
OpenRLHF adapters).

Where it hooks in (every internal is checked by :func:`microcoder_ext.trl.guard.check_trl` in ``__init__``):

* ``_generate_and_score_completions(inputs)`` (TRL calls it from ``_prepare_inputs`` once every
  ``steps_per_generation * num_iterations`` micro-steps and buffers the result; ``t = self.state.global_step``):

  1. (temperature control, train mode) ``T_t = controller.temperature(t)`` is set on everything that samples or
     scores this buffer: ``self.generation_config.temperature`` (transformers ``generate``), ``self.generation_kwargs``,
     ``self.vllm_generation.temperature`` (vLLM: read at every ``generate`` call), ``self.temperature``, and the
     log-prob temperature of the fused LM head -- TRL 1.16 builds it once in ``__init__`` with
     ``add_fused_lm_head(model, temperature=self.temperature)``, which keeps it in a closure variable of the
     ``model.forward`` it installs; the trainer updates that variable (on the policy and, with ``beta > 0``, the
     reference model), so old/reference log-probs and every loss computed from this buffer use ``T_t``.
  2. TRL's method: generation, rewards (``_calculate_rewards``; :class:`~microcoder_ext.trl.reward.CodeReward`
     records each local completion's verdict), group advantages, sliced to this process.
  3. (mask, train mode) :func:`microcoder_ext.core.masking.compute_truncation_mask` on the global batch (each
     completion's length, verdict and last ``2m`` tokens gathered: the same decision on every process): truncated = the
     completion used all ``max_completion_length`` tokens and its last one is not an EOS id
     (:mod:`microcoder_ext.core.truncation`, the definition every adapter uses); verdict
     from ``CodeReward.last_verdicts`` (else ``microcoder.mask.missing_verdict``: ``score`` = weighted reward
     ``>= correct_score``); repeat check on the completion token ids (``m``, ``repeat_check``); coins from
     ``cfg.mask.generator(t)``, one per row of the global batch. This process's masked rows get advantage 0;
     ``completion_mask`` is untouched (they stay in the ``dapo`` token denominator ``num_items_in_batch``).
  4. (temperature control, train mode) diversity of the generated completions (groups of ``num_generations``,
     gathered over processes) -> ``controller.update(t, ...)``; ``T_{t'}`` applies at the next regeneration.
  5. ``microcoder/*`` metrics appended to ``self._metrics["train"]``, which TRL averages over the logging window and
     logs with its own (``log``): ``masked_frac``, ``truncated_frac``, ``eligible_frac``, ``repeat_frac``,
     ``verdict/<v>``, ``verdict_missing_frac``, ``verdict_unknown_frac``, ``temperature``, ``temperature_stage``,
     ``temperature_next``, ``diversity/*``.

* ``_prepare_inputs``: before TRL's, the temperature of the mode is (re)applied: the buffer's ``T_t`` in train mode,
  TRL's own ``args.temperature`` in eval mode (evaluation keeps TRL's temperature; training resumes with the
  buffer's).
* ``_save_checkpoint`` / ``_load_optimizer_and_scheduler`` (TRL's own pattern for its entropy controller): the
  controller state goes to ``<checkpoint>/microcoder_state.json`` and is restored by ``resume_from_checkpoint``.

Advantages logged by TRL's completions table are the ones before the mask.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import torch
from trl import GRPOTrainer

from microcoder_ext.core import verdicts as V
from microcoder_ext.core.config import ConfigError, MicrocoderConfig, parse_config
from microcoder_ext.core.masking import compute_truncation_mask, response_tails
from microcoder_ext.core.temperature import TemperatureController
from microcoder_ext.core.verdict_policy import resolve_verdicts
from microcoder_ext.trl import cpu_logprob, guard
from microcoder_ext.trl.config import preset_temperature_control
from microcoder_ext.trl.reward import CodeReward

logger = logging.getLogger("microcoder_ext.trl")

#: file the trainer writes into each checkpoint folder
STATE_FILE = "microcoder_state.json"
STATE_VERSION = 1
_TOL = 1e-9


def as_microcoder_config(microcoder: Any) -> MicrocoderConfig:
    """``MicrocoderConfig`` | mapping of the ``microcoder:`` keys | None (defaults) -> validated ``MicrocoderConfig``."""
    if microcoder is None:
        return parse_config(None)
    if isinstance(microcoder, MicrocoderConfig):
        return microcoder
    if isinstance(microcoder, Mapping):
        return parse_config(microcoder)
    raise ConfigError(f"microcoder must be a MicrocoderConfig, a mapping of the microcoder: keys or None, got "
                      f"{type(microcoder).__name__}")


def fused_temperature_cell(model: Any):
    """The closure cell holding the log-prob temperature of the fused LM head TRL installed on ``model``."""
    fwd = getattr(model, "__dict__", {}).get("forward")
    func = getattr(fwd, "__func__", None)
    code = getattr(func, "__code__", None)
    if code is None or code.co_name != "_fused_forward" or "temperature" not in code.co_freevars:
        raise RuntimeError(
            f"microcoder: {type(model).__name__}.forward is not TRL's fused LM head (add_fused_lm_head), so its "
            "log-prob temperature cannot be set; the trainer's temperature control needs TRL 1.16's GRPOTrainer "
            "(compat/matrix.toml)")
    return func.__closure__[code.co_freevars.index("temperature")]


def _grpo_config(trainer: Any, args: tuple, kwargs: dict) -> Any:
    """The GRPOConfig passed to ``GRPOTrainer.__init__`` as ``args`` (by keyword or position), or None."""
    try:
        bound = inspect.signature(GRPOTrainer.__init__).bind_partial(trainer, *args, **kwargs)
    except TypeError:  # GRPOTrainer's own error follows
        return None
    return bound.arguments.get("args")


class MicrocoderGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` + the conditional truncation mask + the temperature controller (module doc).

    Args:
        *args, **kwargs: ``GRPOTrainer``'s (``model``, ``reward_funcs``, ``args``, ``train_dataset``, ...).
        microcoder: a :class:`~microcoder_ext.core.config.MicrocoderConfig`, a mapping of the ``microcoder:`` keys
            (``{"mask": {...}, "temperature": {...}}``, validated by ``parse_config``) or None (the paper defaults).
            The mask runs when ``microcoder.mask.enable`` (default true).
        temperature_control: the controller (``microcoder.temperature``) sets the sampling and log-prob temperature;
            False keeps TRL's ``args.temperature``. Default (None): the switch of the preset of a
            :func:`~microcoder_ext.trl.config.microcoder_grpo_config` config (False for ``mask_only``), else True.

    The mask reads verdicts from a :class:`~microcoder_ext.trl.reward.CodeReward` among ``reward_funcs`` (the first
    one); without one it follows ``microcoder.mask.missing_verdict``.
    """

    def __init__(self, *args: Any, microcoder: Any = None, temperature_control: bool | None = None, **kwargs: Any):
        guard.check_trl()
        cfg = as_microcoder_config(microcoder)
        if temperature_control is None:
            temperature_control = preset_temperature_control(_grpo_config(self, args, kwargs))
        if not isinstance(temperature_control, bool):
            raise ConfigError(f"temperature_control must be True/False, got {temperature_control!r}")
        tcfg = cfg.temperature
        if temperature_control and tcfg.mode == "auto" and tcfg.start == "probe":
            raise ConfigError(
                "microcoder.temperature.start=probe is not run inside the trainer: run `microcoder temperature "
                "probe` on the model, then set microcoder.temperature.start=value and .value=<recommended>")
        controller = TemperatureController(tcfg) if temperature_control else None

        super().__init__(*args, **kwargs)
        # TRL 1.15 has no fused log-prob kernel without Triton: on a CPU run, a torch one (a no-op on TRL 1.16)
        cpu_logprob.ensure_fused_head(self.accelerator.device.type)

        self.mc_config: MicrocoderConfig = cfg
        self.mc_mask_enabled: bool = bool(cfg.mask.enable)
        self.mc_temperature: TemperatureController | None = controller
        if self.mc_mask_enabled and self.args.mask_truncated_completions:
            raise ConfigError(
                "GRPOConfig.mask_truncated_completions=True drops every truncated completion from the loss (DeepCoder's "
                "'Mask All'), which the conditional truncation mask replaces: set mask_truncated_completions=False "
                "(the microcoder presets do) or microcoder.mask.enable=false")
        rewards = [f for f in self.reward_funcs if isinstance(f, CodeReward)]
        self.mc_reward: CodeReward | None = rewards[0] if rewards else None
        if self.mc_mask_enabled and self.mc_reward is None:
            hint = ("pass microcoder_ext.trl.reward.CodeReward() among reward_funcs (it records each completion's "
                    "verdict)")
            if cfg.mask.missing_verdict == "error":
                raise ConfigError(f"microcoder.mask.missing_verdict=error but no CodeReward among reward_funcs: {hint}")
            logger.warning("microcoder: no CodeReward among reward_funcs, so the mask has no verdicts; it follows "
                           "microcoder.mask.missing_verdict=%s (%s)", cfg.mask.missing_verdict, hint)
        self._mc_rewards_per_func: torch.Tensor | None = None
        self._mc_warned_verdicts = False

        #: the temperature TRL's evaluation keeps
        self.mc_eval_temperature: float = float(self.args.temperature)
        self._mc_cells: list = []
        #: the temperature of the current generation buffer (train mode)
        self.mc_buffer_temperature: float | None = None
        if controller is not None:
            from accelerate.utils import is_peft_model

            models = [self.model.get_base_model() if is_peft_model(self.model) else self.model]  # as TRL patched it
            if self.ref_model is not None:
                models.append(self.accelerator.unwrap_model(self.ref_model))
            self._mc_cells = [fused_temperature_cell(m) for m in models]
            self.mc_buffer_temperature = controller.temperature(int(self.state.global_step))
            self.mc_set_temperature(self.mc_buffer_temperature)
        m = cfg.mask
        logger.info(
            "microcoder: mask %s; temperature %s",
            f"on (rho={m.rho:g}, m={m.m}, mode={m.mode}, repeat_check={m.repeat_check})" if self.mc_mask_enabled
            else "off",
            f"controller ({tcfg.mode}: " + ", ".join(f"{p['temperature']:g} from step {p['step']}"
                                                     for p in controller.plan()) + ")"
            if controller is not None else f"TRL's args.temperature={self.args.temperature}")

    # ------------------------------------------------------------------ temperature

    def mc_set_temperature(self, temperature: float) -> None:
        """Set ``temperature`` for sampling (transformers and vLLM) and for every log-prob computation."""
        t = float(temperature)
        self.temperature = t
        gen_cfg = getattr(self, "generation_config", None)
        if gen_cfg is not None:
            gen_cfg.temperature = t
        gen_kwargs = getattr(self, "generation_kwargs", None)
        if isinstance(gen_kwargs, dict) and "temperature" in gen_kwargs:
            gen_kwargs["temperature"] = t
        vllm = getattr(self, "vllm_generation", None) if self.use_vllm else None
        if vllm is not None:
            vllm.temperature = t
        for cell in self._mc_cells:
            cell.cell_contents = t

    def mc_logprob_temperatures(self) -> list[float]:
        """The temperatures the fused LM heads (policy, reference) divide the logits by now."""
        return [float(c.cell_contents) for c in self._mc_cells]

    def _prepare_inputs(self, generation_batch):
        if self.mc_temperature is not None:
            train = self.model.training
            t = self.mc_buffer_temperature if train else self.mc_eval_temperature
            if t is not None:
                self.mc_set_temperature(t)
        return super()._prepare_inputs(generation_batch)

    # ------------------------------------------------------------------ generation + scoring

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._mc_rewards_per_func = out  # gathered over processes, (N, num_reward_funcs)
        return out

    def _generate_and_score_completions(self, inputs):
        train = self.model.training
        step = int(self.state.global_step)
        if train and self.mc_temperature is not None:
            t = self.mc_temperature.temperature(step)
            if self.mc_buffer_temperature is not None and not math.isclose(t, self.mc_buffer_temperature,
                                                                            abs_tol=_TOL):
                logger.info("microcoder: temperature %g -> %g at step %d", self.mc_buffer_temperature, t, step)
            self.mc_buffer_temperature = t
            self.mc_set_temperature(t)
        if self.mc_reward is not None:
            self.mc_reward.last_verdicts, self.mc_reward.last_results = [], []
        self._mc_rewards_per_func = None

        output = super()._generate_and_score_completions(inputs)

        if train:
            metrics: dict[str, float] = {}
            if self.mc_mask_enabled:
                metrics.update(self._mc_apply_mask(output, step))
            if self.mc_temperature is not None:
                metrics.update(self._mc_update_temperature(output, step))
            for k, v in metrics.items():
                self._metrics["train"][k].append(float(v))
        return output

    def _mc_local_verdict_codes(self, batch: int) -> list[int]:
        """This process's verdicts as indices into ``V.ALL`` (-1: none, ``len(V.ALL)``: outside the vocabulary)."""
        verdicts = list(self.mc_reward.last_verdicts) if self.mc_reward is not None else []
        if self.mc_reward is not None and len(verdicts) != batch:
            if not self._mc_warned_verdicts:
                self._mc_warned_verdicts = True
                logger.warning("microcoder: CodeReward returned %d verdicts for %d completions; those rows follow "
                               "microcoder.mask.missing_verdict", len(verdicts), batch)
            verdicts = []
        if not verdicts:
            return [-1] * batch
        return [V.ALL.index(v) if v in V.ALL else len(V.ALL) for v in verdicts]

    def _mc_apply_mask(self, output: dict, step: int) -> dict[str, float]:
        cfg = self.mc_config.mask
        ids, cmask = output["completion_ids"], output["completion_mask"]
        batch = int(ids.shape[0])
        # each completion's length, verdict code and last 2m tokens (all the repeat check reads), one row each
        tails, lengths = response_tails(ids, 2 * cfg.m, lengths=cmask.sum(dim=1))
        codes = torch.tensor(self._mc_local_verdict_codes(batch), dtype=torch.long, device=ids.device)
        local = torch.cat([lengths.unsqueeze(1), codes.unsqueeze(1), tails], dim=1)
        rows = self.accelerator.gather(local).cpu()  # (N, 2 + 2m), process-major: the order of the gathered rewards
        infos = []
        for c in rows[:, 1].tolist():
            infos.append(None if c < 0 else {cfg.verdict_key: V.ALL[c] if c < len(V.ALL) else f"unknown#{c}"})
        rpf = self._mc_rewards_per_func
        if rpf is not None and rpf.shape[0] == rows.shape[0]:
            scores = (rpf.cpu() * self.reward_weights.cpu().unsqueeze(0)).nansum(dim=1).tolist()
        else:
            scores = [0.0] * rows.shape[0]
        verdicts, metrics = resolve_verdicts(
            infos, scores, cfg,
            hint="pass microcoder_ext.trl.reward.CodeReward() among reward_funcs, or set "
                 "microcoder.mask.missing_verdict=score|keep")
        # core.truncation: the whole max_completion_length used and the last token is not an EOS id (TRL stops at
        # self.eos_token_ids: the tokenizer's EOS and the generation config's); the same decision on every process
        result, mask_metrics = compute_truncation_mask(
            rows[:, 2:], rows[:, 0], int(self.max_completion_length), verdicts, cfg.rho, cfg.m, cfg.mode,
            cfg.repeat_check, cfg.generator(step), stop_token_ids=self.eos_token_ids)
        lo = int(self.accelerator.process_index) * batch
        masked = result.masked[lo:lo + batch].to(output["advantages"].device)
        adv = output["advantages"]
        if adv.dim() == 1:
            adv[masked] = 0.0
        else:  # (B, T) advantages of a subclass
            adv[masked, ...] = 0.0
        metrics.update(mask_metrics)
        return metrics

    def _mc_update_temperature(self, output: dict, step: int) -> dict[str, float]:
        from accelerate.utils import gather_object

        ids, cmask = output["completion_ids"], output["completion_mask"]
        local = [ids[i, : int(n)].tolist() for i, n in enumerate(cmask.sum(dim=1).tolist())]
        rows = gather_object(local) if self.accelerator.num_processes > 1 else local
        groups = [i // self.num_generations for i in range(len(rows))]
        update = self.mc_temperature.update(step, rows, groups)
        if update.changed:
            logger.info("microcoder: temperature %g -> %g from step %d (%s)", update.temperature,
                        update.next_temperature, step + 1, update.reason)
        return {k: float(v) for k, v in update.metrics.items()}

    # ------------------------------------------------------------------ checkpoints

    def mc_state_dict(self) -> dict:
        """What goes into ``<checkpoint>/microcoder_state.json``."""
        return {
            "version": STATE_VERSION,
            "global_step": int(self.state.global_step),
            "mask_enabled": self.mc_mask_enabled,
            "temperature": self.mc_temperature.state_dict() if self.mc_temperature is not None else None,
        }

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump(self.mc_state_dict(), f, indent=1)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        self.mc_load_checkpoint(checkpoint)

    def mc_load_checkpoint(self, checkpoint: str) -> bool:
        """Restore the controller from ``<checkpoint>/microcoder_state.json``; False (and a warning) if absent."""
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            if self.mc_temperature is not None:
                logger.warning("microcoder: %s has no %s (checkpoint of another trainer?): the temperature "
                               "controller starts from its configuration", checkpoint, STATE_FILE)
            return False
        with open(path) as f:
            state = json.load(f)
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"microcoder: unsupported {STATE_FILE} version {state.get('version')!r} in {checkpoint}")
        if self.mc_temperature is not None:
            if state.get("temperature") is not None:
                self.mc_temperature.load_state_dict(state["temperature"])
                logger.info("microcoder: temperature controller restored from %s", path)
            else:
                logger.warning("microcoder: %s has no temperature state; the controller starts from its "
                               "configuration", path)
            self.mc_buffer_temperature = self.mc_temperature.temperature(int(self.state.global_step))
            self.mc_set_temperature(self.mc_buffer_temperature)
        return True
