"""No silent launch: a ``+recipe=microcoder*`` launch that would train without MicroCoder-GRPO stops in the launching
process, before Ray starts (``microcoder_ext.verl.launch_guard``, a Hydra callback the recipes register).

The launches run through verl 0.9.1's own Hydra entry points (``main_ppo``, the fully-async and one-step-off-policy
mains, ``main_generation_server``): one real ``python -m verl.trainer.main_ppo`` process, and one process that runs
each entry point in turn as ``python -m`` does (``runpy.run_module(module, run_name="__main__")``, its command line
in ``sys.argv``), with ``ray.init`` replaced by a recorder (a launch the guard let through would reach it, or fail
earlier in verl's own checks).
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

pytestmark = pytest.mark.verl

REFUSED = "microcoder-ext: launch refused before any worker started"
FULLY_ASYNC = "verl.experimental.fully_async_policy.fully_async_main"
ONE_STEP_OFF = "verl.experimental.one_step_off_policy.main_ppo"
GENERATION = "verl.trainer.main_generation_server"

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
    # let through: the recipe as shipped, a baseline recipe (no claim to MicroCoder-GRPO), an allowed entry point
    (MAIN_PPO, ["+recipe=microcoder"], None),
    (MAIN_PPO, ["+recipe=grpo_baseline", "trainer.use_v1=false"], None),
    (ONE_STEP_OFF, ["+recipe=microcoder", f"+env:{ENTRY_POINT_ENV}={ONE_STEP_OFF}"], None),
]

DRIVER = textwrap.dedent("""
    import json, os, runpy, sys, time, warnings
    warnings.simplefilter("ignore")
    import ray
    from hydra.core.global_hydra import GlobalHydra

    reached = []
    def recorder(*args, **kwargs):
        reached.append(1)
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
        out.append({"code": code if isinstance(code, (int, str)) else repr(code), "ray": bool(reached),
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
                          cwd=cwd, env=env, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, f"driver failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULTS "):])


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{m.rsplit('.', 2)[-2]}.{m.rsplit('.', 1)[-1]}:"
                                                       f"{' '.join(a)}" for m, a, _ in CASES])
def test_each_launch_applies_the_algorithm_or_stops_before_ray(launched, i):
    module, argv, says = CASES[i]
    r = launched[i]
    print(module, argv, r)
    if says is None:  # let through: verl's own checks or ray.init come next
        assert not (isinstance(r["code"], str) and REFUSED in r["code"]), r
        assert r["ray"] or r["code"] not in (0, None), r
    else:
        assert isinstance(r["code"], str) and r["code"].startswith(REFUSED), r
        assert says in r["code"], r
        assert not r["ray"], r


def test_the_real_command_line_stops_before_ray(tmp_path):
    """``python -m verl.trainer.main_ppo +recipe=microcoder trainer.use_v1=false``: exit 1 with the reason, no Ray."""
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", MAIN_PPO, "+recipe=microcoder", "trainer.use_v1=false"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
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
