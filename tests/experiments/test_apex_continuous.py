"""Ape-X for continuous actions: ``--env-id Pendulum-v1`` picks TD3 by the Box action
space (``--algorithm`` overrides it), transitions with priorities flow from actors that
explore at their own Gaussian scales, and the job resumes and evaluates like Ape-X DQN;
Ape-X SAC's learners stay in step while a killed actor rejoins."""

import json
import os
import signal

import numpy as np
import pytest
from jobs import apex_config

from algorithms.dqn import ApexConfig, ApexDPGActor
from experiments import apex, evaluate
from experiments.runtime import Parts
from experiments.runtime.entry import job_env_fn


def td3_config(log_dir="none", **over):
    settings = {"env_id": "Pendulum-v1", "learning_starts": 300, "batch_size": 32, "hidden": "32",
                "eval_every": 800, "eval_episodes": 2, "max_env_steps": 1600, **over}
    return apex_config(log_dir, **settings)


SHORT = {"learning_starts": 200, "max_env_steps": 1200}  # a serial run's first session


@pytest.mark.timeout(120)
def test_serial_td3_learns_from_prioritized_one_step_transitions_by_default_and_resumes(tmp_path):
    # 0.125 updates per env step past learning_starts: (1200 - 200) / 8 = 125 updates.
    summary = apex.run(td3_config(str(tmp_path), serial=True, **SHORT), quiet=True)
    assert summary["algorithm"] == "algorithms.td3.td3.TD3" and summary["updates"] > 100
    run_dir = summary["run_dir"]
    saved = json.load(open(os.path.join(run_dir, "config.json")))
    assert saved["algorithm"] == "td3"  # auto, resolved by the action space and saved
    assert saved["learn"]["tau"] == 0.005 and saved["learn"]["n_step"] == 1 and saved["learn"]["lr"] == 3e-4
    assert saved["learn"]["updates_per_step"] == 0.125  # CONTINUOUS_DEFAULTS
    resumed = apex.run(td3_config(str(tmp_path), serial=True, resume=run_dir, max_env_steps=1600), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"] and resumed["updates"] > summary["updates"]
    # Another learner cannot load this one's state: refused before anything starts,
    # and the run directory is left as it was.
    before = open(os.path.join(run_dir, "config.json")).read()
    with pytest.raises(ValueError, match="--algorithm cannot change when resuming"):
        apex.run(td3_config(str(tmp_path), serial=True, resume=run_dir, algorithm="ddpg"), quiet=True)
    assert open(os.path.join(run_dir, "config.json")).read() == before
    out = evaluate.evaluate_run(run_dir, which="best")
    assert out["matches_recorded"], out


@pytest.mark.timeout(120)
def test_td3_in_a_local_world_and_ddpg_on_request():
    # Ape-X's n-step returns, on request; no evaluation (Pendulum's are 200-step episodes).
    summary = apex.run(td3_config(n_step=3, max_env_steps=800, eval_every=100_000), quiet=True)
    assert summary["algorithm"] == "algorithms.td3.td3.TD3" and summary["num_actors"] == 2
    assert summary["updates"] > 0 and summary["env_steps"] >= 800
    summary = apex.run(td3_config(serial=True, algorithm="ddpg", max_env_steps=600, eval_every=100_000), quiet=True)
    assert summary["algorithm"] == "algorithms.td3.ddpg.DDPG" and summary["updates"] > 0


def test_actors_explore_at_their_own_scales():
    from gymnasium.vector import AutoresetMode

    from algorithms.builder import EnvSpec
    from envs import make_vector_env
    from rlpar.servers import ModelStore

    config = td3_config()
    apex.env_defaults(config, Parts())
    env = make_vector_env(job_env_fn(config, Parts()), num_envs=4, num_workers=0,
                          autoreset_mode=AutoresetMode.SAME_STEP, seed=0)
    try:
        builder = apex.builder(config, Parts(), EnvSpec(env.single_observation_space, env.single_action_space))
        actors = [builder.make_actor(builder.make_algorithm(device="cpu", seed=i), env=env, sink=None,
                                     params=ModelStore(), index=i, num_actors=2, seed=i) for i in range(2)]
        scales = [actor.ddpg.noise_scale for actor in actors]
    finally:
        env.close()
    assert all(actor.random_start for actor in actors)  # by default, until trained parameters arrive
    assert scales[0].shape == (4,) and scales[0][0] == pytest.approx(0.5)  # the widest: sigma
    assert scales[1][-1] == pytest.approx(0.5 ** 4)  # the narrowest: sigma^(1 + alpha)
    assert all((a > b).all() for a, b in zip(scales, scales[1:]))


def test_the_random_start_is_the_default_and_can_be_switched_off():
    from experiments.runtime.cli import parse_config

    assert parse_config(apex.ApexJobConfig, ["--env-id", "Pendulum-v1"]).continuous.random_start
    assert not parse_config(apex.ApexJobConfig, ["--env-id", "Pendulum-v1", "--no-random-start"]).continuous.random_start


def test_ou_noise_is_an_option_and_restarts_with_each_episode():
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from algorithms.builder import EnvSpec
    from rlpar.servers import ModelStore

    config = td3_config(noise="ou", random_start=False)
    apex.env_defaults(config, Parts())
    env = SyncVectorEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=3)] * 2,
                        autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        builder = apex.builder(config, Parts(), EnvSpec(env.single_observation_space, env.single_action_space))
        actor = builder.make_actor(builder.make_algorithm(device="cpu", seed=0), env=env, sink=None,
                                   params=ModelStore(), index=0, num_actors=1, seed=0)
        actor.add_every = 10**6  # keep the transitions: this actor has no sink
        states = []
        for _ in range(4):
            actor.step()
            states.append(actor.ddpg.noise.state.copy())
    finally:
        env.close()
    assert actor.ddpg.config.noise == "ou"
    assert np.all(states[0] != 0) and np.all(states[1] != 0)  # a correlated walk within the episode
    assert np.all(states[2] == 0)  # both episodes ended at step 3: the process starts afresh
    assert np.all(states[3] != 0)
    summary = apex.run(td3_config(serial=True, noise="ou", max_env_steps=600, eval_every=100_000), quiet=True)
    assert summary["updates"] > 0


