"""Discrete actions numbered from 0 for the learners (envs.actions.FromZero), and the
jobs' env factory applying it."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from envs.actions import FromZero
from experiments.runtime.envs import check_env, env_factory


class Recording(gym.Env):
    """Records the actions it gets; its Discrete space starts at ``start``."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, start=1, n=3):
        self.action_space = spaces.Discrete(n, start=start)
        self.actions = []

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action)
        self.actions.append(int(action))
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_the_learners_action_i_is_the_envs_start_plus_i():
    env = FromZero(Recording(start=-2, n=4))
    assert env.action_space == spaces.Discrete(4)
    env.reset()
    for a in range(4):
        env.step(a)
    assert env.unwrapped.actions == [-2, -1, 0, 1]
    with pytest.raises(TypeError, match="needs a Discrete action space"):
        FromZero(gym.make("Pendulum-v1"))


def test_the_jobs_env_is_numbered_from_zero_and_others_are_left_alone():
    shifted = env_factory("ignored", Recording)()
    assert isinstance(shifted, FromZero) and shifted.action_space == spaces.Discrete(3)
    plain = env_factory("ignored", lambda: Recording(start=0))()
    assert not isinstance(plain, FromZero)
    assert not isinstance(env_factory("Pendulum-v1")(), FromZero)


def test_errors_name_the_users_env_rather_than_the_env_id():
    def multi():
        env = Recording()
        env.action_space = spaces.MultiDiscrete([2, 3])
        return env

    with pytest.raises(ValueError, match=r"^the env of Parts\(env=\.\.\.\) has action space MultiDiscrete"):
        check_env(lambda: env_factory("CartPole-v1", multi), env_id="CartPole-v1",
                  actions=(spaces.Discrete,), job="X", user_env=multi)
    with pytest.raises(ValueError, match="^--env-id 'Pendulum-v1' has action space Box"):
        check_env(lambda: env_factory("Pendulum-v1"), env_id="Pendulum-v1", actions=(spaces.Discrete,), job="X")
