"""Per-step temperature in ``microcoder_sync``, through verl 0.9.1's real step code on a real local TransferQueue.

One training step runs as verl runs it, with the GPU workers replaced by recorders:

1. the trainer's real ``on_step_begin`` and ``_next_train_batch`` (dataloader: a list of prompt dicts);
2. verl's real ``AgentLoopWorkerTQ.generate_sequences`` on that batch, with a *static* copy of the config taken at
   "worker start" (as the Ray actor holds it); its ``_run_prompt`` records the prompt kwargs and sampling params,
   and our ``microcoder_single_turn`` loop's ``run`` turns them into the params it hands to verl's
   ``SingleTurnAgentLoop.run`` (recorded there instead of calling an LLM server);
3. response rows written to TransferQueue with the fields ``AgentLoopWorkerTQ._agent_loop_postprocess`` writes
   (``field.update(kwargs)``: the prompt's fields, incl. the step temperature);
4. verl's real ``_step_once`` (balance, old log-prob, ref log-prob, advantage, actor update) with a recording
   actor worker group: every ``KVBatchMeta.extra_info`` verl's code builds is captured.
"""

import copy
import json
import uuid

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from host_load import hang_guard

pytestmark = [pytest.mark.verl, pytest.mark.slow]

import transfer_queue as tq  # noqa: E402

from microcoder_ext.verl.temperature import AGENT_LOOP_NAME, STATE_FILE, TEMPERATURE_FIELD  # noqa: E402

N = 4  # rollout.n
PROMPTS = 3
STAGED = ["microcoder.temperature.mode=staged", "microcoder.temperature.stages=[[0,0.6],[20,1.0]]"]


def _config(*overrides, tmp_path=None):
    with initialize_config_module(version_base=None, config_module="verl.trainer.config"):
        cfg = compose(
            "ppo_trainer",
            overrides=[
                "+recipe=microcoder",
                f"actor_rollout_ref.rollout.n={N}",
                "actor_rollout_ref.rollout.response_length=8",
                f"data.train_batch_size={PROMPTS}",
                "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                "actor_rollout_ref.actor.use_kl_loss=true",  # a reference model: one more log-prob call to check
                "microcoder.mask.rho=0.0",
                f"trainer.default_local_dir={tmp_path or '/nonexistent'}",
                *overrides,
            ],
        )
    return cfg


def _trainer(*overrides, tmp_path=None):
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    return get_trainer_cls("microcoder_sync")(_config(*overrides, tmp_path=tmp_path))


class RecordingWG:
    """The actor worker group: records the extra_info of every call, writes what verl then reads from TQ."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self._dispatch_info = {"actor": [0]}
        self.saved, self.loaded = [], []

    def compute_log_prob(self, batch):
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        self.calls.append(("compute_log_prob", copy.deepcopy(dict(batch.extra_info))))
        rows = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["response_mask"])
        lengths = [int(r.numel()) for r in rows["response_mask"].unbind()]
        fields = [{"log_probs": -torch.ones(n), "entropy": torch.ones(n)} for n in lengths]
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=list_of_dict_to_tensordict(fields))
        return batch

    def update_actor(self, batch):
        self.calls.append(("update_actor", copy.deepcopy(dict(batch.extra_info))))
        return {"metrics": {"mfu": 0.0, "pg_loss": 0.0}}

    def save_checkpoint(self, local_path, *args, **kwargs):
        self.saved.append(local_path)

    def load_checkpoint(self, local_path, **kwargs):
        self.loaded.append(local_path)


class _Loader:
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def state_dict(self):
        return {"pos": 0}

    def load_state_dict(self, state):
        self.state = state


def _prompt_batch(k: int) -> dict:
    return {
        "raw_prompt": np.array([[{"role": "user", "content": f"q{k}-{i}"}] for i in range(PROMPTS)], dtype=object),
        "index": np.array([k * PROMPTS + i for i in range(PROMPTS)], dtype=object),
    }


def _agent_loop_worker(static_config):
    """verl's AgentLoopWorkerTQ (the Ray actor's class) without its constructor; _run_prompt records."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    worker = object.__new__(AgentLoopWorkerTQ.__ray_metadata__.modified_class)
    worker.config = static_config
    worker.background_tasks = set()
    worker.recorded = []

    async def _run_prompt(prompt, sampling_params, trajectory, trace=False):
        worker.recorded.append((prompt, sampling_params, trajectory))

    worker._run_prompt = _run_prompt
    return worker


