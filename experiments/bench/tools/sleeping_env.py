"""An env that costs wall-clock time but no CPU, and networks sized like Atari's.

Ape-X's scale (Horgan et al. 2018, arXiv:1803.00933: 360 actors, about 35 env steps
per second each) cannot be run with real emulators on a 2-core machine, but the
runtime's part of it can: :class:`SleepingEnv`'s ``step`` sleeps ``step_s`` (the GIL
and the core are free meanwhile), so many actor processes can share two cores while
each still paces itself like a real one. Its observations are either a small vector
or a ``4x84x84`` uint8 frame stack that moves by one frame per step (consecutive
stacks overlap, as Atari's do, so the shared-frames replay layout applies).

:func:`nature_sized_mlp` is a Q network with the Nature CNN's parameter count (about
1.7M) on vector observations: parameter pulls move Atari-sized states while acting
and learning cost a fraction of the CNN's CPU (used where the subject is the runtime's
traffic, not convolution speed). Every name here is importable in every rank.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

FRAME = (84, 84)
STACK = 4
_POOL = 61  # distinct frames an env cycles through (prime: stacks rarely repeat)


class SleepingEnv(gym.Env):
    """``step`` sleeps ``step_s`` seconds and returns the next observation.

    ``frames=False``: observations are ``(4,)`` float32 (the step count and noise);
    ``frames=True``: ``(4, 84, 84)`` uint8 stacks, each one frame newer than the
    last. Reward 1 when the action equals the step's parity; episodes end by
    termination after ``episode_length`` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, *, step_s: float = 0.01, frames: bool = False, episode_length: int = 200,
                 num_actions: int = 4) -> None:
        if not step_s >= 0:
            raise ValueError(f"step_s must be >= 0 seconds, got {step_s!r}")
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        if num_actions < 2:
            raise ValueError(f"num_actions must be >= 2, got {num_actions}")
        self.step_s, self.frames, self.episode_length = float(step_s), bool(frames), int(episode_length)
        self.action_space = spaces.Discrete(num_actions)
        if self.frames:
            self.observation_space = spaces.Box(0, 255, (STACK, *FRAME), np.uint8)
        else:
            self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self._pool: np.ndarray | None = None
        self._t = 0
        self._start = 0

    def _frame_pool(self) -> np.ndarray:
        # Built once per env (about 0.4 MB): a step then copies frames, it draws none.
        if self._pool is None:
            rng = np.random.default_rng(12345)
            self._pool = rng.integers(0, 256, size=(_POOL, *FRAME), dtype=np.uint8)
        return self._pool

    def _obs(self) -> np.ndarray:
        t = self._start + self._t
        if self.frames:
            pool = self._frame_pool()
            return pool[[(t + k) % _POOL for k in range(STACK)]]
        return np.array([self._t, t % 7, (t * 3) % 5, 1.0], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._start = int(self.np_random.integers(_POOL))
        return self._obs(), {}

    def step(self, action):
        if self.step_s:
            time.sleep(self.step_s)
        reward = 1.0 if int(action) == (self._t % 2) else 0.0
        self._t += 1
        terminated = self._t >= self.episode_length
        return self._obs(), reward, terminated, False, {}


def nature_sized_mlp(observation_space: Any, action_space: Any):
    """A Q network (dueling MLP, 1296 units wide) with about as many parameters as
    the Nature CNN with a dueling head on 4x84x84 frames (1.69M)."""
    from algorithms.nets import q_network

    return q_network(observation_space.shape, int(action_space.n), hidden=(1296,), dueling=True)


def parameter_count(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())
