import tomllib
from pathlib import Path

import pytest

from microcoder_ext import compat

ROOT = Path(__file__).resolve().parents[2]


def test_matrix_file_matches_code():
    matrix = tomllib.loads((ROOT / "compat" / "matrix.toml").read_text())
    assert {k: v["supported"] for k, v in matrix.items()} == compat.SUPPORTED
    for name, entry in matrix.items():
        assert compat.is_supported(name, entry["tested"])
        constraints = ROOT / "compat" / entry["constraints"]
        assert constraints.name == f"constraints-{name}-{entry['tested']}.txt"
        assert constraints.is_file(), f"compat/matrix.toml names {constraints.name}, which does not exist"
        pins = dict(line.split("==", 1) for line in constraints.read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
        assert pins[name] == entry["tested"]  # the venv tests the version the matrix says
        assert pins["torch"] == "2.13.0"  # CPU wheel, no local version suffix


def test_version_ranges():
    assert compat.is_supported("verl", "0.9.1")
    assert not compat.is_supported("verl", "0.9.0")
    assert not compat.is_supported("verl", "0.10.0")
    assert compat.is_supported("openrlhf", "0.11.2") and not compat.is_supported("openrlhf", "0.11.3")


def test_require_fails_loudly_outside_range(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda dist: "0.10.0")
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    with pytest.raises(compat.UnsupportedVersionError, match=r"supports verl>=0.9.1,<0.9.2, found verl==0.10.0"):
        compat.require("verl")
    monkeypatch.setenv(compat.ALLOW_ENV, "1")
    assert compat.require("verl") == "0.10.0"


def test_require_missing_package(monkeypatch):
    monkeypatch.setattr(compat, "installed_version", lambda dist: None)
    with pytest.raises(compat.UnsupportedVersionError, match="not installed"):
        compat.require("openrlhf")
