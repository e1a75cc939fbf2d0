"""A failing worker is reported with its traceback and takes the job down cleanly."""

import gymnasium as gym
import pytest
from jobs import a3c_config

from experiments.a3c import run
from rlpar.errors import ChildError

ENV_ID = "A3CCrashingCartPole-v0"


class CrashingCartPole(gym.Wrapper):
    """CartPole that raises on its 50th step (in whichever process runs it)."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps >= 50:
            raise RuntimeError("CrashingCartPole fails on purpose")
        return self.env.step(action)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CrashingCartPole)


@pytest.mark.timeout(150)
def test_a_crashing_worker_env_fails_the_run_with_its_traceback():
    config = a3c_config(env_id=ENV_ID, num_workers=2, max_seconds=60.0, rpc_timeout=20.0,
                        max_env_steps=100_000)
    with pytest.raises(ChildError) as exc:
        run(config, quiet=True)
    assert "CrashingCartPole fails on purpose" in str(exc.value)
