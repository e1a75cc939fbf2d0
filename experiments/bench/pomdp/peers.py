"""The peer of ``experiments.bench.pomdp.budget``: sb3-contrib's RecurrentPPO (PPO with an
LSTM policy and value function, Stable-Baselines3's contrib package), one process on
the CPU, one torch thread (as ours' learner).

- ``rlpar/StatelessCartPole-v1``: rl-baselines3-zoo's ``ppo_lstm.yml`` entry for the
  same task (``CartPoleNoVel-v1``), as recalled here: 8 envs, 32 steps, batch 256, 20
  epochs, gamma 0.98, GAE lambda 0.8, no entropy bonus, lr 1e-3 and clip 0.2 (the zoo
  decays both linearly to 0; a wall-clock budget has no known end to decay to, so
  constants), LSTM of 64 for the actor and its own for the critic, [64] heads, ReLU,
  no orthogonal init.
- ``rlpar/BreakoutNoTrail-v1``: no zoo entry; the MinAtar bench's ``sb3-ppo``
  settings (:mod:`experiments.bench.minatar.peers`: 8 envs, 128 steps, 4 epochs, batch
  256, lr 2.5e-4, clip 0.1, vf_coef 0.5, ent_coef 0.01) on the MinAtar conv net, with
  an LSTM of 128 (actor and critic each) and linear heads on it.

The evaluator plays the deterministic action (the mode) with the policy's LSTM state,
one per episode, reset when its episode starts (:class:`RecurrentGreedy`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

MODULE = "sb3_contrib"
CARTPOLE = "rlpar/StatelessCartPole-v1"


def policy_kwargs(env_id: str) -> dict[str, Any]:
    import torch

    if env_id == CARTPOLE:
        return {"ortho_init": False, "activation_fn": torch.nn.ReLU, "lstm_hidden_size": 64,
                "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}}
    from experiments.bench.minatar.peers import features_extractor

    return {"features_extractor_class": features_extractor(), "net_arch": [], "lstm_hidden_size": 128,
            "enable_critic_lstm": True}


def hyperparameters(env_id: str) -> dict[str, Any]:
    if env_id == CARTPOLE:
        return {"n_envs": 8, "n_steps": 32, "batch_size": 256, "n_epochs": 20, "gamma": 0.98, "gae_lambda": 0.8,
                "ent_coef": 0.0, "learning_rate": 1e-3, "clip_range": 0.2}
    return {"n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 4, "learning_rate": 2.5e-4,
            "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01}


def settings_of(env_id: str, *, quick: bool) -> dict[str, Any]:
    settings = hyperparameters(env_id)
    if quick:  # a smoke test: a few updates within seconds
        settings.update(n_steps=16, batch_size=64, n_epochs=2)
    return settings


def make_model(env_id: str, *, seed: int, quick: bool):
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from envs.registry import EnvFactory

    settings = settings_of(env_id, quick=quick)
    n_envs = settings.pop("n_envs")
    return RecurrentPPO("MlpLstmPolicy", make_vec_env(EnvFactory.from_id(env_id), n_envs=n_envs, seed=seed),
                        policy_kwargs=policy_kwargs(env_id), seed=seed, device="cpu", verbose=0, **settings)


def train(env_id: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
          eval_every: int, quick: bool) -> dict[str, Any]:
    import torch

    from experiments.bench.tools.wallclock import learn_sb3

    torch.set_num_threads(1)
    model = make_model(env_id, seed=seed, quick=quick)
    figures = learn_sb3(model, model.policy.state_dict, run_dir=run_dir, started=started, budget_s=budget_s,
                        max_env_steps=max_env_steps, eval_every=eval_every)
    settings = {**settings_of(env_id, quick=quick), "lstm_hidden_size": policy_kwargs(env_id)["lstm_hidden_size"]}
    return {**figures, "wait_fraction": None, "settings": settings}


class RecurrentGreedy:
    """``act(obs batch) -> actions``: the policy's deterministic action with its LSTM
    state, one row per env; ``episodes_started(mask)`` (called by
    :func:`algorithms.rollout.evaluate`) marks the rows whose next step starts an
    episode, where RecurrentPPO zeroes the state."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.state: Any = None
        self.starts: np.ndarray | None = None

    def episodes_started(self, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool)
        if self.starts is None or len(self.starts) != len(mask):
            self.state, self.starts = None, np.ones(len(mask), dtype=bool)
        else:
            self.starts = self.starts | mask

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.starts is None or len(self.starts) != len(obs):
            self.state, self.starts = None, np.ones(len(obs), dtype=bool)
        actions, self.state = self.policy.predict(np.asarray(obs), state=self.state, episode_start=self.starts,
                                                  deterministic=True)
        self.starts = np.zeros(len(obs), dtype=bool)
        return actions


def policy(env_id: str):
    """``(load(state), act)`` for the evaluator: the policy the trainer snapshots,
    rebuilt from sb3-contrib's own class."""
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

    from envs.registry import EnvFactory

    env = EnvFactory.from_id(env_id)()
    net = RecurrentActorCriticPolicy(env.observation_space, env.action_space, lambda _: 0.0,
                                     **policy_kwargs(env_id))
    env.close()
    act = RecurrentGreedy(net)

    def load(state: dict[str, Any]) -> None:
        net.load_state_dict(state)
        act.state = act.starts = None

    return load, act
