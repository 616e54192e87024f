"""``microcoder doctor``: check what a training launch will do against the paper's insights.

  microcoder doctor verl [RECIPE|none] [HYDRA OVERRIDES...]     verl main_ppo config (as `microcoder recipe show`)
  microcoder doctor openrlhf [train_ppo_ray FLAGS, --mc.*...]  OpenRLHF launch flags
  microcoder doctor trl [microcoder train FLAGS...]            `microcoder train` (TRL) flags

Options (anywhere on the line): ``--strict`` (warnings fail), ``--json`` (findings + plan as JSON on stdout),
``-h/--help``. Rules, severities and the insight behind each: :mod:`microcoder_ext.core.doctor`.

Exit status: 0 clean (infos allowed), 1 warnings with ``--strict``, 2 errors. A usage error (unknown framework
or recipe, an override Hydra rejects, an adapter that is not installed) also exits 2, with one ``error:`` line on
stderr and nothing on stdout: with ``--json`` a CI job tells the two apart by whether stdout parses.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

EXIT_USAGE = 2

#: framework -> (adapter module, function taking the remaining argv and returning a TrainingPlan)
ADAPTERS = {
    "verl": ("microcoder_ext.verl.doctor", "plan_from_argv"),
    "openrlhf": ("microcoder_ext.openrlhf.doctor", "plan_from_argv"),
    "trl": ("microcoder_ext.trl.doctor", "plan_from_argv"),
}
OWN_FLAGS = ("--strict", "--json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check a training configuration against the MicroCoder-GRPO paper's insights (temperature, KL/clip, "
        "truncation mask, response length, batch sizes, reward verdicts, group size). verl: [RECIPE|none] and Hydra "
        "overrides, composed like `microcoder recipe show`; openrlhf: train_ppo_ray flags incl. --mc.*; trl: "
        "`microcoder train` flags. Exit status: 0 clean (infos allowed), 1 warnings with --strict, 2 errors or a "
        "usage error (then stdout is empty)."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  microcoder doctor verl microcoder data.train_batch_size=64 actor_rollout_ref.rollout.n=8\n"
        "  microcoder doctor verl none +recipe=microcoder data.max_response_length=2048 --strict\n"
        "  microcoder doctor openrlhf --mc.preset microcoder --rollout.n_samples_per_prompt 8 --mc.mask.rho 0.2\n"
        "  microcoder doctor trl --model_name_or_path Qwen/Qwen3-1.7B --dataset data/ --json"
    )
    parser.add_argument("framework", choices=tuple(ADAPTERS), help="what the configuration launches")
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="ARGS",
        help="verl: [RECIPE|none] [OVERRIDES...]; openrlhf / trl: the launch flags",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when there are warnings")
    parser.add_argument("--json", action="store_true", help="print {plan, findings, exit_status} as JSON")
    parser.set_defaults(_doctor_parser=parser)


def _split_own(argv: list[str]) -> tuple[list[str], set[str]]:
    own = {a for a in argv if a in OWN_FLAGS or a in ("-h", "--help")}
    return [a for a in argv if a not in own], own


class _UsageError(Exception):
    pass


def _adapter(framework: str):
    module, fn = ADAPTERS[framework]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise _UsageError(f"`microcoder doctor {framework}` is unavailable: cannot import {module} ({e})") from e
    if not hasattr(mod, fn):
        raise _UsageError(f"`microcoder doctor {framework}` is unavailable: {module} has no {fn}()")
    return getattr(mod, fn)


def run(args: argparse.Namespace) -> int:
    from microcoder_ext.core.doctor import diagnose, exit_status, format_findings

    argv, own = _split_own(list(args.argv))
    if own & {"-h", "--help"}:
        args._doctor_parser.print_help()
        return 0
    strict = args.strict or "--strict" in own
    as_json = args.json or "--json" in own
    try:
        plan = _adapter(args.framework)(argv)
    except SystemExit as e:  # an adapter's argparse refused the flags (it printed why)
        code = e.code if isinstance(e.code, int) else EXIT_USAGE
        return EXIT_USAGE if code else 0
    except Exception as e:  # noqa: BLE001  (usage errors of every adapter: unknown recipe, bad override, bad flag)
        print(f"error: {_message(e)}", file=sys.stderr)
        return EXIT_USAGE
    findings = diagnose(plan)
    status = exit_status(findings, strict)
    if as_json:
        out: dict[str, Any] = {
            "exit_status": status,
            "strict": strict,
            "findings": [f.to_dict() for f in findings],
            "plan": plan.to_dict(),
        }
        print(json.dumps(out, indent=2))
    else:
        print(format_findings(findings, plan))
    return status


def _message(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.replace("\n", "\n  ")
