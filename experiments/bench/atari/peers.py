"""The Stable-Baselines3 peers of ``experiments.bench.atari``: PPO and DQN with the RL
Baselines3 Zoo's Atari hyperparameters, on the bench's protocol envs.

The settings, from rl-baselines3-zoo ``hyperparams/ppo.yml`` and ``hyperparams/dqn.yml``
(their ``atari`` entries, zoo 2.x; https://github.com/DLR-RM/rl-baselines3-zoo):

- ``sb3-ppo``: ``CnnPolicy`` (the Nature CNN), 8 envs, n_steps 128, n_epochs 4,
  batch_size 256, learning_rate lin_2.5e-4, clip_range lin_0.1, vf_coef 0.5,
  ent_coef 0.01, SB3's defaults otherwise (gamma 0.99, gae_lambda 0.95,
  max_grad_norm 0.5). The linear schedules run over ``--max-env-steps`` (the zoo's
  n_timesteps is 1e7, the bench's default cap).
- ``sb3-dqn``: ``CnnPolicy``, one env, buffer_size 100,000, learning_rate 1e-4,
  batch_size 32, learning_starts 100,000, target_update_interval 1,000,
  train_freq 4, gradient_steps 1, exploration_fraction 0.1 (of the zoo's 1e7
  steps: epsilon reaches its end at 1M env steps here whatever the cap),
  exploration_final_eps 0.01, optimize_memory_usage False.

The envs are not the zoo's ``AtariWrapper`` + ``VecFrameStack``: that wrapper's
defaults differ from the protocol (``terminal_on_life_loss=True``, ``FireResetEnv``
on games with FIRE such as Pong, sticky actions off or, when asked, repeated per
agent step by ``StickyActionEnv`` instead of per emulator frame in the ALE), so the
peers step :func:`experiments.bench.atari.protocol.make_env` itself (the env ours
step, frame stack included) with rewards clipped to their sign, as ``AtariWrapper``'s
``clip_reward=True`` does. The observations are ``(4, 84, 84)`` uint8, channels
first: SB3's ``CnnPolicy`` takes them as images, unchanged, and scales them by 1/255.

Each trainer runs in one process with one torch thread (as the MinAtar bench's
peers), stops at the budget or the cap, and writes snapshots every ``eval_every``
env steps (:func:`experiments.bench.tools.wallclock.learn_sb3`).
"""

from __future__ import annotations

import functools
from typing import Any

from experiments.bench.atari.protocol import POLICY, VALUE, make_env

MODULE = "stable_baselines3"
ACTING = {"sb3-ppo": POLICY, "sb3-dqn": VALUE}
ZOO_TIMESTEPS = 10_000_000  # the zoo's n_timesteps for both: what exploration_fraction is a fraction of
PPO_SETTINGS: dict[str, Any] = {"n_steps": 128, "n_epochs": 4, "batch_size": 256, "learning_rate": 2.5e-4,
                                "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01}
PPO_ENVS = 8
DQN_SETTINGS: dict[str, Any] = {"buffer_size": 100_000, "learning_rate": 1e-4, "batch_size": 32,
                                "learning_starts": 100_000, "target_update_interval": 1_000, "train_freq": 4,
                                "gradient_steps": 1, "exploration_final_eps": 0.01,
                                "optimize_memory_usage": False}
QUICK = {"sb3-dqn": {"buffer_size": 2_000, "learning_starts": 200}, "sb3-ppo": {"n_steps": 32, "batch_size": 64}}


def linear(start: float):
    """The zoo's ``lin_X``: ``X`` times the progress remaining (1 -> 0 over the run)."""
    return functools.partial(_linear, start)


def _linear(start: float, progress_remaining: float) -> float:
    return start * progress_remaining


def settings(impl: str, *, max_env_steps: int, quick: bool = False) -> dict[str, Any]:
    """The model's keyword arguments (the zoo's, see the module docstring)."""
    if impl == "sb3-ppo":
        out = {**PPO_SETTINGS, **(QUICK[impl] if quick else {})}
        out["learning_rate"], out["clip_range"] = linear(out["learning_rate"]), linear(out["clip_range"])
        return out
    if impl == "sb3-dqn":
        return {**DQN_SETTINGS, "exploration_fraction": min(1.0, 0.1 * ZOO_TIMESTEPS / max_env_steps),
                **(QUICK[impl] if quick else {})}
    raise ValueError(f"unknown SB3 implementation {impl!r}; choose from {sorted(ACTING)}")


def make_model(impl: str, env_id: str, *, seed: int, max_env_steps: int, quick: bool = False):
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.env_util import make_vec_env

    factory = functools.partial(make_env, env_id, clip_rewards=True)
    common = {"seed": seed, "device": "cpu", "verbose": 0}
    kwargs = settings(impl, max_env_steps=max_env_steps, quick=quick)
    if impl == "sb3-ppo":
        return PPO("CnnPolicy", make_vec_env(factory, n_envs=PPO_ENVS, seed=seed), **kwargs, **common)
    return DQN("CnnPolicy", make_vec_env(factory, n_envs=1, seed=seed), **kwargs, **common)


def acting_state(impl: str, model: Any) -> dict[str, Any]:
    return model.policy.q_net.state_dict() if impl == "sb3-dqn" else model.policy.state_dict()


def train(impl: str, env_id: str, *, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, quick: bool = False) -> dict[str, Any]:
    import torch

    from experiments.bench.tools.wallclock import learn_sb3

    torch.set_num_threads(1)
    model = make_model(impl, env_id, seed=seed, max_env_steps=max_env_steps, quick=quick)
    figures = learn_sb3(model, lambda: acting_state(impl, model), run_dir=run_dir, started=started,
                        budget_s=budget_s, max_env_steps=max_env_steps, eval_every=eval_every)
    return {**figures, "wait_fraction": None}


def policy(impl: str, env_id: str):
    """``(load(state), scores(obs))``: the trainer's network rebuilt from SB3's classes
    (Q values for DQN, logits for PPO)."""
    import numpy as np
    import torch
    from stable_baselines3.common.policies import ActorCriticCnnPolicy
    from stable_baselines3.common.torch_layers import NatureCNN
    from stable_baselines3.dqn.policies import QNetwork

    env = make_env(env_id)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if impl == "sb3-dqn":
        features = NatureCNN(obs_space, features_dim=512)
        net = QNetwork(obs_space, act_space, features_extractor=features, features_dim=512, net_arch=[])
        return net.load_state_dict, lambda obs: net(torch.as_tensor(np.asarray(obs)))
    net = ActorCriticCnnPolicy(obs_space, act_space, lambda _: 0.0)
    return net.load_state_dict, lambda obs: net.get_distribution(
        torch.as_tensor(np.asarray(obs))).distribution.logits
