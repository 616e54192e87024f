"""What each ``--mc.preset`` makes OpenRLHF 0.11.2 train with, read from the real objects OpenRLHF builds:

* args: OpenRLHF's own argparse + validation (``parse_cli``) on exactly the preset's flags;
* loss: the real ``openrlhf.models.loss.PolicyLoss`` with the keyword arguments ``ActorPPOTrainer.__init__`` passes
  (``openrlhf/trainer/ray/ppo_actor.py``; the mapping is checked against that source), on ratios outside the clip
  range;
* KL / reference model: OpenRLHF's real ``train()`` (``openrlhf/cli/train_ppo_ray.py``) run up to the trainer
  creation, with ``RayActorGroup`` recording which model groups it would start (no Ray, no GPU).
"""

import inspect
import math

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch

from microcoder_ext.openrlhf import presets

COMMON = ("--actor.num_gpus_per_node", "1", "--rollout.n_samples_per_prompt", "4")
CLIP = {"microcoder": (0.2, 0.28), "dapo_baseline": (0.2, 0.28), "grpo_baseline": (0.2, 0.2)}


def preset_args(cli, name):
    flags = [tok for r in presets.PRESETS[name].requirements for tok in r.flag]
    args = cli(*COMMON, *flags)
    for r in presets.PRESETS[name].requirements:  # the preset's own check passes on what argparse made of its flags
        assert presets.same_value(presets.lookup(args, r.dest), r.value), r.dest
    return args


def policy_loss_like_ppo_actor(args):
    """``PolicyLoss`` exactly as ``ActorPPOTrainer.__init__`` builds it (0.11.2)."""
    from openrlhf.models.loss import PolicyLoss

    return PolicyLoss(
        clip_eps_low=args.actor.eps_clip_low_high[0],
        clip_eps_high=args.actor.eps_clip_low_high[1],
        dual_clip=args.actor.dual_clip,
        token_level_loss=args.actor.loss_agg_mode == "token-mean",
        policy_loss_type=args.actor.policy_loss_type,
        is_correction_level=args.algo.advantage.is_correction_level,
        is_correction_mode=args.algo.advantage.is_correction_mode,
        is_correction_gating=args.algo.advantage.is_correction_gating,
        is_correction_threshold=args.algo.advantage.is_correction_threshold,
    )


def test_the_loss_mapping_is_ppo_actors():
    from openrlhf.trainer.ray.ppo_actor import ActorPPOTrainer

    src = inspect.getsource(ActorPPOTrainer.__init__)
    ours = inspect.getsource(policy_loss_like_ppo_actor)
    for line in ("clip_eps_low=self.args.actor.eps_clip_low_high[0]",
                 "clip_eps_high=self.args.actor.eps_clip_low_high[1]",
                 "dual_clip=self.args.actor.dual_clip",
                 'token_level_loss=self.args.actor.loss_agg_mode == "token-mean"',
                 "policy_loss_type=self.args.actor.policy_loss_type",
                 "is_correction_level=self.args.algo.advantage.is_correction_level"):
        assert line in src, line
        assert line.replace("self.args", "args") in ours, line


@pytest.mark.parametrize("name", sorted(CLIP))
def test_clip_range_and_token_mean(cli, name):
    args = preset_args(cli, name)
    low, high = CLIP[name]
    loss_fn = policy_loss_like_ppo_actor(args)
    assert (loss_fn.clip_eps_low, loss_fn.clip_eps_high) == pytest.approx((low, high))
    assert loss_fn.token_level_loss is True and loss_fn.dual_clip is None and loss_fn.policy_loss_type == "ppo"

    old = torch.full((2, 3), -1.0)
    mask = torch.ones(2, 3, dtype=torch.bool)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3])
    # row 0: ratio 1.35, positive advantage -> clipped at 1 + high; row 1: ratio 0.75, negative -> at 1 - low
    log_probs = (old + torch.log(torch.tensor([[1.35] * 3, [0.75] * 3]))).requires_grad_()
    loss, clip_ratio, *_ = loss_fn(log_probs, old, adv, action_mask=mask)
    per_token = torch.tensor([-(1 + high)] * 3 + [(1 - low)] * 3)
    assert loss.item() == pytest.approx(per_token.mean().item(), abs=1e-6)  # token-mean over all 6 tokens
    assert clip_ratio.item() == 1.0
    loss.backward()
    assert torch.all(log_probs.grad == 0)  # clipped: no gradient

    inside = (old + math.log(1.1)).requires_grad_()  # ratio 1.1 is inside every preset's range
    loss_fn(inside, old, adv, action_mask=mask)[0].backward()
    assert torch.all(inside.grad != 0)


class _Stop(Exception):
    pass


def model_groups_train_starts(args):
    """The model actor classes OpenRLHF's real ``train(args)`` creates groups for, and the generate kwargs it passes
    to ``PPOTrainer.remote``; stops there (no Ray, no GPU)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import ray
    from openrlhf.cli import train_ppo_ray

    created, trainer_kwargs = [], {}

    class RecordingGroup:
        def __init__(self, num_nodes, num_gpus_per_node, ray_actor_type, **kwargs):
            created.append(ray_actor_type.__ray_metadata__.class_name)

    class StopAtTrainer:
        @staticmethod
        def remote(*args, **kwargs):
            trainer_kwargs.update(kwargs)
            raise _Stop

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ray, "is_initialized", lambda: True)
        mp.setattr(train_ppo_ray, "RayActorGroup", RecordingGroup)
        mp.setattr(ppo_trainer, "PPOTrainer", StopAtTrainer)
        with pytest.raises(_Stop):
            train_ppo_ray.train(args)
    return created, trainer_kwargs


@pytest.mark.parametrize("name", ["microcoder", "dapo_baseline", "grpo_baseline"])
def test_kl_and_reference_model(cli, name):
    args = preset_args(cli, name)
    args.reward.remote_url = "/path/to/openrlhf_reward.py"  # the launcher fills it in (no reward model group)
    groups, gen_kwargs = model_groups_train_starts(args)
    kl = args.algo.kl
    if name == "grpo_baseline":
        assert kl.use_loss is True and kl.init_coef == pytest.approx(0.001) and kl.estimator == "k3"
        assert groups == ["PolicyModelActor", "ReferenceModelActor"]
    else:
        assert kl.init_coef == 0 and kl.use_loss is False
        assert groups == ["PolicyModelActor"]  # no reference model, so no KL anywhere
    assert args.algo.advantage.estimator == "group_norm"
    if name != "microcoder":  # microcoder: the launcher sets it from --mc.temperature.* (test_trainer.py)
        assert gen_kwargs["temperature"] == pytest.approx(presets.PAPER_TEMPERATURE)