async def _generate(worker, batch):
    import asyncio

    await worker.generate_sequences(batch)
    await asyncio.sleep(0)  # the fire-and-forget tasks
    while worker.background_tasks:
        await asyncio.sleep(0)


def _sampling_params_of_our_loop(monkeypatch, prompt, sampling_params, rollout_config):
    """What microcoder_single_turn hands to verl's SingleTurnAgentLoop.run for this prompt."""
    import asyncio

    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from microcoder_ext.verl.agent_loop import MicrocoderSingleTurnAgentLoop

    seen = {}

    async def fake_run(self, params, **kwargs):
        seen["params"], seen["kwargs"] = params, kwargs

    monkeypatch.setattr(SingleTurnAgentLoop, "run", fake_run)
    loop = object.__new__(MicrocoderSingleTurnAgentLoop)
    loop.rollout_config = rollout_config  # as AgentLoopBase.__init__ sets it: the worker's actor_rollout_ref.rollout
    asyncio.run(loop.run(dict(sampling_params), **prompt))
    assert TEMPERATURE_FIELD not in seen["kwargs"]
    return seen["params"]


def _run_step(mc, step, monkeypatch, static_config=None, rows_temperature=None):
    """One training step of ``mc`` at ``step`` (see the module doc); returns (sampling temperatures, metrics)."""
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    mc.global_steps = step
    mc.train_dataloader_it = iter([_prompt_batch(step)])
    mc.on_step_begin()
    batch = mc._next_train_batch()
    worker = _agent_loop_worker(static_config if static_config is not None else copy.deepcopy(mc.config))
    import asyncio

    asyncio.run(_generate(worker, batch))
    assert len(worker.recorded) == PROMPTS
    sampled = []
    keys, fields, tags = [], [], []
    pid = f"train-{uuid.uuid4().hex[:8]}"
    for p, (prompt, params, _) in enumerate(worker.recorded):
        assert prompt["agent_name"] == AGENT_LOOP_NAME
        used = _sampling_params_of_our_loop(monkeypatch, prompt, params, worker.config.actor_rollout_ref.rollout)
        sampled.append(used["temperature"])
        for s in range(N):
            tokens = [1 + p, 2, 3, 1 + p, 2, 3, 1 + p, 2][: 4 + s]  # periodic: distinct4 < 1 for the long ones
            n = len(tokens)
            field = {
                "responses": torch.tensor(tokens),
                "response_mask": torch.ones(n, dtype=torch.long),
                "rm_scores": torch.zeros(n),
                "rollout_log_probs": -torch.ones(n),
                "extra_fields": {"reward_extra_info": {"score": 0.0, "verdict": "wrong_answer"}},
            }
            kwargs = {k: v for k, v in prompt.items() if k != "raw_prompt"}  # verl: field.update(kwargs)
            if rows_temperature is not None:
                kwargs[TEMPERATURE_FIELD] = rows_temperature
            field.update(kwargs)
            field["rm_scores"][-1] = float(s % 2)
            keys.append(f"{prompt['uid']}_{s}_0")
            fields.append(field)
            tags.append({"status": "success", "response_len": n, "prompt_len": 2, "seq_len": n + 2})
    tq.kv_batch_put(keys=keys, partition_id=pid, fields=list_of_dict_to_tensordict(fields), tags=tags)
    meta = KVBatchMeta(partition_id=pid, keys=keys, tags=tags)
    mc.replay_buffer.sample = lambda **kw: (meta, {})
    metrics = {}
    mc._step_once(metrics, {}, PROMPTS)
    return sampled, metrics


def _fresh(mc):
    mc.actor_rollout_wg = RecordingWG()
    mc.ref_in_actor = True
    mc.reward_loop_manager = type("R", (), {"reward_loop_worker_handles": ["streaming"]})()  # reward done in rollout
    mc.checkpoint_manager = type("C", (), {"sleep_replicas": lambda self: None})()  # rollout replicas
    mc.curr_step_profile = False
    mc.tokenizer = type("T", (), {"eos_token_id": 0})()  # verl's balance pads with it (dp=1: no padding here)
    return mc


