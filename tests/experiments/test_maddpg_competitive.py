"""Competitive MPE through experiments.maddpg, beyond test_maddpg_experiment.py (which
runs simple_adversary/simple_tag by CLI with per-agent and per-team tags and checks
simple_adversary's critic widths): simple_tag with continuous actions and team
critics, whose inputs hold exactly their own team's observations and actions."""

import math
import types

import pytest
import torch

from algorithms.maddpg import MADDPG
from experiments.maddpg import (
    LearnConfig,
    MADDPGJobConfig,
    MultiAgentEnvConfig,
    ReplayConfig,
    format_summary,
    run,
)
from experiments.runtime import Parts, RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Kept(MADDPG):
    newest = None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        Kept.newest = self


def tag_config(observes: str) -> MADDPGJobConfig:
    return MADDPGJobConfig(
        run=RunConfig(max_env_steps=300, eval_every=150, eval_episodes=2, status_every=0.0, log_dir="none",
                      serial=True),
        env=MultiAgentEnvConfig(env_id="simple_tag", num_envs=4, env_workers=0, continuous=True, episode_steps=25),
        replay=ReplayConfig(replay_capacity=1000),
        learn=LearnConfig(batch_size=16, learning_starts=100, updates_per_step=0.05, critic_observes=observes))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("observes, widths", [("all", [82, 82, 82, 82]), ("team", [63, 63, 63, 19])])
def test_simple_tag_critics_see_what_critic_observes_says(observes, widths):
    """simple_tag: three adversaries observe 16, the good agent 14; 5-wide Box actions.
    all: 3*(16+5) + (14+5) = 82 for every critic; team: 63 for the adversaries, 19 for the agent."""
    pytest.importorskip("mpe2")
    summary = run(tag_config(observes), parts=Parts(algorithm=Kept), quiet=True)
    algo = Kept.newest
    assert summary["agents"] == ["adversary_0", "adversary_1", "adversary_2", "agent_0"]
    assert summary["critic_observes"] == observes and summary["critic_inputs"] == widths
    assert summary["updates"] > 0 and summary["env_steps"] == 300
    assert set(summary["team_return_last100"]) == {"adversary", "agent"}
    # simple_tag's measure is the predators' contacts with the prey; its landmarks are
    # obstacles, so simple_spread's landmark distance and collisions do not apply.
    assert summary["tags_per_episode"] >= 0 and math.isnan(summary["landmark_distance"])
    assert math.isnan(summary["collisions_per_episode"])
    printed = format_summary(summary)
    assert "adversary-good contacts per episode" in printed and "landmark distance" not in printed
    assert [critic[0].in_features for critic in algo.critics] == widths
    assert not algo.homogeneous and not algo.agents[0].discrete
    # Each agent's observation and action filled with its own index: a critic's input
    # holds exactly the indices of the agents it sees, observations first.
    obs = [torch.full((2, a.obs_dim), float(i)) for i, a in enumerate(algo.agents)]
    actions = [torch.full((2, a.action_dim), float(i)) for i, a in enumerate(algo.agents)]
    seen = {"all": [(0, 1, 2, 3)] * 4, "team": [(0, 1, 2)] * 3 + [(3,)]}[observes]
    for i, members in enumerate(seen):
        expected = [float(j) for j in members for _ in range(algo.agents[j].obs_dim)] \
            + [float(j) for j in members for _ in range(algo.agents[j].action_dim)]
        assert algo.critic_input(i, obs, actions)[0].tolist() == expected


@pytest.mark.parametrize("env_id, finite", [
    ("simple_tag", {"tags_per_episode"}),
    ("simple_spread", {"landmark_distance", "collisions_per_episode"}),
    ("simple_adversary", set()),  # its agents never collide, and the landmarks are a target and decoys
])
def test_each_env_gets_the_evaluation_measures_that_fit_it(env_id, finite):
    pytest.importorskip("mpe2")
    from experiments.runtime.multiagent import MEASURES, env_factory, evaluate

    env_fn = env_factory(MultiAgentEnvConfig(env_id=env_id, episode_steps=10), None)
    agents = len(env_fn().possible_agents)
    result = evaluate(types.SimpleNamespace(n_agents=agents), env_fn, episodes=2, random_policy=True)
    assert {key for key in MEASURES if math.isfinite(result[key])} == finite
