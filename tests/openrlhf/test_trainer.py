"""``MicrocoderPPOTrainer`` on the real OpenRLHF 0.11.2 code, without Ray: its ``__init__`` (the real
``BasePPOTrainer.__init__`` with a real ``DeepspeedStrategy``, tokenizer and JSONL prompt dataset of a tiny model saved
here) and what it refuses, the Ray class it registers, the diversity inputs it reads from OpenRLHF's samples, and
``train_step``'s temperature check, which runs before any Ray call.

Nothing of OpenRLHF is overridden here. The trainer inside OpenRLHF's real training loop (``fit()``, the Ray actors,
DeepSpeed on its CPU accelerator, the weight sync into vLLM's real CPU engine, checkpoints) runs in
``test_smoke_e2e.py`` on the project's CPU backend (:mod:`microcoder_ext.openrlhf.cpu`): its ``mc`` and ``mc_resume``
launches start ``MicrocoderPPOTrainerRemote`` as ``train()`` does and check the mask in the real loss
(``test_mask_zeroes_eligible_advantages_in_the_real_loss``), the sampler's and the actors' log-prob temperature per
step (``test_staged_temperature_switches_sampler_and_logprobs``), the ``microcoder/*`` metrics in OpenRLHF's
TensorBoard files, and the controller saved in and restored from OpenRLHF's checkpoint
(``test_checkpoint_resume_restores_weights_and_controller``).
"""

import json
import logging
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch
from openrlhf.utils.deepspeed import DeepspeedStrategy

from microcoder_ext.core.config import ConfigError, parse_config  # noqa: E402
from microcoder_ext.openrlhf import presets  # noqa: E402
from microcoder_ext.openrlhf import trainer as mc_trainer  # noqa: E402
from microcoder_ext.openrlhf.settings import OpenRLHFSettings  # noqa: E402

N, MAX_NEW, M = 4, 96, 4
T0, T1, SWITCH = 0.6, 1.2, 20  # staged: [[0, 0.6], [20, 1.2]]
STAGED = {"mode": "staged", "stages": [[0, T0], [SWITCH, T1]]}


def microcoder_namespace(temperature=STAGED, mask=None, preset="microcoder", mask_on=True, temperature_on=True):
    config = parse_config({"mask": mask or {"rho": 1.0, "m": M}, "temperature": temperature})
    return OpenRLHFSettings(preset=preset, config=config, mask=mask_on, temperature_control=temperature_on)\
        .to_namespace()


