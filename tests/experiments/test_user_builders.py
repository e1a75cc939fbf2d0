"""A builder of the user's own, defined here (the README's worked example), runs in
every rank of a local world and in one process; a factory that does not make a
builder is refused before any process starts."""

import os

import numpy as np
import pytest
import torch
from jobs import apex_config

from algorithms.apex import ApexActor
from experiments import apex
from experiments.builders.dqn import DQNBuilder
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

    def make_actor(self, algorithm, *, env, sink, params, index, num_actors, seed):
        return BoltzmannActor(dqn=algorithm, env=env, buffer=sink, params=params, index=index,
                              num_actors=num_actors, config=self.apex, seed=seed)


def boltzmann(config, parts, spec):
    return BoltzmannBuilder(learn=config.learn, spec=spec, network=parts.network)


@pytest.mark.timeout(120)
def test_a_users_builder_runs_in_every_actor_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("BOLTZMANN_MARKER", str(tmp_path / "acted"))
    summary = apex.run(apex_config(max_env_steps=2000, eval_every=1000), parts=Parts(builder=boltzmann),
                       quiet=True)
    assert summary["env_steps"] >= 2000 and summary["updates"] > 0 and summary["evaluations"] >= 1
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