def test_one_temperature_for_sampling_and_every_log_prob_call(local_tq, monkeypatch):
    mc = _fresh(_trainer(*STAGED))
    static = copy.deepcopy(mc.config)  # the agent-loop workers' copy, taken when they start (T_0)
    assert static.actor_rollout_ref.rollout.temperature == 0.6
    sampled, metrics = _run_step(mc, 20, monkeypatch, static_config=static)
    # sampling: the step temperature although the workers' own config still says 0.6
    assert sampled == [1.0] * PROMPTS
    calls = mc.actor_rollout_wg.calls
    assert [name for name, _ in calls] == ["compute_log_prob", "compute_log_prob", "update_actor"]
    assert calls[1][1].get("no_lora_adapter") is True  # the second one is the reference policy
    assert [info["temperature"] for _, info in calls] == [1.0, 1.0, 1.0]
    assert mc.config.actor_rollout_ref.rollout.temperature == 1.0
    assert metrics["microcoder/temperature"] == 1.0 and metrics["microcoder/temperature_stage"] == 1.0
    assert metrics["microcoder/temperature_unverified_frac"] == 0.0
    for key in ("distinct4", "group_pooled", "pairwise"):
        assert 0.0 <= metrics[f"microcoder/diversity/{key}"] <= 1.0, key
    # verl's own live check ran on the same rows (rollout vs actor log-probs)
    assert any(k.startswith("training/rollout_probs_diff") for k in metrics), sorted(metrics)


def test_a_constant_temperature_adds_no_field_to_the_batch(local_tq, monkeypatch, caplog):
    """Mode constant: no per-row field travels with the prompts (verl stores every prompt field with each response;
    the workers' own rollout.temperature is the constant), the workers sample at it, nothing is reported unverified."""
    mc = _fresh(_trainer("microcoder.temperature.value=0.8"))
    sampled, metrics = _run_step(mc, 3, monkeypatch)
    assert sampled == [0.8] * PROMPTS
    mc.global_steps, mc.train_dataloader_it = 4, iter([_prompt_batch(4)])
    assert TEMPERATURE_FIELD not in mc._next_train_batch().keys()
    assert [info["temperature"] for _, info in mc.actor_rollout_wg.calls] == [0.8] * 3
    assert metrics["microcoder/temperature"] == 0.8
    assert metrics["microcoder/temperature_unverified_frac"] == 0.0
    assert "carry no" not in caplog.text


def test_validation_and_greedy_requests_are_untouched(local_tq, monkeypatch):
    from microcoder_ext.verl.agent_loop import apply_step_temperature

    mc = _trainer(*STAGED)
    worker = _agent_loop_worker(copy.deepcopy(mc.config))
    import asyncio

    from verl.utils import tensordict_utils as tu

    batch = tu.get_tensordict({**_prompt_batch(0), "uid": np.array(["v0", "v1", "v2"], dtype=object)})
    tu.assign_non_tensor_data(batch, "global_steps", 0)
    tu.assign_non_tensor_data(batch, "validate", True)  # verl's _validate: no _next_train_batch, no step field
    asyncio.run(_generate(worker, batch))
    prompt, params, _ = worker.recorded[0]
    val_t = mc.config.actor_rollout_ref.rollout.val_kwargs.temperature
    rollout = worker.config.actor_rollout_ref.rollout
    assert _sampling_params_of_our_loop(monkeypatch, prompt, params, rollout)["temperature"] == val_t
    greedy = {"temperature": 0, "top_p": 1.0}
    assert apply_step_temperature(greedy, 1.0) is greedy
    shared = {"temperature": 0.6}
    assert apply_step_temperature(shared, 1.0) == {"temperature": 1.0} and shared == {"temperature": 0.6}


def test_staged_schedule_changes_exactly_at_the_boundary(local_tq, monkeypatch):
    mc = _fresh(_trainer(*STAGED))
    sampled19, m19 = _run_step(mc, 19, monkeypatch)
    calls19 = [info["temperature"] for _, info in mc.actor_rollout_wg.calls]
    mc.actor_rollout_wg.calls.clear()
    sampled20, m20 = _run_step(mc, 20, monkeypatch)
    calls20 = [info["temperature"] for _, info in mc.actor_rollout_wg.calls]
    assert (sampled19, calls19, m19["microcoder/temperature"]) == ([0.6] * PROMPTS, [0.6] * 3, 0.6)
    assert m19["microcoder/temperature_next"] == 1.0
    assert (sampled20, calls20, m20["microcoder/temperature"]) == ([1.0] * PROMPTS, [1.0] * 3, 1.0)


