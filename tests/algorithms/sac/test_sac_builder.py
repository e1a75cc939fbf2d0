"""Ape-X SAC's builder (algorithms.sac.SACBuilder): its flow and SAC config derived from
the job's sections, actors that sample the policy inside the Box and score what they
add, a learner whose priorities and parameters flow back, a checkpoint round trip."""

import dataclasses
import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.builder import EnvSpec
from algorithms.dqn.config import ApexConfig
from algorithms.sac import SAC, SACBuilder, SACConfig
from algorithms.sac.builder import SAC_DEFAULTS
from algorithms.td3.config import ContinuousConfig
from rlpar.buffers import PrioritizedReplayBuffer
from rlpar.servers import ModelStore

BOX = gym.spaces.Box(low=np.array([-2.0, 0.0], dtype=np.float32), high=np.array([2.0, 0.5], dtype=np.float32))


class Walk(gym.Env):
    """A 3-d observation, a 2-d Box of actions whose bounds differ; episodes of 5 steps."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
    action_space = BOX

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.normal(size=3).astype(np.float32), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=np.float32)), action
        self.t += 1
        obs = self.np_random.normal(size=3).astype(np.float32)
        return obs, -float(np.sum(np.square(action))), self.t >= 5, False, {}


def builder(**sac):
    learn = ApexConfig(**{**SAC_DEFAULTS, "hidden": (16,), "batch_size": 8, "learning_starts": 16,
                          "add_every": 2, "pull_every": 4, "eps_alpha": None, "eps": None})
    spec = EnvSpec(Walk.observation_space, BOX)
    return SACBuilder(learn=learn, continuous=ContinuousConfig(critic_lr=1e-3), sac=SACConfig(**sac), spec=spec)


def vector_env(n=2):
    return SyncVectorEnv([Walk] * n, autoreset_mode=AutoresetMode.SAME_STEP)


def test_flow_and_config_come_from_the_job_sections():
    b = builder(alpha=0.2, autotune=False, target_entropy=-1.0)
    flow = b.flow
    assert (flow.data, flow.batch_size, flow.n_step, flow.updates_per_step) == ("replay", 8, 1, 0.125)
    config = b.config(seed=5)
    assert (config.actor_lr, config.critic_lr, config.tau, config.hidden, config.seed) == (3e-4, 1e-3, 0.005,
                                                                                          (16,), 5)
    assert (config.alpha, config.autotune, config.target_entropy) == (0.2, False, -1.0)  # the sac section's
    with pytest.raises(ValueError, match="--batch-size, --n-step unset"):
        SACBuilder(learn=ApexConfig(n_step=None, batch_size=None), continuous=ContinuousConfig(),
                   sac=SACConfig(), spec=EnvSpec(Walk.observation_space, BOX))
    with pytest.raises(ValueError, match="sac needs a Box action space"):
        SACBuilder(learn=b.learn, continuous=ContinuousConfig(), sac=SACConfig(),
                   spec=EnvSpec(Walk.observation_space, gym.spaces.Discrete(2)))


def test_actors_sample_the_policy_inside_the_box_and_add_positive_priorities():
    b = builder()
    buffer, store, env = PrioritizedReplayBuffer(capacity=256, seed=0), ModelStore(), vector_env()
    b.make_learner(b.make_algorithm(device="cpu", seed=0), source=buffer, params=store)  # publishes version 0
    actors = [b.make_actor(b.make_algorithm(device="cpu", seed=1 + i), env=env, sink=buffer, params=store,
                           index=i, num_actors=2, seed=i) for i in range(2)]
    # Every env copy of every actor samples at the policy's own standard deviation.
    assert all(np.array_equal(a.ddpg.noise_scale, [1.0, 1.0]) for a in actors)
    actor = actors[0]
    actor.random_start = False
    assert actor.sync()
    obs = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32) * 10  # one row per env copy
    actions = np.concatenate([actor.behaviour(obs)[0] for _ in range(32)])
    assert actions.shape == (64, 2) and actions.dtype == np.float32
    assert all(BOX.contains(a) for a in actions)
    assert np.ptp(actions[:, 0]) > 0.5  # sampled, not one greedy action
    for _ in range(12):
        actor.step()
    assert len(buffer) > 0 and actor.transitions_added == len(buffer)
    sample = buffer.sample(len(buffer))
    priorities = actor.acting.initial_priorities(sample.batch)
    assert priorities.shape == (len(buffer),) and np.all(priorities > 0) and priorities.dtype == np.float64
    env.close()


def test_the_learner_learns_publishes_and_its_checkpoint_round_trips():
    b = builder()
    buffer, store, env = PrioritizedReplayBuffer(capacity=256, seed=0), ModelStore(), vector_env()
    algo = b.make_algorithm(device="cpu", seed=0)
    learner = b.make_learner(algo, source=buffer, params=store)
    actor = b.make_actor(b.make_algorithm(device="cpu", seed=1), env=env, sink=buffer, params=store,
                         index=0, num_actors=1, seed=0)
    for _ in range(16):
        actor.step()
    learner.step()  # a prioritized batch in, its new priorities back to the replay
    assert learner.updates == algo.updates == 1
    learned = algo.learn(buffer.sample(8).batch)
    assert learned.priorities.shape == (8,) and np.all(learned.priorities > 0)
    assert {"critic_loss", "actor_loss", "alpha"} <= set(learned.metrics)
    assert b.network_of(algo) is algo.actor
    other = b.make_algorithm(device="cpu", seed=7)
    saved = io.BytesIO()  # through bytes, as a checkpoint goes (in process, optimizer state is shared)
    torch.save(algo.state_dict(), saved)
    saved.seek(0)
    other.load_state_dict(torch.load(saved, weights_only=True))
    batch = buffer.sample(8).batch
    algo.generator.manual_seed(3), other.generator.manual_seed(3)
    assert np.array_equal(algo.learn(batch).priorities, other.learn(batch).priorities)
    for a, o in zip(algo.actor.parameters(), other.actor.parameters()):
        assert torch.equal(a, o)
    env.close()


def test_a_network_factory_and_critic_layer_norm():
    b = builder()
    b.continuous = dataclasses.replace(b.continuous, critic_layer_norm=True)
    assert any(isinstance(m, torch.nn.LayerNorm) for m in b.make_algorithm(device="cpu", seed=0).critic.modules())
    b.network = lambda obs_space, act_space: torch.nn.Linear(3, 4)
    with pytest.raises(TypeError, match=r"returns \(actor, critic\)"):
        b.make_algorithm(device="cpu", seed=0)
    b.network = lambda obs_space, act_space: (torch.nn.Linear(3, 4), torch.nn.Linear(5, 1))
    assert isinstance(b.make_algorithm(device="cpu", seed=0), SAC)
