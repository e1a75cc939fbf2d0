"""A user's env module, named as ``user_envs:UserCountingEnv-v0``: importing it registers
the env (gymnasium's ``module:EnvId`` form), in whichever rank imports it."""

import gymnasium as gym

from envs.testing import CountingEnv

ENV_ID = "UserCountingEnv-v0"

if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CountingEnv, kwargs={"episode_length": 20},
                 reward_threshold=1e9)
