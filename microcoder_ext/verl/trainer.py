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
"""

from __future__ import annotations

import logging

import torch
import transfer_queue as tq
from omegaconf import OmegaConf, open_dict
from tensordict import TensorDict

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from microcoder_ext.core.config import MicrocoderConfig, parse_config
from microcoder_ext.verl.advantage_mask import compute_row_mask, reward_infos_from_rows

logger = logging.getLogger(__name__)

#: TransferQueue fields the mask reads (besides the advantages it rewrites)
MASK_INPUT_FIELDS = ["responses", "response_mask", "rm_scores", "extra_fields", "advantages", "returns"]


def microcoder_config(config) -> MicrocoderConfig:
    """Validated ``microcoder:`` section of a verl config (defaults when absent)."""
    section = config.get("microcoder", None)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    return parse_config(values)


@register_trainer("microcoder_sync")
class MicrocoderSyncTrainer(PPOTrainerSync):
    """verl's ``PPOTrainerSync`` + MicroCoder-GRPO's conditional truncation mask."""

    def __init__(self, config, *args, **kwargs):
        self.mc_config = microcoder_config(config)  # fail before any worker starts
        # verl uses trainer_mode both as registry key and as the sync/async behaviour switch
        # (trainer_base.py:153 and others compare it to "sync"); the registry lookup is already done.
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config, *args, **kwargs)
        logger.info("microcoder_sync: %s", self.mc_config)

    def _compute_advantage(self, batch, metrics: dict):
        batch = super()._compute_advantage(batch, metrics)
        if self.mc_config.mask.enable:
            self._apply_truncation_mask(batch, metrics)
        return batch

    def _apply_truncation_mask(self, batch, metrics: dict) -> None:
        cfg = self.mc_config.mask
        # the colocated reward step stores the verdict as a top-level field (read unless it would shadow one of
        # verl's own fields); TQ silently leaves out fields no row has
        top_key = cfg.verdict_key if cfg.verdict_key not in MASK_INPUT_FIELDS else None
        select = MASK_INPUT_FIELDS + ([top_key] if top_key else [])
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=select)
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


def _as_list(values) -> list:
    """A non-tensor TQ field (tensordict ``LinkedList``, ``NonTensorStack`` or numpy array) as a plain list."""
    if hasattr(values, "tolist"):
        return list(values.tolist())
    return list(values)
