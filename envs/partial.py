"""Partially observed versions of small envs, for agents with memory (R2D2).

``rlpar/StatelessCartPole-v1``: CartPole-v1 (500 steps, solved at 475) whose
observation keeps the cart's position and the pole's angle and drops both velocities,
the usual test of a recurrent agent (e.g. sb3-contrib's RecurrentPPO benchmarks
"CartPoleNoVel"): a feed-forward policy sees no motion, a recurrent one infers it from
consecutive steps. Registered by :func:`envs.registry.ensure_registered` for any id in
the ``rlpar/`` namespace, so every rank of a job knows it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

# The ids registered here: id -> (entry point, max_episode_steps, reward_threshold).
IDS = {"rlpar/StatelessCartPole-v1": ("envs.partial:StatelessCartPoleEnv", 500, 475.0)}
KEPT = np.array([0, 2])  # x and theta of CartPole's (x, x_dot, theta, theta_dot)


class StatelessCartPoleEnv(CartPoleEnv):
    """CartPole observing ``(x, theta)`` only (see the module docstring)."""

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode=render_mode, **kwargs)
        full = self.observation_space
        self.observation_space = spaces.Box(full.low[KEPT], full.high[KEPT], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[KEPT], info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[KEPT], reward, terminated, truncated, info
