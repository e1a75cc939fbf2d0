"""The user's own parts in every job and every rank: env by ``module:EnvId`` or
registered in this process, Dict observations, a network factory, algorithm
subclasses (their code provably ran in each rank), a ``target`` override that
reaches the actors' initial priorities."""

import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from jobs import a3c_config, apex_config
from torch import nn

from algorithms.a2c import A2C
from algorithms.dqn import DQN, ApexActor
from envs.testing import CountingEnv, DictCountingEnv
from experiments import a3c, apex
from experiments.runtime import Parts

USER_ENV_ID = "user_envs:UserCountingEnv-v0"  # registered by importing the user's module user_envs
IN_TEST_ID = "RlparInTestCounting-v0"  # registered only in this (the launching) process


def register_in_this_process():
    # Not at import: a rank imports this module to unpickle MarkedA2C, and would register
    # the id itself, so a factory that lost the launcher's spec would still pass.
    if IN_TEST_ID not in gym.registry:
        gym.register(IN_TEST_ID, entry_point=CountingEnv, kwargs={"episode_length": 15})


# The user's envs in a local world, each kind in one job's launch (the factory that carries
# them to the ranks is the runtime's, the same for every job): the one registered only in
# this process by A3C's, the one named ``module:EnvId`` by Ape-X's; each launch runs a
# user's algorithm subclass too (one launch checks both).
APEX_ENV_STEPS = 1200


def assert_the_env_reached_every_apex_rank(summary, env_id):
    # 4 envs of 15- or 20-step episodes: at least 4 x (300 // 20) = 60 episodes end.
    assert summary["env_id"] == env_id and summary["env_steps"] >= APEX_ENV_STEPS and summary["episodes"] > 50


def assert_the_env_reached_every_a3c_rank(summary, env_id):
    # 4 envs of 15- or 20-step episodes: at least 600 / 20 - 4 = 26 episodes end.
    assert summary["env_id"] == env_id and summary["env_steps"] >= 600 and summary["num_sources"] == 2
    assert summary["episodes"] > 20


def test_dict_observations_are_flattened_for_apex():
    summary = apex.run(apex_config(serial=True, max_env_steps=1200, eval_every=600),
                       parts=Parts(env=lambda: DictCountingEnv(episode_length=10)), quiet=True)
    assert summary["updates"] > 0 and summary["evaluations"] >= 1


class TinyQ(nn.Module):
    built = 0

    def __init__(self, obs_dim, n_actions):
        super().__init__()
        TinyQ.built += 1
        self.layer = nn.Linear(obs_dim, n_actions)

    def forward(self, obs):
        return self.layer(obs.float())


