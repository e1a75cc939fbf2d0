"""Exploration noise for continuous actions (DDPG, TD3, MADDPG).

Both processes work in the actor's normalized action space ([-1, 1]); the
algorithm adds the noise, clips, and only then scales to the environment's Box.
:func:`exploration_scales` spreads Ape-X-style per-actor noise scales over env copies.
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


def actor_noise_scale(index: int, num_actors: int, *, sigma: float = 0.5, alpha: float = 3.0) -> float:
    """Gaussian exploration scale of actor ``index`` of ``num_actors``:
    ``sigma ** (1 + alpha * index / (num_actors - 1))``, Ape-X's per-actor epsilon
    schedule (Horgan et al. 2018, arXiv:1803.00933) read as a noise scale; a single
    actor uses ``sigma``."""
    if num_actors < 1 or not 0 <= index < num_actors:
        raise ValueError(f"actor index must be in [0, {num_actors}), got {index}")
    if not 0.0 <= sigma <= 1.0:
        raise ValueError(f"sigma must be in [0, 1] (a scale of the normalized action range), got {sigma}")
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if num_actors == 1:
        return float(sigma)
    return float(sigma ** (1.0 + index / (num_actors - 1) * alpha))


def exploration_scales(index: int, num_actors: int, num_envs: int, *, sigma: float = 0.5,
                       alpha: float = 3.0, per_env: bool = True) -> float | np.ndarray:
    """Actor ``index``'s exploration noise scales for continuous actions, the analogue
    of :func:`algorithms.dqn.apex.exploration_rates`: one :func:`actor_noise_scale` per env
    copy (an array of ``num_envs``, the schedule spread over all ``num_actors *
    num_envs`` copies, env ``k`` of actor ``i`` being copy ``i * num_envs + k``) or,
    with ``per_env=False``, one scale for the whole actor. Set it as ``noise_scale``
    of :class:`algorithms.td3.ddpg.DDPG` / :class:`algorithms.td3.TD3`.

    Scales are standard deviations in the normalized action space [-1, 1]. The Ape-X
    paper's DPG experiments give no per-actor noise rule that we could find; RLlib's
    Ape-X DDPG (``PerWorkerGaussianNoise``) multiplies its base noise by the DQN
    schedule ``0.4 ** (1 + 7 i / (N - 1))``. We keep that geometric form but choose
    (0.5, 3): from 0.5 down to 0.5 ** 4 = 0.0625, a factor 8 around TD3's fixed 0.1
    (Fujimoto et al. 2018), so the wide end explores and the narrow end acts nearly as
    the policy, on whose states the critic must be accurate. With 2 actors x 8 envs
    (copy j of 16 gets ``0.5 ** (1 + 3 j / 15)``): actor 0 has 0.500, 0.435, 0.379,
    0.330, 0.287, 0.250, 0.218, 0.189; actor 1 has 0.165, 0.144, 0.125, 0.109, 0.095,
    0.082, 0.072, 0.0625. Ape-X DQN's own (0.4, 7) would leave half the copies below
    0.4 ** 4.5 = 0.016, effectively greedy: fine for epsilon-greedy Atari, where a
    greedy actor still meets new states, but wasteful for deterministic control.
    """
    if not per_env:
        return actor_noise_scale(index, num_actors, sigma=sigma, alpha=alpha)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    actor_noise_scale(index, num_actors, sigma=sigma, alpha=alpha)  # validates the arguments
    total = num_actors * num_envs
    return np.array([actor_noise_scale(index * num_envs + k, total, sigma=sigma, alpha=alpha)
                     for k in range(num_envs)])
