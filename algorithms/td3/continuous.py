"""Small parts shared by the deterministic continuous-action actor-critics
(:mod:`algorithms.td3.ddpg`, :mod:`algorithms.td3`): Polyak averaging, Box scaling,
seeded construction, the optimizer choice, ``Q(s, a)`` and the weighted loss mean."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.optim import EagerAdam


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float) -> None:
    """``target <- (1 - tau) target + tau source``, in place, for every pair."""
    target, source = list(target), list(source)
    if len(target) != len(source):
        raise ValueError(f"polyak_update: {len(target)} target tensors vs {len(source)} source tensors")
    if target:
        torch._foreach_lerp_(target, source, tau)


def action_scale(low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
    """Center and half-range of a Box, validated (finite, low < high)."""
    low = np.asarray(low, dtype=np.float32).reshape(-1)
    high = np.asarray(high, dtype=np.float32).reshape(-1)
    if low.shape != high.shape:
        raise ValueError(f"action low {low.shape} and high {high.shape} differ in shape")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ValueError(f"action bounds must be finite with low < high, got low={low} high={high}")
    return (high + low) / 2, (high - low) / 2


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Seed torch's CPU generator inside the block only, so that building seeded
    networks leaves the caller's random stream alone."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def adam(params: Iterable[torch.Tensor], *, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """:class:`~algorithms.optim.EagerAdam` (starts in milliseconds), or torch's Adam
    when the paper's L2 weight decay is asked for (EagerAdam has none)."""
    if weight_decay:
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return EagerAdam(params, lr=lr)


def q_value(critic: nn.Module, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``Q(obs, action)`` of shape (B,) from a critic on ``cat([obs, action])``."""
    return critic(torch.cat([obs, action], -1)).squeeze(-1)


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Mean over the batch (last axis), each transition scaled by its importance weight."""
    return values.mean() if weights is None else (values * weights).mean()
