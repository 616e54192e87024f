#!/usr/bin/env bash
# Launch one of the paper's runs (MicroCoder-GRPO or a baseline) with OpenRLHF 0.11.2 on H100 nodes: the interface and
# values of verl_recipes/train.sh, run by OpenRLHF's own train_ppo_ray through `python3 -m microcoder_ext.openrlhf.train`.
#
#   ALGO=microcoder MODEL=qwen3_4b_instruct TRAIN=train.jsonl VAL=val.jsonl bash openrlhf_recipes/train.sh [FLAGS...]
#
# ALGO   microcoder | mask_only | dapo_baseline | grpo_baseline   (--mc.preset ALGO; microcoder_mask_only = mask_only)
# MODEL  qwen3_1.7b | qwen3_4b_instruct | ds_8b                    (docs/paper.md#training-settings)
# NNODES nodes with GPUS_PER_NODE GPUs each (default 1 x 8); on SLURM use openrlhf_recipes/slurm.sbatch. Multi-node: `ray start --head` on node 0 and
#        `ray start --address=HEAD:6379` on the others first, then run this on node 0 (OpenRLHF's ray.init() joins that
#        cluster). microcoder-ext must be installed on every node (the reward file and the trainer are loaded there).
# FLAGS  extra train_ppo_ray or --mc.* flags, after the recipe's (the last one wins); a flag that contradicts the
#        preset is refused unless --mc.allow_override (`python3 -m microcoder_ext.openrlhf.train --help`).
# DRY_RUN=1 adds --mc.dry_run: OpenRLHF parses and validates everything and the effective settings are printed; no Ray,
#        GPU, model or data needed (works on any CPU machine with openrlhf installed).
# SMOKE=1 runs 3 real OpenRLHF steps of exactly this launch on the local CPU (`microcoder smoke openrlhf`): a tiny model
#        of the same family, the first rows of TRAIN/VAL, every GPU-only piece swapped for the CPU backend (printed).
#        SMOKE_ARGS: options of `microcoder smoke` (e.g. "--steps 2 --json smoke.json").
#
# Data: OpenRLHF JSONL rows with `prompt` = chat messages ([{"role": "user", "content": ...}], rendered with the model's
# chat template) and `label` = the tests as a JSON string ({"inputs": [...], "outputs": [...], "fn_name"?: str}), read by
# microcoder_ext.openrlhf.reward (the --reward.remote_url file the presets fill in). Prompts longer than 2048 tokens are
# truncated by OpenRLHF (verl's recipe filters them out: filter prompts to <= 2048 tokens beforehand).
# Citations: docs/paper.md (what the paper states); [INF] = our choice where the paper is silent (as in verl_recipes/).
set -euo pipefail

ALGO=${ALGO:-microcoder}
MODEL=${MODEL:-qwen3_4b_instruct}
NNODES=${NNODES:-1}
GPUS=${GPUS_PER_NODE:-8}
TRAIN=${TRAIN:-$HOME/data/microcoder/train.jsonl}
VAL=${VAL:-}                                                     # eval set (JSONL as TRAIN); none when empty
CKPT_DIR=${CKPT_DIR:-$HOME/ckpt/microcoder/openrlhf/${ALGO}_${MODEL}}

case "$ALGO" in
  microcoder | mask_only | dapo_baseline | grpo_baseline) PRESET=$ALGO ;;
  microcoder_mask_only) PRESET=mask_only ;;                      # verl_recipes' name for it
  *) echo "unknown ALGO '$ALGO' (microcoder | mask_only | dapo_baseline | grpo_baseline)" >&2; exit 2 ;;
esac

# model, max response length (docs/paper.md#training-settings: 4K for 1.7B/4B, 16K for DS 8B) and vLLM tensor parallelism [INF], as verl
case "$MODEL" in
  qwen3_1.7b)        MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-1.7B};                      RESP=4096;  TP=1 ;;
  qwen3_4b_instruct) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507};          RESP=4096;  TP=1 ;;
  ds_8b)             MODEL_PATH=${MODEL_PATH:-deepseek-ai/DeepSeek-R1-0528-Qwen3-8B}; RESP=16384; TP=2 ;;
  *) echo "unknown MODEL '$MODEL' (qwen3_1.7b | qwen3_4b_instruct | ds_8b)" >&2; exit 2 ;;
esac
PROMPT=2048                                                      # max prompt length [INF] (verl: data.max_prompt_length)
STEPS=600                                                        # verl: trainer.total_training_steps=600 [INF] (paper: ~460-560)
GPUS_TOTAL=$(( NNODES * GPUS ))

