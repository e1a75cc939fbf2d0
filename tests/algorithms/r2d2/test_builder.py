"""R2D2 as the Ape-X job's builder: its flow of sequences, the recurrent actor (state
kept per env copy, zeroed at episode ends, stored at each sequence's start, initial
priorities) and the greedy policy that starts every evaluation episode afresh."""

import numpy as np
import pytest

from envs.testing import CountingEnv


def small_builder(**r2d2):
    from algorithms.builder import EnvSpec
    from algorithms.dqn.config import ApexConfig
    from algorithms.r2d2 import R2D2Builder, R2D2Config

    env = CountingEnv(episode_length=6)
    learn = ApexConfig(lr=1e-3, n_step=1, batch_size=4, hidden=(8,), learning_starts=20, updates_per_step=0.1)
    cfg = R2D2Config(**{"burn_in": 1, "unroll": 3, "period": 2, "lstm_size": 8, **r2d2})
    return R2D2Builder(learn=learn, r2d2=cfg, spec=EnvSpec(env.observation_space, env.action_space))


def test_the_flow_is_a_replay_of_sequences_and_the_learner_config_comes_from_learn():
    builder = small_builder()
    flow = builder.flow
    assert flow.data == "replay" and flow.items == "sequences" and flow.batch_size == 4
    # Pacing counts 20 env steps; the learner waits for 5 sequences, which half of
    # them surely make (one every period, 2, of an episode's steps, or one per shorter episode).
    assert flow.start_steps == 20 and flow.learning_starts == 5
    assert flow.held_steps == builder.r2d2.sequence_length + 1 == 1 + 3 + 1 + 1
    assert (builder.r2d2.lr, builder.r2d2.n_step, builder.r2d2.hidden, builder.r2d2.gamma) == (1e-3, 1, (8,), 0.99)


def test_the_annealing_given_in_env_steps_is_counted_in_updates_at_the_replay_ratio():
    assert small_builder().r2d2.lr_anneal_updates is None  # 0: a constant rate
    assert small_builder(lr_anneal_steps=1000).r2d2.lr_anneal_updates == 100  # 0.1 updates per env step
    assert small_builder(lr_anneal_steps=3).r2d2.lr_anneal_updates == 1
    algo = small_builder(lr_anneal_steps=1000).make_algorithm(device="cpu", seed=0)
    assert algo.config.lr_anneal_updates == 100 and algo.config.lr == 1e-3
    # None is the job's "by observation family": a builder is never handed it unfilled.
    with pytest.raises(ValueError, match="--lr-anneal-steps unset"):
        small_builder(lr_anneal_steps=None)


@pytest.mark.parametrize("last_action_reward", [False, True], ids=["lstm", "lstm-last-action-reward"])
def test_the_actor_keeps_its_state_zeroes_it_at_episode_ends_and_stores_it_at_sequence_starts(last_action_reward):
    from gymnasium.vector import AutoresetMode

    from algorithms.r2d2 import R2D2Actor
    from envs import make_vector_env
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers.model import ModelStore

    builder = small_builder(last_action_reward=last_action_reward)
    acted_from = {}  # episode step (the obs) -> the state the actor acted from, per env
    acted = {}  # the last step's observations and actions

    class Logging(R2D2Actor):
        def behaviour(self, obs):
            actions, before = super().behaviour(obs)
            acted.update(obs=np.array(obs), actions=np.array(actions))
            for e in range(len(obs)):
                acted_from.setdefault(float(obs[e][0]), before["state_h"][e].copy())
            return actions, before

    env = make_vector_env(lambda: CountingEnv(episode_length=6), num_envs=2, num_workers=0,
                          autoreset_mode=AutoresetMode.SAME_STEP, seed=0)
    added = []  # the initial priorities the actor sent

    class Recording(PrioritizedReplayBuffer):
        def add(self, batch, priorities=None):
            added.append(np.asarray(priorities))
            return super().add(batch, priorities)

    buffer, params = Recording(capacity=100, seed=0), ModelStore()
    learner = builder.make_learner(builder.make_algorithm(device="cpu", seed=0), source=buffer, params=params)
    actor = Logging(r2d2=builder.make_algorithm(device="cpu", seed=1), env=env, buffer=buffer, params=params,
                    index=0, num_actors=1, config=builder.apex, seed=0)
    actor.sync()
    try:
        for step in range(1, 13):
            actor.step()
            if step % 6 == 0:  # every episode just ended: the next starts from zeros
                assert not any(v.any() for v in actor.state.values())
            else:  # mid-episode: the state carries the episode so far
                assert actor.state["state_h"].any(axis=1).all()
                if last_action_reward:  # and the step's action and reward (1 where action = count % 2)
                    np.testing.assert_array_equal(actor.state["last_action"], np.eye(2)[acted["actions"]])
                    rewarded = acted["actions"] == acted["obs"][:, 0].astype(int) % 2
                    np.testing.assert_array_equal(actor.state["last_reward"], rewarded.astype(np.float32))
        assert len(buffer) > 0 and actor.transitions_added == len(buffer)
        sample = buffer.sample(len(buffer))
        for obs, mask, start in zip(sample.batch["obs"], sample.batch["mask"], sample.batch["state_h"]):
            first = float(obs[0][0])
            assert mask[: builder.r2d2.min_sequence_steps].all()
            # A sequence stores the state its first step was acted from (zero at an episode's start).
            np.testing.assert_allclose(start, acted_from[first], atol=1e-6)
            assert start.any() == (first > 0)
        assert sum(map(len, added)) == len(buffer) and all((p > 0).all() and np.isfinite(p).all() for p in added)
        metrics = learner.step()  # the learner takes the actor's sequences
        assert np.isfinite(metrics["loss"]) and metrics["trained_steps"] > 0
    finally:
        env.close()


