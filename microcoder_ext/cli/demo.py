"""``microcoder demo``: the main job on this CPU, verl's own ``main_ppo`` with ``+recipe=microcoder`` and verl's vLLM
rollout, training a tiny Qwen3 model until its held-back pass rate is up (``make demo``).

Prints one line per step from verl's metrics and writes ``report.json`` and ``curves.png`` into ``--output-dir``.
Needs verl (and vLLM's CPU build); run it in the verl test venv: ``bash compat/in_venv.sh verl microcoder demo``.
Exit status: 0 the run completed, 1 it failed (verl's own error is printed), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from microcoder_ext.demo.run import RECIPES, DemoSettings

    d = DemoSettings()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = __doc__
    parser.add_argument("--recipe", default=d.recipe, choices=RECIPES, help="+recipe=NAME (default %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed, help="warm start, data order and sampling seed "
                                                                 "(default %(default)s)")
    parser.add_argument("--steps", type=int, default=d.steps, help="RL steps (default %(default)s)")
    parser.add_argument("--test-freq", type=int, default=d.test_freq,
                        help="verl validation on the held-back problems every N steps (default %(default)s)")
    parser.add_argument("--warm-steps", type=int, default=d.warm_steps,
                        help="supervised warm-start steps on the mixed demonstrations (default %(default)s)")
    parser.add_argument("--lr", type=float, default=d.lr, help="the actor's learning rate (default %(default)s)")
    parser.add_argument("--threads", type=int, default=d.threads,
                        help="torch threads per process (default %(default)s: both cores of a laptop-class machine)")
    parser.add_argument("--output-dir", default=d.output_dir, help="report.json, curves.png, the run's files "
                                                                   "(default %(default)s)")
    parser.add_argument("--timeout", type=float, default=d.timeout,
                        help="seconds before main_ppo is killed (default %(default)s; 0: never)")
    parser.add_argument("-v", "--verbose", action="store_true", help="stream verl's output")


def run(args: argparse.Namespace) -> int:
    from microcoder_ext.demo.run import DemoSettings
    from microcoder_ext.demo.run import run as run_demo
    from microcoder_ext.smoke.runner import SmokeUsageError

    try:
        settings = DemoSettings(recipe=args.recipe, seed=args.seed, steps=args.steps, test_freq=args.test_freq,
                                warm_steps=args.warm_steps, lr=args.lr, threads=args.threads, output_dir=args.output_dir,
                                timeout=args.timeout or None, verbose=args.verbose)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = run_demo(settings, say=lambda line: print(line, flush=True))
    except SmokeUsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    s = report.summary
    print()
    if "heldout_change" in s:
        print(f"held-back pass rate: {s['heldout_before']:.3f} before RL -> {s['heldout_after']:.3f} after "
              f"{s['heldout_after_step']} steps ({s['heldout_change']:+.3f})")
    if "reward_change" in s:
        print(f"training reward: {s['reward_first']:.3f} (first {s['reward_window']} steps) -> {s['reward_last']:.3f} "
              f"(last {s['reward_window']}) ({s['reward_change']:+.3f})")
    print(f"report: {settings.output_dir}/report.json, curves: {settings.output_dir}/curves.png "
          f"({report.wall_s:.0f} s)")
    if not report.ok:
        print(f"\nmicrocoder demo: FAILED\n{report.error or ''}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
