"""Exploration noise for continuous actions (DDPG, MADDPG).

Both processes work in the actor's normalized action space ([-1, 1]); the
algorithm adds the noise, clips, and only then scales to the environment's Box.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np


class ActionNoise(abc.ABC):
    """Noise with a fixed per-row shape; ``sample`` returns one draw per row."""

    def __init__(self, *, shape: Sequence[int], seed: int | None = None) -> None:
        shape = tuple(int(s) for s in shape)
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"noise shape must be non-empty and positive, got {shape}")
        self.shape = shape
        self.rng = np.random.default_rng(seed)

    @abc.abstractmethod
    def sample(self) -> np.ndarray:
        """One draw of shape ``self.shape`` (float32)."""

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Forget state for the rows where ``mask`` is true (all rows if ``None``).

        Stateless noise has nothing to forget."""
        del mask


class GaussianNoise(ActionNoise):
    """Independent N(0, std^2) per action dimension (TD3-style; no state)."""

    def __init__(self, *, shape: Sequence[int], std: float = 0.1, seed: int | None = None) -> None:
        super().__init__(shape=shape, seed=seed)
        if not std >= 0:
            raise ValueError(f"std must be >= 0, got {std}")
        self.std = float(std)

    def sample(self) -> np.ndarray:
        return (self.std * self.rng.standard_normal(self.shape)).astype(np.float32)


class OrnsteinUhlenbeckNoise(ActionNoise):
    """Temporally correlated noise ``dx = theta (mu - x) dt + sigma sqrt(dt) N(0, 1)``,
    as used by Lillicrap et al. 2016 (arXiv 1509.02971, theta=0.15, sigma=0.2).

    The leading axis of ``shape`` is usually the number of env copies so that each
    copy has its own process; ``reset(mask)`` restarts the processes of finished
    episodes.
    """

    def __init__(
        self,
        *,
        shape: Sequence[int],
        theta: float = 0.15,
        sigma: float = 0.2,
        dt: float = 1e-2,
        mu: float = 0.0,
        seed: int | None = None,
    ) -> None:
        super().__init__(shape=shape, seed=seed)
        for name, value in (("theta", theta), ("sigma", sigma), ("dt", dt)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if dt == 0:
            raise ValueError("dt must be > 0")
        self.theta, self.sigma, self.dt, self.mu = float(theta), float(sigma), float(dt), float(mu)
        self.state = np.full(self.shape, self.mu, dtype=np.float64)

    def sample(self) -> np.ndarray:
        drift = self.theta * (self.mu - self.state) * self.dt
        diffusion = self.sigma * np.sqrt(self.dt) * self.rng.standard_normal(self.shape)
        self.state = self.state + drift + diffusion
        return self.state.astype(np.float32)

    def reset(self, mask: np.ndarray | None = None) -> None:
        if mask is None:
            self.state[...] = self.mu
            return
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != self.shape[: mask.ndim]:
            raise ValueError(f"reset mask shape {mask.shape} does not lead noise shape {self.shape}")
        self.state[mask] = self.mu


def make_noise(kind: str, *, shape: Sequence[int], scale: float, seed: int | None = None) -> ActionNoise:
    """``kind`` is ``"gaussian"`` (std=scale) or ``"ou"`` (sigma=scale)."""
    if kind == "gaussian":
        return GaussianNoise(shape=shape, std=scale, seed=seed)
    if kind == "ou":
        return OrnsteinUhlenbeckNoise(shape=shape, sigma=scale, seed=seed)
    raise ValueError(f"noise kind must be 'gaussian' or 'ou', got {kind!r}")
