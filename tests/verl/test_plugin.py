"""The ``verl.plugins`` entry point, exercised in fresh interpreters exactly as verl loads it, and the post-import
hook helper (:mod:`microcoder_ext.verl.lazy`) it registers the trainer with.

verl is real (0.9.1) everywhere; the helper's own tests use throwaway modules written to ``tmp_path``.
"""

import importlib
import logging
import os
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest

from microcoder_ext.verl import lazy
from host_load import hang_guard

pytestmark = pytest.mark.verl

PLUGIN_ENV = "VERL_USE_EXTERNAL_PLUGINS"  # verl/__init__.py: "auto" (default), "none", or entry-point names
V1 = "verl.trainer.ppo.v1"
OUR_TRAINER = "microcoder_ext.verl.trainer"


def _python(code: str, timeout: int = 300, **env):
    base = {k: v for k, v in os.environ.items() if k != PLUGIN_ENV}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=hang_guard(timeout),
        env={**base, **env},
    )


# modules that only a trainer lookup needs: verl's v1 trainer stack and ours
LOADED_TRAINER_MODULES = (
    f"[m for m in sys.modules if m == {V1!r} or m.startswith({V1 + '.'!r}) or m.startswith({OUR_TRAINER!r})]"
)


# --------------------------------------------------------------------------------------------------- verl plugin


