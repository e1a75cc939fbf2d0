"""A user's env module for ``"user_env_module:UserEnv-v0"`` ids: importing it registers
``UserEnv-v0``, as gymnasium's ``module:EnvId`` form expects (tests/envs/test_registry.py)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "UserEnv-v0"


class UserEnv(gym.Env):
    """Observation = ``[steps since reset, offset]``; three steps to an episode."""

    def __init__(self, *, offset: float = 0.0) -> None:
        self.offset = offset
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([0.0, self.offset], dtype=np.float32), {}

    def step(self, action: Any):
        self.count += 1
        obs = np.array([self.count, self.offset], dtype=np.float32)
        return obs, float(action), self.count >= 3, False, {}


gym.register(id=ENV_ID, entry_point="user_env_module:UserEnv", kwargs={"offset": 0.5})