def test_the_greedy_policy_starts_each_episode_from_zero_and_evaluate_tells_it_when():
    from algorithms.rollout import evaluate
    from envs import make_vector_env

    builder = small_builder()
    policy = builder.greedy(builder.make_algorithm(device="cpu", seed=0))
    obs = np.ones((2, 1), np.float32)
    policy(obs)
    assert policy.state["state_h"].any(axis=1).all()
    policy.episodes_started(np.array([True, False]))
    assert not policy.state["state_h"][0].any() and policy.state["state_h"][1].any()
    policy(np.ones((1, 1), np.float32))  # another batch (a video's one env): a fresh state
    assert policy.state["state_h"].shape[0] == 1

    calls = []

    class Watching:
        def __call__(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def rewarded(self, reward):
            calls.append(("rewarded", np.asarray(reward).tolist()))

        def episodes_started(self, mask):
            calls.append(("started", np.asarray(mask).tolist()))

    env = make_vector_env(lambda: CountingEnv(episode_length=3), num_envs=2, num_workers=0, seed=0)
    try:
        evaluate(Watching(), env, episodes=2, seed=0)
    finally:
        env.close()
    # After the reset; each step's rewards (action 0 pays where the count is even); after both episodes ended.
    assert calls == [("started", [True, True]), ("rewarded", [1.0, 1.0]), ("rewarded", [0.0, 0.0]),
                     ("rewarded", [1.0, 1.0]), ("started", [True, True])]


def test_the_greedy_policy_keeps_its_last_action_and_the_reward_that_followed():
    builder = small_builder(last_action_reward=True)
    policy = builder.greedy(builder.make_algorithm(device="cpu", seed=0))
    actions = policy(np.ones((2, 1), np.float32))
    np.testing.assert_array_equal(policy.state["last_action"], np.eye(2)[actions])
    policy.rewarded(np.array([1.0, -2.0]))
    np.testing.assert_array_equal(policy.state["last_reward"], np.float32([1.0, -2.0]))
    policy.episodes_started(np.array([False, True]))
    assert policy.state["last_action"][1].sum() == 0 and policy.state["last_reward"].tolist() == [1.0, 0.0]
    policy.rewarded(np.array([3.0]))  # not this batch's: ignored (a new batch starts afresh anyway)
    assert policy.state["last_reward"].tolist() == [1.0, 0.0]


def test_a_continuous_action_space_is_refused():
    from gymnasium import spaces

    from algorithms.builder import EnvSpec
    from algorithms.dqn.config import ApexConfig
    from algorithms.r2d2 import R2D2Builder, R2D2Config

    box = spaces.Box(-1.0, 1.0, (1,))
    with pytest.raises(ValueError, match="r2d2 needs a Discrete action space"):
        R2D2Builder(learn=ApexConfig(), r2d2=R2D2Config(), spec=EnvSpec(box, box))


def test_an_ending_actor_adds_its_partial_sequences_with_start_state_mask_and_priorities():
    from gymnasium.vector import AutoresetMode

    from algorithms.r2d2 import R2D2Actor
    from envs import make_vector_env
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers.model import ModelStore

    builder = small_builder()  # sequences of 5 (burn-in 1, unroll 3, n-step 1) every 2 steps, at least 3 valid
    acted_from = []  # per vector step, the state the actor acted from

    class Logging(R2D2Actor):
        def behaviour(self, obs):
            actions, before = super().behaviour(obs)
            acted_from.append(before["state_h"].copy())
            return actions, before

    added = []  # (batch, priorities) of each add

    class Recording(PrioritizedReplayBuffer):
        def add(self, batch, priorities=None):
            added.append((batch, np.asarray(priorities)))
            return super().add(batch, priorities)

    env = make_vector_env(lambda: CountingEnv(episode_length=6), num_envs=2, num_workers=0,
                          autoreset_mode=AutoresetMode.SAME_STEP, seed=0)
    buffer, params = Recording(capacity=100, seed=0), ModelStore()
    builder.make_learner(builder.make_algorithm(device="cpu", seed=0), source=buffer, params=params)
    actor = Logging(r2d2=builder.make_algorithm(device="cpu", seed=1), env=env, buffer=buffer, params=params,
                    index=0, num_actors=1, config=builder.apex, seed=0)
    actor.sync()
    try:
        for _ in range(6 + 5):  # an episode, then steps 0-4 of the next
            actor.step()
        # Step 4 completed the sequence from step 0; steps 2-4 (from step 2) and 4
        # (from step 4) are open: the first has 3 valid steps, the second too few.
        before, sent = actor.transitions_added, len(added)
        actor.finish()
    finally:
        env.close()
    assert len(added) == sent + 1 and actor.transitions_added == before + 2 and actor.held_steps() == 0
    batch, priorities = added[-1]
    assert batch["mask"].tolist() == [[True, True, True, False, False]] * 2
    assert not batch["obs"][:, 3:].any() and not batch["reward"][:, 3:].any()  # padding
    # Its observations are steps 2-4 of the episode, and its state the one step 2 was acted from.
    np.testing.assert_array_equal(batch["obs"][:, 0], added[-2][0]["obs"][:, 2])  # the sequences from step 0
    np.testing.assert_allclose(batch["state_h"], acted_from[6 + 2], atol=1e-6)
    assert batch["state_h"].any(axis=1).all()  # mid-episode: not a zero state
    assert priorities.shape == (2,) and (priorities > 0).all() and np.isfinite(priorities).all()
