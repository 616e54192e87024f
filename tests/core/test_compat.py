import re
import tomllib
from pathlib import Path

import pytest

from microcoder_ext import compat

ROOT = Path(__file__).resolve().parents[2]


def test_matrix_file_matches_code():
    matrix = tomllib.loads((ROOT / "compat" / "matrix.toml").read_text())
    assert {k: v["supported"] for k, v in matrix.items()} == compat.SUPPORTED
    assert {k: tuple(v["tested"]) for k, v in matrix.items()} == compat.TESTED
    for name, entry in matrix.items():
        assert entry["main"] == entry["tested"][-1], "the full suite runs on the newest tested release"
        assert set(entry.get("differences", {})) <= set(entry["tested"])
        for release in entry["tested"]:
            assert compat.is_supported(name, release)
            constraints = ROOT / "compat" / f"constraints-{name}-{release}.txt"
            assert constraints.is_file(), f"compat/matrix.toml tests {name} {release}: {constraints.name} is missing"
            pins = dict(line.split("==", 1) for line in constraints.read_text().splitlines()
                        if line.strip() and not line.startswith("#"))
            assert pins[name] == release  # the venv tests the version the matrix says
            assert pins["torch"] == "2.13.0"  # CPU wheel, no local version suffix


def test_every_tested_release_has_a_venv_and_a_lane():
    """compat/venv.sh builds a venv for each tested release and tests/run_all.sh runs it (its own suite)."""
    venv_sh = (ROOT / "compat" / "venv.sh").read_text()
    run_all = (ROOT / "tests" / "run_all.sh").read_text()
    matrix = tomllib.loads((ROOT / "compat" / "matrix.toml").read_text())
    suites = re.search(r"^SUITES=\$\{SUITES:-([^}]*)\}$", run_all, re.M).group(1).split()
    for name, entry in matrix.items():
        for release in entry["tested"]:
            venv = name if release == entry["main"] else f"{name}-{release}"
            assert f'{venv}) echo "constraints-{name}-{release}.txt ' in venv_sh, venv
            assert venv in suites, venv


def test_version_ranges():
    assert compat.is_supported("verl", "0.9.1") and compat.is_supported("verl", "0.9.0")
    assert not compat.is_supported("verl", "0.8.0")
    assert not compat.is_supported("verl", "0.10.0")
    assert compat.is_supported("openrlhf", "0.11.2") and not compat.is_supported("openrlhf", "0.11.3")
    assert compat.is_supported("trl", "1.15.0") and compat.is_supported("trl", "1.16.0")
    assert not compat.is_supported("trl", "1.14.2") and not compat.is_supported("trl", "1.17.0")


def test_an_older_release_names_the_oldest_supported(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda dist: "1.14.2")
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedVersionError, match=r"found trl==1.14.2 \(older than the oldest supported "
                                                             r"release, trl 1.15.0\)\. Tested releases: 1.15.0, 1.16.0"):
        compat.require("trl")


def test_require_fails_loudly_outside_range(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda dist: "0.10.0")
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedVersionError, match=r"supports verl>=0.9.0,<0.9.2, found verl==0.10.0"):
        compat.require("verl")
    monkeypatch.setenv(compat.ALLOW_ENV, "1")
    assert compat.require("verl") == "0.10.0"


def test_require_missing_package(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda dist: None)
    with pytest.raises(compat.UnsupportedVersionError, match="not installed"):
        compat.require("openrlhf")
