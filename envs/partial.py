"""Partially observed versions of small envs, for agents with memory (R2D2).

``rlpar/StatelessCartPole-v1``: CartPole-v1 (500 steps, solved at 475) whose
observation keeps the cart's position and the pole's angle and drops both velocities,
the usual test of a recurrent agent (e.g. sb3-contrib's RecurrentPPO benchmarks
"CartPoleNoVel"): a feed-forward policy sees no motion, a recurrent one infers it from
consecutive steps.

``rlpar/BreakoutNoTrail-v1``: MinAtar Breakout (Young & Tian 2019) as
``MinAtar/Breakout-v1`` plays it (the minimal action set: noop, left, right; sticky
actions 0.1), one frame observed with the ``trail`` channel dropped: a ``(10, 10, 3)``
bool image of paddle, ball and bricks. MinAtar's trail marks the ball's previous cell,
which is what tells its direction; without it one frame shows where the ball is but not
where it goes, so a feed-forward agent has to guess and a recurrent one can remember
the previous frame. Episodes are cut at 1,000 steps (gymnax's MinAtar cap; MinAtar has
none), so that a good policy's episodes stay bounded. Needs the ``minatar`` extra.

Both are registered by :func:`envs.registry.ensure_registered` for any id in the
``rlpar/`` namespace, so every rank of a job knows them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

# The ids registered here: id -> (entry point, max_episode_steps, reward_threshold).
IDS = {"rlpar/StatelessCartPole-v1": ("envs.partial:StatelessCartPoleEnv", 500, 475.0),
       "rlpar/BreakoutNoTrail-v1": ("envs.partial:BreakoutNoTrailEnv", 1000, None)}
KEPT = np.array([0, 2])  # x and theta of CartPole's (x, x_dot, theta, theta_dot)
BREAKOUT_KEPT = np.array([0, 1, 3])  # MinAtar Breakout's channels: paddle, ball, (trail), brick


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


class BreakoutNoTrailEnv(gym.ObservationWrapper):
    """MinAtar Breakout observing paddle, ball and bricks, not the ball's trail (see the
    module docstring). ``sticky_action_prob`` is MinAtar's (0.1 by default)."""

    def __init__(self, render_mode: str | None = None, sticky_action_prob: float = 0.1) -> None:
        from envs.minatar import MinAtarEnv  # the minatar extra, only for this env

        env = MinAtarEnv("breakout", use_minimal_action_set=True, sticky_action_prob=sticky_action_prob,
                         render_mode=render_mode)
        channels = env.game.env.channels
        if [channels[name] for name in ("paddle", "ball", "brick")] != BREAKOUT_KEPT.tolist():
            raise RuntimeError(f"MinAtar Breakout's channels moved: {channels}; update envs.partial")
        super().__init__(env)
        height, width, _ = env.observation_space.shape
        self.observation_space = spaces.Box(0.0, 1.0, shape=(height, width, len(BREAKOUT_KEPT)), dtype=bool)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[..., BREAKOUT_KEPT]