@pytest.mark.timeout(120)
def test_serial_sac_learns_with_n_step_returns_resumes_and_evaluates(tmp_path):
    summary = apex.run(td3_config(str(tmp_path), serial=True, algorithm="sac", alpha=0.5, n_step=3, **SHORT),
                       quiet=True)
    assert summary["algorithm"] == "algorithms.sac.sac.SAC" and summary["updates"] > 100
    run_dir = summary["run_dir"]
    saved = json.load(open(os.path.join(run_dir, "config.json")))
    assert saved["learn"]["n_step"] == 3 and saved["learn"]["updates_per_step"] == 0.125  # the flag, SAC_DEFAULTS
    assert saved["sac"]["alpha"] == 0.5 and "gamma" not in saved["sac"]  # derived from learn, not saved twice
    resumed = apex.run(td3_config(str(tmp_path), serial=True, resume=run_dir, max_env_steps=1600), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"] and resumed["updates"] > summary["updates"]
    out = evaluate.evaluate_run(run_dir, which="best")
    assert out["matches_recorded"], out


class DiesOnceActor(ApexDPGActor):
    """SIGKILLs its own process once per test, in the rank whose RANK is $DIE_RANK,
    at its first step past $DIE_AFTER env steps (whether it acts at random yet or by
    policy: a kill that waits for trained parameters may never come in a short run)."""

    def step(self):
        marker = os.environ["DIE_MARKER"]
        if (os.environ.get("RANK") == os.environ["DIE_RANK"] and self.env_steps >= int(os.environ["DIE_AFTER"])
                and not os.path.exists(marker)):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step()


@pytest.mark.timeout(150)
def test_two_sac_learners_learn_in_step_in_a_local_world_while_a_killed_actor_rejoins(tmp_path, monkeypatch):
    from test_multi_learner import in_step

    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "3")  # actor 1 (ranks 0 and 1 are the learners), feeding learner 1
    monkeypatch.setenv("DIE_AFTER", "240")  # of its about 600 env steps
    summary = apex.run(td3_config(algorithm="sac", learners=2, max_env_steps=1200, eval_every=100_000),
                       parts=Parts(actor=DiesOnceActor), quiet=True)
    assert summary["algorithm"] == "algorithms.sac.sac.SAC" and summary["stop_reason"] == "env step budget"
    in_step(summary)  # every gradient (the temperature's too) averaged: bitwise-identical parameters
    # The actor alone was restarted and rejoined; the learners never stopped.
    assert (tmp_path / "killed").exists() and summary["actor_restarts"] == 1 and summary["restarts"] == 0
    assert summary["silent_sources"] == []
    # What it held at its last report: its add batch and n-step window, at most.
    assert 0 <= summary["lost_transitions"] <= (ApexConfig().add_every + 3) * 2
