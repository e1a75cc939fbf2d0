"""n-step assembly: returns, discounts and bootstrapping worked out by hand."""

import numpy as np
import pytest

from rlpar.buffers import NStepAssembler


def step(asm, t, rewards, terminated=(0, 0), truncated=(0, 0), cut=None):
    return asm.step(
        obs=np.array([[t], [100 + t]], np.float32),
        action=np.array([t, 100 + t]),
        reward=np.array(rewards, np.float32),
        next_obs=np.array([[t + 1], [100 + t + 1]], np.float32),
        terminated=np.array(terminated, bool),
        truncated=np.array(truncated, bool),
        cut=None if cut is None else np.array(cut, bool),
    )


def rows_of(out, env_offset):
    keep = out["action"] >= 100 if env_offset else out["action"] < 100
    return {k: v[keep] for k, v in out.items()}


def test_full_windows_then_truncation_bootstraps():
    g = 0.5
    asm = NStepAssembler(num_envs=2, n=3, gamma=g)
    assert len(step(asm, 0, [1, 0])["obs"]) == 0
    assert len(step(asm, 1, [2, 0])["obs"]) == 0
    out = rows_of(step(asm, 2, [3, 0]), 0)
    np.testing.assert_allclose(out["reward"], [1 + g * 2 + g * g * 3])
    np.testing.assert_array_equal(out["obs"][:, 0], [0])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [3])
    np.testing.assert_allclose(out["discount"], [g**3])
    assert not out["terminated"].any()
    # Truncation at t=3 flushes steps 1, 2, 3, all bootstrapping from the final obs.
    out = rows_of(step(asm, 3, [4, 0], truncated=(1, 0)), 0)
    np.testing.assert_array_equal(out["obs"][:, 0], [1, 2, 3])
    np.testing.assert_allclose(out["reward"], [2 + g * 3 + g * g * 4, 3 + g * 4, 4])
    np.testing.assert_allclose(out["discount"], [g**3, g**2, g])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [4, 4, 4])
    assert not out["terminated"].any()


def test_a_cut_step_ends_the_window_at_the_last_real_observation():
    # Env 1's step 2 was lost (its env process died): steps 0 and 1 bootstrap from
    # obs 102, the last it reached; step 2 is not a transition; env 0 goes on.
    g = 0.5
    asm = NStepAssembler(num_envs=2, n=3, gamma=g)
    step(asm, 0, [1, 1])
    step(asm, 1, [2, 2])
    out = step(asm, 2, [3, 0], truncated=(0, 1), cut=(0, 1))
    env0, env1 = rows_of(out, 0), rows_of(out, 100)
    np.testing.assert_array_equal(env1["obs"][:, 0], [100, 101])
    np.testing.assert_allclose(env1["reward"], [1 + g * 2, 2])
    np.testing.assert_allclose(env1["discount"], [g**2, g])
    np.testing.assert_array_equal(env1["next_obs"][:, 0], [102, 102])
    assert not env1["terminated"].any()
    np.testing.assert_array_equal(env0["obs"][:, 0], [0])
    # Env 1 starts a fresh window at step 3: its first full one completes at step 5.
    assert len(rows_of(step(asm, 3, [4, 4]), 100)["obs"]) == 0
    assert len(rows_of(step(asm, 4, [5, 5]), 100)["obs"]) == 0
    np.testing.assert_array_equal(rows_of(step(asm, 5, [6, 6]), 100)["obs"][:, 0], [103])
    # A cut with nothing pending emits nothing.
    assert len(step(NStepAssembler(num_envs=2, n=3, gamma=g), 0, [1, 1], cut=(1, 1))["obs"]) == 0


def test_termination_does_not_bootstrap_and_envs_are_independent():
    g = 0.9
    asm = NStepAssembler(num_envs=2, n=4, gamma=g)
    step(asm, 0, [0, 1])
    out = step(asm, 1, [0, 2], terminated=(0, 1))
    env1 = rows_of(out, 100)
    np.testing.assert_array_equal(env1["obs"][:, 0], [100, 101])
    np.testing.assert_allclose(env1["reward"], [1 + g * 2, 2], rtol=1e-6)
    assert env1["terminated"].all()
    np.testing.assert_allclose(env1["discount"], [g**2, g], rtol=1e-6)
    np.testing.assert_array_equal(env1["next_obs"][:, 0], [102, 102])
    assert len(rows_of(out, 0)["obs"]) == 0
    # env 1 starts a fresh window; env 0 keeps its 2 pending steps.
    step(asm, 2, [0, 5])
    out = step(asm, 3, [7, 6])
    env0, env1 = rows_of(out, 0), rows_of(out, 100)
    np.testing.assert_allclose(env0["reward"], [g**3 * 7], rtol=1e-6)
    assert len(env1["obs"]) == 0
    # Terminated and truncated together: termination wins (no bootstrap).
    out = rows_of(step(asm, 4, [0, 1], terminated=(0, 1), truncated=(0, 1)), 100)
    assert out["terminated"].all() and len(out["obs"]) == 3
    np.testing.assert_allclose(out["reward"], [5 + g * 6 + g * g * 1, 6 + g * 1, 1], rtol=1e-6)


def test_n_equals_one_is_plain_transitions():
    asm = NStepAssembler(num_envs=2, n=1, gamma=0.99)
    out = step(asm, 0, [1, 2], terminated=(1, 0))
    assert len(out["obs"]) == 2
    np.testing.assert_allclose(sorted(out["reward"]), [1, 2])
    np.testing.assert_allclose(out["discount"], [0.99, 0.99], rtol=1e-6)
    np.testing.assert_array_equal(out["terminated"][np.argsort(out["action"])], [True, False])


def test_output_keys_and_dtypes():
    asm = NStepAssembler(num_envs=2, n=1, gamma=0.5)
    out = step(asm, 0, [1, 2])
    assert set(out) == {"obs", "action", "reward", "next_obs", "terminated", "discount"}
    assert out["reward"].dtype == np.float32 and out["discount"].dtype == np.float32
    assert out["terminated"].dtype == bool and out["obs"].dtype == np.float32


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_envs"):
        NStepAssembler(num_envs=0, n=3, gamma=0.9)
    with pytest.raises(ValueError, match="n must"):
        NStepAssembler(num_envs=2, n=0, gamma=0.9)
    with pytest.raises(ValueError, match="gamma"):
        NStepAssembler(num_envs=2, n=3, gamma=1.5)
    asm = NStepAssembler(num_envs=2, n=3, gamma=0.9)
    with pytest.raises(ValueError, match="reward"):
        asm.step(
            obs=np.zeros((2, 1)),
            action=np.zeros(2),
            reward=np.zeros(3),
            next_obs=np.zeros((2, 1)),
            terminated=np.zeros(2),
            truncated=np.zeros(2),
        )
    with pytest.raises(ValueError, match="next_obs"):
        asm.step(
            obs=np.zeros((2, 1)),
            action=np.zeros(2),
            reward=np.zeros(2),
            next_obs=np.zeros((2, 2)),
            terminated=np.zeros(2),
            truncated=np.zeros(2),
        )
