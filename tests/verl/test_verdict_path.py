"""The verdict's whole path through real verl 0.9.1 code, from our code reward to the mask.

Four real responses to one real problem (``_verdict_path_data.py``) are scored by our reward
(``reward.custom_reward_function.path=pkg://microcoder_ext.reward``) inside verl's real reward loop workers
(Ray actors created by verl's ``RewardLoopManager``) and written to a real local TransferQueue by verl's own
code; then the ``microcoder_sync`` trainer masks them in ``_compute_advantage``:

* default path (reward computed during rollout): ``AgentLoopWorkerTQ._agent_loop_postprocess`` ->
  ``AgentLoopWorker._compute_score`` -> reward loop worker -> TQ ``extra_fields[i]["reward_extra_info"]``;
* colocated reward model (``reward.reward_model.enable=True``): the agent loop stores no reward, then
  ``PPOTrainer._compute_reward_colocate`` scores the sampled batch and writes each extra-info key as a top-level
  TQ field (``verdict``), then ``upsample_batch_to_divisible_size`` adds balancing padding rows.

Replaced, and nothing else: the tokenizer (a tiny BPE trained in-process, saved with a tiny model config so that
verl's ``HFModelConfig`` loads it), the Ray hop to the agent-loop worker (its class runs in the test process) and
the LLM server (responses are given, cut at ``rollout.response_length`` as ``SingleTurnAgentLoop`` cuts them). On
the colocated path the reward manager is a subclass of verl's naive manager that recovers the ground truth from the
prompt (verl 0.9.1 does not pass it there: the test shows the naive manager failing with ``KeyError: 'data_source'``),
and the reward model server itself (a GPU vLLM server) is not started.
"""

import asyncio
import importlib.util
import json
import pathlib
import time
import types
import uuid

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from microcoder_ext.reward.leetcode import ground_truth_from_row
from microcoder_ext.verl.advantage_mask import reward_infos_from_rows

pytestmark = pytest.mark.verl

HERE = pathlib.Path(__file__).resolve().parent
DATA_FILE = HERE / "_verdict_path_data.py"
L = 48  # rollout.response_length (tokens of the test tokenizer)
M = 4  # microcoder.mask.m


def _load_data():
    spec = importlib.util.spec_from_file_location("microcoder_test_verdict_path_data", DATA_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DATA = _load_data()
EXPECTED_VERDICTS = [verdict for _, _, _, verdict, _ in DATA.RESPONSES]
EXPECTED_MASKED = [masked for *_, masked in DATA.RESPONSES]


# --------------------------------------------------------------------------------------------- precedence (no Ray)


def test_verdict_precedence_top_level_field_then_extra_fields():
    extra = [
        {"reward_extra_info": {"verdict": "wrong_answer", "score": 0.0}},  # both: the top-level field wins
        {"reward_extra_info": {"verdict": "no_answer", "score": 0.0}},  # top-level null -> extra_fields
        {},  # colocated path: extra_fields carry no reward info
        None,  # no extra_fields at all, no top-level value -> missing
        {"reward_extra_info": {"score": 1.0}},  # reward without a verdict, nothing top-level -> missing
    ]
    top = [np.str_("correct"), None, b"timeout", None, None]
    infos = reward_infos_from_rows(extra, top, "verdict")
    assert [(i or {}).get("verdict") for i in infos] == ["correct", "no_answer", "timeout", None, None]
    assert type(infos[0]["verdict"]) is str and infos[0]["score"] == 0.0  # other keys kept, numpy -> str
    assert extra[0]["reward_extra_info"]["verdict"] == "wrong_answer"  # inputs are not modified
    # no row has the top-level field (TransferQueue then leaves the field out): extra_fields only
    assert [(i or {}).get("verdict") for i in reward_infos_from_rows(extra, None, "verdict")] == [
        "wrong_answer", "no_answer", None, None, None]
    with pytest.raises(ValueError):
        reward_infos_from_rows(extra, top[:2], "verdict")


def test_embedded_problem_is_the_converted_leetcode_row():
    gt, converted = json.loads(DATA.GROUND_TRUTH), ground_truth_from_row(DATA.LEETCODE_ROW)
    for key in ("fn_name", "inputs", "outputs"):
        assert gt[key] == converted[key], key
    assert gt["setup_code"] == DATA.LEETCODE_ROW["prompt"]


# ----------------------------------------------------------------------------------------------- through real verl


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Tokenizer files + a tiny model config, loadable by verl's ``HFModelConfig`` / ``hf_tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()  # byte-level: any text round-trips
    bpe.train_from_iterator(DATA.TOKENIZER_CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<pad>")
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    path = tmp_path_factory.mktemp("tiny-model")
    tok.save_pretrained(path)
    # a model type whose AutoTokenizer class is the generic TokenizersBackend, so verl loads exactly this BPE
    (path / "config.json").write_text(json.dumps({
        "architectures": ["GraniteForCausalLM"], "model_type": "granite", "vocab_size": len(tok), "hidden_size": 16,
        "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1,
        "max_position_embeddings": 512}))
    return str(path)


def _config(model_dir, *overrides):
    with initialize_config_module(version_base=None, config_module="verl.trainer.config"):
        return compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.n=4",
            f"actor_rollout_ref.rollout.response_length={L}",
            "algorithm.adv_estimator=grpo",
            "reward.custom_reward_function.path=pkg://microcoder_ext.reward",
            "reward.num_workers=1",
            "trainer.v1.trainer_mode=microcoder_sync",
            "++microcoder.mask.rho=1.0",
            f"++microcoder.mask.m={M}",
            *overrides,
        ])


