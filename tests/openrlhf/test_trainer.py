"""``MicrocoderPPOTrainer`` on the real OpenRLHF 0.11.2 code, with real Ray (started once for the module, on CPU):

* the policy (and reference) model actors are real ``PolicyModelActor`` / ``ReferenceModelActor`` Ray actors
  created by a real ``RayActorGroup``; what ``init_model_from_pretrained`` would set up on a GPU is set up by
  ``__ray_call__`` (:func:`_w_setup_model`): a real ``openrlhf.models.actor.Actor`` around a tiny random Qwen2
  built here, a real ``NaiveReplayBuffer``, a 1-process gloo group, ``torch.cuda.current_device() -> "cpu"``;
* the trainer is built by its real ``__init__`` (real ``DeepspeedStrategy``, tokenizer and JSONL prompt dataset
  from a temporary folder) and runs OpenRLHF's real ``fit()``: ``SamplesGenerator.generate_samples(
  **generate_kwargs)`` -> real ``_dispatch_prompts_to_vllm`` -> the real ``RolloutRayActor`` (vLLM replaced by
  ``FakeAsyncLLM``, our reward) -> our ``train_step`` -> real ``make_experience`` (old log-probs from the Ray
  worker's ``PolicyModelActor.forward``) -> real ``compute_advantages_and_returns`` + our mask -> the worker's
  replay buffer -> ``save_logs_and_checkpoints`` -> the worker's real ``save_checkpoint``;
* stand-ins, each because it needs a GPU: the DeepSpeed PPO update and the NCCL weight sync to vLLM
  (:class:`CPUTrainer` overrides ``ppo_train`` and ``broadcast_to_vllm``), DeepSpeed's engine checkpoint files
  (:class:`CPUCheckpointStrategy` writes/reads the client states with ``torch.save``), the vLLM engine (``FakeAsyncLLM``
  inside the real rollout actor, reached through :class:`VLLMHandle`, a local stand-in for its Ray handle).

The worker-side helpers (``_w_*``, the setup hook, :class:`CPUCheckpointStrategy`) are pickled **by value**
(``cloudpickle.register_pickle_by_value`` on this module: ``tests/`` is not importable in the workers);
``microcoder_ext.openrlhf.ray_calls.set_actor_temperature`` goes by reference, as in production.
"""

import asyncio
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.openrlhf  # the tests that start Ray are marked slow
import openrlhf  # noqa: F401  (a missing framework fails, never skips)
import torch
from openrlhf.utils.deepspeed import DeepspeedStrategy

from microcoder_ext.core import verdicts as V  # noqa: E402
from microcoder_ext.core.config import ConfigError, parse_config  # noqa: E402
from microcoder_ext.openrlhf import presets  # noqa: E402
from microcoder_ext.openrlhf import trainer as mc_trainer  # noqa: E402
from microcoder_ext.openrlhf.settings import OpenRLHFSettings  # noqa: E402
from openrlhf_cases import CASES as SHARED_CASES, MAX_NEW, MUL, M, N, fence, masked_at_rho_1  # noqa: E402

STUBS_FILE = str(Path(__file__).resolve().parents[2] / "compat" / "cpu_stubs.py")
T0, T1, SWITCH = 0.6, 1.2, 20  # staged: [[0, 0.6], [20, 1.2]]
FIRST_STEP = SWITCH - 1  # fit() runs steps 19 (T0) and 20 (T1)
STAGED = {"mode": "staged", "stages": [[0, T0], [SWITCH, T1]]}

# prompt -> (label, [(completion, masked at rho = 1)])
CASES = {prompt: (label, [(c, masked_at_rho_1(v, trunc, rep)) for c, v, trunc, rep in samples])
         for prompt, (label, samples) in SHARED_CASES.items()}


# ------------------------------------------------------------------------------------ run inside the Ray workers
def _worker_setup_hook():
    """``worker_process_setup_hook``: the CPU stubs of flash_attn / vllm before a worker imports OpenRLHF."""
    import importlib.util
    import sys

    name = "microcoder_cpu_stubs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, STUBS_FILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    sys.modules[name].install()


