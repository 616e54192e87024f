"""compat/venv.sh's overlay venvs (OpenRLHF 0.11.1 over the openrlhf-0.11.0 venv, TRL 1.15.0 over TRL's): which pins
an overlay holds, and a real overlay built by ``_layer_venv`` over a real base venv, with two releases of a tiny
package built here as wheels (no index): every way of starting its python imports the overlay's release, and the
base is left as it was."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_SH = ROOT / "compat" / "venv.sh"


def bash(script: str, **env: str) -> subprocess.CompletedProcess:
    """``script`` in bash with compat/venv.sh sourced (nothing built unless the script asks)."""
    return subprocess.run(["bash", "-c", f'. "{VENV_SH}"\n{script}'], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHON": sys.executable, **env})


@pytest.mark.parametrize("name,base,pin", [("openrlhf-0.11.1", "openrlhf-0.11.0", "openrlhf==0.11.1"),
                                           ("trl-1.15.0", "trl", "trl==1.15.0")])
def test_each_overlay_differs_from_its_base_in_its_framework_release_only(name, base, pin):
    out = bash(f'venv_base {name}; venv_install_mode {name}; echo "[$(venv_base {base})]"\n'
               f'read -r c _ <<<"$(_venv_spec {name})"; read -r b _ <<<"$(_venv_spec {base})"\n'
               '_overlay_pins "$ROOT/compat/$b" "$ROOT/compat/$c"')
    assert out.returncode == 0 and out.stdout.split() == [base, "editable", "[]", pin], out.stdout + out.stderr


def test_an_overlay_of_other_packages_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("# pins\nsix==1.16.0\nidna==3.7\n")
    (tmp_path / "b.txt").write_text("six==1.17.0\nIdna==3.7  # the same package, another spelling\n")
    (tmp_path / "c.txt").write_text("six==1.17.0\n")
    same = bash(f'_overlay_pins "{tmp_path}/a.txt" "{tmp_path}/b.txt"')
    other = bash(f'_overlay_pins "{tmp_path}/a.txt" "{tmp_path}/c.txt"')
    assert same.returncode == 0 and same.stdout.split() == ["six==1.17.0"], same.stderr
    assert other.returncode != 0 and "pin different packages" in other.stderr and "idna" in other.stderr


def _wheel(tmp_path: Path, name: str, version: str) -> None:
    """A pure-Python wheel of ``name`` ``version`` with a console script of the same name, written by hand (no build
    backend needed)."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n\n\ndef main():\n    import sys\n"
                                    "    print(VERSION, sys.executable)\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{dist}/entry_points.txt": f"[console_scripts]\n{name} = {name}:main\n"}
    files[f"{dist}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{dist}/RECORD"])
    (tmp_path / "wheels").mkdir(exist_ok=True)
    with zipfile.ZipFile(tmp_path / "wheels" / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


@pytest.fixture(scope="module")
def layered(tmp_path_factory):
    """A base venv with mcdemo 1.0 and mcother 1.0, and an overlay of it with mcdemo 2.0 (``_layer_venv``)."""
    tmp = tmp_path_factory.mktemp("overlay")
    for name, version in (("mcdemo", "1.0"), ("mcdemo", "2.0"), ("mcother", "1.0")):
        _wheel(tmp, name, version)
    base, overlay = tmp / "base", tmp / "overlay"
    subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
    subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(tmp / "wheels"), "mcdemo==1.0", "mcother==1.0"], check=True, capture_output=True)
    (base / "torch_extensions").mkdir()
    out = bash(f'_layer_venv "{overlay}" "{base}" demo-2.0 mcdemo==2.0',
               PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp / "wheels"))
    assert out.returncode == 0, out.stdout + out.stderr
    return base, overlay


SHOW = ("import json, sys, mcdemo, mcother; from importlib import metadata\n"
        "print(json.dumps([mcdemo.VERSION, metadata.version('mcdemo'), mcother.__file__, sys.executable]))")


def _show(python: Path, *flags: str, env: dict | None = None) -> list:
    r = subprocess.run([str(python), *flags, "-c", SHOW], capture_output=True, text=True, env=env or {}, check=True)
    return json.loads(r.stdout)


def test_the_overlay_imports_its_release_and_the_rest_from_the_base(layered):
    base, overlay = layered
    version, meta, other, exe = _show(overlay / "bin" / "python")
    assert (version, meta) == ("2.0", "2.0") and other.startswith(str(base)) and exe == str(overlay / "bin" / "python")
    # the reward's worker starts its python with -s -B: the same
    assert _show(overlay / "bin" / "python", "-s", "-B")[:2] == ["2.0", "2.0"]
    # a process it starts with sys.executable and an empty environment: the same (no variable to lose on the way)
    child = subprocess.run([str(overlay / "bin" / "python"), "-c",
                            "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import mcdemo; "
                            "print(mcdemo.VERSION)'], env={})"], capture_output=True, text=True, env={})
    assert child.stdout.strip() == "2.0", child.stderr


def test_the_base_is_untouched_and_scripts_run_the_overlays_python(layered):
    base, overlay = layered
    assert _show(base / "bin" / "python")[:2] == ["1.0", "1.0"]
    assert not list((base / "lib").glob("python*/site-packages/zz-microcoder-overlay-base.pth"))
    script = subprocess.run([str(overlay / "bin" / "mcdemo")], capture_output=True, text=True, env={})
    assert script.stdout.split() == ["2.0", str(overlay / "bin" / "python")], script.stderr
    assert not list((overlay / "bin").glob("pip*"))  # an overlay's pip would uninstall the base's releases
    assert (overlay / "torch_extensions").resolve() == (base / "torch_extensions").resolve()


def test_the_sandbox_may_read_the_bases_site_packages(layered):
    """The reward's sandboxed programs import from the interpreter's site-packages: an overlay's and its base's."""
    base, overlay = layered
    r = subprocess.run([str(overlay / "bin" / "python"), "-s", "-c",
                        "from microcoder_ext.reward.sandbox.probe import interpreter_paths; print(interpreter_paths())"],
                       capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)}, cwd="/")
    assert r.returncode == 0, r.stderr
    sites = [p for p in ast.literal_eval(r.stdout) if p.endswith("site-packages")]
    assert sorted(Path(p).parents[2].name for p in sites) == ["base", "overlay"], sites
