"""``microcoder`` command line: every subcommand lives in this package, one module per subcommand, named after it.

Each module defines ``add_arguments(parser)`` and ``run(args) -> int`` and holds only argument parsing, progress and
output formatting and exit codes; the work is done by the subpackages (``core`` <- ``reward`` / ``data`` / ``eval``
/ adapters <- ``cli``: nothing outside this package imports it). No module imports verl, OpenRLHF, TRL, Hydra or
vLLM before its command runs, so ``microcoder --help`` works without them. ``python -m microcoder_ext.cli ARGS``
runs ``microcoder ARGS`` (``accelerate launch -m microcoder_ext.cli train ...`` for several GPUs).

  microcoder recipe show NAME [OVERRIDES...]   compose verl's main_ppo config with +recipe=NAME
  microcoder recipe list                       list the shipped recipes
  microcoder eval-code FILE.jsonl              score (response, tests) records with the code reward
  microcoder temperature probe ...             output diversity at candidate temperatures
  microcoder data prepare|difficulty ...       training / evaluation data (verl parquet, OpenRLHF JSONL)
  microcoder eval ...                          pass@1 / pass@k by platform x difficulty (LiveCodeBench-style)
  microcoder plot RUN... -o OUT.png            the paper's training-curve panels from run logs
  microcoder train ...                         MicroCoder-GRPO through Hugging Face TRL (GRPOTrainer)
  microcoder doctor verl|openrlhf|trl ...      check a launch configuration against the paper's insights
  microcoder smoke verl|openrlhf|trl ...       a few real training steps of a launch on the local CPU
  microcoder demo [--recipe NAME] [--seed N]   verl main_ppo +recipe=microcoder training a tiny model on the CPU
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

#: subcommand -> (module, help). The module defines ``add_arguments(parser)`` and ``run(args) -> int``.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "recipe": ("microcoder_ext.cli.recipe", "show or list the verl Hydra recipes (+recipe=...)"),
    "eval-code": ("microcoder_ext.cli.eval_code", "score a JSONL of (response, tests) with the code reward"),
    "temperature": ("microcoder_ext.cli.temperature", "probe output diversity at candidate temperatures"),
    "data": ("microcoder_ext.cli.data", "prepare training/evaluation data (verl parquet, OpenRLHF JSONL), difficulty"),
    "eval": ("microcoder_ext.cli.eval", "pass@1 / pass@k by platform x difficulty (LiveCodeBench-style)"),
    "plot": ("microcoder_ext.cli.plot", "the paper's training-curve panels from run logs"),
    "train": ("microcoder_ext.cli.train", "MicroCoder-GRPO with Hugging Face TRL (one GPU, LoRA, or CPU)"),
    "doctor": ("microcoder_ext.cli.doctor", "check a verl / OpenRLHF / TRL launch against the paper's insights"),
    "smoke": ("microcoder_ext.cli.smoke", "run a few real training steps of a verl / OpenRLHF / TRL launch on the CPU"),
    "demo": ("microcoder_ext.cli.demo", "train a tiny model with verl main_ppo +recipe=microcoder on this CPU"),
}


def build_parser() -> argparse.ArgumentParser:
    from microcoder_ext import __version__

    parser = argparse.ArgumentParser(prog="microcoder", description="MicroCoder-GRPO for verl and OpenRLHF")
    parser.add_argument("--version", action="version", version=f"microcoder-ext {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # keep the other subcommands usable
            p.set_defaults(_unavailable=f"`microcoder {name}` is unavailable: {e}")
            continue
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the running command as Ctrl-C is, so that it stops what it started the same way (a
    framework launch is killed with its whole process group: ``microcoder_ext.smoke.runner.run_logged``)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; its exit status. SIGTERM and Ctrl-C stop what it started and exit 143 and 130."""
    args = build_parser().parse_args(argv)
    if getattr(args, "_unavailable", None):
        print(f"error: {args._unavailable}", file=sys.stderr)
        return 2
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        return int(args._run(args) or 0)
    except Terminated:
        print(f"\nmicrocoder {args.command}: stopped by SIGTERM", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print(f"\nmicrocoder {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        if in_main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)

