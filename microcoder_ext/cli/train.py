"""``microcoder train``: MicroCoder-GRPO with Hugging Face TRL 1.15-1.16 on one GPU (full or LoRA), several GPUs
(``accelerate launch -m microcoder_ext.cli train ...``) or CPU.

The flags and how they become the run's settings: :mod:`microcoder_ext.trl.train_settings`; the dataset:
:mod:`microcoder_ext.trl.train_data`; the run: :mod:`microcoder_ext.trl.train_run`. Everything is validated before
the model is loaded; a bad value prints one ``error:`` line per problem and exits with status 2. Only the standard
library is imported at module level (``microcoder --help`` stays fast).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

PROG = "microcoder train"
EXIT_OK, EXIT_USAGE = 0, 2

DESCRIPTION = (
    "MicroCoder-GRPO through Hugging Face TRL's GRPOTrainer (microcoder_ext.trl.trainer.MicrocoderGRPOTrainer): the "
    "conditional truncation mask and the diversity-determined temperature inside TRL's step, the sandboxed code "
    "reward (microcoder_ext.trl.reward.CodeReward), no KL + clip-higher. One GPU, LoRA, CPU, or several GPUs with "
    "accelerate launch."
)

EPILOG = """\
the seed's flags (MicroCoder's train_grpo.py) and what they set:
  --use_conditional_mask B   microcoder.mask.enable = B (the conditional truncation mask)
  --diversity_driven_temp B  True: the temperature controller in mode auto (diversity-determined, starting at
                             --temperature, which must be one of --mc.temperature.candidates);
                             False: mode constant at --temperature
  --remove_kl_loss B         True: GRPOConfig.beta = 0 (no KL term, no reference model);
                             False: beta = --beta (default 0.001)
  --clipping_ratio X         the HIGH clipping ratio: GRPOConfig.epsilon_high = X, the ratio is clipped to
                             [1 - epsilon, 1 + X] (epsilon = --epsilon, default 0.2). The paper removes the KL loss
                             "with high clipping ratios"; the seed's 0.3 is read as that upper bound (our reading:
                             its train_grpo.py is not public). Presets use 0.28 (DAPO).
  Booleans take True/False (also true/false, 1/0, yes/no).

presets (--preset; the seed's flags and --mc.* change them):
  microcoder     no KL, clip 0.2/0.28, token-mean (loss dapo), conditional mask, temperature controller (default)
  mask_only      TRL's GRPOConfig defaults + the conditional mask
  dapo_baseline  no KL, clip 0.2/0.28, token-mean, constant temperature 1.2, no mask
  grpo_baseline  KL beta 0.001, clip 0.2/0.2, token-mean, constant temperature 1.2, no mask

data (--dataset):
  a .parquet file: verl rows of `microcoder data prepare` (prompt = chat messages, reward_model.ground_truth)
  a .jsonl/.jsonl.gz file: OpenRLHF lines of `microcoder data prepare` (prompt, label), our problem records
    (Problem.to_dict(): statement, tests, ...), or any rows with `prompt` and `tests`
  a directory: the output of `microcoder data prepare` (train.parquet, else train.jsonl, else problems.train.jsonl)
  otherwise a Hugging Face dataset name (datasets.load_dataset(NAME, --dataset_config, split=--dataset_split))
    with one of the row shapes above
  Prompts that are chat messages go through the tokenizer's chat template (without one, their contents are joined
  as plain text). The tests go to the reward as its ground truth ({"inputs", "outputs", "fn_name"?} or stdin/stdout).

examples:
  microcoder train --model_name_or_path Qwen/Qwen3-1.7B --dataset data/ --output_dir runs/mc \\
      --use_conditional_mask True --diversity_driven_temp True --remove_kl_loss True --clipping_ratio 0.3 \\
      --per_device_train_batch_size 4 --gradient_accumulation_steps 8 --use_lora
  several GPUs (one process each; accelerate's own flags first; both forms run the same code):
    accelerate launch --num_processes 4 -m microcoder_ext.cli train --model_name_or_path ... --dataset ...
    accelerate launch --num_processes 4 $(which microcoder) train --model_name_or_path ... --dataset ...
  (per_device_train_batch_size x gradient_accumulation_steps x processes must be a multiple of num_generations)
  CPU smoke run:
    microcoder train --model_name_or_path ./tiny --dataset data/train.parquet --use_cpu --max_steps 1 \\
      --num_generations 2 --per_device_train_batch_size 2 --gradient_accumulation_steps 1 --max_completion_length 32

output: OUTPUT_DIR with TRL's checkpoints and logs (the microcoder/* metrics among TRL's), the final model (LoRA:
the adapter) and microcoder_train.json (the effective settings and TRL's log history). exit status: 0 trained; 2 bad flags or input
(one error line per problem, nothing loaded); 1 training failed.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from microcoder_ext.trl.train_settings import add_flags

    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_flags(parser)


def _err(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        from microcoder_ext.trl.guard import check_trl

        version = check_trl()
    except ImportError as e:
        _err(f"`microcoder train` needs TRL: pip install 'microcoder-ext[trl]' ({e})")
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - the guard's message says what differs
        _err(str(e))
        return EXIT_USAGE
    from microcoder_ext.trl.train_data import load_train_dataset
    from microcoder_ext.trl.train_run import load_tokenizer, train
    from microcoder_ext.trl.train_settings import UsageError, plan, preset_value

    is_main = int(os.environ.get("RANK", "0")) == 0
    say = print if is_main else (lambda *a, **k: None)
    try:
        p = plan(args)
        tokenizer = None if args.dry_run else load_tokenizer(args.model_name_or_path,
                                                             trust_remote_code=args.trust_remote_code)
        dataset, desc = load_train_dataset(args.dataset, tokenizer, config=args.dataset_config,
                                           split=args.dataset_split, max_samples=args.max_samples,
                                           max_prompt_length=args.max_prompt_length)
    except UsageError as e:
        for line in e.errors:
            _err(line)
        return EXIT_USAGE

    settings = {"trl": version, "model": args.model_name_or_path, "dataset": desc, **p.to_dict()}
    say(f"microcoder train: preset {p.preset}; mask {'on' if p.mask else 'off'}; temperature "
        + (f"controller ({p.microcoder.temperature.mode}, start {p.grpo.get('temperature'):g})" if p.temperature_control
           else f"constant {p.grpo.get('temperature', 'TRL default')}")
        + f"; beta {p.grpo.get('beta', preset_value(p.preset, 'beta'))}; clip [1 - "
        + f"{p.grpo.get('epsilon', preset_value(p.preset, 'epsilon'))}, 1 + "
        + f"{p.grpo.get('epsilon_high', preset_value(p.preset, 'epsilon_high'))}]"
        + ("; LoRA r=%d alpha=%d" % (p.lora["r"], p.lora["lora_alpha"]) if p.lora else "")
        + f"; {'CPU' if p.grpo['use_cpu'] else 'GPU'}")
    say(f"data: {desc}")
    for note in p.notes:
        say(f"note: {note}")
    if args.dry_run:
        print(json.dumps(settings, indent=2, default=str))
        return EXIT_OK

    try:
        trainer = train(p, model=args.model_name_or_path, dataset=dataset, tokenizer=tokenizer,
                        output_dir=args.output_dir, settings=settings, is_main=is_main)
    except UsageError as e:
        for line in e.errors:
            _err(line)
        return EXIT_USAGE
    if is_main:
        say(f"done: {trainer.state.global_step} steps in {settings['wall_time_s']:.0f} s; model and "
            f"microcoder_train.json in {Path(args.output_dir)}")
    return EXIT_OK