def _w_setup_model(actor_self, model_dir, strategy, temperature):
    """What ``init_model_from_pretrained`` sets up, on CPU: ``.actor`` (policy) or ``.model`` (reference) = a real
    ``Actor`` at ``args.rollout.temperature``; the policy also gets its replay buffer and checkpoint attributes."""
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist
    from openrlhf.models import Actor
    from openrlhf.trainer.ppo_utils import NaiveReplayBuffer
    from transformers import AutoModelForCausalLM

    args = strategy.args
    torch.cuda.current_device = lambda: 0  # NaiveReplayBuffer.__init__ reads it for sample(), which is not used
    buffer = NaiveReplayBuffer(args.train.micro_batch_size, 0, True, args.ds.packing_samples,
                               args.train.dynamic_batch_enable)
    torch.cuda.current_device = lambda: "cpu"  # forward(): sequences.to(torch.cuda.current_device())
    torch.cuda.synchronize = lambda *a, **k: None  # save_checkpoint(): torch_dist_barrier_and_cuda_sync()
    if not dist.is_initialized():  # strategy.setup_distributed() (deepspeed.init_distributed) on a GPU
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    actor = Actor(model, temperature=temperature)
    actor.packing_samples = False  # Actor sets it only when it loads the model itself
    actor_self.strategy = strategy
    if hasattr(type(actor_self), "append"):  # PolicyModelActor
        actor_self.actor = actor
        actor_self.trainer = SimpleNamespace(replay_buffer=buffer)
        actor_self.disable_ds_ckpt, actor_self.save_hf_ckpt, actor_self.checkpoint_states = False, False, {}
    else:  # ReferenceModelActor
        actor_self.model = actor
    return type(actor_self).__name__


def _recompute(actor, sequences, attention_mask, temperature):
    """``log_softmax(logits / T)`` of the next token, gathered, the action-mask layout of ``Actor.forward``."""
    import torch

    pos = attention_mask.long().cumsum(-1) - 1
    pos.masked_fill_(attention_mask == 0, 1)
    logits = actor.model(sequences, attention_mask=attention_mask, position_ids=pos).logits.float()
    lp = torch.log_softmax(logits / temperature, dim=-1)[:, :-1]
    return lp.gather(-1, sequences[:, 1:].unsqueeze(-1)).squeeze(-1)


def _w_log_probs(actor_self, sequences, attention_mask, action_mask, other_temperature):
    """In the worker: the model's temperature, ``Actor.forward``'s action log-probs and the hand computation at the
    model's temperature and at ``other_temperature``."""
    import torch

    model = actor_self.actor if getattr(actor_self, "actor", None) is not None else actor_self.model
    with torch.no_grad():
        got = model(sequences, action_mask, attention_mask)
        mask = action_mask.float()
        at_t = _recompute(model, sequences, attention_mask, model.temperature)[:, -action_mask.shape[1]:] * mask
        at_o = _recompute(model, sequences, attention_mask, other_temperature)[:, -action_mask.shape[1]:] * mask
    return float(model.temperature), got, at_t, at_o


def _w_take_replay_buffer(actor_self, other_temperature):
    """What ``PolicyModelActor.fit`` trains on, read and then cleared as ``fit`` does: per sample, the stored old
    log-probs next to a recomputation at the model's current temperature and at ``other_temperature``."""
    import torch

    actor = actor_self.actor
    rows = []
    with torch.no_grad():
        for item in actor_self.trainer.replay_buffer.items:
            seq, att, act = item.sequences.unsqueeze(0), item.attention_mask.unsqueeze(0), item.action_mask.bool()
            rows.append(dict(
                temperature=float(actor.temperature), sequences=item.sequences, action_mask=act,
                old=item.action_log_probs[act], at_t=_recompute(actor, seq, att, actor.temperature)[0][act],
                at_other=_recompute(actor, seq, att, other_temperature)[0][act],
                advantages=item.advantages[act], returns=item.returns[act], info=dict(item.info),
            ))
    actor_self.trainer.replay_buffer.clear()
    return rows


def _w_load_checkpoint(actor_self, remove_key=None):
    """``init_model_from_pretrained`` after a restart: ``self.checkpoint_states`` from ``strategy.load_ckpt``."""
    import os

    path = os.path.join(actor_self.strategy.args.ckpt.path, "_actor")
    _, states = actor_self.strategy.load_ckpt(actor_self.actor.model, path)
    if remove_key is not None:
        states.pop(remove_key, None)
    actor_self.checkpoint_states = states
    return states


