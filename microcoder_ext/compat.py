"""Supported framework versions and the guard that protects every use of framework internals.

The same table lives in ``compat/matrix.toml`` (a test keeps them equal). Adapters call
:func:`require` before subclassing or patching anything; outside the range they raise
:class:`UnsupportedVersionError` with the installed and supported versions. ``MICROCODER_ALLOW_UNSUPPORTED=1``
turns the error into a warning, for people porting to a new release on purpose.
"""

from __future__ import annotations

import logging
import os
from importlib import metadata

from packaging.specifiers import SpecifierSet
from packaging.version import Version

logger = logging.getLogger(__name__)

#: distribution name -> supported version specifier
SUPPORTED: dict[str, str] = {
    "verl": ">=0.9.0,<0.9.2",
    "openrlhf": ">=0.11.0,<0.11.3",
    "trl": ">=1.15,<1.17",
}

#: distribution name -> every release of its range tested in ``make test`` (each with its own pins), newest last
TESTED: dict[str, tuple[str, ...]] = {
    "verl": ("0.9.0", "0.9.1"),
    "openrlhf": ("0.11.0", "0.11.1", "0.11.2"),
    "trl": ("1.15.0", "1.16.0"),
}

ALLOW_ENV = "MICROCODER_ALLOW_UNSUPPORTED"


class UnsupportedVersionError(RuntimeError):
    """The installed framework version is outside the range microcoder-ext was tested with."""


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def is_supported(dist: str, version: str) -> bool:
    return Version(version) in SpecifierSet(SUPPORTED[dist])


def require(dist: str) -> str:
    """Return the installed version of ``dist``; raise if it is missing or unsupported."""
    version = installed_version(dist)
    if version is None:
        raise UnsupportedVersionError(
            f"microcoder-ext: {dist} is not installed; install it with `pip install 'microcoder-ext[{dist}]'`"
        )
    if not is_supported(dist, version):
        tested = TESTED[dist]
        older = Version(version) < Version(tested[0])
        msg = (
            f"microcoder-ext {_own_version()} supports {dist}{SUPPORTED[dist]}, found {dist}=={version}"
            + (f" (older than the oldest supported release, {dist} {tested[0]})" if older else "") + ". "
            f"Tested releases: {', '.join(tested)}. "
            f"Its {dist} adapter subclasses/wraps {dist} internals that change between releases; "
            f"install a supported {dist} (see compat/matrix.toml) or set {ALLOW_ENV}=1 to try anyway."
        )
        if os.environ.get(ALLOW_ENV, "") == "1":
            logger.warning("%s (continuing because %s=1)", msg, ALLOW_ENV)
        else:
            raise UnsupportedVersionError(msg)
    return version


def _own_version() -> str:
    from microcoder_ext import __version__

    return __version__