class _RewardLoop:
    """verl's real ``RewardLoopManager`` (Ray reward loop workers); its named actors are killed on exit."""

    def __init__(self, config):
        from verl.experimental.reward_loop.reward_loop import RewardLoopManager

        self.manager = RewardLoopManager(config)

    def __enter__(self):
        return self.manager

    def __exit__(self, *exc):
        import ray

        names = [f"reward_loop_worker_{i}" for i in range(len(self.manager.reward_loop_workers))]
        for handle in self.manager.reward_loop_workers:
            ray.kill(handle, no_restart=True)
        for name in names:  # the next RewardLoopManager reuses these actor names
            for _ in range(200):
                try:
                    ray.get_actor(name)
                except ValueError:
                    break
                time.sleep(0.05)


class _CaptureRewardInput:
    """Stands in for the reward loop manager once, to keep what ``_compute_reward_colocate`` sends it."""

    class Captured(Exception):
        pass

    def compute_rm_score(self, data):
        self.data = data
        raise self.Captured


def _agent_loop_worker(config, reward_handles):
    """verl's ``AgentLoopWorkerTQ``, constructed for real, in this process (the class under ``@ray.remote``)."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    cls = AgentLoopWorkerTQ.__ray_metadata__.modified_class.__ray_actor_class__
    assert cls.__qualname__ == "AgentLoopWorkerTQ" and cls.__module__ == "verl.trainer.ppo.v1.agent_loop_tq"
    return cls(config, llm_client=None, reward_loop_worker_handles=reward_handles)


def _roll_out(worker):
    """One prompt, one session per response, through ``_agent_loop_postprocess`` into TQ partition ``train``.

    Returns the ``KVBatchMeta`` of the written trajectories with the tags verl wrote."""
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    tok = worker.tokenizer
    uid = f"verdict-{uuid.uuid4().hex[:8]}"
    # what _run_prompt hands _run_agent_loop (the dataset row + uid, global_steps), minus agent_name
    prompt = dict(DATA.PROMPT_ROW, uid=uid, global_steps=1)
    prompt_ids = tok.encode(tok.apply_chat_template(prompt["raw_prompt"], add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)

    outputs = []
    for name, text, stopped, _, _ in DATA.RESPONSES:
        ids = tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if stopped else [])
        assert tok.decode(ids, skip_special_tokens=True) == text
        # preconditions: what the test means by "truncated" / "finished"
        assert (len(ids) > L) != stopped, (name, len(ids))
        ids = ids[:L]  # SingleTurnAgentLoop: response_ids[: self.response_length]
        outputs.append(AgentLoopOutput(prompt_ids=prompt_ids, response_ids=ids, response_mask=[1] * len(ids),
                                       num_turns=2, metrics=AgentLoopMetrics()))

    async def run_sessions():  # as _run_prompt runs them: concurrently, session_id = i
        await asyncio.gather(*(worker._agent_loop_postprocess(out, False, session_id=i, **prompt)
                               for i, out in enumerate(outputs)))

    asyncio.run(run_sessions())
    keys = [f"{uid}_{i}_0" for i in range(len(outputs))]
    listed = tq.kv_list("train")["train"]
    return KVBatchMeta(partition_id="train", keys=keys, tags=[listed[k] for k in keys])


def _get(batch, *fields):
    import transfer_queue as tq

    return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=list(fields))


def _advantages(batch):
    return [row.clone() for row in _get(batch, "advantages")["advantages"].unbind()]


def _trainers(config_overrides, model_dir):
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    mc = get_trainer_cls("microcoder_sync")(_config(model_dir, *config_overrides))
    plain = get_trainer_cls("sync")(_config(model_dir, *config_overrides, "trainer.v1.trainer_mode=sync"))
    for trainer in (mc, plain):
        trainer.global_steps = 1
    return mc, plain


def _check_mask(mc, plain, batch, n_real):
    """verl's plain GRPO first (reference), then microcoder_sync on the same rows."""
    plain._compute_advantage(batch, {})
    reference = _advantages(batch)
    metrics = {}
    mc._compute_advantage(batch, metrics)
    advantages = _advantages(batch)
    for i, masked in enumerate(EXPECTED_MASKED):
        name = DATA.RESPONSES[i][0]
        assert torch.any(reference[i] != 0), name  # GRPO gave every real response a non-zero advantage
        if masked:
            assert torch.all(advantages[i] == 0), name
        else:
            torch.testing.assert_close(advantages[i], reference[i], rtol=0, atol=0, msg=name)
    for i in range(len(EXPECTED_MASKED), len(batch.keys)):  # balancing padding rows: untouched
        torch.testing.assert_close(advantages[i], reference[i], rtol=0, atol=0)
    assert metrics["microcoder/verdict_missing_frac"] == 0.0
    assert metrics["microcoder/verdict_unknown_frac"] == 0.0
    assert metrics["microcoder/truncated_frac"] == pytest.approx(3 / n_real)
    assert metrics["microcoder/repeat_frac"] == 0.0
    assert metrics["microcoder/masked_frac"] == pytest.approx(2 / n_real)
    assert metrics["microcoder/verdict/correct"] == pytest.approx(2 / n_real)
    assert metrics["microcoder/verdict/no_answer"] == pytest.approx(1 / n_real)
    return metrics


