"""``--reward-clip``: 84x84 frames learn from rewards clipped to +-1 (the DQN papers'
Atari preprocessing) while episode returns and evaluations count the game's; other
observation families learn from the env's own rewards; a bad bound is refused naming
the flag. Both programs: the sync member's envs (PPO) and the actors' (Ape-X DQN)."""

import json
import math
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from jobs import apex_config

from algorithms.dqn import DQN
from algorithms.ppo import PPO
from algorithms.rollout import GAME_REWARD, RolloutCollector, evaluate
from envs import make_vector_env
from envs.testing import CountingEnv
from experiments import apex, impala, ppo, pqn
from experiments.runtime import Parts
from experiments.runtime.cli import apply_overrides
from experiments.runtime.config import EnvConfig
from experiments.runtime.envs import ClippedRewards, learning_rewards
from experiments.runtime.job import check_command

LENGTH = 8


class FramesThatScore(gym.Env):
    """A 4-frame stack of 84x84 bytes (the frames family) that scores 5 for action 0
    and 3 for action 1, in episodes of 8 steps: a game's return is 24-40 whatever is
    played, where rewards clipped to 1 would sum to 8."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.action_space = spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        return (np.arange(4, dtype=np.uint8)[:, None, None] + self.t) * np.ones((4, 84, 84), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 5.0 if int(action) == 0 else 3.0, self.t >= LENGTH, False, {}


SEEN: list[np.ndarray] = []  # the rewards of every batch learned from (serial runs: this process)


class SeenPPO(PPO):
    def update(self, batch):
        SEEN.append(np.unique(np.asarray(batch["rewards"])))
        return super().update(batch)


class SeenDQN(DQN):
    def learn(self, batch):
        SEEN.append(np.unique(np.asarray(batch["reward"])))
        return super().learn(batch)


def ppo_frames(**over):
    config = ppo.PPOJobConfig()
    apply_overrides(config, {
        "num_envs": 2, "n_steps": 16, "minibatches": 2, "epochs": 1, "cnn": "small", "eval_every": 64,
        "eval_episodes": 2, "target_return": 1e9, "max_env_steps": 128, "max_seconds": 60.0, "log_dir": "none",
        "status_every": 0.0, "serial": True, **over})
    return config


@pytest.fixture(autouse=True)
def _seen():
    SEEN.clear()
    yield
    SEEN.clear()


@pytest.mark.timeout(120)
def test_frames_learn_clipped_rewards_and_report_the_games_returns_in_the_sync_program():
    summary = ppo.run(ppo_frames(), parts=Parts(env=FramesThatScore, algorithm=SeenPPO), quiet=True)
    assert summary["updates"] >= 4 and SEEN
    assert set(np.concatenate(SEEN).tolist()) <= {0.0, 1.0}, SEEN  # 0: a reset step's, masked
    assert 24 <= summary["train_return"] <= 40 and 24 <= summary["best_eval_return"] <= 40, summary


@pytest.mark.timeout(120)
def test_a_given_bound_wins_and_inf_learns_the_games_own_rewards():
    ppo.run(ppo_frames(reward_clip=math.inf), parts=Parts(env=FramesThatScore, algorithm=SeenPPO), quiet=True)
    assert {3.0, 5.0} <= set(np.concatenate(SEEN).tolist()), SEEN
    SEEN.clear()
    ppo.run(ppo_frames(reward_clip=4.0), parts=Parts(env=FramesThatScore, algorithm=SeenPPO), quiet=True)
    assert max(np.concatenate(SEEN)) == 4.0 and 3.0 in np.concatenate(SEEN), SEEN


@pytest.mark.timeout(120)
def test_the_actor_learner_program_clips_before_the_n_step_sums(tmp_path):
    config = apex_config(str(tmp_path), serial=True, num_actors=1, cnn="small", learning_starts=64, batch_size=16,
                         max_env_steps=192, eval_every=96, eval_episodes=2, replay_capacity=1000)
    summary = apex.run(config, parts=Parts(env=FramesThatScore, algorithm=SeenDQN), quiet=True)
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        saved = json.load(f)
    assert saved["env"]["reward_clip"] == 1.0  # filled by family, and saved
    gamma, n = saved["learn"]["gamma"], saved["learn"]["n_step"]
    assert SEEN and summary["updates"] >= 1
    # n-step sums of rewards of 1: at most 1 + gamma + ... (the game's would be 3 or more)
    assert max(np.concatenate(SEEN)) <= sum(gamma ** k for k in range(n)) + 1e-6, SEEN
    assert 24 <= summary["train_return"] <= 40 and 24 <= summary["best_eval_return"] <= 40, summary


@pytest.mark.parametrize("module", [apex, impala, ppo, pqn])
@pytest.mark.parametrize(("argv", "bound"), [
    (["--env-id", "ALE/Pong-v5"], 1.0),
    (["--env-id", "ALE/Pong-v5", "--reward-clip", "2"], 2.0),
    (["--env-id", "ALE/Pong-v5", "--reward-clip", "inf"], math.inf),
    (["--env-id", "MinAtar/Breakout-v0"], math.inf),
    (["--env-id", "CartPole-v1"], math.inf),
])
def test_the_bound_left_out_is_the_observation_familys(module, argv, bound):
    config, _ = check_command(module.job, module.ENTRY.config_cls, argv)
    assert config.env.reward_clip == bound


@pytest.mark.parametrize("bound", [0.0, -1.0, math.nan])
def test_a_bound_that_is_not_positive_is_refused_naming_the_flag(bound):
    with pytest.raises(ValueError, match="--reward-clip must be > 0"):
        EnvConfig(reward_clip=bound).validate()


def test_clipped_rewards_keep_the_games_and_the_wrapped_envs_attributes():
    env = make_vector_env(CountingEnv, num_envs=2, num_workers=0)
    assert learning_rewards(env, EnvConfig(reward_clip=math.inf)) is env
    assert learning_rewards(env, None) is env  # a section without the field (MADDPG's)
    clipped = learning_rewards(env, EnvConfig(reward_clip=0.5))
    assert isinstance(clipped, ClippedRewards) and clipped.num_envs == 2
    clipped.reset(seed=0)
    _, reward, _, _, infos = clipped.step(np.array([0, 1]))
    assert reward.tolist() == [0.5, 0.0] and infos[GAME_REWARD].tolist() == [1.0, 0.0]
    assert clipped.single_observation_space == env.single_observation_space
    clipped.close()


def test_episode_returns_count_the_games_rewards_and_a_policy_sees_the_clipped():
    env = ClippedRewards(make_vector_env(CountingEnv, num_envs=2, num_workers=0), bound=0.25)
    collector = RolloutCollector(env=env, sample_actions=lambda obs: (
        (obs[:, 0] % 2).astype(np.int64), (obs[:, 0] % 2).astype(np.int64)), n_steps=10, seed=0)
    rollout = collector.collect()
    assert set(np.unique(rollout["rewards"]).tolist()) <= {0.0, 0.25}
    assert collector.drain_episodes()[0] == [10.0, 10.0]  # every step scored 1 in the game

    seen = []

    def act(obs):
        return (obs[:, 0] % 2).astype(np.int64)

    act.rewarded = lambda reward: seen.append(np.asarray(reward).copy())
    assert evaluate(act, env, episodes=2, seed=0).tolist() == [10.0, 10.0]
    assert {float(r) for r in np.concatenate(seen)} == {0.25}
    env.close()
