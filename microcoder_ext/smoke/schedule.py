"""Fitting a staged temperature schedule into a smoke run's few steps (so that every switch is exercised)."""

from __future__ import annotations

from typing import Any, Sequence


def compress_stages(stages: Sequence[Sequence[Any]], steps: int, first_step: int = 1) -> list[list[Any]]:
    """``[[step, T], ...]`` spread over ``steps`` steps numbered from ``first_step`` (verl and OpenRLHF count
    from 1, TRL's controller from 0): stage ``k`` of ``m`` starts at ``first_step + k * steps // m``, the first
    stays at 0; stages that no longer fit (or would start at the same step as the one before) are dropped."""
    m = len(stages)
    out: list[list[Any]] = []
    for k, (_, temperature) in enumerate(stages):
        start = 0 if k == 0 else first_step + (k * steps) // m
        if k and (start >= first_step + steps or start <= out[-1][0]):
            break
        out.append([start, float(temperature)])
    return out
