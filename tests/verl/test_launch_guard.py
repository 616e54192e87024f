"""No silent launch: a ``+recipe=microcoder*`` launch that would train without MicroCoder-GRPO stops in the launching
process, before Ray starts (``microcoder_ext.verl.launch_guard``, a Hydra callback the recipes register).

The launches run through verl 0.9.1's own Hydra entry points (``main_ppo``, the fully-async and one-step-off-policy
mains, ``main_generation_server``): one real ``python -m verl.trainer.main_ppo`` process, and one process that runs
each entry point in turn as ``python -m`` does (``runpy.run_module(module, run_name="__main__")``, its command line
in ``sys.argv``), with ``ray.init`` replaced by a recorder. A launch the guard lets through must reach it from verl's
``verl/trainer/main_ppo.py:run_ppo``, the step that starts verl's trainer (its ``TaskRunner`` class, as a Ray actor),
with the trainer class and ``trainer.v1.trainer_mode`` the launch asked for: the recorder notes where it was called
from and with what.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from microcoder_ext.verl.launch_guard import ENTRY_POINT_ENV, MAIN_PPO, entry_point, launch_refusal
from microcoder_ext.verl.recipes import compose_many
from host_load import hang_guard

pytestmark = pytest.mark.verl

REFUSED = "microcoder-ext: launch refused before any worker started"
FULLY_ASYNC = "verl.experimental.fully_async_policy.fully_async_main"
ONE_STEP_OFF = "verl.experimental.one_step_off_policy.main_ppo"
GENERATION = "verl.trainer.main_generation_server"

#: what verl's own validate_config asks of a launch besides a recipe (a let-through launch must pass it to go on)
MICRO = [f"actor_rollout_ref.{role}_micro_batch_size_per_gpu=2"
         for role in ("actor.ppo", "rollout.log_prob", "ref.log_prob")]

#: (entry point module, command line, what the refusal says; None: the guard lets it through)
CASES = [
    (MAIN_PPO, ["+recipe=microcoder", "trainer.use_v1=false"], "trainer.use_v1=false runs verl's legacy trainer"),
    (MAIN_PPO, ["+recipe=microcoder_mask_only", "trainer.use_v1=false"], "trainer.use_v1=false"),
    (MAIN_PPO, ["+recipe=microcoder", "trainer.v1.trainer_mode=separate_async"], "'separate_async' trainer"),
    (MAIN_PPO, ["+recipe=microcoder_mask_only", "trainer.v1.trainer_mode=sync"], "verl's own 'sync' trainer"),
    (MAIN_PPO, ["+recipe=microcoder", "microcoder.mask.rho=2"], "rho"),
    (MAIN_PPO, ["+recipe=microcoder", "actor_rollout_ref.rollout.temperature=0.7"], "temperature"),
    (FULLY_ASYNC, ["+recipe=microcoder"], f"composed into {FULLY_ASYNC}"),
    (ONE_STEP_OFF, ["+recipe=microcoder_mask_only"], f"composed into {ONE_STEP_OFF}"),
    (GENERATION, ["+recipe=microcoder"], f"composed into {GENERATION}"),
    # let through (None), each reaching run_ppo with the trainer of LET_THROUGH: the recipe as shipped, a baseline
    # recipe (no claim to MicroCoder-GRPO), an allowed entry point
    (MAIN_PPO, ["+recipe=microcoder", *MICRO], None),
    (MAIN_PPO, ["+recipe=grpo_baseline", "trainer.use_v1=false", *MICRO], None),
    (ONE_STEP_OFF, ["+recipe=microcoder", f"+env:{ENTRY_POINT_ENV}={ONE_STEP_OFF}", *MICRO], None),
]
#: (entry point, first override) of each let-through case -> (the Ray actor class run_ppo was given, the launch's
#: trainer.v1.trainer_mode)
LET_THROUGH = {
    (MAIN_PPO, "+recipe=microcoder"): ("TaskRunnerV1", "microcoder_sync"),  # main_ppo's v1 TaskRunner
    (MAIN_PPO, "+recipe=grpo_baseline"): ("TaskRunner", "sync"),  # main_ppo_v0's legacy TaskRunner
    (ONE_STEP_OFF, "+recipe=microcoder"): ("OneStepTaskRunner", "microcoder_sync"),
}
#: where verl's trainer is started: the function that calls ray.init, then runs the TaskRunner as a Ray actor
RUN_PPO = "verl/trainer/main_ppo.py:run_ppo"

DRIVER = textwrap.dedent("""
    import json, os, runpy, sys, time, warnings
    warnings.simplefilter("ignore")
    import ray
    from hydra.core.global_hydra import GlobalHydra

    reached = []
    def recorder(*args, **kwargs):  # who called ray.init, for which trainer
        from omegaconf import OmegaConf
        caller = sys._getframe(1)
        path = caller.f_code.co_filename.replace(os.sep, "/")
        config, runner = caller.f_locals.get("config"), caller.f_locals.get("task_runner_class")
        reached.append({"caller": path[path.rfind("/verl/") + 1:] + ":" + caller.f_code.co_name,
                        "task_runner": getattr(getattr(runner, "__ray_metadata__", None), "class_name", None),
                        "trainer_mode": OmegaConf.select(config, "trainer.v1.trainer_mode") if config else None})
        raise RuntimeError("ray.init reached")
    ray.init = recorder
    out = []
    for module, argv in json.loads(sys.argv[1]):
        env = [a for a in argv if a.startswith("+env:")]
        for a in env:
            key, value = a[len("+env:"):].split("=", 1)
            os.environ[key] = value
        argv = [a for a in argv if a not in env]
        GlobalHydra.instance().clear()
        sys.argv = [module.rsplit(".", 1)[-1] + ".py", *argv]
        reached.clear()
        t0 = time.monotonic()
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code
        except BaseException as e:  # a launch that went on: whatever stopped it
            code = f"{type(e).__name__}: {e}"
        for a in env:
            os.environ.pop(a[len("+env:"):].split("=", 1)[0])
        out.append({"code": code if isinstance(code, (int, str)) else repr(code), "ray": (reached or [None])[0],
                    "seconds": round(time.monotonic() - t0, 2)})
    print("RESULTS " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    import verl

    cwd = tmp_path_factory.mktemp("guard")
    # the one-step-off-policy main finds verl's ppo_trainer config at file://verl/trainer/config, relative to the
    # working directory (a verl checkout's root): give it one
    (cwd / "verl").symlink_to(os.path.dirname(verl.__file__))
    cases = [(m, argv) for m, argv, _ in CASES]
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", ENTRY_POINT_ENV)}
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=hang_guard(900))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, f"driver failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULTS "):])


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{m.rsplit('.', 2)[-2]}.{m.rsplit('.', 1)[-1]}:"
                                                       f"{' '.join(a)}" for m, a, _ in CASES])
