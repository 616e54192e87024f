"""verl's real actor loss (``verl.workers.utils.losses.ppo_loss``) with the actor config each recipe composes.

Checks the loss preset of MicroCoder-GRPO (docs/paper.md#kl-and-clipping): clip-higher 0.2 / 0.28, token-mean aggregation,
no KL term; and that a zeroed (masked) advantage row still counts in the token-mean denominator.
"""

import math

import pytest
import torch
from hydra import compose, initialize_config_module
from tensordict import TensorDict

pytestmark = pytest.mark.verl

from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

PROMPTS = [3, 2, 2]
RESPONSES = [4, 3, 5]
RATIOS = [1.25, 0.75, 1.1]  # pi / pi_old per token of each response
ADVANTAGES = [1.0, -1.0, 0.0]  # row 3 plays a masked row


def _actor(recipe, *overrides):
    with initialize_config_module(version_base=None, config_module="verl.trainer.config"):
        # micro batch size is a per-launch setting the actor dataclass insists on
        base = [f"+recipe={recipe}", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"]
        cfg = compose("ppo_trainer", overrides=[*base, *overrides])
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def _loss(actor, with_ref=False):
    nt = lambda xs: torch.nested.as_nested_tensor(xs, layout=torch.jagged)  # noqa: E731
    leaves = []
    log_probs = []
    for p, r, ratio in zip(PROMPTS, RESPONSES, RATIOS):
        # model output covers prompt+response; response log-probs sit at positions p-1 .. p+r-2
        lp = torch.zeros(p + r)
        lp[p - 1 : p + r - 1] = math.log(ratio)
        lp.requires_grad_(True)
        leaves.append(lp)
        log_probs.append(lp)
    fields = {
        "prompts": nt([torch.ones(p, dtype=torch.long) for p in PROMPTS]),
        "responses": nt([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
        "response_mask": nt([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
        "old_log_probs": nt([torch.zeros(r) for r in RESPONSES]),
        "advantages": nt([torch.full((r,), a) for r, a in zip(RESPONSES, ADVANTAGES)]),
    }
    if with_ref:
        fields["ref_log_prob"] = nt([torch.full((r,), -0.1) for r in RESPONSES])
    data = TensorDict(fields, batch_size=[len(PROMPTS)])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=sum(RESPONSES), global_batch_size=len(PROMPTS))
    loss, metrics = ppo_loss(actor, {"log_probs": nt(log_probs)}, data)
    loss.backward()
    grads = [lp.grad[p - 1 : p + r - 1] for lp, p, r in zip(leaves, PROMPTS, RESPONSES)]
    return loss, metrics, grads


def test_microcoder_actor_config():
    actor = _actor("microcoder")
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert actor.use_kl_loss is False and actor.loss_agg_mode == "token-mean" and actor.entropy_coeff == 0
    assert actor.policy_loss.loss_mode == "vanilla"


def test_clip_higher_token_mean_and_no_kl():
    loss, metrics, grads = _loss(_actor("microcoder"))
    # row 1: ratio 1.25, A=+1 -> inside 1+0.28: unclipped; row 2: ratio 0.75, A=-1 -> clipped at 0.8;
    # row 3: A=0 (masked) contributes 0 but its 5 tokens stay in the denominator
    expected = (4 * -1.25 + 3 * 0.8 + 5 * 0.0) / sum(RESPONSES)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert torch.all(grads[0] != 0)  # clip-higher lets the positive-advantage update through
    assert torch.all(grads[1] == 0)  # lower clip still binds
    assert torch.all(grads[2] == 0)
    assert "kl_loss" not in metrics


def test_symmetric_clip_of_the_grpo_baseline_blocks_the_same_update():
    actor = _actor("grpo_baseline")
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2) and actor.use_kl_loss
    _, metrics, grads = _loss(actor, with_ref=True)
    assert "kl_loss" in metrics and metrics["kl_coef"] == actor.kl_loss_coef > 0
    assert torch.all(grads[2] != 0)  # zero-advantage row: only the KL term pulls on it
    # the policy-gradient part alone: ratio 1.25 > 1 + 0.2 is clipped, no gradient
    _, _, grads = _loss(_actor("grpo_baseline", "actor_rollout_ref.actor.use_kl_loss=false"))
    assert torch.all(grads[0] == 0)


def test_command_line_override_reaches_the_loss():
    # clip_ratio_high=0.2 from the command line must beat the recipe's 0.28
    _, _, grads = _loss(_actor("microcoder", "actor_rollout_ref.actor.clip_ratio_high=0.2"))
    assert torch.all(grads[0] == 0)


def test_seq_mean_differs_from_token_mean():
    # guards the expected value above: the aggregation mode really changes the number
    loss, _, _ = _loss(_actor("microcoder", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"))
    assert loss.item() != pytest.approx((4 * -1.25 + 3 * 0.8) / sum(RESPONSES), abs=1e-4)