class CPUCheckpointStrategy(DeepspeedStrategy):
    """OpenRLHF's ``DeepspeedStrategy`` with the DeepSpeed engine's checkpoint files replaced by one
    ``torch.save`` of the client states per tag (a DeepSpeed engine does not run on CPU). ``load_ckpt`` reads them
    with ``weights_only=True``: what OpenRLHF stores must be plain data."""

    def save_ckpt(self, model, save_dir, tag=None, max_num=3, max_mem=1000, client_state=None, save_latest=True,
                  metric_value=None, metric_key=None):
        import os

        import torch

        os.makedirs(os.path.join(save_dir, tag), exist_ok=True)
        torch.save(client_state or {}, os.path.join(save_dir, tag, "client_states.pt"))
        with open(os.path.join(save_dir, "latest"), "w") as f:
            f.write(tag)

    def load_ckpt(self, model, load_dir, tag=None, **kwargs):
        import os

        import torch

        if tag is None:
            with open(os.path.join(load_dir, "latest")) as f:
                tag = f.read().strip()
        path = os.path.join(load_dir, tag)
        return path, torch.load(os.path.join(path, "client_states.pt"), weights_only=True)


# ------------------------------------------------------------------------------------ driver side
class _Remote:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        import ray

        return ray.put(self.fn(*args, **kwargs))


class VLLMHandle:
    """Stands in for the Ray handle of one vLLM actor: ``SamplesGenerator`` calls ``generate_responses.remote(...)``
    and ``get_num_unfinished_requests.remote()`` and ``ray.wait``/``ray.get``s the refs; ``generate_responses`` runs
    the real ``RolloutRayActor.generate_responses`` in this process."""

    def __init__(self, rollout_actor):
        self.actor = rollout_actor
        self.generate_responses = _Remote(lambda **kw: asyncio.run(rollout_actor.generate_responses(**kw)))
        self.get_num_unfinished_requests = _Remote(lambda: 0)  # FakeAsyncLLM has no vLLM output processor


class CPUTrainer(mc_trainer.MicrocoderPPOTrainer):
    """The real trainer minus the GPU-only parts of a step: ``ppo_train`` (the policy actor's DeepSpeed update)
    reads the replay buffer it would train on and clears it as ``PolicyModelActor.fit`` does; ``broadcast_to_vllm``
    (NCCL weight sync) is counted. The logs of each step are kept."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trained, self.logged, self.broadcasts = {}, {}, 0

    def ppo_train(self, global_steps):
        import ray

        other = T1 if math.isclose(self.generate_kwargs["temperature"], T0) else T0
        self.trained[global_steps] = ray.get(
            self.actor_model_group.async_run_method("__ray_call__", _w_take_replay_buffer, other))[0]
        return {"policy_loss": 0.0}

    def broadcast_to_vllm(self):
        self.broadcasts += 1

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        self.logged[global_step] = dict(logs_dict or {})
        return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)


def microcoder_namespace(temperature=STAGED, mask=None, preset="microcoder", mask_on=True, temperature_on=True):
    config = parse_config({"mask": mask or {"rho": 1.0, "m": M}, "temperature": temperature})
    return OpenRLHFSettings(preset=preset, config=config, mask=mask_on, temperature_control=temperature_on)\
        .to_namespace()


@pytest.fixture(scope="module")
def files(tmp_path_factory, tokenizer, make_prompt):
    """A tiny random Qwen2 + the byte tokenizer saved as a model folder, and a JSONL prompt dataset."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("trainer")
    model_dir = root / "tiny-qwen2"
    tokenizer.save_pretrained(model_dir)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # sharp next-token distributions: the temperature visibly changes the log-probs
        model.lm_head.weight.normal_(0.0, 1.0)
    model.save_pretrained(model_dir)
    data = root / "prompts.jsonl"
    data.write_text("".join(json.dumps({"input": make_prompt(p), "label": label}) + "\n"
                            for p, (label, _) in CASES.items()))
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


@pytest.fixture(scope="module")
def ray_cluster():
    """Ray in this process, once for the module (declared GPUs: Ray only counts them)."""
    import ray
    from ray import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    assert not ray.is_initialized(), "another test left Ray running (this module needs its own runtime_env)"
    t = time.time()
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": _worker_setup_hook,
                          "env_vars": {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}})
    print(f"ray.init: {time.time() - t:.1f}s")
    yield ray
    ray.shutdown()
    cloudpickle.unregister_pickle_by_value(module)