@pytest.fixture(scope="module")
def files(tmp_path_factory, tokenizer, make_prompt):
    """A tiny random Qwen2 + the byte tokenizer saved as a model folder, and a JSONL prompt dataset of two bundled
    problems."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from microcoder_ext.smoke.data import bundled_problems

    root = tmp_path_factory.mktemp("trainer")
    model_dir = root / "tiny-qwen2"
    tokenizer.save_pretrained(model_dir)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    Qwen2ForCausalLM(cfg).save_pretrained(model_dir)
    data = root / "prompts.jsonl"
    data.write_text("".join(json.dumps({"input": make_prompt(p.prompt_text()), "label": json.dumps(p.tests)}) + "\n"
                            for p in bundled_problems("train")[:2]))
    return SimpleNamespace(model=str(model_dir), data=str(data), ckpt=str(root / "ckpt"), root=root)


def trainer_args(cli, files, reward_file, *extra, microcoder=None):
    flags = [tok for r in presets.PRESETS["microcoder"].requirements for tok in r.flag]
    args = cli(*flags, "--actor.num_gpus_per_node", "1", "--actor.model_name_or_path", files.model,
               "--rollout.n_samples_per_prompt", str(N), "--rollout.batch_size", "1",
               "--rollout.micro_batch_size", "2", "--train.batch_size", str(N), "--train.micro_batch_size", "2",
               "--rollout.temperature", str(T0), "--rollout.max_new_tokens", str(MAX_NEW), "--data.max_len", "1024",
               "--reward.remote_url", str(reward_file), "--data.prompt_dataset", files.data,
               "--data.input_key", "input", "--data.label_key", "label", "--ckpt.path", files.ckpt,
               "--ckpt.save_steps", str(SWITCH), *extra)
    args.microcoder = microcoder if microcoder is not None else microcoder_namespace()
    return args


# ------------------------------------------------------------------------------------ tests
def test_set_actor_temperature_needs_a_model():
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

    from microcoder_ext.openrlhf.ray_calls import get_actor_temperature, set_actor_temperature

    cls = PolicyModelActor.__ray_metadata__.modified_class.__ray_actor_class__
    with pytest.raises(RuntimeError, match="has no model yet"):
        set_actor_temperature(cls.__new__(cls), 1.0)
    with pytest.raises(RuntimeError, match="without a 'temperature'"):
        get_actor_temperature(SimpleNamespace(actor=object()))


# ------------------------------------------------------------------------------------ refusals (no Ray needed)
def _init(args, **generate_kwargs):
    return mc_trainer.MicrocoderPPOTrainer(args.actor.model_name_or_path, DeepspeedStrategy(args=args), None, None,
                                           None, None, None,
                                           **({"temperature": args.rollout.temperature} | generate_kwargs))


def test_refuses_to_start_without_the_launcher(cli, files, reward_files):
    args = trainer_args(cli, files, reward_files["reward_fns"])
    del args.microcoder
    with pytest.raises(RuntimeError, match="microcoder_ext.openrlhf.train"):
        _init(args)


@pytest.mark.parametrize("flag", ["--train.async_enable", "--rollout.temperature"])
def test_refuses_async_and_a_foreign_rollout_temperature(cli, files, reward_files, flag):
    extra = ("--train.async_enable",) if flag == "--train.async_enable" else ("--rollout.temperature", "1.0")
    args = trainer_args(cli, files, reward_files["reward_fns"], *extra)
    with pytest.raises(ConfigError, match="async_enable" if "async" in flag else r"rollout.temperature=1.0 .* 0.6"):
        _init(args)


def test_refuses_generate_kwargs_at_another_temperature(cli, files, reward_files):
    args = trainer_args(cli, files, reward_files["reward_fns"])
    with pytest.raises(ConfigError, match=r"generate_kwargs\['temperature'\]=1.0"):
        _init(args, temperature=1.0)


def test_refuses_the_probe_start(cli, files, reward_files):
    auto = {"mode": "auto", "start": "probe", "value": 0.6, "target": 0.5}
    args = trainer_args(cli, files, reward_files["reward_fns"], microcoder=microcoder_namespace(temperature=auto))
    with pytest.raises(ConfigError, match="temperature probe"):
        _init(args)


def test_mask_only_leaves_the_temperature_alone(cli, files, reward_files):
    ns = microcoder_namespace(preset="mask_only", temperature_on=False, temperature={"value": 1.2})
    args = trainer_args(cli, files, reward_files["reward_fns"], microcoder=ns)  # --rollout.temperature 0.6
    trainer = _init(args)
    assert trainer.mc_temperature is None
    assert trainer.generate_kwargs["temperature"] == T0  # OpenRLHF's, untouched
    assert isinstance(trainer.experience_maker.compute_advantages_and_returns, mc_trainer.TruncationMaskHook)
    assert trainer.mc_state_dict() == {"preset": "mask_only", "temperature": None}
    assert trainer.init_checkpoint_states()["global_step"] == 0  # no --ckpt.load_enable: no actor call
    assert trainer.generate_kwargs["temperature"] == T0


def test_the_remote_class_keeps_openrlhf_options():
    from openrlhf.trainer.ppo_trainer import PPOTrainer

    remote = mc_trainer.MicrocoderPPOTrainerRemote
    original = PPOTrainer.__ray_metadata__.modified_class.__ray_actor_class__
    assert remote.__ray_metadata__.modified_class.__ray_actor_class__ is mc_trainer.MicrocoderPPOTrainer
    assert mc_trainer.MicrocoderPPOTrainer.__mro__[1] is original
    assert remote._default_options == PPOTrainer._default_options
    methods = remote.__ray_metadata__.method_meta.methods
    assert {"fit", "get_max_steps", "train_step"} <= set(methods)


def test_diversity_inputs_follow_openrlhfs_sample_layout(caplog):
    """Groups of n consecutive rollout samples; response spans cut out of ``sequences[j, 1:]`` by ``action_mask``
    (holes kept); a layout that mixes prompts falls back to grouping by prompt text."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    from microcoder_ext.core.diversity import diversity_metrics

    def sample(prompt, response, hole=None):
        prompt_ids = [7] * (len(prompt) + 2)
        seq = torch.tensor([prompt_ids + response])
        action_mask = torch.zeros(1, seq.shape[1] - 1, dtype=torch.bool)
        action_mask[0, len(prompt_ids) - 1:] = True  # action_mask[t] flags sequences[t + 1]
        if hole is not None:
            action_mask[0, len(prompt_ids) - 1 + hole] = False
        return Experience(sequences=seq, action_mask=action_mask, prompts=[prompt])

    responses = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 1, 2, 3, 4], [9, 8, 7, 6, 5], [9, 8, 7, 6, 5]]
    samples = [sample("a", responses[0]), sample("a", responses[1]), sample("bb", responses[2]),
               sample("bb", responses[3], hole=2)]
    tokens, mask, groups = mc_trainer.rollout_diversity_inputs(samples, 2)
    assert groups == [0, 0, 1, 1]
    assert tokens.shape == mask.shape == (4, 8)
    for row, resp in enumerate(responses):
        assert tokens[row, :len(resp)].tolist() == resp
    assert mask[3].tolist() == [True, True, False, True, True, False, False, False]
    got = diversity_metrics(tokens, groups, mask=mask).metrics()
    # the hole leaves [9, 8] and [6, 5]: no 4-gram, so row 3 is a short response and only rows 0-2 count
    first3 = diversity_metrics([torch.tensor(r) for r in responses[:3]], [0, 0, 1]).metrics()
    assert got["microcoder/diversity/distinct4"] == pytest.approx(first3["microcoder/diversity/distinct4"])
    assert got["microcoder/diversity/short_responses"] == 1.0

    mixed = [samples[0], samples[2], samples[1], samples[3]]
    mc_trainer.logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING):
            _, _, groups = mc_trainer.rollout_diversity_inputs(mixed, 2)
    finally:
        mc_trainer.logger.removeHandler(caplog.handler)
    assert groups == ["a", "bb", "a", "bb"]
    assert "mixes prompts" in caplog.text


def test_init_wires_mask_and_temperature(cli, files, reward_files):
    trainer = _init(trainer_args(cli, files, reward_files["reward_fns"]))
    hook = trainer.experience_maker.compute_advantages_and_returns
    assert isinstance(hook, mc_trainer.TruncationMaskHook) and hook.max_response_length == MAX_NEW
    assert trainer.tokenizer.eos_token_id in hook.stop_token_ids
    assert trainer.generate_kwargs["temperature"] == T0 == trainer.mc_temperature.temperature(0)
    assert trainer.mc.preset == "microcoder"
    assert trainer.mc_state_dict()["temperature"] == trainer.mc_temperature.state_dict()


def test_train_step_refuses_samples_of_another_temperature(cli, files, reward_files):
    """Checked before anything is sent to an actor: samples drawn at another temperature than the controller's for
    the step never reach the log-prob computation."""
    trainer = _init(trainer_args(cli, files, reward_files["reward_fns"]))
    assert trainer.mc_temperature.temperature(SWITCH + 1) == T1
    with pytest.raises(RuntimeError, match=r"step 21's samples were drawn at .*=0.6 .* step is 1.2"):
        trainer.train_step([], SWITCH + 1)
