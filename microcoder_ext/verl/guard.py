"""Version guard of the ``microcoder_sync`` trainer: every verl internal :class:`~microcoder_ext.verl.trainer.
MicrocoderSyncTrainer` overrides or relies on, each as a :class:`microcoder_ext.internals.Check`.

:func:`check_trainer_internals` raises :class:`VerlTrainerInternalsChanged` listing every one that does not hold in
the installed verl: the trainer runs it first thing in ``__init__`` (in verl's TaskRunner, before any worker starts),
and ``microcoder doctor verl`` / ``microcoder recipe show`` report it. A changed internal then fails loudly instead
of silently mis-masking or sampling at one temperature and scoring at another.
"""

from __future__ import annotations

from microcoder_ext import internals as I
from microcoder_ext.compat import UnsupportedVersionError

BASE = "verl.trainer.ppo.v1.trainer_base:PPOTrainer"
SYNC = "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync"


class VerlTrainerInternalsChanged(UnsupportedVersionError):
    """The installed verl's v1 trainer differs from the one ``microcoder_sync`` was written against."""


#: (internal, why microcoder_sync relies on it)
CHECKS = [
    # registration and the class we extend
    I.signature("verl.trainer.ppo.v1.trainer_base:register_trainer", ["name"]),
    I.exists(SYNC),
    # the methods we override, called by verl's own step as before
    I.signature(f"{SYNC}._compute_advantage", ["self", "batch", "metrics"]),
    I.source_has(f"{BASE}._step_once", "self._compute_advantage(batch, metrics",
                 "calls _compute_advantage once per step, after the rewards and before the actor update "
                 "(where the mask rewrites the advantages)"),
    I.signature(f"{SYNC}._next_train_batch", ["self", "num_prompts"]),
    I.source_has(f"{BASE}._next_train_batch", "tu.assign_non_tensor_data(batch, \"global_steps\"",
                 "returns the prompt TensorDict of a step (the per-row temperature column is added to it)"),
    I.signature(f"{SYNC}.on_step_begin", ["self"]),
    I.source_has(f"{BASE}.fit", "self.on_step_begin()", "calls on_step_begin at the start of every step"),
    # overridden; with per-request seeds it first puts the rows in submission order (SEED_CHECKS)
    I.signature(f"{SYNC}._balance_batch", ["self", "batch", "metrics", "logging_prefix", "keep_minibatch"]),
    # the temperature hand-off: the one config key verl reads for sampling and for every log-prob pass
    I.source_has(f"{BASE}._step_once",
                 'batch.extra_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature',
                 "takes the step's log-prob temperature from actor_rollout_ref.rollout.temperature"),
    I.source_has(f"{BASE}.__init__", ["self.trainer_mode = self.config.trainer.v1.trainer_mode"],
                 "reads trainer.v1.trainer_mode once in __init__ (microcoder_sync sets it to 'sync' first)"),
    # the reward's verdict: extra-info keys stored as TransferQueue fields by the colocated reward step
    I.source_has(f"{BASE}._compute_reward_colocate", ['rm_output.meta_info.get("reward_extra_keys", [])'],
                 "writes every reward extra-info key (the verdict) as its own TransferQueue field"),
    # TransferQueue: how the step's rows are read and written back
    I.params_include("transfer_queue:kv_batch_get", ["keys", "partition_id", "select_fields"]),
    I.params_include("transfer_queue:kv_batch_put", ["keys", "partition_id", "fields"]),
    I.signature("verl.workers.utils.padding:response_to_nested", ["tensor", "response_mask"]),
    # checkpoints: the controller state is saved beside verl's and restored on resume
    I.signature(f"{SYNC}._save_checkpoint", ["self"]),
    I.signature(f"{SYNC}._load_checkpoint", ["self"]),
    I.exists("verl.utils.checkpoint.checkpoint_manager:find_latest_ckpt_path"),
]

#: what per-request seeds (``rollout.custom.microcoder_request_seeds``, :mod:`microcoder_ext.verl.request_seeds`) rely
#: on besides :data:`CHECKS`; checked only when they are asked for (the vLLM server module imports vLLM)
SEED_CHECKS = [
    I.source_has(f"{BASE}._step_once", "batch = self._balance_batch(batch",
                 "reorders the step's rows once, before the log-prob passes, the advantages and the update"),
    I.exists("transfer_queue:KVBatchMeta.reorder"),
    I.source_has(f"{BASE}._fetch_one_gen_batch", 'batch_dict["uid"] = ',
                 "gives each prompt of a drawn batch its uid (the first part of its rows' keys)"),
    I.source_has("verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess",
                 'keys.append(f"{uid}_{session_id}_{i}")', "names each row {uid}_{session_id}_{index}"),
    I.source_has("verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._run_prompt", "session_id=i",
                 "runs sample i of a prompt's group with session_id=i (the seed's sample number)"),
    I.source_has("verl.workers.rollout.vllm_rollout.vllm_async_server:vLLMHttpServer.generate",
                 "SamplingParams(max_tokens=max_tokens, **sampling_params)",
                 "passes the agent loop's sampling params, a seed included, to vLLM's SamplingParams"),
]


def trainer_internal_problems(seeded: bool = False) -> list[str]:
    """One line per internal of :data:`CHECKS` (and :data:`SEED_CHECKS` if ``seeded``) that does not hold (empty:
    all hold)."""
    return I.problems(CHECKS + (SEED_CHECKS if seeded else []))


def check_trainer_internals(seeded: bool = False) -> str:
    """The installed verl version, or :class:`VerlTrainerInternalsChanged` naming every changed internal."""
    return I.require_internals("verl", "verl", trainer_internal_problems(seeded), VerlTrainerInternalsChanged)