args=(
  --mc.preset "$PRESET"
  --actor.model_name_or_path "$MODEL_PATH"
  # data: chat prompts + JSON test labels for our reward
  --data.prompt_dataset "$TRAIN" --data.input_key prompt --data.label_key label --data.apply_chat_template
  --data.max_len $(( PROMPT + RESP ))                            # prompt + response (verl: max_model_len)
  --rollout.max_new_tokens "$RESP"                               # verl: data.max_response_length
  # OpenRLHF has no step limit: 600 steps x 64 prompts, one pass (train.num_episodes 1); a smaller set = fewer steps
  --data.max_samples $(( STEPS * 64 ))
  # batch (docs/paper.md#training-settings): 64 prompts per step x 8 samples = 512 responses. OpenRLHF counts train.batch_size in
  # samples: 256 = verl's ppo_mini_batch_size 32 prompts x 8 [INF] -> 2 optimizer steps per rollout, 1 epoch
  --rollout.batch_size 64
  --rollout.n_samples_per_prompt 8                               # group size G [INF] (verl: rollout.n=8)
  --train.batch_size 256
  --train.max_epochs 1                                           # PPO epochs [INF] (docs/paper.md#training-settings)
  # optimizer: lr 1e-6 [INF] (docs/paper.md#training-settings); constant lr, no warm-up, weight decay 0.01, betas 0.9/0.999, grad clip 1.0:
  # verl's FSDP optimizer defaults, which the verl recipe trains with [INF]
  --actor.adam.lr 1e-6 --actor.lr_scheduler constant --actor.lr_warmup_ratio 0
  --actor.adam.weight_decay 0.01 --actor.adam.betas 0.9 0.999 --actor.max_norm 1.0
  # parallelism [INF]: actor (and the reference model of grpo_baseline) on every GPU, one vLLM engine per TP GPUs, all
  # colocated with vLLM/DeepSpeed sleep (verl: hybrid engine, gpu_memory_utilization 0.6)
  --actor.num_nodes "$NNODES" --actor.num_gpus_per_node "$GPUS"
  --ref.num_nodes "$NNODES" --ref.num_gpus_per_node "$GPUS"
  --vllm.num_engines $(( GPUS_TOTAL / TP )) --vllm.tensor_parallel_size "$TP" --vllm.gpu_memory_utilization 0.6
  --train.colocate_all --vllm.enable_sleep --ds.enable_sleep
  --ds.zero_stage 3 --ds.param_dtype bf16                        # [INF] (verl: FSDP, bf16)
  --actor.gradient_checkpointing_enable                          # verl: enable_gradient_checkpointing=true
  --ds.packing_samples                                           # verl: use_remove_padding=true
  --train.dynamic_batch_enable                                   # verl: use_dynamic_bsz=true, same token budget
  --train.max_tokens_per_gpu $(( (PROMPT + RESP) * 2 )) --rollout.max_tokens_per_gpu $(( (PROMPT + RESP) * 2 ))
  # checkpoints and logs (verl: save_freq=50)
  --ckpt.save_steps 50 --ckpt.path "$CKPT_DIR/checkpoints" --ckpt.output_dir "$CKPT_DIR"
  --logger.tensorboard_dir "$CKPT_DIR/tensorboard"
)
if [ -n "$VAL" ]; then
  # verl: test_freq=20; 4 samples per problem, pass@1 = mean (docs/paper.md#evaluation-protocol); eval temperature [NS]: OpenRLHF's 0.6
  args+=(--eval.dataset "$VAL" --eval.steps 20 --eval.n_samples_per_prompt 4)
fi
if [ -n "${WANDB_API_KEY:-}" ]; then
  args+=(--logger.wandb.key "$WANDB_API_KEY" --logger.wandb.project microcoder
         --logger.wandb.run_name "openrlhf_${ALGO}_${MODEL}")
fi
if [ "$PRESET" = mask_only ]; then
  # mask_only leaves estimator and reward to the command line; the paper's data needs our code reward, and the mask
  # assumes a group estimator: GRPO's group_norm [INF] (override either with FLAGS)
  args+=(--reward.remote_url "$(python3 -c 'import microcoder_ext.openrlhf.launcher as l; print(l.reward_file())')"
         --algo.advantage.estimator group_norm)
fi
if [ "${SMOKE:-0}" = 1 ]; then
  # shellcheck disable=SC2086  # SMOKE_ARGS is a list of options
  exec microcoder smoke ${SMOKE_ARGS:-} openrlhf "${args[@]}" "$@"
fi
if [ "${DRY_RUN:-0}" = 1 ]; then
  args+=(--mc.dry_run)
fi
exec python3 -m microcoder_ext.openrlhf.train "${args[@]}" "$@"
