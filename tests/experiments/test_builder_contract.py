"""The builder contract is checked in the launching process, before any rank starts: an
algorithm class lacking a method the program calls on it, and a builder factory that
does not pass the user's parts on, are refused by name; a part a builder method
replaces by its own class is named in the rank; a user's builder is told which
``learn`` fields the job filled with its own algorithm's defaults."""

import json
import os
import warnings

import numpy as np
import pytest
from jobs import apex_config

from algorithms.actor_learner import Actor, Learner
from algorithms.adders import NStepAdder
from algorithms.builder import Builder, Flow
from algorithms.dqn import DQN, DQNBuilder
from experiments import apex
from experiments.runtime import Parts
from experiments.runtime.job import prepare


class Bare:
    """A new algorithm that learns, publishes and checkpoints, but cannot score the
    transitions its actors add (no ``initial_priorities``)."""

    def __init__(self, num_actions):
        self.num_actions, self.updates = num_actions, 0

    def act(self, obs, *, explore=True):
        return np.zeros(len(obs), dtype=np.int64)

    def learn(self, batch):
        raise AssertionError("never reached: refused before the run")

    def policy_state(self):
        return {}

    def load_policy_state(self, state):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class BareBuilder(Builder):
    algorithm_base = Bare

    def __init__(self, *, spec, actor=None):
        super().__init__(spec=spec, actor=actor)

    @property
    def flow(self):
        return Flow(data="replay", batch_size=32, push_every=8, pull_every=64, held_steps=4, learning_starts=100,
                    updates_per_step=0.25, n_step=3)

    def make_algorithm(self, *, device, seed):
        return self.algorithm_cls(int(self.spec.action_space.n))

    def make_actor(self, algorithm, *, env, sink, params, index, num_actors, seed):
        return self.actor_cls(acting=algorithm, behave=lambda obs: (algorithm.act(obs), {}),
                              adder=NStepAdder(num_envs=env.num_envs, n=3, gamma=0.99), env=env, sink=sink,
                              params=params, add_every=1, pull_every=64, prioritized=True, seed=seed)

    def make_learner(self, algorithm, *, source, params):
        return Learner(algorithm=algorithm, source=source, params=params, batch_size=32, push_every=8,
                       weighted=True)


def no_launch(monkeypatch):
    """Any launch fails the test: what is refused must be refused before one."""
    import rlpar.distributed

    def launch(*args, **kwargs):
        raise AssertionError("a world was launched")

    monkeypatch.setattr(rlpar.distributed, "launch", launch)


def test_an_algorithm_without_initial_priorities_is_refused_before_any_rank_starts(monkeypatch):
    no_launch(monkeypatch)
    with pytest.raises(TypeError, match=r"BareBuilder's algorithm class test_builder_contract.Bare has no "
                                        r"initial_priorities \(initial_priorities\(batch\) -> np.ndarray: each "
                                        r"actor's priorities of the transitions it adds to the replay"):
        apex.run(apex_config(), parts=Parts(builder=lambda config, parts, spec: BareBuilder(spec=spec)), quiet=True)


class ScoringActor(Actor):
    """Scores new transitions itself: its algorithm needs no initial_priorities."""

    def initial_priorities(self, batch):
        return np.ones(len(batch["reward"]))


def test_an_actor_that_scores_itself_needs_no_initial_priorities():
    ctx = prepare(apex.job(), apex_config(serial=True), parts=Parts(
        builder=lambda config, parts, spec: BareBuilder(spec=spec, actor=ScoringActor)))
    assert ctx.parts.builder is not None


def test_every_missing_method_is_named_with_the_class():
    class Bareer(Bare):
        load_state_dict = state_dict = None  # a class that only pretends

    class BareerBuilder(BareBuilder):
        algorithm_base = Bareer

    with pytest.raises(TypeError, match=r"Bareer has no state_dict \(state_dict\(\): the checkpoint\); no "
                                        r"load_state_dict \(load_state_dict\(state\): a resume"):
        prepare(apex.job(), apex_config(serial=True), parts=Parts(
            builder=lambda config, parts, spec: BareerBuilder(spec=spec, actor=ScoringActor)))