@pytest.fixture(scope="module")
def model_groups(ray_cluster, cli, files, reward_files):
    """A real ``RayActorGroup`` of ``PolicyModelActor`` and one of ``ReferenceModelActor``, models at T0."""
    from openrlhf.trainer.ray.launcher import RayActorGroup, ReferenceModelActor
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

    t = time.time()
    args = trainer_args(cli, files, reward_files["reward_fns"])
    strategy = CPUCheckpointStrategy(seed=args.train.seed, zero_stage=args.ds.zero_stage, args=args)
    # half a declared GPU each (RayActorGroup also asks num_cpus = num_gpus_per_actor): both fit on 2 CPUs, 1 GPU
    policy = RayActorGroup(1, 1, PolicyModelActor, pg=None, num_gpus_per_actor=0.5)
    reference = RayActorGroup(1, 1, ReferenceModelActor, pg=None, num_gpus_per_actor=0.5)
    names = ray_cluster.get([*policy.async_run_method("__ray_call__", _w_setup_model, files.model, strategy, T0),
                             *reference.async_run_method("__ray_call__", _w_setup_model, files.model, strategy, T0)])
    assert names == ["PolicyModelActor", "ReferenceModelActor"]
    print(f"model actors ready: {time.time() - t:.1f}s")
    return SimpleNamespace(policy=policy, reference=reference)


def fixed_sequence(tokenizer, make_prompt):
    ids = tokenizer(make_prompt("Multiply two integers.") + fence(MUL), add_special_tokens=False)["input_ids"]
    seq = torch.tensor([ids])
    action_mask = torch.zeros(1, seq.shape[1] - 1, dtype=torch.bool)
    action_mask[0, -len(fence(MUL)):] = True
    return seq, torch.ones_like(seq), action_mask


# ------------------------------------------------------------------------------------ tests
def test_set_actor_temperature_needs_a_model():
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

    from microcoder_ext.openrlhf.ray_calls import get_actor_temperature, set_actor_temperature

    cls = PolicyModelActor.__ray_metadata__.modified_class.__ray_actor_class__
    with pytest.raises(RuntimeError, match="has no model yet"):
        set_actor_temperature(cls.__new__(cls), 1.0)
    with pytest.raises(RuntimeError, match="without a 'temperature'"):
        get_actor_temperature(SimpleNamespace(actor=object()))


@pytest.mark.slow
def test_log_prob_temperature_reaches_the_workers(model_groups, tokenizer, make_prompt):
    """The trainer's ``mc_set_model_temperature`` (``__ray_call__`` with ``set_actor_temperature``) on real policy
    and reference actors: ``Actor.temperature`` and the log-probs ``PolicyModelActor.forward`` returns follow it."""
    import ray

    from microcoder_ext.openrlhf.ray_calls import get_actor_temperature

    trainer = mc_trainer.MicrocoderPPOTrainer.__new__(mc_trainer.MicrocoderPPOTrainer)
    trainer.actor_model_group, trainer.reference_model_group = model_groups.policy, model_groups.reference
    trainer._mc_model_temperature = None
    calls = []
    for group in (model_groups.policy, model_groups.reference):
        original = group.async_run_method
        group.async_run_method = lambda *a, _o=original, **k: calls.append(a[0]) or _o(*a, **k)
    try:
        seq, att, act = fixed_sequence(tokenizer, make_prompt)
        for t in (T1, T0, T1):
            assert trainer.mc_set_model_temperature(t) is True
            assert trainer.mc_set_model_temperature(t) is False  # unchanged: no Ray round trip
            for group in (model_groups.policy, model_groups.reference):
                temp, got, at_t, at_1 = ray.get(group.async_run_method("__ray_call__", _w_log_probs, seq, att, act,
                                                                         1.0))[0]
                assert temp == t
                assert torch.allclose(got, at_t, atol=1e-5)
                assert (got - at_1).abs().max() > 0.1  # the temperature matters for this model
            # the old log-probs path: RemoteExperienceMaker -> async_run_method_batch("forward") -> execute_batch
            forward = ray.get(model_groups.policy.async_run_method_batch(
                method_name="forward", sequences=[seq], action_mask=[act], attention_mask=[att]))[0][0]
            assert torch.allclose(forward, at_t, atol=1e-5)
        assert calls.count("__ray_call__") == 3 * 2 * 2  # 3 changes x 2 groups, plus the probes above
        assert [get_actor_temperature(SimpleNamespace(actor=SimpleNamespace(temperature=0.5)))] == [0.5]
    finally:
        for group in (model_groups.policy, model_groups.reference):
            del group.async_run_method


