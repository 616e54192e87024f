"""``python -m microcoder_ext.openrlhf.train``: OpenRLHF 0.11.2's own ``train_ppo_ray`` with a MicroCoder-GRPO preset.

::

    python -m microcoder_ext.openrlhf.train <any train_ppo_ray flags> --mc.preset microcoder [--mc.* flags]

OpenRLHF has no plugin API and builds its argparse parser under ``if __name__ == "__main__"`` of
``openrlhf/cli/train_ppo_ray.py`` (OpenRLHF 0.11.0-0.11.2), so it runs that module with :mod:`runpy`.
:func:`main`:

1. splits ``argv``: the ``--mc.*`` flags (:mod:`microcoder_ext.openrlhf.options`, exit 2 on a bad one); the rest
   goes to OpenRLHF untouched, whose own parser rejects unknown flags (exit 2 with its message);
2. runs the version guard :func:`microcoder_ext.openrlhf.guard.check_openrlhf` before patching anything (exit 1);
3. puts the preset's flags (:mod:`microcoder_ext.openrlhf.presets`) **before** the user's (argparse: the last
   one wins): for ``microcoder`` also ``--rollout.temperature`` = the temperature controller's step-0 value, and
   ``--reward.remote_url <microcoder_ext/openrlhf/openrlhf_reward.py>`` unless the user gives a reward;
4. wraps ``openrlhf.utils.config.hierarchize``: after OpenRLHF's argparse, every preset requirement is checked on
   the parsed args; a user flag that contradicts the preset is an error naming the flag (``--mc.allow_override``:
   a WARNING, the user's value stays; never for ``--rollout.temperature`` under ``microcoder``); async training
   is refused where it would bypass our trainer. All problems are reported at once (exit 1). Then it sets
   ``args.microcoder`` (:class:`microcoder_ext.openrlhf.settings.OpenRLHFSettings`), which travels in
   ``strategy.args`` to every Ray actor;
5. for ``microcoder`` / ``mask_only`` sets ``openrlhf.trainer.ppo_trainer.PPOTrainer`` (imported lazily by
   ``train()``) to :class:`microcoder_ext.openrlhf.trainer.MicrocoderPPOTrainerRemote`; the baselines run
   OpenRLHF's own ``PPOTrainer``;
6. runs ``openrlhf.cli.train_ppo_ray`` as ``__main__`` with ``runpy``; every patched attribute (and ``sys.argv``)
   is restored afterwards.

``--mc.dry_run`` takes the same path and stops where ``train()`` starts (its first call, ``ray.is_initialized()``),
after OpenRLHF's own validation has run on the final args: it prints the effective settings and exits 0, or 1
with ``error: OpenRLHF rejected the arguments: ...``. No Ray, no model, no data. Without vLLM / flash-attn
(a CPU machine) it installs the import placeholders of :mod:`microcoder_ext.openrlhf.dry_run_imports` (``--help``
too); a real run without them is OpenRLHF's own ``ImportError``.

Exit status: 0 ok, 1 refused (guard, preset conflict, OpenRLHF's validation), 2 usage (``--mc.*`` flags,
OpenRLHF's argparse, or no ``--vllm.num_engines``: OpenRLHF cannot generate without vLLM engines).
"""

from __future__ import annotations

import importlib
import importlib.util
import runpy
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microcoder_ext.openrlhf import options as mc_options
from microcoder_ext.openrlhf.presets import Requirement, has, lookup, same_value, temperature_requirement

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

PROG = "python -m microcoder_ext.openrlhf.train"
TRAIN_MODULE = "openrlhf.cli.train_ppo_ray"
#: the Ray actor class that replaces ``openrlhf.trainer.ppo_trainer.PPOTrainer`` for presets with our trainer
TRAINER = ("microcoder_ext.openrlhf.trainer", "MicrocoderPPOTrainerRemote")
#: the ``reward_func`` file for ``--reward.remote_url`` (loaded by path inside OpenRLHF's vLLM actors)
REWARD_MODULE = "microcoder_ext.openrlhf.openrlhf_reward"
#: estimators with a per-prompt group baseline (``openrlhf/cli/train_ppo_ray.py:656``): the mask's setting
GROUP_ESTIMATORS = ("group_norm", "dr_grpo", "rloo", "reinforce_baseline")
#: shown by the dry run whether the preset sets them or not
ALGORITHM_DESTS = ("algo.advantage.estimator", "algo.kl.init_coef", "algo.kl.use_loss", "actor.eps_clip_low_high",
                   "actor.loss_agg_mode", "rollout.temperature")
