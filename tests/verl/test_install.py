"""Where microcoder-ext comes from in this venv, and that everything a launch needs comes with it.

The main venvs install this checkout editable; the verl 0.9.0 venv installs a wheel built from it, as a user does
(`pip install microcoder-ext` into an existing verl stack: compat/venv.sh). There run_all.sh sets
``MICROCODER_TEST_INSTALL=wheel`` and ``PYTHONSAFEPATH=1``, so that neither pytest nor any process it starts (the
launches, Ray's and vLLM's workers) imports the checkout: the release lane's real ``+recipe=microcoder`` smoke then runs
on the wheel. These tests check which of the two is in use, in this process, in a fresh process started from the
checkout and in a Ray worker, and that the wheel carries the recipes, the Hydra search-path plugin, the bundled data
and the entry points verl and vLLM load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import microcoder_ext
from host_load import hang_guard

pytestmark = pytest.mark.verl

ROOT = Path(__file__).resolve().parents[2]
INSTALL = os.environ.get("MICROCODER_TEST_INSTALL", "editable")
WHERE = "import microcoder_ext, hydra_plugins.microcoder_ext_searchpath as h; print(microcoder_ext.__file__, h.__file__)"


def _from_checkout(path: str | Path) -> bool:
    return Path(path).resolve().is_relative_to(ROOT)


def installed() -> metadata.Distribution:
    """The microcoder-ext pip installed (not the checkout's own egg-info, which `python -m` from the checkout sees)."""
    found = [d for d in metadata.distributions(name="microcoder-ext") if d.read_text("INSTALLER")]
    assert len(found) == 1, [d._path for d in found]
    return found[0]


def test_install_mode_is_the_one_the_lane_asked_for():
    assert INSTALL in ("editable", "wheel"), INSTALL
    direct = json.loads(installed().read_text("direct_url.json") or "{}")
    editable = bool(direct.get("dir_info", {}).get("editable"))
    assert editable == (INSTALL == "editable"), direct
    assert _from_checkout(microcoder_ext.__file__) == (INSTALL == "editable"), microcoder_ext.__file__


def test_a_process_started_from_the_checkout_imports_the_same_install():
    r = subprocess.run([sys.executable, "-c", WHERE], cwd=ROOT, capture_output=True, text=True, timeout=hang_guard(120))
    assert r.returncode == 0, r.stderr
    package, plugin = r.stdout.split()
    assert _from_checkout(package) == _from_checkout(plugin) == (INSTALL == "editable"), r.stdout


@pytest.mark.slow
def test_a_ray_worker_imports_the_same_install(tmp_path):
    """Started from a run directory, as `microcoder smoke` starts main_ppo (Ray puts the driver's working directory on
    its workers' sys.path: a driver started inside a checkout gives its workers that checkout)."""
    r = subprocess.run([sys.executable, "-c", f"""
import ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
@ray.remote
def where():
    {WHERE.replace('; print', '; return')}
print(*ray.get(where.remote()))
ray.shutdown()
"""], cwd=tmp_path, capture_output=True, text=True, timeout=hang_guard(600))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    package, plugin = r.stdout.split()[-2:]
    assert _from_checkout(package) == _from_checkout(plugin) == (INSTALL == "editable"), r.stdout


def test_the_install_carries_recipes_data_and_entry_points():
    dist = installed()
    configs = Path(microcoder_ext.__file__).parent / "configs" / "recipe"
    recipes = sorted(p.stem for p in configs.glob("*.yaml"))
    assert recipes == sorted(p.stem for p in (ROOT / "microcoder_ext" / "configs" / "recipe").glob("*.yaml"))
    from microcoder_ext.bundled import DATA
    assert DATA.exists() and DATA.read_bytes() == (ROOT / "microcoder_ext" / "bundled" / "problems.jsonl").read_bytes()
    groups = {ep.group: ep.value for ep in dist.entry_points}
    assert groups["verl.plugins"] == "microcoder_ext.verl.plugin"
    assert groups["vllm.general_plugins"] == "microcoder_ext.openrlhf.cpu.vllm_plugin:load"
    assert groups["console_scripts"] == "microcoder_ext.cli:main"
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    names = [f"{p.__module__}.{p.__name__}" for p in Plugins.instance().discover(SearchPathPlugin)]
    assert "hydra_plugins.microcoder_ext_searchpath.microcoder_ext_searchpath.MicrocoderExtSearchPathPlugin" in names
