#!/usr/bin/env bash
# Launch one of the paper's verl runs (MicroCoder-GRPO or a baseline) on H100 nodes.
#
#   ALGO=microcoder MODEL=qwen3_4b_instruct TRAIN=train.parquet VAL=val.parquet bash verl_recipes/train.sh [OVERRIDES...]
#
# ALGO   microcoder | microcoder_mask_only | dapo_baseline | grpo_baseline   (Hydra recipe, +recipe=ALGO)
# MODEL  qwen3_1.7b | qwen3_4b_instruct | ds_8b                               (docs/paper.md#training-settings)
# NNODES nodes with 8 GPUs each (default 1); on SLURM use verl_recipes/slurm.sbatch. Multi-node: `ray start --head` on node 0 and
#        `ray start --address=HEAD:6379` on the others first, then run this on node 0 (verl joins that cluster).
# DRY_RUN=1 composes and validates the config (`microcoder recipe show`) instead of training: works on any CPU machine.
# SMOKE=1 runs 3 real main_ppo steps of exactly this launch on the local CPU (`microcoder smoke verl`): a tiny model of
#        the same family, the first rows of TRAIN/VAL, every GPU-only piece swapped for the CPU backend (printed).
#        SMOKE_ARGS: options of `microcoder smoke` (e.g. "--steps 2 --json smoke.json").
#
# Data: verl parquet rows with `prompt` (chat messages), `data_source` and `reward_model.ground_truth` = the tests as
# JSON ({"inputs": [...], "outputs": [...], "fn_name"?: str}), as read by microcoder_ext.reward.compute_score.
# Batch sizes follow the paper (train_batch_size 64; ppo_mini_batch_size 32 is our assumption, docs/paper.md#training-settings);
# rollout.n=8, lr 1e-6 and the parallelism are our choices where the paper is silent.
set -euo pipefail

ALGO=${ALGO:-microcoder}
MODEL=${MODEL:-qwen3_4b_instruct}
NNODES=${NNODES:-1}
GPUS=${GPUS_PER_NODE:-8}
TRAIN=${TRAIN:-$HOME/data/microcoder/train.parquet}
VAL=${VAL:-$HOME/data/microcoder/val.parquet}

case "$MODEL" in
  qwen3_1.7b)        MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-1.7B};                      RESP=4096;  TP=1 ;;
  qwen3_4b_instruct) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507};          RESP=4096;  TP=1 ;;
  ds_8b)             MODEL_PATH=${MODEL_PATH:-deepseek-ai/DeepSeek-R1-0528-Qwen3-8B}; RESP=16384; TP=2 ;;
  *) echo "unknown MODEL '$MODEL' (qwen3_1.7b | qwen3_4b_instruct | ds_8b)" >&2; exit 2 ;;
esac
PROMPT=2048

args=(
  "+recipe=$ALGO"
  "data.train_files=$TRAIN" "data.val_files=$VAL"
  data.train_batch_size=64 "data.max_prompt_length=$PROMPT" "data.max_response_length=$RESP"
  data.filter_overlong_prompts=true data.truncation=error
  "actor_rollout_ref.model.path=$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=true actor_rollout_ref.model.enable_gradient_checkpointing=true
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=32
  actor_rollout_ref.actor.use_dynamic_bsz=true
  "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(( (PROMPT + RESP) * 2 ))"
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8
  "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP"
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  "actor_rollout_ref.rollout.max_model_len=$(( PROMPT + RESP ))"
  trainer.logger='[console,wandb]' trainer.project_name=microcoder "trainer.experiment_name=${ALGO}_${MODEL}"
  "trainer.nnodes=$NNODES" "trainer.n_gpus_per_node=$GPUS"
  trainer.total_training_steps=600 trainer.save_freq=50 trainer.test_freq=20
)

if [ "${SMOKE:-0}" = 1 ]; then
  # shellcheck disable=SC2086  # SMOKE_ARGS is a list of options
  exec microcoder smoke ${SMOKE_ARGS:-} verl "${args[@]}" "$@"
fi
if [ "${DRY_RUN:-0}" = 1 ]; then
  # same composition as main_ppo, plus verl's own config validation and our checks; exit 1 on failure
  exec microcoder recipe show "$ALGO" "${args[@]:1}" "$@"
fi
exec python3 -m verl.trainer.main_ppo "${args[@]}" "$@"
