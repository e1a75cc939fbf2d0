"""A builder of the user's own, defined here (the worked example of docs/extending.md), runs in
every rank of a local world and in one process; a factory that does not make a
builder is refused before any process starts, and parts of the wrong type are named
by the builder method that made them."""

import os

import numpy as np
import pytest
import torch
from jobs import apex_config

from algorithms.dqn import ApexActor, DQNBuilder
from algorithms.td3 import TD3, TD3Builder
from algorithms.td3.continuous import q_value, weighted_mean
from experiments import apex
from experiments.runtime import Parts


class BoltzmannActor(ApexActor):
    """Explores by a softmax over its Q values at temperature eps_i (instead of
    epsilon-greedy); leaves a marker per process that acted so."""

    def behaviour(self, obs):
        marker = os.environ.get("BOLTZMANN_MARKER")
        if marker:
            open(f"{marker}.{os.environ.get('RANK', 'serial')}", "w").close()
        q = self.dqn.q_values(obs)
        temperature = torch.as_tensor(np.maximum(self.dqn.epsilon, 1e-3), dtype=q.dtype).reshape(-1, 1)
        return torch.distributions.Categorical(logits=q / temperature).sample().numpy(), {}


class BoltzmannBuilder(DQNBuilder):
    """Ape-X DQN with Boltzmann actors: everything else is DQNBuilder's."""

    actor_base = BoltzmannActor


def boltzmann(config, parts, spec):
    return BoltzmannBuilder(learn=config.learn, spec=spec, network=parts.network, algorithm=parts.algorithm,
                            actor=parts.actor, learner=parts.learner)


@pytest.mark.timeout(120)
def test_a_users_builder_runs_in_every_actor_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("BOLTZMANN_MARKER", str(tmp_path / "acted"))
    summary = apex.run(apex_config(max_env_steps=800, eval_every=400), parts=Parts(builder=boltzmann),
                       quiet=True)
    assert summary["env_steps"] >= 800 and summary["updates"] > 0 and summary["evaluations"] >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acted.1", "acted.2"]  # both actor ranks


def test_a_users_builder_runs_serially(tmp_path, monkeypatch):
    monkeypatch.setenv("BOLTZMANN_MARKER", str(tmp_path / "acted"))
    summary = apex.run(apex_config(serial=True, max_env_steps=800), parts=Parts(builder=boltzmann), quiet=True)
    assert summary["updates"] > 0 and os.path.exists(tmp_path / "acted.serial")


def test_a_factory_that_makes_no_builder_is_refused_before_the_run():
    with pytest.raises(TypeError, match="not an algorithms.builder.Builder"):
        apex.run(apex_config(serial=True), parts=Parts(builder=lambda config, parts, spec: object()))
    with pytest.raises(TypeError, match="builder must be a callable factory"):
        apex.run(apex_config(serial=True), parts=Parts(builder="mine"))


class HuberTD3(TD3):
    """TD3 with a Huber loss on both critics (a user's variant)."""

    def critic_loss(self, data, y):
        obs, action = data["obs"], data["action"]
        td = torch.stack([y - q_value(self.critic, obs, action), y - q_value(self.critic2, obs, action)])
        loss = torch.nn.functional.huber_loss(td, torch.zeros_like(td), reduction="none").sum(0)
        return weighted_mean(loss, data.get("weights")), td.detach()


class HuberTD3Builder(TD3Builder):
    algorithm_base = HuberTD3


def pendulum(**over):
    return apex_config(serial=True, env_id="Pendulum-v1", max_env_steps=600, learning_starts=200, **over)


def test_a_td3_builder_subclass_keeps_its_own_algorithm_base():
    """TD3Builder picks TD3 over its DDPG base for "td3", but not over a subclass's own."""
    def make(config, parts, spec):
        return HuberTD3Builder(algorithm_name="td3", learn=config.learn, continuous=config.continuous, spec=spec)

    summary = apex.run(pendulum(), parts=Parts(builder=make), quiet=True)
    assert summary["algorithm"].endswith("HuberTD3") and summary["updates"] > 0

    def ddpg(config, parts, spec):  # a TD3 class run as "ddpg" would get DDPG's config
        return HuberTD3Builder(algorithm_name="ddpg", learn=config.learn, continuous=config.continuous, spec=spec)

    with pytest.raises(ValueError, match=r"HuberTD3 is a TD3: algorithm_name='td3' \(--algorithm td3"):
        apex.run(pendulum(), parts=Parts(builder=ddpg), quiet=True)


def test_a_factory_of_the_wrong_shape_is_refused_saying_what_it_should_be():
    with pytest.raises(TypeError, match=r"cannot be called as make\(config, parts, spec\).*takes a factory"):
        apex.run(apex_config(serial=True), parts=Parts(builder=lambda config, spec: None))

    def the_class(config, parts, spec):
        return BoltzmannBuilder

    with pytest.raises(TypeError, match=r"returned the class BoltzmannBuilder, not an instance of it"):
        apex.run(apex_config(serial=True), parts=Parts(builder=the_class))


def test_an_actor_or_learner_of_the_wrong_type_is_named_by_the_method_that_made_it():
    class NoActor(BoltzmannBuilder):
        def make_actor(self, algorithm, **kwargs):
            return lambda obs: obs

    class NoLearner(BoltzmannBuilder):
        def make_learner(self, algorithm, *, source, params):
            return algorithm

    with pytest.raises(TypeError, match=r"NoActor.make_actor returned function, not an "
                                        r"algorithms.actor_learner.Actor"):
        apex.run(apex_config(serial=True),
                 parts=Parts(builder=lambda config, parts, spec: NoActor(learn=config.learn, spec=spec)))
    class NoAlgorithm(BoltzmannBuilder):
        def make_algorithm(self, *, device, seed):
            return None

    with pytest.raises(TypeError, match=r"NoAlgorithm.make_algorithm returned NoneType, not an algorithms.dqn.dqn.DQN"):
        apex.run(apex_config(serial=True),
                 parts=Parts(builder=lambda config, parts, spec: NoAlgorithm(learn=config.learn, spec=spec)))
    with pytest.raises(TypeError, match=r"NoLearner.make_learner returned DQN, not an "
                                        r"algorithms.actor_learner.Learner"):
        apex.run(apex_config(serial=True),
                 parts=Parts(builder=lambda config, parts, spec: NoLearner(learn=config.learn, spec=spec)))
