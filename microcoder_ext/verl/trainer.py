"""``microcoder_sync``: verl's synchronous v1 PPO trainer plus the conditional truncation mask.

Selected by ``trainer.v1.trainer_mode=microcoder_sync`` (the recipes set it). Per step, after verl's own
advantage computation (GRPO incl. multi-trajectory broadcast, unchanged), it reads ``responses``,
``extra_fields["reward_extra_info"]`` and ``rm_scores`` from TransferQueue, computes the mask with
:func:`microcoder_ext.verl.advantage_mask.compute_row_mask`, multiplies ``advantages`` and ``returns`` of the
masked rows by zero and writes them back. Masked rows stay in the group statistics and in the token-mean
denominator. Metrics go to verl's step metrics (``microcoder/*``).
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
from microcoder_ext.verl.advantage_mask import compute_row_mask

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
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=MASK_INPUT_FIELDS)
        extra = data["extra_fields"]
        extra = extra.tolist() if hasattr(extra, "tolist") else list(extra)
        reward_infos = [(e or {}).get("reward_extra_info") for e in extra]
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