@pytest.fixture(scope="module")
def fitted(model_groups, cli, files, reward_files, make_rollout_actor, make_prompt):
    """OpenRLHF's real ``fit()`` of a :class:`CPUTrainer` built by its real ``__init__``, from global step 19:
    step 19 at T0, the stage switch, step 20 at T1 (one prompt x 4 samples per step); checkpoint at step 20."""
    from openrlhf.utils import get_strategy

    t = time.time()
    args = trainer_args(cli, files, reward_files["reward_fns"], "--logger.tensorboard_dir", str(files.root / "tb"))
    script = {make_prompt(p): [c for c, _ in samples] for p, (_, samples) in CASES.items()}
    rollout = make_rollout_actor(args, script)
    strategy = get_strategy(args)
    trainer = CPUTrainer(args.actor.model_name_or_path, strategy, model_groups.policy, None, None, None,
                         [VLLMHandle(rollout)], do_sample=True, max_len=args.data.max_len,
                         max_new_tokens=args.rollout.max_new_tokens, temperature=args.rollout.temperature,
                         top_p=args.rollout.top_p)
    init = dict(generate_kwargs=dict(trainer.generate_kwargs), mask_hook=trainer.experience_maker
                .compute_advantages_and_returns)
    trainer.fit(global_step=FIRST_STEP)
    print(f"trainer __init__ + fit (2 steps): {time.time() - t:.1f}s")
    return SimpleNamespace(trainer=trainer, llm=rollout.llm, args=args, init=init, script=script)


@pytest.mark.slow
def test_init_wires_mask_and_temperature(fitted):
    assert isinstance(fitted.init["mask_hook"], mc_trainer.TruncationMaskHook)
    assert fitted.init["mask_hook"].max_response_length == MAX_NEW
    assert fitted.init["generate_kwargs"]["temperature"] == T0
    assert fitted.trainer.mc.preset == "microcoder"


@pytest.mark.slow
def test_sampling_params_follow_the_controller(fitted):
    """The ``SamplingParams`` the real rollout actor received, built by the real ``_dispatch_prompts_to_vllm`` from
    the generate kwargs ``fit()`` handed to ``generate_samples``: T0 for step 19, T1 after the stage switch."""
    temps = [sp.temperature for _, _, sp in fitted.llm.requests]
    assert temps == [T0] * N + [T1] * N
    assert all(sp.max_tokens == MAX_NEW and sp.top_p == 1.0 for _, _, sp in fitted.llm.requests)
    ctl = fitted.trainer.mc_temperature
    assert [ctl.temperature(s) for s in (FIRST_STEP, SWITCH)] == [T0, T1]
    assert fitted.trainer.generate_kwargs["temperature"] == ctl.temperature(SWITCH + 1) == T1


@pytest.mark.slow
def test_old_log_probs_at_the_step_temperature(fitted):
    """The experiences train_step appended to the worker's replay buffer carry old log-probs computed (by the Ray
    worker's ``PolicyModelActor.forward``) at the step's temperature, not at the other stage's."""
    assert sorted(fitted.trainer.trained) == [FIRST_STEP, SWITCH]
    for step, want, other in ((FIRST_STEP, T0, T1), (SWITCH, T1, T0)):
        rows = fitted.trainer.trained[step]
        assert len(rows) == N
        for row in rows:
            assert row["temperature"] == want
            assert torch.allclose(row["old"], row["at_t"], atol=1e-4)
            assert (row["old"] - row["at_other"]).abs().max() > 0.1
    assert fitted.trainer._mc_model_temperature == T1


def _expected_case(tokenizer, response_text):
    for prompt, (_, samples) in CASES.items():
        for completion, masked in samples:
            ids = tokenizer(completion, add_special_tokens=False)["input_ids"][:MAX_NEW]
            if tokenizer.decode(ids) == response_text:
                return prompt, completion, masked
    raise AssertionError(f"no scripted completion gives {response_text!r}")