#: either one makes ``train()`` build ``PPOTrainerAsync`` (``openrlhf/cli/train_ppo_ray.py:144-148``)
ASYNC_DESTS = ("train.async_enable", "train.partial_rollout_enable")


@dataclass
class Launch:
    """What one :func:`launch` did (``main`` returns ``code``)."""

    code: int
    #: OpenRLHF's nested args as ``train()`` received them (dry run: after all of OpenRLHF's validation)
    args: Any = None
    #: ``openrlhf.trainer.ppo_trainer.PPOTrainer`` while ``train()`` ran (dry run: when it was stopped)
    trainer: Any = None
    #: packages replaced by import placeholders (dry run / help on a machine without them)
    placeholders: list[str] = field(default_factory=list)


class _Refused(Exception):
    """The preset refuses the parsed args; ``.errors`` names every offending flag."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


class _Missing(_Refused):
    """A flag the launch cannot run without is missing (exit 2, usage)."""


def missing_engines(args: Any) -> str | None:
    """Why a launch with OpenRLHF's parsed ``args`` cannot generate (None: it can). OpenRLHF generates only
    with vLLM engines; without ``--vllm.num_engines`` it fails at the first step with ``IndexError: index out of
    range`` (a pop from its empty engine heap)."""
    return None if lookup(args, "vllm.num_engines") else MISSING_ENGINES


MISSING_ENGINES = ("--vllm.num_engines is missing (or 0): OpenRLHF generates only with vLLM engines and fails "
                   "at the first step without one (IndexError: index out of range); add --vllm.num_engines N (and "
                   "--vllm.tensor_parallel_size)")


class _StopBeforeTrain(Exception):
    """Raised by the dry run's ``ray.is_initialized``: ``train()`` has started, nothing of it has run."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m microcoder_ext.openrlhf.train``; returns the exit status."""
    return launch(argv).code


def reward_file() -> str:
    """Absolute path of the packaged ``reward_func`` file (``microcoder_ext/openrlhf/openrlhf_reward.py``)."""
    spec = importlib.util.find_spec(REWARD_MODULE)
    if spec is None or not spec.origin:
        raise FileNotFoundError(f"{REWARD_MODULE} is not installed")
    return str(Path(spec.origin).resolve())


