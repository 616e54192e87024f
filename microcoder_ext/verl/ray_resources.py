"""The Ray CPUs a verl ``main_ppo`` launch (v1 trainer) holds on a node, and what it needs to start at all.

verl waits with no time limit for two kinds of Ray placement, so a node with too few logical CPUs does not fail: the
launch sits in its set-up forever (seen with ``microcoder smoke --gpus 4``: ``main_ppo`` idle after "Disabled critic").

* Its resource pool (``verl.single_controller.ray.base.ResourcePoolManager``) asks for one placement group per node
  with a bundle of ``{CPU: max_colocate_count, GPU: 1}`` per rank (3 CPUs in verl 0.9), strategy ``STRICT_PACK``, and
  ``ray.get(pg.ready())`` without a timeout.
* transfer queue (``transfer_queue.*``, which the v1 trainer runs) starts its controller and
  ``num_data_storage_units`` storage units (verl's default: 8), 1 CPU each for the whole run, the units placed round
  robin over the nodes.
* Every other actor of ``main_ppo`` (TaskRunner, agent-loop and reward-loop workers) holds no CPU once placed, but Ray
  places it only where one CPU is free.
"""

from __future__ import annotations

import math

from microcoder_ext.compat import UnsupportedVersionError

#: the key that sets the number of transfer queue's storage units, and verl 0.9's default for it
STORAGE_UNITS_KEY = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
DEFAULT_STORAGE_UNITS = 8


def pool_cpus_per_rank() -> int:
    """CPUs per rank of verl's resource pool: the default of ``ResourcePoolManager.max_colocate_count`` in the
    installed verl (raises :class:`~microcoder_ext.compat.UnsupportedVersionError` where it has none)."""
    from verl.single_controller.ray.base import ResourcePoolManager

    field_ = getattr(ResourcePoolManager, "__dataclass_fields__", {}).get("max_colocate_count")
    default = getattr(field_, "default", None)
    if not isinstance(default, int) or isinstance(default, bool) or default < 1:
        raise UnsupportedVersionError(f"verl's ResourcePoolManager.max_colocate_count has no integer default "
                                      f"({default!r}); microcoder-ext supports verl 0.9.0-0.9.1")
    return default


def node_cpus_needed(gpus_per_node: int, nnodes: int = 1, storage_units: int = DEFAULT_STORAGE_UNITS,
                     per_rank: int | None = None) -> int:
    """The fewest Ray logical CPUs on each node with which a launch of ``nnodes`` x ``gpus_per_node`` ranks starts:
    the pool's bundles of the node, the storage units placed on it (round robin: ``ceil(units / nnodes)``), the
    controller (on any node, so counted on each) and one free CPU to place the actors that hold none."""
    per_rank = pool_cpus_per_rank() if per_rank is None else per_rank
    return per_rank * gpus_per_node + math.ceil(max(storage_units, 0) / max(nnodes, 1)) + 1 + 1


def shortfall(config) -> str | None:
    """What a composed ``main_ppo`` config that fixes Ray's CPUs (``ray_kwargs.ray_init.num_cpus``, one node) lacks,
    as a message that names the knob and a value that fixes it; None when it is enough, unset (Ray counts the
    node's cores) or not checkable (several nodes: each raylet's ``--num-cpus`` decides there)."""
    from microcoder_ext.verl.recipes import select

    cpus = select(config, "ray_kwargs.ray_init.num_cpus")
    gpus = select(config, "trainer.n_gpus_per_node")
    nnodes = select(config, "trainer.nnodes") or 1
    units = select(config, STORAGE_UNITS_KEY)
    units = DEFAULT_STORAGE_UNITS if units is None else units
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (cpus, gpus, nnodes, units)) or nnodes != 1:
        return None
    per_rank = pool_cpus_per_rank()
    need = node_cpus_needed(gpus, 1, units, per_rank)
    if cpus >= need:
        return None
    return (f"ray_kwargs.ray_init.num_cpus={cpus} is short of the {need} CPUs main_ppo needs on this node: verl's "
            f"resource pool places {per_rank} CPUs and 1 GPU per rank ({per_rank} x trainer.n_gpus_per_node={gpus}), "
            f"transfer queue's controller and its {units} storage units ({STORAGE_UNITS_KEY}) hold 1 each, and one "
            f"must stay free to place the agent-loop and reward-loop workers; with fewer, main_ppo waits forever after 'Disabled critic'. "
            f"Set ray_kwargs.ray_init.num_cpus={need} (or more, or null: Ray then counts the node's cores)")
