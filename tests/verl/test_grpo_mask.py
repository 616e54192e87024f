"""The mask multiplies verl's already group-normalised GRPO advantages (docs/paper.md#objective)."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

pytestmark = pytest.mark.verl

from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from microcoder_ext.core.masking import conditional_truncation_mask  # noqa: E402

L, M = 8, 2


def _batch():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([8, 3, 8, 5, 8, 8, 2, 8])
    responses = torch.randint(10, 50, (8, L), generator=g)
    mask = (torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)).long()
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    tlr = torch.zeros(8, L)
    tlr[torch.arange(8), lengths - 1] = rewards
    uid = np.array(["p"] * 4 + ["q"] * 4, dtype=object)
    verdicts = ["correct", "wrong_answer", "correct", "wrong_answer", "no_answer", "correct", "correct", "timeout"]
    return responses, lengths, mask, tlr, uid, verdicts


def test_masked_rows_stay_in_group_statistics():
    responses, lengths, mask, tlr, uid, verdicts = _batch()
    adv, _ = compute_grpo_outcome_advantage(tlr, mask, uid)
    drop = conditional_truncation_mask(responses, lengths, L, verdicts, rho=1.0, m=M)
    assert drop.tolist() == [True, False, True, False, True, True, False, False]
    final = adv * (~drop).unsqueeze(1)
    assert torch.all(final[drop] == 0)
    torch.testing.assert_close(final[~drop], adv[~drop], rtol=0, atol=0)
    # had the masked rows been removed before normalisation, the others would differ: they were not
    keep = (~drop).nonzero(as_tuple=True)[0]
    adv_without, _ = compute_grpo_outcome_advantage(tlr[keep], mask[keep], uid[keep.numpy()])
    assert not torch.allclose(adv_without, adv[keep])


def test_same_through_verls_compute_advantage_entry_point():
    responses, lengths, mask, tlr, uid, verdicts = _batch()
    data = DataProto.from_dict(tensors={"token_level_rewards": tlr, "response_mask": mask}, non_tensors={"uid": uid})
    out = compute_advantage(data, adv_estimator="grpo", config=OmegaConf.create({"norm_adv_by_std_in_grpo": True}))
    ref, _ = compute_grpo_outcome_advantage(tlr, mask, uid)
    torch.testing.assert_close(out.batch["advantages"], ref)
    drop = conditional_truncation_mask(responses, lengths, L, verdicts, rho=1.0, m=M)
    masked = out.batch["advantages"] * (~drop).unsqueeze(1)
    # token-level: zero on every token of a masked row, untouched (incl. padding zeros) elsewhere
    assert torch.all(masked[drop] == 0) and torch.equal(masked[~drop], ref[~drop])
