"""Multi-agent adapter and vector env on the built-in CooperativeEnv and MPE simple_spread."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from envs.multiagent import CooperativeEnv, MultiAgentVectorEnv, ParallelEnvAdapter


def test_adapter_stacks_homogeneous_agents():
    adapter = ParallelEnvAdapter(CooperativeEnv(n_agents=3, max_steps=4))
    assert adapter.stacked and adapter.homogeneous and adapter.n_agents == 3
    obs, info = adapter.reset(seed=0)
    assert obs.shape == (3, 12) and obs.dtype == np.float32 and info == {}
    assert adapter.observation_space.contains(obs)
    for _ in range(4):
        obs, rew, term, trunc, _ = adapter.step(np.zeros((3, 2), dtype=np.float32))
        assert rew.shape == (3,) and np.all(rew == rew[0]) and rew[0] < 0
    assert trunc.all() and not term.any()


def test_adapter_heterogeneous_gives_per_agent_tuples():
    env = CooperativeEnv(n_agents=2, heterogeneous=True, continuous=False)
    adapter = ParallelEnvAdapter(env)
    assert not adapter.stacked and not adapter.homogeneous
    obs, _ = adapter.reset(seed=1)
    assert [o.shape for o in obs] == [(8,), (6,)]
    assert [s.n for s in adapter.agent_action_spaces] == [5, 3]
    obs, *_ = adapter.step((2, 2))  # agent 0 moves right, rail agent 1 moves right
    with pytest.raises(ValueError, match="stack=True"):
        ParallelEnvAdapter(env, stack=True)
    with pytest.raises(ValueError, match="2 agents"):
        adapter.step((1, 1, 1))
    unstacked = ParallelEnvAdapter(CooperativeEnv(n_agents=2), stack=False)
    assert isinstance(unstacked.reset(seed=0)[0], tuple)


def test_cooperative_task_is_learnable_by_moving_to_landmarks():
    """Greedy 'go to your landmark' beats standing still: the reward carries signal."""
    env = CooperativeEnv(n_agents=2, max_steps=25)

    def run(policy):
        obs, _ = env.reset(seed=3)
        total = 0.0
        for _ in range(25):
            obs, rew, *_ = env.step(
                {a: policy(i, obs[a]) for i, a in enumerate(env.possible_agents)}
            )
            total += rew["agent_0"]
        return total

    still = run(lambda i, o: np.zeros(2, dtype=np.float32))
    greedy = run(lambda i, o: np.clip(o[2 + 2 * i : 4 + 2 * i] * 10, -1, 1).astype(np.float32))
    assert greedy > still + 5


@pytest.mark.timeout(40)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("heterogeneous", [False, True])
def test_vector_env_shapes_autoreset_and_identity(num_workers, heterogeneous):
    fn = partial(CooperativeEnv, n_agents=3, max_steps=3, heterogeneous=heterogeneous)
    venv = MultiAgentVectorEnv([fn] * 3, num_workers=num_workers)
    ref = MultiAgentVectorEnv([fn] * 3, num_workers=0)
    try:
        assert venv.stacked == (not heterogeneous) and venv.n_agents == 3
        obs, _ = venv.reset(seed=5)
        ref_obs, _ = ref.reset(seed=5)
        leaves = [obs] if venv.stacked else list(obs)
        assert leaves[0].shape == (3, 3, 12) if venv.stacked else leaves[1].shape == (3, 8)
        rng = np.random.default_rng(0)
        for t in range(5):
            if venv.stacked:
                actions = rng.uniform(-1, 1, (3, 3, 2)).astype(np.float32)
            else:
                actions = tuple(
                    rng.uniform(-1, 1, s.shape).astype(np.float32) for s in venv.action_space
                )
            obs, rew, term, trunc, _ = venv.step(actions)
            r_obs, r_rew, r_term, r_trunc, _ = ref.step(actions)
            assert rew.shape == (3, 3) and trunc.shape == (3, 3) and trunc.dtype == np.bool_
            np.testing.assert_array_equal(rew, r_rew)
            for a, b in zip([obs] if venv.stacked else obs, [r_obs] if venv.stacked else r_obs):
                np.testing.assert_array_equal(a, b)
            # max_steps=3: truncated at t=2, next-step autoreset at t=3 (reward 0)
            assert trunc.all() == (t == 2)
            assert (rew == 0).all() == (t == 3)
    finally:
        venv.close()
        ref.close()


@pytest.mark.timeout(30)
def test_same_step_reports_final_step_per_agent_values():
    fn = partial(CooperativeEnv, n_agents=2, max_steps=2, continuous=False)
    venv = MultiAgentVectorEnv([fn] * 2, num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        venv.reset(seed=0)
        venv.step(np.zeros((2, 2), dtype=np.int64))
        obs, rew, term, trunc, info = venv.step(np.zeros((2, 2), dtype=np.int64))
        assert trunc.all() and (rew < 0).all()
        assert info["_final_obs"].all() and info["final_obs"][0].shape == (2, 8)
        assert venv.get_attr("t") == (0, 0)  # already reset in the same step
    finally:
        venv.close()


@pytest.mark.timeout(40)
def test_mpe_simple_spread_through_adapter_and_vector_env():
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    fn = partial(simple_spread_v3.parallel_env, N=3, max_cycles=4)
    adapter = ParallelEnvAdapter(fn())
    obs, _ = adapter.reset(seed=0)
    assert adapter.stacked and obs.shape == (3, 18)
    venv = MultiAgentVectorEnv([fn] * 2, num_workers=2)
    try:
        obs, _ = venv.reset(seed=0)
        assert obs.shape == (2, 3, 18)
        truncs = []
        for _ in range(6):
            obs, rew, term, trunc, _ = venv.step(np.zeros((2, 3), dtype=np.int64))
            truncs.append(bool(trunc.all()))
            assert rew.shape == (2, 3)
        assert truncs == [False, False, False, True, False, False]
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_multiagent_subset_stepping():
    fn = partial(CooperativeEnv, n_agents=2)
    venv = MultiAgentVectorEnv([fn] * 4, num_workers=2, step_in_parent=False)
    try:
        venv.reset(seed=0)
        venv.step_async(np.zeros((2, 2, 2), dtype=np.float32), workers=[1])
        obs, rew, *_ = venv.step_wait(timeout=10)
        assert obs.shape == (2, 2, 8) and rew.shape == (2, 2)
    finally:
        venv.close()