class TinyActorCritic(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.policy, self.value = nn.Linear(obs_dim, n_actions), nn.Linear(obs_dim, 1)

    def forward(self, obs):
        obs = obs.float()
        return self.policy(obs), self.value(obs).squeeze(-1)


def test_a_network_factory_is_used_by_apex_and_a3c():
    TinyQ.built = 0
    summary = apex.run(apex_config(serial=True, max_env_steps=800, eval_every=10_000),
                       parts=Parts(network=lambda o, a: TinyQ(o.shape[0], a.n)), quiet=True)
    assert TinyQ.built == 3 and summary["updates"] > 0  # the learner's and two actors' networks
    summary = a3c.run(a3c_config(max_env_steps=400),
                      parts=Parts(network=lambda o, a: TinyActorCritic(o.shape[0], a.n)), quiet=True)
    assert summary["updates"] > 0 and summary["param_change"] > 0


class MarkedA2C(A2C):
    """Leaves one file per rank that computed a gradient with it."""

    def compute_loss(self, data):
        marker = os.environ["A2C_TEST_MARKER"]
        open(f"{marker}.{os.environ.get('RANK', 'serial')}", "w").close()
        return super().compute_loss(data)


@pytest.mark.timeout(120)
def test_an_a2c_subclass_and_an_env_registered_in_this_process_run_in_every_a3c_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("A2C_TEST_MARKER", str(tmp_path / "ran"))
    register_in_this_process()
    summary = a3c.run(a3c_config(env_id=IN_TEST_ID, num_workers=2, max_env_steps=600),
                      parts=Parts(algorithm=MarkedA2C), quiet=True)
    assert_the_env_reached_every_a3c_rank(summary, IN_TEST_ID)
    assert summary["algorithm"].endswith("MarkedA2C")
    # The actors (ranks 1, 2) compute the gradients; the learner's (rank 0) follows the server.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ran.1", "ran.2"]


class ShiftedTargetDQN(DQN):
    """A user's target: the usual one plus 100 (so its TD errors are ~100)."""

    def target(self, batch):
        return super().target(batch) + 100.0


def test_a_target_override_drives_the_actors_initial_priorities():
    from algorithms.dqn import ApexActor, ApexConfig
    from envs import make_vector_env
    from rlpar.servers import ModelStore

    class Recorder:
        def __init__(self):
            self.priorities = []

        def add(self, batch, priorities=None):
            self.priorities.append(np.asarray(priorities))

    def actor(cls, recorder):
        torch.manual_seed(0)
        dqn = cls(network=TinyQ(1, 2), num_actions=2)
        env = make_vector_env(lambda: CountingEnv(episode_length=5), num_envs=2, num_workers=0,
                              autoreset_mode="SameStep")
        return ApexActor(dqn=dqn, env=env, buffer=recorder, params=ModelStore(), index=0, num_actors=1,
                         config=ApexConfig(n_step=2, add_every=2), seed=0)

    plain, shifted = Recorder(), Recorder()
    for cls, recorder in ((DQN, plain), (ShiftedTargetDQN, shifted)):
        a = actor(cls, recorder)
        for _ in range(6):
            a.step()
        a.flush()
        a.env.close()
    assert plain.priorities and shifted.priorities
    assert max(p.max() for p in plain.priorities) < 10 < min(p.min() for p in shifted.priorities)


def test_parts_that_do_not_fit_the_job_are_refused():
    with pytest.raises(TypeError, match="algorithm must be a subclass of algorithms.dqn.dqn.DQN") as info:
        apex.run(apex_config(serial=True), parts=Parts(algorithm=A2C))
    assert "the job runs --algorithm dqn for --env-id 'CartPole-v1', whose action space is Discrete(2)" in str(info.value)
    with pytest.raises(TypeError, match="actor must be a subclass of algorithms.a2c.builder.A3CActor"):
        a3c.run(a3c_config(), parts=Parts(actor=DQN))
    with pytest.raises(TypeError, match="returned NoneType, not an algorithms.builder.Builder"):
        a3c.run(a3c_config(), parts=Parts(builder=lambda config, parts, spec: None))


def test_with_a_builder_of_the_users_the_class_parts_are_its_to_check():
    """The job's default builder's bases do not apply to parts meant for the user's own
    builder (which checks them against its own bases when it takes them)."""
    Parts(builder=lambda config, parts, spec: None, algorithm=A2C).check(algorithm=DQN)
    with pytest.raises(TypeError, match="builder must be a callable factory"):
        Parts(builder=DQN(num_actions=2, network=torch.nn.Linear(4, 2))).check(algorithm=DQN)


class BoltzmannDQN(DQN):
    """The manual's new distributed variant (docs/extending.md): actors explore with a softmax over Q at
    their eps_i as temperature."""

    def act(self, obs, *, explore=True):
        if not explore:
            return super().act(obs, explore=False)
        q = self.q_values(obs)
        temperature = torch.as_tensor(np.maximum(self.epsilon, 1e-3), dtype=q.dtype).reshape(-1, 1)
        marker = os.environ.get("BOLTZMANN_MARKER")
        if marker:
            open(f"{marker}.{os.environ.get('RANK', 'serial')}", "w").close()
        return torch.distributions.Categorical(logits=q / temperature).sample().numpy()


class BoltzmannActor(ApexActor):
    pass


@pytest.mark.timeout(120)
def test_a_new_distributed_variant_reuses_the_roles_by_passing_its_classes(tmp_path, monkeypatch):
    monkeypatch.setenv("BOLTZMANN_MARKER", str(tmp_path / "acted"))
    summary = apex.run(apex_config(env_id=USER_ENV_ID, max_env_steps=APEX_ENV_STEPS, eval_every=600),
                       parts=Parts(algorithm=BoltzmannDQN, actor=BoltzmannActor), quiet=True)
    assert_the_env_reached_every_apex_rank(summary, USER_ENV_ID)
    assert summary["evaluations"] >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acted.1", "acted.2"]  # both actor ranks