def test_import_verl_loads_no_trainer_and_main_ppo_lookup_finds_microcoder_sync():
    r = _python(
        f"""
        import sys, verl
        assert 'microcoder_ext.verl.plugin' in sys.modules, 'plugin not loaded by import verl'
        assert {LOADED_TRAINER_MODULES} == [], {LOADED_TRAINER_MODULES}
        import verl.trainer.main_ppo as main_ppo
        assert {LOADED_TRAINER_MODULES} == [], 'main_ppo imports the v1 trainers at module level now?'
        print('LAZY OK')

        # main_ppo's own lookup: TaskRunnerV1.run resolves trainer.v1.trainer_mode with verl.trainer.ppo.v1's
        # get_trainer_cls, then sets config.transfer_queue.enable, which fails on this struct config without a
        # transfer_queue section: the lookup's result is still in the frame of run()
        from omegaconf import OmegaConf
        def run(mode):
            cfg = OmegaConf.create({{'trainer': {{'v1': {{'trainer_mode': mode}}}}}})
            OmegaConf.set_struct(cfg, True)
            try:
                main_ppo.TaskRunnerV1.__ray_actor_class__().run(cfg)
            except Exception as e:
                tb = e.__traceback__
                while tb is not None and tb.tb_frame.f_code is not main_ppo.TaskRunnerV1.__ray_actor_class__.run.__code__:
                    tb = tb.tb_next
                return e, (tb.tb_frame.f_locals.get('trainer_cls') if tb else None)
            raise AssertionError('run() went on')
        err, cls = run('microcoder_sync')
        assert 'transfer_queue' in str(err), repr(err)
        from verl.trainer.ppo.v1 import PPOTrainerSync
        assert issubclass(cls, PPOTrainerSync), cls
        print('FOUND', cls.__module__ + '.' + cls.__qualname__)
        err, cls = run('no_such_trainer')
        assert isinstance(err, ValueError) and cls is None, repr(err)
        print('UNKNOWN', err)
        """
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "LAZY OK" in r.stdout
    assert "FOUND microcoder_ext.verl.trainer.MicrocoderSyncTrainer" in r.stdout
    assert "Unknown trainer 'no_such_trainer'. Available trainers: " in r.stdout
    assert "microcoder_sync" in r.stdout.split("UNKNOWN", 1)[1]


@pytest.mark.slow
def test_main_ppo_task_runner_actor_finds_microcoder_sync():
    # where verl really resolves trainer_mode: TaskRunnerV1.run in its own Ray worker process, which loads the
    # plugin through `import verl` when it unpickles the actor class
    r = _python(
        """
        import sys, ray
        from omegaconf import OmegaConf
        from verl.trainer.main_ppo import TaskRunnerV1

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

        @ray.remote
        def worker_modules():
            import verl
            return sorted(m for m in sys.modules if m.startswith(('verl.trainer.ppo.v1', 'microcoder_ext')))

        def get(ref):
            # a hang guard (tests/host_load.py; at Ray's default nice 15 a starved worker did not finish in 300 s
            # on CI's loaded 2 cores; tests/conftest.py runs Ray's workers at nice 0): a hang fails with what Ray
            # and the machine said, instead of an empty timeout
            try:
                return ray.get(ref, timeout=__RAY_GUARD__)
            except ray.exceptions.GetTimeoutError:
                import glob, os, subprocess
                print('TIMEOUT', 'load', os.getloadavg(), open('/proc/meminfo').read().split(chr(10))[:3])
                print(subprocess.run(['ps', '-eo', 'pid,ppid,stat,etime,time,rss,args', '--sort=-rss'],
                                     capture_output=True, text=True).stdout[:3000])
                logs = ray._private.worker._global_node.get_session_dir_path() + '/logs/'
                for path in [logs + 'raylet.out'] + sorted(glob.glob(logs + 'worker-*.err')):
                    lines = [l for l in open(path, errors='replace') if not l.startswith('[state-dump]')]
                    print('==', path, ''.join(lines[-25:])[-2500:])
                sys.stdout.flush()
                os._exit(3)

        print('WORKER', get(worker_modules.remote()))
        for mode in ('microcoder_sync', 'no_such_trainer'):
            cfg = OmegaConf.create({'trainer': {'v1': {'trainer_mode': mode}}})
            OmegaConf.set_struct(cfg, True)  # run() fails at config.transfer_queue, right after the lookup
            try:
                get(TaskRunnerV1.remote().run.remote(cfg))
            except ray.exceptions.RayError as e:
                print('MODE', mode, type(e).__name__, str(e).replace(chr(10), ' '))
        ray.shutdown()
        """.replace("__RAY_GUARD__", str(hang_guard(300))),  # below the child's own guard: Ray's state gets printed
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-3000:]
    worker = next(line for line in r.stdout.splitlines() if line.startswith("WORKER"))
    assert "microcoder_ext.verl.plugin" in worker and "verl.trainer.ppo.v1" not in worker and OUR_TRAINER not in worker
    ours = next(line for line in r.stdout.splitlines() if line.startswith("MODE microcoder_sync"))
    assert "transfer_queue" in ours and "Unknown trainer" not in ours, ours
    unknown = next(line for line in r.stdout.splitlines() if line.startswith("MODE no_such_trainer"))
    assert "Unknown trainer 'no_such_trainer'" in unknown and "microcoder_sync" in unknown, unknown


@pytest.mark.parametrize("policy", ["none", "some_other_plugin"])
def test_plugin_respects_verl_opt_out(policy):
    r = _python(
        """
        import sys, verl
        from microcoder_ext.verl import lazy
        print('PLUGIN', 'microcoder_ext.verl.plugin' in sys.modules, lazy.hooks())
        from verl.trainer.ppo.v1 import get_trainer_cls
        try:
            get_trainer_cls('microcoder_sync')
            print('registered')
        except ValueError:
            print('missing')
        """,
        **{PLUGIN_ENV: policy},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "PLUGIN False {}" in r.stdout and "missing" in r.stdout, r.stdout


def test_plugin_loads_when_named_in_verl_allow_list():
    r = _python(
        f"""
        import sys, verl
        assert {LOADED_TRAINER_MODULES} == []
        from verl.trainer.ppo.v1 import get_trainer_cls
        print('OK', get_trainer_cls('microcoder_sync').__name__)
        """,
        **{PLUGIN_ENV: "microcoder_ext,some_other_plugin"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "OK MicrocoderSyncTrainer" in r.stdout


def test_load_failure_is_logged_at_error_although_verl_swallows_it():
    # make the version guard fail inside the plugin, then let verl load it as usual
    r = _python(
        """
        import microcoder_ext.compat as c
        c.SUPPORTED['verl'] = '>=99'
        import verl
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
        print('registered' if 'microcoder_sync' in TRAINER_REGISTRY else 'missing')
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]  # verl itself keeps going...
    assert "missing" in r.stdout
    # ...but the user sees why, at ERROR, with the versions
    assert "ERROR" in r.stderr and "microcoder-ext: the verl plugin failed to load" in r.stderr
    from importlib import metadata

    assert f"supports verl>=99, found verl=={metadata.version('verl')}" in r.stderr


def test_failing_registration_is_logged_at_error_and_verl_import_goes_on():
    # the trainer module cannot be imported (None in sys.modules makes Python refuse it): the lazy registration
    # fails when verl.trainer.ppo.v1 is imported; that import still succeeds and the failure is logged at ERROR
    r = _python(
        f"""
        import sys, logging
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)
        logging.getLogger('microcoder_ext').addHandler(Keep())
        sys.modules[{OUR_TRAINER!r}] = None
        import verl
        from verl.trainer.ppo.v1 import get_trainer_cls
        print('V1 IMPORTED', get_trainer_cls('sync').__name__)
        try:
            get_trainer_cls('microcoder_sync')
        except ValueError as e:
            print('LOOKUP', e)
        for r in records:
            print('RECORD', r.levelname, r.getMessage(), r.exc_info[0].__name__ if r.exc_info else None)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "V1 IMPORTED PPOTrainerSync" in r.stdout
    assert "LOOKUP Unknown trainer 'microcoder_sync'" in r.stdout
    records = [line for line in r.stdout.splitlines() if line.startswith("RECORD")]
    assert len(records) == 1, r.stdout
    assert records[0].startswith("RECORD ERROR microcoder-ext: registering trainer.v1.trainer_mode=microcoder_sync")
    assert "failed after verl.trainer.ppo.v1 was imported" in records[0]
    assert records[0].endswith("ModuleNotFoundError"), records[0]
    assert "import of microcoder_ext.verl.trainer halted" in r.stderr  # the traceback reaches the user


def test_v1_already_imported_registers_immediately():
    # verl.trainer.ppo.v1 imported before the plugin runs (here: the plugin imported by hand after an opt-out)
    r = _python(
        """
        import sys, verl, verl.trainer.ppo.v1 as v1
        assert 'microcoder_ext.verl.plugin' not in sys.modules
        import microcoder_ext.verl.plugin
        print('OK', v1.get_trainer_cls('microcoder_sync').__name__)
        """,
        **{PLUGIN_ENV: "none"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "OK MicrocoderSyncTrainer" in r.stdout


def test_importing_our_trainer_first_registers_it_without_an_error():
    # a user's script imports the trainer class before anything of verl's v1 package: the trainer module imports
    # verl's v1 package, whose hook must not re-enter the half-imported trainer module (an ERROR and an ImportError)
    r = _python(
        """
        from microcoder_ext.verl.trainer import MicrocoderSyncTrainer
        import verl.trainer.ppo.v1 as v1
        assert v1.get_trainer_cls('microcoder_sync') is MicrocoderSyncTrainer
        print('OK')
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "OK" in r.stdout
    assert "failed after" not in r.stderr and "ImportError" not in r.stderr, r.stderr[-2000:]


def test_reloads_keep_one_hook_and_register_again():
    r = _python(
        """
        import importlib, sys, verl
        import microcoder_ext.verl.plugin as plugin
        from microcoder_ext.verl import lazy
        def finders():
            return [f for f in sys.meta_path if getattr(f, '_microcoder_post_import_finder', False)]
        import verl.trainer.ppo.v1 as v1
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
        cls = v1.get_trainer_cls('microcoder_sync')
        for mod in (plugin, lazy, plugin):
            importlib.reload(mod)
            assert len(finders()) == 1, finders()
            assert lazy.hooks()['verl.trainer.ppo.v1'] == ['microcoder_ext.verl.plugin:trainer'], lazy.hooks()
            assert v1.get_trainer_cls('microcoder_sync') is cls
        # a reload of verl's v1 package runs the hook again: a registry emptied meanwhile gets the trainer back
        del TRAINER_REGISTRY['microcoder_sync']
        importlib.reload(v1)
        assert v1.get_trainer_cls('microcoder_sync') is cls
        # the module keeps its real loader
        assert type(v1.__loader__).__name__ == 'SourceFileLoader', v1.__loader__
        assert v1.__spec__.loader is v1.__loader__
        print('OK')
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout


def test_concurrent_first_lookups_all_find_microcoder_sync():
    # several threads trigger the first import of verl.trainer.ppo.v1 at once: none may see it unregistered
    r = _python(
        """
        import sys, threading, verl
        n = 6
        barrier, found, errors = threading.Barrier(n), [], []
        def lookup():
            barrier.wait()
            try:
                from verl.trainer.ppo.v1 import get_trainer_cls
                found.append(get_trainer_cls('microcoder_sync'))
            except Exception as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=lookup) for _ in range(n)]
        for t in threads: t.start()
        for t in threads: t.join()
        print('FOUND', len(found), len(set(found)), 'ERRORS', errors)
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "FOUND 6 1 ERRORS []" in r.stdout, r.stdout


# ------------------------------------------------------------------------------------- lazy: post-import hooks


@pytest.fixture
def make_module(tmp_path, monkeypatch):
    """Write a throwaway module (unique name) and return its name; hooks on it are removed afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def make(body: str = "", package: bool = False) -> str:
        name = f"mc_lazy_{uuid.uuid4().hex[:10]}"
        path = tmp_path / name / "__init__.py" if package else tmp_path / f"{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(body))
        importlib.invalidate_caches()
        names.append(name)
        return name

    yield make
    for name in names:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]
        for mod, keys in lazy.hooks().items():
            if mod == name or mod.startswith(name + "."):
                for key in keys:
                    lazy.unregister(mod, key)


def test_hook_runs_after_the_module_body_before_import_returns(make_module):
    name = make_module("import sys\nVALUE = 41\nSEEN = sys.modules[__name__].__loader__\n")
    calls = []
    lazy.register_when_imported(name, lambda m: calls.append(m.VALUE), key="t")
    assert calls == [] and name not in sys.modules  # registering imports nothing
    mod = importlib.import_module(name)
    assert calls == [41]
    # the module sees and keeps its real loader
    assert type(mod.SEEN).__name__ == "SourceFileLoader" and mod.__loader__ is mod.SEEN is mod.__spec__.loader
    importlib.import_module(name)
    assert calls == [41]  # once per execution, not per import statement


def test_hook_on_a_submodule_and_several_hooks(make_module, tmp_path):
    pkg = make_module("", package=True)
    (tmp_path / pkg / "child.py").write_text("X = 'child'\n")
    calls = []
    lazy.register_when_imported(f"{pkg}.child", lambda m: calls.append(("a", m.X)), key="a")
    lazy.register_when_imported(f"{pkg}.child", lambda m: calls.append(("b", m.X)), key="b")
    lazy.register_when_imported(pkg, lambda m: calls.append(("pkg", m.__name__)), key="p")
    importlib.import_module(f"{pkg}.child")
    assert calls == [("pkg", pkg), ("a", "child"), ("b", "child")]


def test_already_imported_runs_immediately_and_registering_again_is_idempotent(make_module):
    name = make_module("VALUE = 1\n")
    importlib.import_module(name)
    calls = []
    lazy.register_when_imported(name, lambda m: calls.append("first"), key="k")
    assert calls == ["first"]
    lazy.register_when_imported(name, lambda m: calls.append("second"), key="k")  # same key: replaced, not rerun
    assert calls == ["first"]
    assert lazy.hooks()[name] == ["k"]


def test_reload_runs_hooks_again(make_module):
    name = make_module("VALUE = 1\n")
    calls = []
    lazy.register_when_imported(name, lambda m: calls.append(m.VALUE), key="k")
    mod = importlib.import_module(name)
    importlib.reload(mod)
    assert calls == [1, 1]
    assert type(mod.__loader__).__name__ == "SourceFileLoader"


def test_failing_hook_is_logged_at_error_and_the_import_goes_on(make_module, caplog):
    name = make_module("VALUE = 1\n")
    calls = []

    def broken(module):
        raise RuntimeError("boom")

    lazy.register_when_imported(name, broken, key="broken", what="registering the broken thing")
    lazy.register_when_imported(name, lambda m: calls.append(m.VALUE), key="fine")
    with caplog.at_level(logging.ERROR, logger="microcoder_ext"):
        mod = importlib.import_module(name)
    assert mod.VALUE == 1 and calls == [1]  # the import and the other hook went on
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.name == "microcoder_ext.verl.lazy"
    assert f"registering the broken thing failed after {name} was imported" in record.getMessage()
    assert record.exc_info[0] is RuntimeError


def test_failing_module_body_propagates_and_hooks_run_on_the_next_successful_import(make_module, tmp_path):
    name = make_module("raise ImportError('not yet')\n")
    calls = []
    lazy.register_when_imported(name, lambda m: calls.append(m.VALUE), key="k")
    with pytest.raises(ImportError, match="not yet"):
        importlib.import_module(name)
    assert calls == [] and name not in sys.modules
    (tmp_path / f"{name}.py").write_text("VALUE = 2\n")
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    importlib.import_module(name)
    assert calls == [2]


def test_other_imports_are_untouched(make_module):
    name = make_module("VALUE = 1\n")
    lazy.register_when_imported(name, lambda m: None, key="k")
    other = make_module("VALUE = 2\n")
    assert lazy._PostImportFinder().find_spec(other) is None  # not hooked: one dict lookup, no spec
    mod = importlib.import_module(other)
    assert type(mod.__spec__.loader).__name__ == "SourceFileLoader"
    spec = lazy._PostImportFinder().find_spec(name)
    assert isinstance(spec.loader, lazy._HookedLoader) and spec.loader.get_filename(name).endswith(f"{name}.py")


def test_concurrent_imports_wait_for_the_hook_which_runs_once(make_module):
    name = make_module("import time\ntime.sleep(0.3)\nREGISTERED = []\n")
    runs = []

    def hook(module):
        runs.append(1)
        module.REGISTERED.append("ours")

    lazy.register_when_imported(name, hook, key="k")
    n = 8
    barrier, seen, errors = threading.Barrier(n), [], []

    def worker():
        barrier.wait()
        try:
            seen.append(list(importlib.import_module(name).REGISTERED))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and runs == [1]
    assert seen == [["ours"]] * n  # no thread got the module before the hook had run


def test_registering_while_another_thread_executes_the_module(make_module):
    name = make_module(
        """
        import sys
        gate = sys.modules['mc_lazy_gate']
        gate.started.set()
        gate.release.wait(10)
        VALUE = 3
        """
    )
    gate = type(sys)("mc_lazy_gate")
    gate.started, gate.release = threading.Event(), threading.Event()
    sys.modules["mc_lazy_gate"] = gate
    calls = []
    try:
        lazy.register_when_imported(name, lambda m: calls.append(("early", m.VALUE)), key="early")
        t = threading.Thread(target=importlib.import_module, args=(name,))
        t.start()
        assert gate.started.wait(120)  # far above a loaded machine's thread start
        # registered while the body runs (wrapped execution): runs at its end, in the importing thread
        lazy.register_when_imported(name, lambda m: calls.append(("late", m.VALUE)), key="late")
        assert calls == []
        gate.release.set()
        t.join(120)
        assert sorted(calls) == [("early", 3), ("late", 3)]
    finally:
        gate.release.set()
        del sys.modules["mc_lazy_gate"]


def test_registering_while_an_unhooked_import_is_running_waits_for_it(make_module):
    # the module's import started before any hook existed: registration waits for it, then runs the hook
    name = make_module(
        """
        import sys
        gate = sys.modules['mc_lazy_gate2']
        gate.started.set()
        gate.release.wait(10)
        VALUE = 4
        """
    )
    gate = type(sys)("mc_lazy_gate2")
    gate.started, gate.release = threading.Event(), threading.Event()
    sys.modules["mc_lazy_gate2"] = gate
    calls = []
    try:
        t = threading.Thread(target=importlib.import_module, args=(name,))
        t.start()
        assert gate.started.wait(120)  # far above a loaded machine's thread start
        threading.Timer(0.3, gate.release.set).start()
        lazy.register_when_imported(name, lambda m: calls.append(m.VALUE), key="k")  # blocks until the body ends
        assert calls == [4]
        t.join(120)
        assert calls == [4]
    finally:
        gate.release.set()
        del sys.modules["mc_lazy_gate2"]


def test_callback_must_be_callable():
    with pytest.raises(TypeError):
        lazy.register_when_imported("whatever", None)