def test_each_launch_applies_the_algorithm_or_stops_before_ray(launched, i):
    module, argv, says = CASES[i]
    r = launched[i]
    print(module, argv, r)
    if says is None:  # let through: verl's trainer is started (ray.init from run_ppo, with the launch's trainer)
        runner, mode = LET_THROUGH[(module, argv[0])]
        assert r["ray"] == {"caller": RUN_PPO, "task_runner": runner, "trainer_mode": mode}, r
        assert r["code"] == 1, r  # Hydra reports the recorder's RuntimeError and exits 1
    else:
        assert isinstance(r["code"], str) and r["code"].startswith(REFUSED), r
        assert says in r["code"], r
        assert not r["ray"], r


def test_the_real_command_line_stops_before_ray(tmp_path):
    """``python -m verl.trainer.main_ppo +recipe=microcoder trainer.use_v1=false``: exit 1 with the reason, no Ray."""
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", MAIN_PPO, "+recipe=microcoder", "trainer.use_v1=false"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=hang_guard(600))
    seconds = time.monotonic() - t0
    print(f"refused after {seconds:.1f} s (mostly importing verl)")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"{REFUSED}: trainer.use_v1=false" in proc.stderr
    assert "Started a local Ray instance" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_refusal_reasons_on_composed_configs():
    ok, legacy, sync, rho = compose_many([("microcoder", []), ("microcoder", ["trainer.use_v1=false"]),
                                          ("microcoder_mask_only", ["trainer.v1.trainer_mode=sync"]),
                                          ("microcoder", ["microcoder.mask.rho=1.5"])])
    assert launch_refusal(ok, MAIN_PPO) is None
    assert "legacy trainer" in launch_refusal(legacy, MAIN_PPO)
    assert "'sync' trainer" in launch_refusal(sync, MAIN_PPO)
    assert "rho" in launch_refusal(rho, MAIN_PPO)
    other = launch_refusal(ok, "my_project.train")
    assert "composed into my_project.train" in other and f"{ENTRY_POINT_ENV}=my_project.train" in other


def test_a_verl_outside_the_range_is_refused_naming_the_oldest_supported(monkeypatch):
    """verl 0.8 (no v1 trainer, no plugin entry point) would never build microcoder_sync: the launch stops."""
    from microcoder_ext import compat

    (ok,) = compose_many([("microcoder", [])])
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    monkeypatch.setattr(compat, "installed_version", lambda dist: "0.8.0")
    refusal = launch_refusal(ok, MAIN_PPO)
    assert "found verl==0.8.0 (older than the oldest supported release, verl 0.9.0)" in refusal


def test_entry_point_names_the_module_also_under_python_dash_m(monkeypatch):
    import types

    def main():  # a task function defined in a module run with ``python -m verl.trainer.main_ppo``
        pass

    main.__module__ = "__main__"
    fake = types.ModuleType("__main__")
    fake.__spec__ = types.SimpleNamespace(name=MAIN_PPO)
    monkeypatch.setitem(sys.modules, "__main__", fake)
    assert entry_point(main) == MAIN_PPO
    fake.__spec__ = None  # ``python script.py``: the script's file
    assert entry_point(main) == os.path.realpath(__file__)
    main.__module__ = "my_project.train"
    assert entry_point(main) == "my_project.train"


def test_the_guarded_recipes_are_the_ones_that_register_it():
    """``microcoder smoke verl`` runs the launch guard exactly where main_ppo would: for a recipe whose file
    registers the Hydra callback (the last ``recipe`` override wins, as in Hydra)."""
    from microcoder_ext.verl.launch_guard import guarded_recipe

    assert guarded_recipe(["+recipe=microcoder", "trainer.use_v1=false"]) == "microcoder"
    assert guarded_recipe(["+recipe=microcoder_mask_only"]) == "microcoder_mask_only"
    assert guarded_recipe(["+recipe=grpo_baseline"]) is None and guarded_recipe(["+recipe=dapo_baseline"]) is None
    assert guarded_recipe(["trainer.v1.trainer_mode=separate_async"]) is None
    assert guarded_recipe(["+recipe=grpo_baseline", "recipe=microcoder"]) == "microcoder"
