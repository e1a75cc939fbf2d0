"""Timeouts as every part of ``rlpar.distributed`` takes them: seconds, checked once."""

from __future__ import annotations


def _check_timeout(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
    return float(value)