@pytest.mark.slow
def test_mask_inside_the_real_train_step(fitted, tokenizer):
    """rho = 1: exactly the truncated, non-incorrect, non-repeating samples reached the replay buffer with zero
    advantages and returns; the others keep OpenRLHF's group_norm values."""
    for step in (FIRST_STEP, SWITCH):
        rows = fitted.trainer.trained[step]
        prompts = set()
        for row in rows:
            response = row["sequences"][1:][row["action_mask"]]
            p, completion, masked = _expected_case(tokenizer, tokenizer.decode(response, skip_special_tokens=True))
            prompts.add(p)
            assert float(row["info"]["mc_trunc_masked"]) == float(masked), completion
            if masked:
                assert torch.all(row["advantages"] == 0) and torch.all(row["returns"] == 0)
            else:
                assert torch.all(row["advantages"] != 0)  # both groups have mixed rewards
        assert len(prompts) == 1  # one prompt per step, all four of its samples
    masked_per_step = [sum(float(r["info"]["mc_trunc_masked"]) for r in fitted.trainer.trained[s])
                       for s in (FIRST_STEP, SWITCH)]
    assert sorted(masked_per_step) == [1.0, 2.0]


@pytest.mark.slow
def test_metrics_reach_openrlhf_tensorboard_logger(fitted, files):
    """OpenRLHF's own ``TensorboardLogger`` (``--logger.tensorboard_dir``) wrote the ``microcoder/*`` step metrics
    as ``train/microcoder/*`` scalars; read back from its event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    fitted.trainer.tensorboard_logger.close()  # fit() closes it too; flush in any case
    runs = [p for p in (files.root / "tb").rglob("events.out.tfevents.*")]
    assert runs, "no TensorBoard event file"
    scalars = {}
    for path in runs:
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    for key in ("microcoder/masked_frac", "microcoder/truncated_frac", "microcoder/verdict/correct",
                "microcoder/temperature", "microcoder/diversity/distinct4"):
        assert sorted(scalars[f"train/{key}"]) == [SWITCH, SWITCH + 1], key
        for step in (SWITCH, SWITCH + 1):
            assert scalars[f"train/{key}"][step] == pytest.approx(fitted.trainer.logged[step][key], abs=1e-6)
    assert [scalars["train/microcoder/temperature"][s] for s in (SWITCH, SWITCH + 1)] == pytest.approx([T0, T1])


@pytest.mark.slow
def test_step_status_has_microcoder_floats(fitted):
    logged = fitted.trainer.logged
    assert sorted(logged) == [SWITCH, SWITCH + 1]  # fit() logs with the step train_step returns
    for logs, temp, stage, nxt in ((logged[SWITCH], T0, 0.0, T1), (logged[SWITCH + 1], T1, 1.0, T1)):
        mc = {k: v for k, v in logs.items() if k.startswith("microcoder/")}
        assert all(type(v) is float for v in mc.values()), mc
        assert mc["microcoder/temperature"] == temp and mc["microcoder/temperature_stage"] == stage
        assert mc["microcoder/temperature_next"] == nxt
        assert 0.0 < mc["microcoder/diversity/distinct4"] <= 1.0
        for key in ("microcoder/eligible_frac", "microcoder/repeat_frac", "microcoder/verdict/correct",
                    "microcoder/diversity/group_pooled", "microcoder/diversity/pairwise"):
            assert key in mc
        assert "policy_loss" in logs and "rollout/reward_mean" in logs  # OpenRLHF's own status is kept
    # the diversity is the step's four responses as one group (here: what reached the replay buffer)
    from microcoder_ext.core.diversity import diversity_metrics

    for step in (FIRST_STEP, SWITCH):
        responses = [r["sequences"][1:][r["action_mask"]] for r in fitted.trainer.trained[step]]
        want = diversity_metrics(responses, [0] * N).metrics()
        for key in ("microcoder/diversity/distinct4", "microcoder/diversity/group_pooled",
                    "microcoder/diversity/pairwise"):
            assert logged[step + 1][key] == pytest.approx(want[key])
    # the sum prompt: 3 of 4 truncated, 1 masked; the multiply prompt: 2 truncated, both masked (shuffled order)
    assert {(logged[s]["microcoder/truncated_frac"], logged[s]["microcoder/masked_frac"]) for s in logged} == \
        {(0.75, 0.25), (0.5, 0.5)}


@pytest.mark.slow
def test_checkpoint_carries_and_restores_the_controller(fitted, model_groups, cli, files, reward_files):
    import ray

    path = Path(files.ckpt) / "_actor" / f"global_step{SWITCH}" / "client_states.pt"
    saved = torch.load(path, weights_only=True)  # written by the worker's real save_checkpoint
    assert saved["global_step"] == SWITCH
    mc = saved[mc_trainer.CLIENT_STATE_KEY]
    assert mc["preset"] == "microcoder" and mc["temperature"]["last_step"] == FIRST_STEP
    assert not (Path(files.ckpt) / "_actor" / f"global_step{SWITCH + 1}").exists()

    ray.get(model_groups.policy.async_run_method("__ray_call__", _w_load_checkpoint))
    args = trainer_args(cli, files, reward_files["reward_fns"], "--ckpt.load_enable")
    resumed = CPUTrainer(args.actor.model_name_or_path, DeepspeedStrategy(args=args), model_groups.policy, None,
                         None, None, None, temperature=T0)
    assert resumed.generate_kwargs["temperature"] == T0
    states = resumed.init_checkpoint_states()  # what fit() calls first
    assert states["global_step"] == SWITCH
    assert resumed.mc_temperature.state_dict() == mc["temperature"]
    assert resumed.generate_kwargs["temperature"] == T1  # the first resumed step, 20, is in the second stage
    assert resumed._mc_model_temperature is None  # so its first train_step sets the actors' temperature


@pytest.mark.slow
def test_resume_without_our_state_warns(fitted, model_groups, cli, files, reward_files, caplog):
    import ray

    ray.get(model_groups.policy.async_run_method("__ray_call__", _w_load_checkpoint, mc_trainer.CLIENT_STATE_KEY))
    args = trainer_args(cli, files, reward_files["reward_fns"], "--ckpt.load_enable")
    resumed = CPUTrainer(args.actor.model_name_or_path, DeepspeedStrategy(args=args), model_groups.policy, None,
                         None, None, None, temperature=T0)
    mc_trainer.logger.addHandler(caplog.handler)  # OpenRLHF's loggers do not propagate
    try:
        with caplog.at_level(logging.WARNING):
            resumed.init_checkpoint_states()
    finally:
        mc_trainer.logger.removeHandler(caplog.handler)
    assert "without client_states['microcoder']" in caplog.text
    assert resumed.mc_temperature.state_dict()["last_step"] is None  # from its configuration
    assert resumed.generate_kwargs["temperature"] == T1


@pytest.mark.slow
def test_train_step_refuses_samples_of_another_temperature(fitted):
    trainer = fitted.trainer
    saved = trainer.generate_kwargs["temperature"]
    trainer.generate_kwargs["temperature"] = T0  # as if step 21's samples were drawn at the first stage's T
    try:
        with pytest.raises(RuntimeError, match=r"step 21's samples were drawn at .*=0.6 .* step is 1.2"):
            trainer.train_step([], SWITCH + 1)
    finally:
        trainer.generate_kwargs["temperature"] = saved


# ------------------------------------------------------------------------------------ refusals (no Ray needed)
def _init(args, **generate_kwargs):
    return CPUTrainer(args.actor.model_name_or_path, DeepspeedStrategy(args=args), None, None, None, None, None,
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


def _w_trainer_state(trainer_self):
    return dict(cls=type(trainer_self).__qualname__, preset=trainer_self.mc.preset,
                temperature=trainer_self.generate_kwargs["temperature"],
                hook=type(trainer_self.experience_maker.compute_advantages_and_returns).__name__)


@pytest.mark.slow
def test_the_remote_trainer_starts_as_openrlhf_starts_it(model_groups, cli, files, reward_files):
    """``MicrocoderPPOTrainerRemote.remote(...)`` with the arguments OpenRLHF's ``train()`` passes: the class is
    unpickled in a fresh Ray worker (module import + version guard there), ``__init__`` runs in the actor."""
    import ray

    args = trainer_args(cli, files, reward_files["reward_fns"])
    t = time.time()
    handle = mc_trainer.MicrocoderPPOTrainerRemote.remote(
        args.actor.model_name_or_path, DeepspeedStrategy(args=args), model_groups.policy, None, None, None, None,
        do_sample=True, max_len=args.data.max_len, max_new_tokens=args.rollout.max_new_tokens,
        temperature=args.rollout.temperature, top_p=args.rollout.top_p)
    try:
        assert ray.get(handle.get_max_steps.remote()) == 2  # 2 prompts x 4 samples / train batch 4
        assert ray.get(handle.__ray_call__.remote(_w_trainer_state)) == dict(
            cls="MicrocoderPPOTrainer", preset="microcoder", temperature=T0, hook="TruncationMaskHook")
    finally:
        ray.kill(handle)
    print(f"remote trainer: {time.time() - t:.1f}s")
