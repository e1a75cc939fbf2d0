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


class BoxActions:
    """A Box's normalized-action map: flat actions in [-1, 1] to the Box's shape and
    float dtype, and the Box's actions back, validated like :func:`action_scale`.

    Actions go out in the Box's own float dtype (float32 for plain sequences),
    clipped to its bounds in that dtype: center + half_range * 1 rounds to one step
    past a bound such as 0.1 in float32, which ``Box.contains`` refuses."""

    def __init__(self, low: Any, high: Any) -> None:
        self.center, self.half_range = action_scale(low, high)
        floating = isinstance(low, np.ndarray) and np.issubdtype(low.dtype, np.floating)
        self.dtype = low.dtype if floating else np.dtype(np.float32)
        self.low = np.asarray(low, dtype=self.dtype).reshape(-1)
        self.high = np.asarray(high, dtype=self.dtype).reshape(-1)
        self.dim = int(self.center.size)
        self.shape: tuple[int, ...] = tuple(np.shape(low))  # e.g. (2, 2); the networks see it flat

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """Normalized flat actions (B, dim) -> the Box's actions (B, *shape)."""
        scaled = self.center + self.half_range * np.asarray(action, dtype=np.float64)
        # Clipped in float64 against bounds exact in the Box's dtype, the cast cannot round past them.
        return np.clip(scaled, self.low, self.high).astype(self.dtype).reshape(-1, *self.shape)

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """The Box's actions (a tensor, any leading batch) -> flat normalized (B, dim)."""
        center = torch.as_tensor(self.center, device=action.device)
        half = torch.as_tensor(self.half_range, device=action.device)
        return (action.float().reshape(-1, self.dim) - center) / half


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
