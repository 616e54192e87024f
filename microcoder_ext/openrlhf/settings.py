"""What the launcher hands to the Ray actors: ``args.microcoder`` on OpenRLHF's nested ``args``.

The launcher sets it in its ``hierarchize`` wrapper; it then travels inside ``strategy.args`` to the trainer actor
(and every other actor), also multi-node and under ``ray job submit``, where the driver's environment does not
reach the workers. It holds plain values only (picklable, printable by ``strategy.print(args)``)::

    args.microcoder = SimpleNamespace(preset="microcoder", config={"mask": {...}, "temperature": {...}},
                                      mask=True, temperature_control=True, version="0.1.0")

``config`` is the ``microcoder:`` mapping of :mod:`microcoder_ext.core.config` (same keys as verl's), validated
again on the worker by :func:`settings_from_args`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from microcoder_ext.core.config import MicrocoderConfig, parse_config

ARGS_KEY = "microcoder"


@dataclass(frozen=True)
class OpenRLHFSettings:
    preset: str
    config: MicrocoderConfig
    #: apply the conditional truncation mask after ``compute_advantages_and_returns``
    mask: bool
    #: drive sampling and log-prob temperature from ``config.temperature`` every step
    temperature_control: bool

    def to_namespace(self) -> SimpleNamespace:
        from microcoder_ext import __version__

        return SimpleNamespace(preset=self.preset, config=config_to_dict(self.config), mask=self.mask,
                               temperature_control=self.temperature_control, version=__version__)


def config_to_dict(config: MicrocoderConfig) -> dict:
    """``MicrocoderConfig`` -> the plain ``microcoder:`` mapping (tuples as lists), accepted by ``parse_config``."""

    def plain(x: Any) -> Any:
        if isinstance(x, (tuple, list)):
            return [plain(v) for v in x]
        return x

    return {section: {k: plain(v) for k, v in dataclasses.asdict(getattr(config, section)).items()}
            for section in ("mask", "temperature")}


def settings_from_args(args: Any) -> OpenRLHFSettings:
    """Read and validate ``args.microcoder`` (set by ``python -m microcoder_ext.openrlhf.train``)."""
    ns = getattr(args, ARGS_KEY, None)
    if ns is None:
        raise RuntimeError(
            "microcoder-ext: OpenRLHF's args carry no 'microcoder' settings. The MicroCoder trainer must be started "
            "through `python -m microcoder_ext.openrlhf.train ... --mc.preset NAME`, not openrlhf.cli.train_ppo_ray"
        )
    values = vars(ns) if isinstance(ns, SimpleNamespace) else dict(ns)
    return OpenRLHFSettings(
        preset=str(values["preset"]),
        config=parse_config(values.get("config") or {}),
        mask=bool(values["mask"]),
        temperature_control=bool(values["temperature_control"]),
    )
