"""Ape-X DQN with Rainbow's two options (Hessel et al. 2018): ``--distributional`` (C51)
and ``--noisy`` (noisy nets), with double Q, dueling, n-step and priorities: the
builder's algorithm, positive priorities from the distributional loss, a serial run
that updates and resumes from its checkpoint."""

import json
import os

import numpy as np
import pytest
from jobs import apex_config

from algorithms.builder import EnvSpec
from algorithms.dqn.c51 import CategoricalDQN
from algorithms.noisy import noisy_layers
from experiments import apex
from experiments.runtime import Parts
from experiments.runtime.entry import job_env_fn


def test_the_builder_makes_a_noisy_c51_whose_priorities_are_positive():
    from envs import make_vector_env
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers import ModelStore

    config = apex_config(distributional=True, noisy=True, n_atoms=11, v_max=20.0)
    apex.env_defaults(config, Parts())
    env = make_vector_env(job_env_fn(config, Parts()), num_envs=2, num_workers=0, seed=0)
    try:
        builder = apex.builder(config, Parts(), EnvSpec(env.single_observation_space, env.single_action_space))
        algo = builder.make_algorithm(device="cpu", seed=0)
        assert isinstance(algo, CategoricalDQN) and noisy_layers(algo.network)
        assert (algo.config.n_atoms, algo.config.v_max, algo.config.lr) == (11, 20.0, config.learn.lr)
        buffer = PrioritizedReplayBuffer(capacity=256, seed=0)
        actor = builder.make_actor(builder.make_algorithm(device="cpu", seed=1), env=env, sink=buffer,
                                   params=ModelStore(), index=0, num_actors=2, seed=0)
        assert np.all(actor.dqn.epsilon == 0)  # the noisy layers explore
        for _ in range(40):
            actor.step()
        batch = buffer.sample(32).batch
        for priorities in (actor.dqn.initial_priorities(batch), algo.learn(batch).priorities):
            assert priorities.shape == (32,) and np.all(np.isfinite(priorities)) and np.all(priorities > 0)
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_serial_rainbow_run_updates_and_resumes_from_its_checkpoint(tmp_path):
    over = {"serial": True, "distributional": True, "noisy": True, "max_env_steps": 800}
    summary = apex.run(apex_config(str(tmp_path), **over), quiet=True)
    assert summary["algorithm"] == "algorithms.dqn.c51.CategoricalDQN" and summary["updates"] > 100
    run_dir = summary["run_dir"]
    saved = json.load(open(os.path.join(run_dir, "config.json")))
    assert saved["dqn"]["distributional"] and saved["dqn"]["noisy"] and saved["learn"]["eps"] == 0.0
    resumed = apex.run(apex_config(str(tmp_path), resume=run_dir, max_env_steps=1200, serial=True), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"] and resumed["updates"] > summary["updates"]
    with pytest.raises(ValueError, match="--n-atoms cannot change when resuming"):  # the network's shape
        apex.run(apex_config(str(tmp_path), resume=run_dir, serial=True, n_atoms=11, max_env_steps=3200))
