"""The partially observed envs of envs.partial hide what they say and nothing else."""

import numpy as np
import pytest

from envs.registry import env_spec, make_env


def test_breakout_no_trail_is_minatars_breakout_without_the_trail_channel():
    pytest.importorskip("minatar")
    from envs.minatar import MinAtarEnv

    ours = make_env("rlpar/BreakoutNoTrail-v1")
    full = MinAtarEnv("breakout", use_minimal_action_set=True)
    assert ours.observation_space.shape == (10, 10, 3) and ours.observation_space.dtype == bool
    assert ours.action_space.n == 3 and env_spec("rlpar/BreakoutNoTrail-v1").max_episode_steps == 1000
    actions = np.random.default_rng(0)
    obs, _ = ours.reset(seed=5)
    seen, _ = full.reset(seed=5)
    trail_seen = False
    for _ in range(300):  # several episodes: random play misses the ball soon
        assert obs.dtype == bool and (obs == seen[..., [0, 1, 3]]).all()
        trail_seen |= bool(seen[..., 2].any())
        action = int(actions.integers(3))
        obs, reward, terminated, truncated, _ = ours.step(action)
        seen, reward_full, terminated_full, _, _ = full.step(action)
        assert (reward, terminated) == (reward_full, terminated_full) and not truncated
        if terminated:
            obs, _ = ours.reset()
            seen, _ = full.reset()
    assert trail_seen  # what was dropped was there to drop
    ours.close()


def test_stateless_cartpole_keeps_position_and_angle():
    env = make_env("rlpar/StatelessCartPole-v1")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2,) and np.allclose(obs, env.unwrapped.state[[0, 2]])
    env.close()