class SquaredLossDQN(DQN):
    """A user's DQN (what Parts(algorithm=...) would run)."""


def dropping(config, parts, spec):  # the manual's example (docs/extending.md) before it passed the parts on
    return DQNBuilder(learn=config.learn, spec=spec, network=parts.network)


def test_a_factory_that_drops_a_given_part_is_refused_before_any_rank_starts(monkeypatch):
    no_launch(monkeypatch)
    with pytest.raises(TypeError, match=r"made a DQNBuilder without Parts\(algorithm=SquaredLossDQN \(it has "
                                        r"DQN\)\), which would not run: pass each on, as DQNBuilder\(\.\.\., "
                                        r"algorithm=parts.algorithm\)"):
        apex.run(apex_config(), parts=Parts(builder=dropping, algorithm=SquaredLossDQN), quiet=True)
    with pytest.raises(TypeError, match=r"without Parts\(network=.*<lambda> \(it has none\)\)"):
        apex.run(apex_config(), parts=Parts(builder=lambda config, parts, spec: DQNBuilder(learn=config.learn,
                                                                                           spec=spec),
                                            network=lambda o, a: None), quiet=True)


def forwarding(config, parts, spec):
    return DQNBuilder(learn=config.learn, spec=spec, network=parts.network, algorithm=parts.algorithm,
                      actor=parts.actor, learner=parts.learner)


def test_a_forwarded_part_runs_and_parts_json_names_it(tmp_path):
    summary = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=400),
                       parts=Parts(builder=forwarding, algorithm=SquaredLossDQN), quiet=True)
    assert summary["algorithm"].endswith("SquaredLossDQN")
    with open(os.path.join(summary["run_dir"], "parts.json")) as f:
        assert json.load(f)["algorithm"].endswith("SquaredLossDQN")


class OwnClassBuilder(DQNBuilder):
    """Holds the user's algorithm class, but makes the stock one."""

    def make_algorithm(self, *, device, seed):
        return DQN(network=self.network_for(), num_actions=int(self.spec.action_space.n), config=self.dqn,
                   device=device, seed=seed)

    def network_for(self):
        from algorithms.nets import q_network

        return q_network(self.spec.observation_space.shape, int(self.spec.action_space.n), hidden=(32,))


def test_a_builder_method_that_makes_its_own_class_instead_of_the_given_part_is_named():
    def make(config, parts, spec):
        return OwnClassBuilder(learn=config.learn, spec=spec, algorithm=parts.algorithm)

    with pytest.raises(TypeError, match=r"OwnClassBuilder.make_algorithm returned DQN, not the "
                                        r"Parts\(algorithm=SquaredLossDQN\) given"):
        apex.run(apex_config(serial=True), parts=Parts(builder=make, algorithm=SquaredLossDQN), quiet=True)


def test_a_users_builder_is_told_which_learn_fields_the_job_filled():
    with pytest.warns(UserWarning, match=r"Parts\(builder=forwarding\) gets config.learn with the apex job's "
                                         r"defaults for its --algorithm dqn on this env in the fields left unset: "
                                         r"lr=0.0025, n_step=3, tau=1.0, updates_per_step=0.25, eps=0.4, eps_alpha=7.0; "
                                         r"set them in config.learn"):
        prepare(apex.job(), apex_config(serial=True), parts=Parts(builder=forwarding))
    with warnings.catch_warnings():  # the job's own builder, or every field given: nothing to tell
        warnings.simplefilter("error")
        prepare(apex.job(), apex_config(serial=True))
        prepare(apex.job(), apex_config(serial=True, lr=1e-3, n_step=1, tau=0.5, hidden="32",
                                        updates_per_step=0.5, eps_alpha=3.0, eps=0.3), parts=Parts(builder=forwarding))