def test_rows_sampled_at_another_temperature_are_refused(local_tq, monkeypatch):
    mc = _fresh(_trainer(*STAGED))
    with pytest.raises(RuntimeError, match=r"sampled at T=\[0.6\]"):
        _run_step(mc, 20, monkeypatch, rows_temperature=0.6)
    assert [name for name, _ in mc.actor_rollout_wg.calls] == ["compute_log_prob", "compute_log_prob"]  # no update


def test_controller_state_saved_and_restored_with_verl_checkpoints(local_tq, monkeypatch, tmp_path):
    overrides = ["microcoder.temperature.mode=auto", "microcoder.temperature.value=0.8",
                 "microcoder.temperature.target=0.99", "microcoder.temperature.window=1",
                 "microcoder.temperature.min_interval=20", "microcoder.temperature.smoothing=0.0",
                 "microcoder.temperature.candidates=[0.6,0.8,1.0]", "microcoder.temperature.max_temperature=1.0"]
    mc = _fresh(_trainer(*overrides, tmp_path=tmp_path))
    mc.train_dataloader = _Loader([])
    _, m1 = _run_step(mc, 20, monkeypatch)
    assert m1["microcoder/temperature"] == 0.8 and m1["microcoder/temperature_next"] == 1.0  # diversity < target
    mc._save_checkpoint()
    saved = json.loads((tmp_path / "global_step_20" / STATE_FILE).read_text())
    assert saved == mc.mc_temperature.state_dict()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "20"
    assert mc.actor_rollout_wg.saved == [str(tmp_path / "global_step_20" / "actor")]

    resumed = _fresh(_trainer(*overrides, "trainer.resume_mode=auto", tmp_path=tmp_path))
    assert resumed.config.actor_rollout_ref.rollout.temperature == 0.8  # before the resume: T_0
    resumed.train_dataloader = _Loader([])
    resumed._load_checkpoint()
    assert resumed.global_steps == 20
    assert resumed.mc_temperature.state_dict() == saved
    assert resumed.config.actor_rollout_ref.rollout.temperature == 1.0  # the stage decided before the save
    sampled, m2 = _run_step(resumed, 21, monkeypatch)
    assert sampled == [1.0] * PROMPTS and m2["microcoder/temperature"] == 1.0

    fresh = _fresh(_trainer(*overrides, tmp_path=tmp_path))  # same trace without the checkpoint: same decisions
    _run_step(fresh, 20, monkeypatch)
    _, f2 = _run_step(fresh, 21, monkeypatch)
    assert {k: v for k, v in f2.items() if k.startswith("microcoder/")} == {
        k: v for k, v in m2.items() if k.startswith("microcoder/")
    }


def test_async_modes_and_constant_mismatch_refused_at_construction(local_tq):
    from microcoder_ext.core.config import ConfigError
    from microcoder_ext.verl.trainer import MicrocoderSyncTrainer

    with pytest.raises(ConfigError, match="colocate_async is refused"):
        MicrocoderSyncTrainer(_config("trainer.v1.trainer_mode=colocate_async"))
    with pytest.raises(ConfigError, match="disagrees with microcoder.temperature.value=1.2"):
        _trainer("actor_rollout_ref.rollout.temperature=1.0")
    # no microcoder.temperature section (mask-only users): verl's rollout.temperature, constant, untouched
    mc = _trainer("~microcoder.temperature", "actor_rollout_ref.rollout.temperature=0.7")
    assert mc.mc_temperature.mode == "constant" and mc.mc_temperature.temperature(100) == 0.7
    assert mc.config.actor_rollout_ref.rollout.temperature == 0.7


def test_agent_loop_registered_where_verl_runs_agent_loops():
    """A fresh interpreter that imports what verl's agent-loop Ray actor imports finds microcoder_single_turn."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import verl\n"
        "assert 'microcoder_ext.verl.agent_loop' not in sys.modules\n"
        "from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "print(_agent_loop_registry['microcoder_single_turn']['_target_'])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=hang_guard(300))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "microcoder_ext.verl.agent_loop.MicrocoderSingleTurnAgentLoop"
