"""What fixes a launch that fails only at its declared size: the knob and a value, read from the framework's own error.

A default smoke shrinks a launch to one or two ranks and recomputes its batches, so a launch whose sizes do not
divide at its declared world passes it and fails on the cluster. ``microcoder smoke --topology`` runs the launch at
that size and fails with the framework's error; :func:`advise` then names the knob and a value that fixes it. Each
:class:`FailureClass` was found by running a real launch (``tests/openrlhf/test_smoke_e2e.py``,
``tests/verl/test_smoke_e2e.py`` run each at its declared size). Framework-free: patterns over error text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class FailureClass:
    """``pattern`` (over the framework's error text) and ``advice(match) -> str``: the knob and a value that fix it."""

    name: str
    framework: str
    pattern: re.Pattern
    advice: Callable[[re.Match], str]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest(values: list[int], target: int) -> list[int]:
    """Up to two of ``values`` nearest ``target`` (the one below first)."""
    below = [v for v in values if v < target]
    above = [v for v in values if v > target]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def _deepspeed_batch(m: re.Match) -> str:
    train, micro, world = int(m["train"]), int(m["micro"]), int(m["world"])
    if train % world:
        step = micro * world
        options = sorted({max(step, train // step * step), -(-train // step) * step})
        return (f"--train.batch_size {train} does not split over {world} DeepSpeed ranks: use a multiple of "
                f"{world} ranks x --train.micro_batch_size {micro} = {step}, e.g. --train.batch_size "
                + " or ".join(str(v) for v in options))
    share = train // world
    options = _nearest(_divisors(share), micro)
    return (f"--train.micro_batch_size {micro} does not divide each rank's share of --train.batch_size ({train} / "
            f"{world} ranks = {share} samples): use a divisor of {share}, e.g. --train.micro_batch_size "
            + " or ".join(str(v) for v in options))


def _colocated_engines(m: re.Match) -> str:
    world, have = int(m["world"]), int(m["engines_tp"])
    return (f"--train.colocate_all puts one vLLM shard on each of the actor's {world} GPUs, but --vllm.num_engines x "
            f"--vllm.tensor_parallel_size is {have}: set --vllm.num_engines to {world} / --vllm.tensor_parallel_size "
            f"(e.g. --vllm.num_engines {world} at TP 1, {world // 2} at TP 2)" if world % 2 == 0 else
            f"--train.colocate_all puts one vLLM shard on each of the actor's {world} GPUs, but --vllm.num_engines x "
            f"--vllm.tensor_parallel_size is {have}: set --vllm.num_engines {world} --vllm.tensor_parallel_size 1")


def _verl_rollout_tp(m: re.Match) -> str:
    world, tp = int(m["world"]), int(m["infer"])
    options = _nearest(_divisors(world), tp)
    return (f"vLLM's tensor parallelism x data parallelism ({tp}) must divide the {world} trainer GPUs (verl places "
            f"one rollout replica on each group of that many): use actor_rollout_ref.rollout."
            "tensor_model_parallel_size=" + " or =".join(str(v) for v in options)
            + f" (or trainer.n_gpus_per_node x trainer.nnodes a multiple of {tp})")


#: the failure classes found at declared sizes, each with its test (see the module doc)
CLASSES: tuple[FailureClass, ...] = (
    FailureClass("deepspeed-batch", "openrlhf",
                 re.compile(r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size "
                            r"(?P<train>\d+) != (?P<micro>\d+) \* (?P<acc>\d+) \* (?P<world>\d+)"),
                 _deepspeed_batch),
    FailureClass("colocated-engines", "openrlhf",
                 re.compile(r"actor_num_nodes \* actor_num_gpus_per_node must be equal to vllm_num_engines \* "
                            r"vllm_tensor_parallel_size, got (?P<world>\d+) and (?P<engines_tp>\d+)"),
                 _colocated_engines),
    FailureClass("rollout-tp", "verl",
                 re.compile(r"rollout world_size: (?P<world>\d+) is not divisible by infer_world_size: "
                            r"(?P<infer>\d+)"),
                 _verl_rollout_tp),
)


def advise(framework: str, error: str) -> list[str]:
    """The fix of every failure class of ``framework`` whose pattern the error text matches (each once)."""
    out = []
    for fc in CLASSES:
        if fc.framework != framework:
            continue
        m = fc.pattern.search(error or "")
        if m:
            out.append(fc.advice(m))
    return out


def fix_lines(framework: str, *texts: str) -> str:
    """``"\\nfix: ..."`` for each fix :func:`advise` finds in the first of ``texts`` that has one (the error excerpt
    first, then the whole log), else ``""``."""
    for text in texts:
        found = advise(framework, text)
        if found:
            return "".join(f"\nfix: {f}" for f in found)
    return ""
