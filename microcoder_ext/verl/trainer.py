"""``microcoder_sync``: verl's synchronous v1 PPO trainer plus the conditional truncation mask.

Selected by ``trainer.v1.trainer_mode=microcoder_sync`` (the recipes set it). Per step, after verl's own
advantage computation (GRPO incl. multi-trajectory broadcast, unchanged), it reads ``responses``,
``rm_scores`` and the reward's verdict from TransferQueue, computes the mask with
:func:`microcoder_ext.verl.advantage_mask.compute_row_mask`, multiplies ``advantages`` and ``returns`` of the
masked rows by zero and writes them back. Masked rows stay in the group statistics and in the token-mean
denominator. Metrics go to verl's step metrics (``microcoder/*``).

Where the verdict is read (:func:`microcoder_ext.verl.advantage_mask.reward_infos_from_rows`), per row:

1. the top-level TQ field ``<microcoder.mask.verdict_key>``, written by verl's colocated reward step
   (``reward.reward_model.enable=True`` without ``enable_resource_pool``: ``PPOTrainer._compute_reward_colocate``
   stores every extra-info key as its own field, ``verl/trainer/ppo/v1/trainer_base.py:1572-1579``);
2. else ``extra_fields["reward_extra_info"][<verdict_key>]``, written by the agent loop when the reward is computed
   during rollout (verl's default; ``verl/trainer/ppo/v1/agent_loop_tq.py:160-227``);
3. else the verdict is missing: ``microcoder.mask.missing_verdict`` applies, ``microcoder/verdict_missing_frac``
   reports it and the first such step logs a WARNING.

Per-step temperature (``microcoder.temperature``, rules in :mod:`microcoder_ext.verl.temperature`): a
:class:`~microcoder_ext.core.temperature.TemperatureController` gives the step's temperature ``T_t``. At the start of
each step (``on_step_begin``) and whenever a prompt batch of the step is drawn (``_next_train_batch``, also used by the
replay buffer's refills) the trainer writes ``T_t`` into ``actor_rollout_ref.rollout.temperature``, which verl reads
for ``KVBatchMeta.extra_info["temperature"]`` of the sampled batch, old/ref log-probs, values, critic and actor
updates, and attaches ``T_t`` to the prompt batch for the ``microcoder_single_turn`` agent loop
(:mod:`microcoder_ext.verl.agent_loop`), which samples with it. After the step's advantages the trainer reads the
step's responses (``uid``, ``responses``, ``response_mask`` and the stored sampling temperature) from TransferQueue,
refuses rows sampled at another temperature, measures diversity and calls ``controller.update``; its metrics
(``microcoder/temperature``, ``microcoder/temperature_stage``, ``microcoder/diversity/*``) join the step metrics and
a new stage starts at the next step. The controller state is saved in every checkpoint folder
(:data:`~microcoder_ext.verl.temperature.STATE_FILE`) and restored on resume.
"""

from __future__ import annotations

import json
import logging
import math
import os

import torch
import transfer_queue as tq
from omegaconf import OmegaConf, open_dict
from tensordict import TensorDict

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from microcoder_ext.core.config import MicrocoderConfig, parse_config
from microcoder_ext.core.temperature import TemperatureController
from microcoder_ext.core.truncation import stop_token_ids
from microcoder_ext.verl import temperature as mc_temp
from microcoder_ext.verl.advantage_mask import compute_row_mask, reward_infos_from_rows
from microcoder_ext.verl.guard import check_trainer_internals
from microcoder_ext.verl.lazy import register_when_imported
from microcoder_ext.verl.request_seeds import seeded, submission_order

logger = logging.getLogger(__name__)

#: TransferQueue fields the mask reads (besides the advantages it rewrites)
MASK_INPUT_FIELDS = ["responses", "response_mask", "rm_scores", "extra_fields", "advantages", "returns"]
#: TransferQueue fields the temperature controller reads (diversity groups by uid; the sampling temperature check)
TEMPERATURE_INPUT_FIELDS = ["uid", "responses", "response_mask", mc_temp.TEMPERATURE_FIELD]


def _register_agent_loop(module=None) -> None:
    from microcoder_ext.verl.agent_loop import register_agent_loop

    register_agent_loop()


# the agent loop is looked up in the agent-loop worker processes, which import verl.trainer.ppo.v1 (and so this
# module, through the plugin's trainer registration); registered once verl's agent-loop package is imported
register_when_imported(
    "verl.experimental.agent_loop",
    _register_agent_loop,
    key="microcoder_ext.verl.trainer:agent_loop",
    what=f"registering the agent loop {mc_temp.AGENT_LOOP_NAME}",
)


