"""``microcoder smoke --topology``: the launch's declared size on one machine, or the largest size below a rank limit
that keeps every divisibility relation of the launch. Framework-free arithmetic; the frameworks' smoke plans
(:mod:`microcoder_ext.verl.smoke`) read their launch into a :class:`Declared` and apply what :func:`fit` returns.

What "keeps the structure" means here: every parallel group size of the launch (``groups``: vLLM tensor parallelism,
Ulysses sequence parallelism, an FSDP shard group) still divides the GPUs of a node, or the whole world, exactly where
it did; the prompts per step and per mini-batch shrink by the same factor as the world, so that each rank gets the
share of every batch (prompts x samples / ranks) that it gets at the declared size, and the number of updates per step
is the launch's; a multi-node launch keeps more than one node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: the most training ranks a topology smoke runs on one machine (2 cores, 24 GB: see docs/smoke.md)
MAX_RANKS = 16


@dataclass(frozen=True)
class Declared:
    """What a launch declares. ``prompts``: prompts per step; ``mini``: prompts per mini-batch (one update);
    ``groups``: ``name -> size`` of each parallel group (TP of the rollout, Ulysses SP, an FSDP shard group)."""

    nnodes: int
    gpus_per_node: int
    prompts: int
    mini: int
    groups: dict

    @property
    def world(self) -> int:
        return self.nnodes * self.gpus_per_node

    def describe(self) -> str:
        groups = ", ".join(f"{k} {v}" for k, v in self.groups.items() if v > 1)
        return (f"{self.nnodes} x {self.gpus_per_node} GPUs, {self.prompts} prompts per step in mini-batches of "
                f"{self.mini}" + (f", {groups}" if groups else ""))


class TopologyError(ValueError):
    """No size within the rank limit keeps the launch's structure (the message says which relation breaks)."""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _relations(d: Declared) -> list[tuple[str, int, str]]:
    """Each (group name, size, 'node' | 'world') that divides at the declared size."""
    out = []
    for name, size in d.groups.items():
        if size <= 1:
            continue
        if d.gpus_per_node % size == 0:
            out.append((name, size, "node"))
        elif d.world % size == 0:
            out.append((name, size, "world"))
    return out


def keeps_structure(d: Declared, nnodes: int, gpus_per_node: int) -> bool:
    """Whether ``nnodes x gpus_per_node`` keeps every relation of ``d`` (groups, per-rank shares, multi-node)."""
    world = nnodes * gpus_per_node
    if d.world % world or d.prompts * world % d.world or d.mini * world % d.world:
        return False
    if d.nnodes > 1 and nnodes < 2:
        return False
    for _, size, scope in _relations(d):
        if (gpus_per_node if scope == "node" else world) % size:
            return False
    return True


def fit(d: Declared, max_ranks: int = MAX_RANKS) -> Declared:
    """``d`` itself when it has at most ``max_ranks`` ranks, else the largest size that keeps its structure
    (:func:`keeps_structure`): fewer nodes first, then fewer GPUs per node; prompts and mini-batch scaled with the
    world. Raises :class:`TopologyError` when none does."""
    if d.world <= max_ranks:
        return d
    best = None
    for nnodes in _divisors(d.nnodes):
        for gpn in _divisors(d.gpus_per_node):
            if nnodes * gpn > max_ranks or not keeps_structure(d, nnodes, gpn):
                continue
            key = (nnodes * gpn, gpn)  # most ranks, then most GPUs per node (nodes shrink first)
            if best is None or key > best[0]:
                best = (key, nnodes, gpn)
    if best is None:
        groups = ", ".join(f"{name} {size} (divides the {scope})" for name, size, scope in _relations(d)) or "none"
        raise TopologyError(f"no size of at most {max_ranks} ranks keeps the structure of {d.describe()}: the world "
                            f"must divide {d.world} ranks and the prompts per step ({d.prompts}) and per mini-batch "
                            f"({d.mini}) by the same factor, keeping these groups: {groups}")
    _, nnodes, gpn = best
    world = nnodes * gpn
    return replace(d, nnodes=nnodes, gpus_per_node=gpn, prompts=d.prompts * world // d.world,
                   mini=d.mini * world // d.world)


def scaled_token_limit(limit: int, declared_length: int, smoke_length: int) -> int:
    """A dynamic-batch token limit per rank for sequences of ``smoke_length`` tokens at most, so that as many
    sequences of the longest length fit in it as fit in ``limit`` at ``declared_length`` (never below one)."""
    per_rank = max(1, limit // max(1, declared_length))
    return per_rank * smoke_length
