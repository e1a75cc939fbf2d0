"""Action spaces as the learners' heads number them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces


class FromZero(gym.ActionWrapper):
    """``Discrete(n, start=s)`` as ``Discrete(n)``: the policy's action ``i`` is the
    env's ``s + i``. Q-heads and categorical policies number actions from 0; without
    this they would send 0 to an env whose actions start at 1."""

    def __init__(self, env: gym.Env) -> None:
        if not isinstance(env.action_space, spaces.Discrete):
            raise TypeError(f"FromZero needs a Discrete action space, got {env.action_space}")
        super().__init__(env)
        self.start = int(env.action_space.start)
        self.action_space = spaces.Discrete(int(env.action_space.n))

    def action(self, action: Any) -> Any:
        return action + self.start