def launch(argv: list[str] | None = None) -> Launch:
    """Run (or dry-run) OpenRLHF's ``train_ppo_ray`` with the ``--mc.*`` preset; see the module docstring."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(token in ("-h", "--help") for token in argv):
        return _help()
    try:
        mc, rest = mc_options.parse(argv)
    except mc_options.OptionsError as e:
        _errors(e.errors)
        print(f"(see `{PROG} --help`)", file=sys.stderr)
        return Launch(EXIT_USAGE)

    placeholders = _install_placeholders() if mc.dry_run else []
    problem = _import_openrlhf(mc.dry_run)
    if problem:
        _errors([problem])
        return Launch(EXIT_INVALID, placeholders=placeholders)

    from microcoder_ext.compat import UnsupportedVersionError
    from microcoder_ext.openrlhf import guard

    try:
        version = guard.check_openrlhf()
    except UnsupportedVersionError as e:
        _errors([str(e)])
        return Launch(EXIT_INVALID, placeholders=placeholders)

    trainer = None
    if mc.preset.uses_trainer:
        try:
            trainer = getattr(importlib.import_module(TRAINER[0]), TRAINER[1])
        except (ImportError, AttributeError) as e:
            _errors([f"cannot load microcoder-ext's OpenRLHF trainer {'.'.join(TRAINER)} "
                     f"(needed by --mc.preset {mc.preset.name}): {type(e).__name__}: {e}"])
            return Launch(EXIT_INVALID, placeholders=placeholders)

    run = _Run(mc, rest, trainer=trainer, version=version, placeholders=placeholders)
    return run.execute()


# ------------------------------------------------------------------------------------------------ steps


def _errors(errors: list[str]) -> None:
    for error in errors:
        print("error: " + error.replace("\n", "\n  "), file=sys.stderr)


def _install_placeholders() -> list[str]:
    from microcoder_ext.openrlhf import dry_run_imports

    return dry_run_imports.install()


def _import_openrlhf(dry_run: bool) -> str | None:
    """OpenRLHF's own ImportError (e.g. no vLLM on this machine) as one clear error, instead of the guard's list of
    'changed internals'. A missing OpenRLHF is left to the guard (it names the extra to install)."""
    if importlib.util.find_spec("openrlhf") is None:
        return None
    try:
        importlib.import_module("openrlhf.trainer.ray")
        importlib.import_module("openrlhf.trainer.ppo_trainer")
    except ImportError as e:
        hint = ("" if dry_run else "; a training run needs OpenRLHF's GPU dependencies (pip install "
                "'openrlhf[vllm]==0.11.2': vLLM 0.29.0 and flash-attn 2.8.3, CUDA only); --mc.dry_run checks the "
                "arguments without them")
        return f"OpenRLHF cannot be imported: {type(e).__name__}: {e}{hint}"
    return None


def _help() -> Launch:
    print(mc_options.format_help(PROG))
    placeholders = _install_placeholders()
    print("OpenRLHF's train_ppo_ray flags (every flag that is not --mc.* goes to it unchanged):\n", flush=True)
    saved = sys.argv
    sys.argv = ["train_ppo_ray", "--help"]
    code = EXIT_OK
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
            runpy.run_module(TRAIN_MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = _exit_code(e)
    except ImportError as e:
        _errors([f"OpenRLHF's help is unavailable: {type(e).__name__}: {e}"])
        code = EXIT_INVALID
    finally:
        sys.argv = saved
    if placeholders:
        print(f"\n(note: {', '.join(placeholders)} not installed here: import placeholders were used to show "
              f"OpenRLHF's help)")
    return Launch(code, placeholders=placeholders)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return EXIT_OK
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return EXIT_INVALID


def _given(rest: list[str], option: str) -> bool:
    return any(token == option or token.startswith(option + "=") for token in rest)


def _effective(args: Any, dest: str) -> Any:
    value = lookup(args, dest)
    if dest == "actor.eps_clip_low_high" and value is None:  # OpenRLHF fills it after hierarchize (:633-634)
        eps = lookup(args, "actor.eps_clip")
        value = (eps, eps)
    return value


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)  # as typed: 1.0, 0.28, 1e-06
    if isinstance(value, (list, tuple)):
        return " ".join(_fmt(v) for v in value)
    return str(value)


def _as_flag(option: str, value: Any) -> str:
    """How a user would have written ``value``: ``--algo.kl.use_loss``, ``--actor.eps_clip_low_high 0.2 0.2``."""
    if value is True:
        return option
    if value is False or value is None:
        return f"{option} unset"
    return f"{option} {_fmt(value)}"


class _Patches:
    """Module attributes set for one launch, restored in reverse order."""

    def __init__(self):
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, obj: Any, name: str, value: Any) -> None:
        self._undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self._undo:
            obj, name, value = self._undo.pop()
            setattr(obj, name, value)


@dataclass
class _Row:
    key: str
    value: str
    source: str


class _Run:
    """One launch after the guard: injected flags, the ``hierarchize`` check, runpy, the dry-run report."""

    def __init__(self, mc: mc_options.McOptions, rest: list[str], *, trainer: Any, version: str,
                 placeholders: list[str]):
        from microcoder_ext.core.temperature import TemperatureController

        self.mc, self.rest, self.trainer, self.version, self.placeholders = mc, rest, trainer, version, placeholders
        self.preset = mc.preset
        self.controller = TemperatureController(mc.config.temperature) if self.preset.temperature_control else None
        #: requirements whose flag the installed OpenRLHF does not have: OpenRLHF is fixed to the value there
        self.fixed: list[Requirement] = [r for r in self.preset.requirements if not r.applies_to(version)]
        self.requirements: list[Requirement] = [r for r in self.preset.requirements if r.applies_to(version)]
        if self.controller is not None:
            self.requirements.append(temperature_requirement(self.controller.temperature(0)))
        self.injected = [token for req in self.requirements for token in req.flag]
        self.reward = None
        if self.preset.fill_reward and not _given(rest, "--reward.remote_url") \
                and not _given(rest, "--train.agent_func_path"):
            self.reward = reward_file()
            self.injected += ["--reward.remote_url", self.reward]
        self.args: Any = None
        self.rows: list[_Row] = []
        self.started = False

    # -- the hierarchize wrapper's check

    def check(self, args: Any) -> None:
        """Every preset requirement on OpenRLHF's parsed args; raises :class:`_Refused` with all problems."""
        preset, errors = self.preset, []
        for req in self.fixed:
            self.rows.append(_Row(req.option, _fmt(req.value), f"fixed in OpenRLHF {self.version} (no such flag "
                                  f"before {req.since})"))
        missing = missing_engines(args)
        if missing:
            errors.append(missing)
        for req in self.requirements:
            actual = _effective(args, req.dest)
            if same_value(actual, req.value):
                source = "preset" if req.flag else "OpenRLHF default (preset requires it)"
                if req.dest == "rollout.temperature" and self.controller is not None:
                    source = "preset (--mc.temperature.*, step 0)"
                self.rows.append(_Row(req.option, _fmt(actual), source))
                continue
            conflict = f"{_as_flag(req.option, actual)} contradicts --mc.preset {preset.name}: {req.why}"
            if not req.overridable:
                errors.append(f"{conflict} (--mc.allow_override does not apply)")
            elif self.mc.allow_override:
                print(f"WARNING: {conflict}; kept yours because of --mc.allow_override", file=sys.stderr)
                self.rows.append(_Row(req.option, _fmt(actual), f"yours (override; preset: {_fmt(req.value)})"))
            else:
                errors.append(f"{conflict}; pass --mc.allow_override to keep yours")
        if preset.refuses_async:
            lost = []
            if preset.mask:
                lost.append("the truncation mask would not run")
            if preset.temperature_control:
                lost.append("the sampling temperature could not be kept equal to the log-prob temperature "
                            "(stale batches drawn at an older temperature)")
            for dest in ASYNC_DESTS:
                if lookup(args, dest):
                    errors.append(f"--{dest} is refused with --mc.preset {preset.name}: OpenRLHF then builds "
                                  f"PPOTrainerAsync instead of microcoder-ext's trainer, so {' and '.join(lost)} "
                                  f"(--mc.allow_override does not apply); train synchronously")
        if not (lookup(args, "reward.remote_url") or lookup(args, "train.agent_func_path")
                or lookup(args, "reward.model_name_or_path")):
            errors.append(f"no reward: --mc.preset {preset.name} does not fill one in; pass --reward.remote_url "
                          f"{reward_file()} (microcoder-ext's code reward, which gives the mask its verdicts), your own "
                          f"reward file, or --reward.model_name_or_path")
        estimator = lookup(args, "algo.advantage.estimator")
        if preset.mask and self.mc.config.mask.enable and estimator not in GROUP_ESTIMATORS:
            print(f"WARNING: --mc.preset {preset.name} with --algo.advantage.estimator {estimator}: the truncation "
                  f"mask zeroes advantages that were normalised within each prompt's group; it is meant for a group "
                  f"estimator ({', '.join(GROUP_ESTIMATORS)})", file=sys.stderr)
        if errors:
            raise (_Missing if missing else _Refused)(errors)

        from microcoder_ext.openrlhf.settings import ARGS_KEY, OpenRLHFSettings

        settings = OpenRLHFSettings(preset=preset.name, config=self.mc.config, mask=preset.mask,
                                    temperature_control=preset.temperature_control)
        setattr(args, ARGS_KEY, settings.to_namespace())

    # -- run

    def execute(self) -> Launch:
        import openrlhf.trainer.ppo_trainer as ppo_trainer
        import openrlhf.utils.config as openrlhf_config
        import ray

        original_hierarchize, original_is_initialized = openrlhf_config.hierarchize, ray.is_initialized

        def hierarchize(namespace):
            args = original_hierarchize(namespace)
            if self.args is None:  # train_ppo_ray's call
                self.args = args
                self.check(args)
            return args

        def is_initialized():  # the first thing train() does
            self.started = True
            if self.mc.dry_run:
                raise _StopBeforeTrain
            return original_is_initialized()

        result = Launch(EXIT_OK, placeholders=self.placeholders)
        patches, saved_argv = _Patches(), sys.argv
        patches.set(openrlhf_config, "hierarchize", hierarchize)
        patches.set(ray, "is_initialized", is_initialized)
        if self.trainer is not None:
            patches.set(ppo_trainer, "PPOTrainer", self.trainer)
        sys.argv = [sys.argv[0], *self.injected, *self.rest]
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
                runpy.run_module(TRAIN_MODULE, run_name="__main__", alter_sys=True)
        except _StopBeforeTrain:
            result.trainer = ppo_trainer.PPOTrainer
            print(self.report())
        except _Refused as e:
            _errors(e.errors)
            result.code = EXIT_USAGE if isinstance(e, _Missing) else EXIT_INVALID
        except SystemExit as e:  # OpenRLHF's argparse: usage errors (2)
            result.code = _exit_code(e)
        except AssertionError as e:  # OpenRLHF's validation asserts
            if self.started:
                raise
            _errors([f"OpenRLHF rejected the arguments: {e or 'assertion failed'}"])
            result.code = EXIT_INVALID
        except Exception as e:
            if self.started:
                raise
            _errors([f"OpenRLHF failed while checking the arguments: {type(e).__name__}: {e}"])
            result.code = EXIT_INVALID
        finally:
            sys.argv = saved_argv
            patches.restore()
        result.args = self.args
        return result

    # -- dry-run report

    def report(self) -> str:
        args, preset, mc = self.args, self.preset, self.mc
        from microcoder_ext import __version__

        rows: list[_Row] = [_Row("[preset settings]", "", "")] + self.rows
        required = {req.dest for req in self.requirements + self.fixed}
        for dest in ALGORITHM_DESTS:  # the algorithm settings the preset leaves to you (all of them for mask_only)
            if dest not in required and not has(args, dest):  # a flag this OpenRLHF release does not have
                rows.append(_Row(f"--{dest}", "(no such flag)", f"OpenRLHF {self.version}"))
            elif dest not in required:
                given = _given(self.rest, f"--{dest}") or _given(self.injected, f"--{dest}")
                rows.append(_Row(f"--{dest}", _fmt(_effective(args, dest)),
                                 ("command line" if given else "OpenRLHF default") + ", not set by the preset"))
        rows.append(_Row("[run]", "", ""))
        for dest in ("actor.model_name_or_path", "data.prompt_dataset", "eval.dataset", "rollout.batch_size",
                     "rollout.n_samples_per_prompt", "train.batch_size", "rollout.max_new_tokens", "data.max_len",
                     "actor.num_nodes", "actor.num_gpus_per_node", "vllm.num_engines", "vllm.tensor_parallel_size",
                     "train.colocate_all", "ckpt.save_steps"):
            option = f"--{dest}"
            rows.append(_Row(option, _fmt(lookup(args, dest)), "command line" if _given(self.rest, option)
                             or _given(self.injected, option) else "OpenRLHF default"))
        rows.append(_Row("[reward]", "", ""))
        remote = lookup(args, "reward.remote_url")
        if lookup(args, "train.agent_func_path"):
            rows.append(_Row("--train.agent_func_path", str(lookup(args, "train.agent_func_path")),
                             "yours (OpenRLHF sets --reward.remote_url agent)"))
        elif remote:
            ours = self.reward is not None and list(remote) == [self.reward]
            rows.append(_Row("--reward.remote_url", ",".join(remote),
                             "preset (microcoder-ext code reward)" if ours else "yours"))
        else:
            rows.append(_Row("--reward.remote_url", "null",
                             f"(reward model {_fmt(lookup(args, 'reward.model_name_or_path'))})"))
        rows.append(_Row("[trainer]", "", ""))
        if self.trainer is not None:
            rows.append(_Row("PPOTrainer", ".".join(TRAINER), "microcoder-ext (replaces OpenRLHF's PPOTrainer)"))
        else:
            rows.append(_Row("PPOTrainer", "openrlhf.trainer.ppo_trainer.PPOTrainer", "OpenRLHF's own"))
        async_on = [f"--{d}" for d in ASYNC_DESTS if lookup(args, d)]
        rows.append(_Row("async", "on (" + ", ".join(async_on) + ")" if async_on else "off",
                         "refused with this preset" if preset.refuses_async else "OpenRLHF"))
        rows += self._temperature_rows()
        rows += self._mask_rows()
        settings = vars(lookup(args, "microcoder"))
        rows.append(_Row("[args.microcoder]", "", "travels in strategy.args to every Ray actor"))
        for key in ("preset", "mask", "temperature_control", "version"):
            rows.append(_Row(key, _fmt(settings[key]), ""))

        kw = max(len(r.key) for r in rows if not r.key.startswith("["))
        vw = max(len(r.value) for r in rows if len(r.value) <= 32)  # longer values (paths) push their source right
        lines = [f"microcoder-ext {__version__} dry run: OpenRLHF {self.version} train_ppo_ray with --mc.preset "
                 f"{preset.name}", f"  {preset.summary}"]
        if self.placeholders:
            lines.append(f"note: {', '.join(self.placeholders)} not installed here: import placeholders "
                         f"(microcoder_ext/openrlhf/dry_run_imports.py) let OpenRLHF's modules import for this dry run")
        lines.append("")
        for row in rows:
            if row.key.startswith("["):
                lines.append(f"{row.key}  {row.source}".rstrip())
            else:
                lines.append(f"  {row.key:<{kw}}  {row.value:<{vw}}  {row.source}".rstrip())
        lines += ["", "OK: OpenRLHF's argument validation passed (dry run: stopped where train() starts Ray; "
                      "no model or data loaded)"]
        return "\n".join(lines)

    def _temperature_rows(self) -> list[_Row]:
        rows = [_Row("[temperature]", "", "")]
        if self.controller is None:
            t = _fmt(lookup(self.args, "rollout.temperature"))
            rows.append(_Row("--rollout.temperature", t, "constant (no temperature controller with this preset)"))
            return rows
        cfg = self.mc.config.temperature
        shown = {"constant": ("mode", "value"), "staged": ("mode", "stages")}.get(
            cfg.mode, ("mode", "value", "candidates", "target", "target_steps", "target_margin", "window",
                       "min_interval", "max_temperature", "smoothing", "n", "metric"))
        keys = list(shown) + [k.split(".", 1)[1] for k in self.mc.given
                              if k.startswith("temperature.") and k.split(".", 1)[1] not in shown]
        for key in keys:
            value = getattr(cfg, key)
            if key == "stages":
                value = "[" + ", ".join(f"[{s}, {t:g}]" for s, t in value) + "]"
            unused = "" if key in shown else f", unused with mode {cfg.mode}"
            source = ("yours" if f"temperature.{key}" in self.mc.given else "default (TemperatureConfig)") + unused
            rows.append(_Row(f"--mc.temperature.{key}", _fmt(value), source))
        rows.append(_Row("=> value at step 0", f"{self.controller.temperature(0):g}", "--rollout.temperature"))
        plan = ", ".join(f"step {p['step']}: T={p['temperature']:g}" for p in self.controller.plan())
        rows.append(_Row("=> plan", plan, "TemperatureController.plan()"))
        if cfg.mode == "auto":
            target = "estimated" if cfg.target is None else f"{cfg.target:g}"
            rows.append(_Row("=> auto rule", f"one candidate up when smoothed {cfg.metric} diversity < target "
                             f"{target} for {cfg.window} steps, >= {cfg.min_interval} steps apart", ""))
        rows.append(_Row("=> sampling & log-prob T", "same value, set per step", "microcoder-ext trainer"))
        return rows

    def _mask_rows(self) -> list[_Row]:
        rows = [_Row("[truncation mask]", "", "")]
        mask = self.mc.config.mask
        applied = self.preset.mask and mask.enable
        why = "preset" if not self.preset.mask else ("--mc.mask.enable" if not mask.enable else "preset")
        rows.append(_Row("=> applied", "yes" if applied else "no", why))
        if self.preset.mask:
            for f in ("enable", "rho", "m", "mode", "repeat_check", "seed", "verdict_key", "missing_verdict",
                      "correct_score"):
                source = "yours" if f"mask.{f}" in self.mc.given else "default (MaskConfig)"
                rows.append(_Row(f"--mc.mask.{f}", _fmt(getattr(mask, f)), source))
        return rows
