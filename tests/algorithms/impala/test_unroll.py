import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.impala import UnrollAdder, collate_unrolls
from envs.testing import CountingEnv


def counting_envs(mode=AutoresetMode.SAME_STEP):
    """Env 0 is truncated after 3 steps, env 1 terminates after 2: obs = step count."""
    return SyncVectorEnv([lambda: CountingEnv(episode_length=3, truncate=True),
                          lambda: CountingEnv(episode_length=2)], autoreset_mode=mode)


def run(adder, env, steps, *, seed=0):
    obs, _ = env.reset(seed=seed)
    unrolls = []
    for t in range(steps):
        action = np.zeros(env.num_envs, dtype=np.int64)
        log_prob = np.full(env.num_envs, -0.1 * (t + 1), dtype=np.float32)
        next_obs, reward, term, trunc, infos = env.step(action)
        item = adder.add(obs=obs, action=action, reward=reward, terminated=term, truncated=trunc,
                         behaviour_log_prob=log_prob, next_obs=next_obs, infos=infos)
        if item is not None:
            unrolls.append(item)
        obs = next_obs
    return unrolls


def test_adder_cuts_unrolls_with_episode_ends_and_truncations():
    adder = UnrollAdder(unroll_length=4, num_envs=2)
    first, second = run(adder, counting_envs(), 8)
    assert adder.unrolls == 2 and len(adder) == 0
    np.testing.assert_array_equal(first["obs"][..., 0], [[0, 0], [1, 1], [2, 0], [0, 1]])
    np.testing.assert_array_equal(first["terminated"], [[0, 0], [0, 1], [0, 0], [0, 1]])
    np.testing.assert_array_equal(first["truncated"], [[0, 0], [0, 0], [1, 0], [0, 0]])
    np.testing.assert_array_equal(first["reward"], [[1, 1], [0, 0], [1, 1], [1, 0]])
    np.testing.assert_allclose(first["behaviour_log_prob"][:, 0], [-0.1, -0.2, -0.3, -0.4])
    # Only the truncated step keeps its final observation (count 3); env 1's
    # terminations need none. Position t * n + env = 2 * 2 + 0.
    np.testing.assert_array_equal(first["final_index"], [4])
    np.testing.assert_array_equal(first["final_obs"], [[3.0]])
    # The bootstrap is the env's next observation: env 1 has already reset.
    np.testing.assert_array_equal(first["next_obs_last"][:, 0], [1, 0])
    # Consecutive unrolls share their boundary observation.
    np.testing.assert_array_equal(second["obs"][0], first["next_obs_last"])
    np.testing.assert_array_equal(second["obs"][..., 0], [[1, 0], [2, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(second["final_index"], [2])  # truncated at t = 1
    assert first["reward"].dtype == np.float32 and first["terminated"].dtype == bool
    assert first["final_index"].dtype == np.int64 and first["obs"].dtype == np.float32


def test_unroll_without_truncation_has_empty_finals():
    adder = UnrollAdder(unroll_length=2, num_envs=2)
    (item,) = run(adder, counting_envs(), 2)
    assert item["final_obs"].shape == (0, 1) and item["final_index"].shape == (0,)


def test_adder_rejects_next_step_autoreset():
    adder = UnrollAdder(unroll_length=8, num_envs=2)
    with pytest.raises(ValueError, match="SAME_STEP"):
        run(adder, counting_envs(AutoresetMode.NEXT_STEP), 3)


def test_adder_checks_its_arguments():
    with pytest.raises(ValueError, match="unroll_length must be an int >= 1"):
        UnrollAdder(unroll_length=0, num_envs=1)
    adder = UnrollAdder(unroll_length=2, num_envs=2)
    z = np.zeros(2)
    with pytest.raises(ValueError, match="reward must have a leading axis of num_envs=2"):
        adder.add(obs=np.zeros((2, 1)), action=z, reward=np.zeros(3), terminated=z, truncated=z,
                  behaviour_log_prob=z, next_obs=np.zeros((2, 1)))
    assert len(adder) == 0
    adder.add(obs=np.zeros((2, 1)), action=z, reward=z, terminated=z, truncated=z,
              behaviour_log_prob=z, next_obs=np.zeros((2, 1)))
    assert len(adder) == 1
    adder.reset()
    assert len(adder) == 0


def test_collate_stacks_envs_and_remaps_final_index():
    wide = run(UnrollAdder(unroll_length=4, num_envs=2), counting_envs(), 4)[0]
    narrow_env = SyncVectorEnv([lambda: CountingEnv(episode_length=2, truncate=True)],
                               autoreset_mode=AutoresetMode.SAME_STEP)
    narrow = run(UnrollAdder(unroll_length=4, num_envs=1), narrow_env, 4)[0]
    batch = collate_unrolls([wide, narrow])
    assert batch["obs"].shape == (4, 3, 1) and batch["next_obs_last"].shape == (3, 1)
    np.testing.assert_array_equal(batch["obs"][:, :2], wide["obs"])
    np.testing.assert_array_equal(batch["obs"][:, 2:], narrow["obs"])
    # Each final observation still points at its own step: (t, column) in the batch.
    cases = [(wide, 0), (narrow, 2)]
    expected = sorted((t, offset + env, float(obs[0]))
                      for item, offset in cases
                      for (t, env), obs in zip((divmod(int(i), item["reward"].shape[1])
                                                for i in item["final_index"]), item["final_obs"]))
    got = sorted((*divmod(int(i), 3), float(obs[0])) for i, obs in zip(batch["final_index"], batch["final_obs"]))
    assert got == expected and len(got) == 3  # env 0 at t=2; the narrow env at t=1 and t=3
    assert batch["truncated"].reshape(-1)[batch["final_index"]].all()


def test_collate_names_what_is_wrong():
    item = run(UnrollAdder(unroll_length=4, num_envs=2), counting_envs(), 4)[0]
    short = {key: value[:3] if key not in ("next_obs_last", "final_obs", "final_index") else value
             for key, value in item.items()}
    with pytest.raises(ValueError, match="unroll 1 has 3 steps, unroll 0 has 4"):
        collate_unrolls([item, short])
    with pytest.raises(KeyError, match="unroll 0 is missing"):
        collate_unrolls([{k: v for k, v in item.items() if k != "reward"}])
    with pytest.raises(ValueError, match="non-empty"):
        collate_unrolls([])
    bad = dict(item, obs=np.zeros((4, 2, 5), np.float32))
    with pytest.raises(ValueError, match="disagree on the shape of obs"):
        collate_unrolls([item, bad])


def test_the_unroll_adder_of_an_actor_names_the_extras_it_needs():
    """An IMPALA-family actor whose behave() leaves out the behaviour log-probs is told
    what behave() must return, not just the missing key."""
    from algorithms.impala import UnrollItems

    items = UnrollItems(unroll_length=2, num_envs=2)
    step = {"obs": np.zeros((2, 1)), "action": np.zeros(2, np.int64), "reward": np.zeros(2),
            "next_obs": np.zeros((2, 1)), "reset_obs": np.zeros((2, 1)), "terminated": np.zeros(2, bool),
            "truncated": np.zeros(2, bool)}
    with pytest.raises(KeyError, match=r"behave\(obs\) must return \(actions, extras\) with "
                                       r"extras\['behaviour_log_prob'\].*\['entropy'\]"):
        items.add(**step, extras={"entropy": np.zeros(2)})
    assert items.add(**step, extras={"behaviour_log_prob": np.zeros(2)}) == []  # an unroll in the making