def microcoder_config(config) -> MicrocoderConfig:
    """Validated ``microcoder:`` section of a verl config (defaults when absent)."""
    section = config.get("microcoder", None)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    return parse_config(values)


@register_trainer("microcoder_sync")
class MicrocoderSyncTrainer(PPOTrainerSync):
    """verl's ``PPOTrainerSync`` + MicroCoder-GRPO's conditional truncation mask."""

    def __init__(self, config, *args, **kwargs):
        check_trainer_internals()  # every verl internal this class relies on, before any worker starts
        #: per-request seeds asked for (microcoder_ext.verl.request_seeds): rows in submission order, by prompt uid
        self._mc_seeded = seeded(config.actor_rollout_ref.rollout)
        if self._mc_seeded:
            check_trainer_internals(seeded=True)
        self.mc_config = microcoder_config(config)
        temperature_cfg, notes = mc_temp.check_temperature_config(config, self.mc_config)
        self.mc_temperature = TemperatureController(temperature_cfg)
        for note in notes:
            _say(f"microcoder_sync: {note}")
        self._mc_step_temperature: float | None = None
        self._mc_uid_rank: dict[str, int] = {}
        self._mc_uids_submitted = 0
        # verl uses trainer_mode both as registry key and as the sync/async behaviour switch
        # (trainer_base.py:153 and others compare it to "sync"); the registry lookup is already done.
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config, *args, **kwargs)
        # the agent-loop workers and every extra_info["temperature"] start from T_0
        self._mc_set_temperature(int(getattr(self, "global_steps", 0) or 0))
        _say(f"microcoder_sync: {self.mc_config}")

    # ------------------------------------------------------------------ per-step temperature

    def _mc_set_temperature(self, step: int) -> float:
        """Make ``T_step`` the temperature every verl reader of ``actor_rollout_ref.rollout.temperature`` sees."""
        t = self.mc_temperature.temperature(step)
        with open_dict(self.config):
            self.config.actor_rollout_ref.rollout.temperature = t
        self._mc_step_temperature = t
        return t

    def on_step_begin(self):
        super().on_step_begin()
        self._mc_set_temperature(self.global_steps)

    def _next_train_batch(self, num_prompts: int | None = None):
        batch = super()._next_train_batch(num_prompts)
        t = self._mc_set_temperature(self.global_steps)
        if self._mc_temperature_changes():
            # only where T changes: a constant T is the agent-loop workers' own copy of rollout.temperature.
            # A float64 column [B], not a non-tensor field: verl stores every prompt field with each response in
            # TransferQueue, and a per-row non-tensor field there slowed each actor pass by ~15 % (measured:
            # docs/benchmarks.md); float64 keeps T exact for the trainer's check
            batch[mc_temp.TEMPERATURE_FIELD] = torch.full((len(batch),), t, dtype=torch.float64)
        if self._mc_seeded:
            for uid in _as_list(batch["uid"]):
                self._mc_uid_rank.setdefault(str(uid), self._mc_uids_submitted)
                self._mc_uids_submitted += 1
        return batch

    def _balance_batch(self, batch, metrics, *args, **kwargs):
        """With per-request seeds: the step's rows in submission order (prompt, sample), not in the order they
        finished, before verl's own balancing (which reorders deterministically from there)."""
        if self._mc_seeded:
            batch.reorder(submission_order(batch.keys, self._mc_uid_rank))
            done = {key.rsplit("_", 2)[0] for key in batch.keys}
            self._mc_uid_rank = {uid: r for uid, r in self._mc_uid_rank.items() if uid not in done}
        return super()._balance_batch(batch, metrics, *args, **kwargs)

    # ------------------------------------------------------------------ advantages: mask, then diversity

    def _compute_advantage(self, batch, metrics: dict):
        batch = super()._compute_advantage(batch, metrics)
        # one TransferQueue read for both: the step's responses (B x response_length) are the large part
        fields = list(TEMPERATURE_INPUT_FIELDS)
        if self.mc_config.mask.enable:
            fields += [f for f in self._mask_input_fields() if f not in fields]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        if self.mc_config.mask.enable:
            self._apply_truncation_mask(batch, data, metrics)
        self._update_temperature(batch, data, metrics)
        return batch

    def _update_temperature(self, batch, data, metrics: dict) -> None:
        step = int(getattr(self, "global_steps", 0) or 0)
        expected = self.mc_temperature.temperature(step)
        used = float(self.config.actor_rollout_ref.rollout.temperature)
        if not math.isclose(used, expected, abs_tol=1e-9):
            raise RuntimeError(
                f"microcoder_sync: step {step} computed its log-probs at actor_rollout_ref.rollout.temperature={used:g} "
                f"but the controller's temperature for the step is {expected:g}"
            )
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        responses = data["responses"].unbind()
        uids = _as_list(data["uid"])
        responses = [responses[i] for i in keep]
        uids = [uids[i] for i in keep]
        if not self._mc_temperature_changes():
            # no per-row field (_next_train_batch): the workers sample at their own rollout.temperature, which
            # check_temperature_config made equal to the constant before any worker started
            sampled = []
        elif mc_temp.TEMPERATURE_FIELD in set(data.keys()):
            sampled = [_as_list(data[mc_temp.TEMPERATURE_FIELD])[i] for i in keep]
        else:
            sampled = [None] * len(keep)
        missing = sum(t is None for t in sampled)
        stale = sorted({float(t) for t in sampled if t is not None and not math.isclose(float(t), expected, abs_tol=1e-9)})
        if stale:
            raise RuntimeError(
                f"microcoder_sync: step {step} (T={expected:g}) got responses sampled at T={stale}; their log-probs "
                f"would be computed at another temperature than they were sampled with. Samples older than the "
                f"step are not supported (sync mode only)"
            )
        if missing and not math.isclose(expected, self._mc_initial_temperature(), abs_tol=1e-9):
            raise RuntimeError(
                f"microcoder_sync: {missing} responses of step {step} carry no '{mc_temp.TEMPERATURE_FIELD}': an agent "
                f"loop other than {mc_temp.AGENT_LOOP_NAME!r} sampled them at the workers' initial temperature "
                f"{self._mc_initial_temperature():g}, but step {step} computes log-probs at T={expected:g}. Set "
                f"{mc_temp.AGENT_LOOP_KEY}={mc_temp.AGENT_LOOP_NAME} and give no other agent_name in the data"
            )
        metrics["microcoder/temperature_unverified_frac"] = missing / max(len(keep), 1)
        if missing and not getattr(self, "_mc_warned_unverified", False):
            self._mc_warned_unverified = True
            logger.warning(
                "microcoder_sync: %d of %d responses of step %d carry no '%s' (an agent loop other than %s sampled "
                "them at the workers' initial temperature %s); logged once, see "
                "microcoder/temperature_unverified_frac",
                missing, len(keep), step, mc_temp.TEMPERATURE_FIELD, mc_temp.AGENT_LOOP_NAME,
                self._mc_initial_temperature(),
            )
        update = self.mc_temperature.update(step, responses, uids)
        metrics.update(update.metrics)
        if update.changed:
            _say(f"microcoder_sync: temperature {update.temperature:g} -> {update.next_temperature:g} from step "
                 f"{step + 1} ({update.reason})")

    def _mc_temperature_changes(self) -> bool:
        """Whether T can change during the run (staged / auto): only then does each prompt batch carry it."""
        return self.mc_temperature.config.mode != "constant"

    def _mc_initial_temperature(self) -> float:
        return self.mc_temperature.temperature(0)

    # ------------------------------------------------------------------ checkpoints

    def _save_checkpoint(self):
        # written before verl's own save, whose last act is the latest_checkpointed_iteration.txt tracker
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, mc_temp.STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.mc_temperature.state_dict(), f)
        os.replace(tmp, path)
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        if self.global_steps > 0:
            folder = self._mc_resume_folder()
            path = os.path.join(folder, mc_temp.STATE_FILE) if folder else None
            if path and os.path.exists(path):
                with open(path) as f:
                    self.mc_temperature.load_state_dict(json.load(f))
                _say(f"microcoder_sync: temperature controller restored from {path}")
            else:
                logger.warning(
                    "microcoder_sync: resuming at step %d without %s (checkpoint of another trainer?): the temperature "
                    "controller starts from its configuration%s",
                    self.global_steps, mc_temp.STATE_FILE,
                    " (auto mode: earlier stage changes are lost)" if self.mc_temperature.mode == "auto" else "",
                )
        # the first step to run (fit() increments global_steps first); the agent-loop workers start after this
        self._mc_set_temperature(self.global_steps + 1)
        return result

    def _mc_resume_folder(self) -> str | None:
        """The ``global_step_<n>`` folder verl's ``_load_checkpoint`` resumed from (same resolution)."""
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        trainer = self.config.trainer
        if trainer.resume_mode == "auto":
            folder = trainer.default_local_dir
            if not os.path.isabs(folder):
                folder = os.path.join(os.getcwd(), folder)
            return find_latest_ckpt_path(folder)
        if trainer.resume_mode == "resume_path":
            folder = trainer.resume_from_path
            return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)
        return None

    # ------------------------------------------------------------------ truncation mask

    def _verdict_field(self) -> str | None:
        """The colocated reward step stores the verdict as a top-level field: read unless it would shadow one of
        verl's own fields (TQ silently leaves out fields no row has)."""
        key = self.mc_config.mask.verdict_key
        return key if key not in MASK_INPUT_FIELDS + TEMPERATURE_INPUT_FIELDS else None

    def _mask_input_fields(self) -> list[str]:
        top_key = self._verdict_field()
        return MASK_INPUT_FIELDS + ([top_key] if top_key else [])

    def _mc_stop_token_ids(self) -> tuple[int, ...]:
        """The ids the sampler stops at: the tokenizer's EOS and the model's ``generation_config`` EOS ids (vLLM stops
        at both). A response ending with one of them at the budget finished (core.truncation)."""
        ids = getattr(self, "_mc_stop_ids", None)
        if ids is None:
            model_eos = None
            try:  # verl's own model config (local copy of the model, its generation_config.json)
                from verl.utils.config import omega_conf_to_dataclass

                gen = omega_conf_to_dataclass(self.config.actor_rollout_ref.model).generation_config
                model_eos = getattr(gen, "eos_token_id", None) if gen is not None else None
            except Exception as e:  # no generation config: the tokenizer's EOS is what the engine stops at
                logger.debug("microcoder_sync: no generation config (%s); stop ids from the tokenizer", e)
            tok = getattr(self, "tokenizer", None)
            ids = stop_token_ids(getattr(tok, "eos_token_id", None), model_eos)
            if not ids:
                raise RuntimeError("microcoder_sync: neither the tokenizer nor the model's generation config names an "
                                   "EOS token id; the truncation mask cannot tell finished responses from cut ones")
            self._mc_stop_ids = ids
        return ids

    def _apply_truncation_mask(self, batch, data, metrics: dict) -> None:
        """``data``: the step's rows with at least :meth:`_mask_input_fields`."""
        cfg = self.mc_config.mask
        top_key = self._verdict_field()
        present = set(data.keys())
        n = len(batch.keys)
        extra = _as_list(data["extra_fields"]) if "extra_fields" in present else [None] * n
        top_level = _as_list(data[top_key]) if top_key and top_key in present else None
        reward_infos = reward_infos_from_rows(extra, top_level, cfg.verdict_key)
        scores = [float(r.sum()) for r in data["rm_scores"].unbind()]
        row_mask, mask_metrics = compute_row_mask(
            keys=list(batch.keys),
            is_padding=[bool(t.get("is_padding", False)) for t in batch.tags],
            responses=list(data["responses"].unbind()),
            reward_infos=reward_infos,
            scores=scores,
            max_response_length=int(self.config.actor_rollout_ref.rollout.response_length),
            cfg=cfg,
            generator=cfg.generator(int(getattr(self, "global_steps", 0))),
            stop_token_ids=self._mc_stop_token_ids(),
        )
        metrics.update(mask_metrics)
        missing = mask_metrics.get("microcoder/verdict_missing_frac", 0.0)
        if missing > 0 and not getattr(self, "_mc_warned_missing", False):
            self._mc_warned_missing = True
            logger.warning(
                "microcoder mask: %.0f%% of this step's responses have no '%s' (looked in the TransferQueue field '%s' "
                "and in extra_fields['reward_extra_info']); applying microcoder.mask.missing_verdict=%s. Logged once; "
                "see the metric microcoder/verdict_missing_frac.",
                100 * missing, cfg.verdict_key, cfg.verdict_key, cfg.missing_verdict,
            )
        if not row_mask.any():
            return
        response_mask = data["response_mask"]
        padded = data.select("advantages", "returns").to_padded_tensor()
        out = {}
        for field in ("advantages", "returns"):
            values = padded[field]
            values[row_mask] = 0.0  # the whole row; masked rows keep their place in every denominator
            out[field] = response_to_nested(values, response_mask)
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(out, batch_size=len(batch)))


def _say(message: str) -> None:
    """What users need to see in the trainer's output, as verl prints its own progress (verl's loggers are at
    WARN by default)."""
    print(message, flush=True)


def _as_list(values) -> list:
    """A non-tensor TQ field (tensordict ``LinkedList``, ``NonTensorStack`` or numpy array) as a plain list."""
    if hasattr(values, "tolist"):
        return list(values.tolist())
    return list(values)