@pytest.mark.slow
def test_streaming_reward_verdicts_reach_the_mask(local_tq, model_dir):
    """Default path: reward in the agent loop, verdict in ``extra_fields[i]["reward_extra_info"]``."""
    config = _config(model_dir)
    with _RewardLoop(config) as reward_loop:
        handles = reward_loop.reward_loop_worker_handles
        assert handles  # verl streams rewards during rollout with this config
        batch = _roll_out(_agent_loop_worker(config, handles))

    rows = _get(batch, "extra_fields", "rm_scores", "responses")
    infos = [extra["reward_extra_info"] for extra in rows["extra_fields"]]
    assert [info["verdict"] for info in infos] == EXPECTED_VERDICTS, [info["detail"] for info in infos]
    assert [float(r[-1]) for r in rows["rm_scores"].unbind()] == [info["score"] for info in infos] == [1, 0, 0, 1]
    assert [t["response_len"] for t in batch.tags] == [L, L, L, int(rows["responses"][3].numel())]
    assert "verdict" not in _get(batch, "verdict").keys()  # nothing top-level on this path

    mc, plain = _trainers([], model_dir)
    _check_mask(mc, plain, batch, n_real=4)


@pytest.mark.slow
def test_colocated_reward_verdicts_reach_the_mask(local_tq, model_dir):
    """``reward.reward_model.enable=True``: verl scores after sampling and stores ``verdict`` as a top-level field."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager, RewardLoopWorker
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

    colocated = ["reward.reward_model.enable=True"]
    config = _config(model_dir, *colocated)
    # verl's own rule: a colocated reward model gives the agent loop no reward workers (rewards come later)
    assert RewardLoopManager.reward_loop_worker_handles.fget(types.SimpleNamespace(config=config)) is None
    batch = _roll_out(_agent_loop_worker(config, None))
    rows = _get(batch, "extra_fields", "rm_scores")
    assert "rm_scores" not in rows.keys() and all("reward_extra_info" not in e for e in rows["extra_fields"])

    mc, plain = _trainers(colocated, model_dir)
    mc._init_tokenizer()  # verl's own: HFModelConfig(model_dir).tokenizer
    # verl 0.9.1's default (naive) reward manager cannot score there: the colocated step hands the reward loop no
    # data_source and no ground truth (its input, captured here, goes to a RewardLoopWorker run in this process)
    capture = _CaptureRewardInput()
    mc.reward_loop_manager = capture
    with pytest.raises(_CaptureRewardInput.Captured):
        mc._compute_reward_colocate(batch, metrics={})
    assert sorted(capture.data.non_tensor_batch) == ["raw_prompt"]
    naive_worker = RewardLoopWorker(_config(model_dir))
    with pytest.raises(KeyError, match="data_source"):
        naive_worker.loop.run_until_complete(naive_worker.compute_score_batch(capture.data))
    # The reward loop _compute_reward_colocate calls: verl's RewardLoopManager with our reward function and a naive
    # manager that finds the ground truth, built with reward_model.enable=False only because enable=True would
    # launch the reward-model server (GPU); the colocated step itself does not depend on that flag.
    scoring = _config(model_dir, "reward.reward_manager.source=importlib",
                      "reward.reward_manager.name=PromptKeyedRewardManager",
                      f"reward.reward_manager.module.path={DATA_FILE}")
    with _RewardLoop(scoring) as reward_loop:
        mc.reward_loop_manager = reward_loop
        batch = mc._compute_reward_colocate(batch, metrics={})  # verl's code writes rm_scores + one field per key
    batch = upsample_batch_to_divisible_size(batch, 6, mc.tokenizer.eos_token_id)  # _balance_batch's padding
    assert len(batch.keys) == 6 and [bool(t.get("is_padding")) for t in batch.tags] == [False] * 4 + [True] * 2

    rows = _get(batch, "verdict", "score", "extra_fields")
    assert [str(v) for v in rows["verdict"]][:4] == EXPECTED_VERDICTS
    assert [float(s) for s in rows["score"]][:4] == [1, 0, 0, 1]
    assert all("reward_extra_info" not in e for e in rows["extra_fields"])  # the verdict is only top-level

    metrics = _check_mask(mc, plain, batch, n_real=4)
    assert metrics["microcoder/verdict/wrong_answer"] == pytest.approx(1 / 4)
