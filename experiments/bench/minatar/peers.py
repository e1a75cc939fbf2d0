"""The Stable-Baselines3 peers of ``experiments.bench.minatar.budget``, each on the MinAtar
conv net (Young & Tian 2019: 16 3x3 filters, stride 1, then 128 units; our
:func:`algorithms.nets.minatar_conv`) as its features extractor, one torch thread
(as ours' learner), one process.

- ``sb3-dqn``: the paper's DQN settings (MinAtar's ``examples/dqn.py``): one env,
  replay 100K, batch 32 every env step, target copy every 1,000 steps, Huber loss
  (SB3's), no gradient clipping (SB3 clips at 10 by default: ``max_grad_norm=inf``),
  centered RMSProp with lr 2.5e-4, squared-gradient momentum (alpha) 0.95 and eps
  0.01, exactly the optimizer ``examples/dqn.py`` constructs (one revision of that
  file also passes ``momentum=0.95``; we follow the one without), epsilon 1 -> 0.1
  over the first 100K env steps, 5K random steps before learning, linear Q head on
  the 128 features, no double Q. Difference left: SB3 anneals epsilon over env steps
  0-100K, the paper over 5K-105K.
- ``sb3-a2c`` / ``sb3-ppo``: rl-baselines3-zoo has no MinAtar entry, so its ``atari``
  settings without the Atari wrappers: A2C with 16 envs, ent_coef 0.01, vf_coef 0.25,
  RMSpropTFLike(eps 1e-5) and SB3's defaults otherwise (5 steps, lr 7e-4); PPO with 8
  envs, 128 steps, 4 epochs, batch 256, lr 2.5e-4, clip 0.1, vf_coef 0.5, ent_coef
  0.01 (the zoo's linear decays of lr and clip become constants: a wall-clock
  budget has no known end to decay to). Policy and value layers sit directly on the
  shared 128 features, as in our A3C.

Each trainer stops at the wall-clock budget (counted from its process's launch) or
the env-step cap, writes snapshots every ``eval_every`` env steps and a final one,
and returns the run's figures; ``updates`` is SB3's own count (DQN: gradient steps;
A2C: one per rollout; PPO: epochs, each of 4 minibatches here).
"""

from __future__ import annotations

from typing import Any

from experiments.bench.minatar.evaluation import env_id

MODULE = "stable_baselines3"
ALGORITHMS = {"sb3-dqn": "DQN", "sb3-a2c": "A2C", "sb3-ppo": "PPO"}


def features_extractor():
    """The MinAtar torso as an SB3 features extractor (built lazily: SB3 is optional)."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    from algorithms.nets import MINATAR_FEATURES, minatar_conv

    class MinAtarFeatures(BaseFeaturesExtractor):
        def __init__(self, observation_space: Any) -> None:
            super().__init__(observation_space, features_dim=MINATAR_FEATURES)
            height, width, channels = observation_space.shape
            self.net = minatar_conv(channels, height=height, width=width)

        def forward(self, obs):
            return self.net(obs)

    return MinAtarFeatures


def policy_kwargs(impl: str) -> dict[str, Any]:
    import torch

    kwargs: dict[str, Any] = {"features_extractor_class": features_extractor(), "net_arch": []}
    if impl == "sb3-dqn":
        kwargs.update(optimizer_class=torch.optim.RMSprop,
                      optimizer_kwargs={"alpha": 0.95, "eps": 0.01, "centered": True})
    elif impl == "sb3-a2c":
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        kwargs.update(optimizer_class=RMSpropTFLike, optimizer_kwargs={"eps": 1e-5})
    return kwargs


def make_model(impl: str, game: str, *, seed: int, max_env_steps: int, quick: bool, variant: str = "paper"):
    from stable_baselines3 import A2C, DQN, PPO
    from stable_baselines3.common.env_util import make_vec_env

    from envs.registry import EnvFactory

    factory = EnvFactory.from_id(env_id(game, variant))
    common = {"policy_kwargs": policy_kwargs(impl), "seed": seed, "device": "cpu", "verbose": 0}
    if impl == "sb3-dqn":
        return DQN("MlpPolicy", make_vec_env(factory, n_envs=1, seed=seed), learning_rate=2.5e-4,
                   buffer_size=5_000 if quick else 100_000, learning_starts=250 if quick else 5_000,
                   batch_size=32, train_freq=1, gradient_steps=1, target_update_interval=1_000, gamma=0.99,
                   exploration_initial_eps=1.0, exploration_final_eps=0.1,
                   exploration_fraction=min(1.0, 100_000 / max_env_steps), max_grad_norm=float("inf"),
                   **common)
    if impl == "sb3-a2c":
        return A2C("MlpPolicy", make_vec_env(factory, n_envs=16, seed=seed), ent_coef=0.01, vf_coef=0.25,
                   **common)
    if impl == "sb3-ppo":
        return PPO("MlpPolicy", make_vec_env(factory, n_envs=8, seed=seed), n_steps=128, n_epochs=4,
                   batch_size=256, learning_rate=2.5e-4, clip_range=0.1, vf_coef=0.5, ent_coef=0.01,
                   **common)
    raise ValueError(f"unknown SB3 implementation {impl!r}; choose from {sorted(ALGORITHMS)}")


def acting_state(impl: str, model: Any) -> dict[str, Any]:
    """What the evaluator needs: the online Q network (DQN) or the whole policy."""
    return model.policy.q_net.state_dict() if impl == "sb3-dqn" else model.policy.state_dict()


def train(impl: str, game: str, *, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, quick: bool, variant: str = "paper") -> dict[str, Any]:
    import torch

    from experiments.bench.tools.wallclock import learn_sb3

    torch.set_num_threads(1)
    model = make_model(impl, game, seed=seed, max_env_steps=max_env_steps, quick=quick, variant=variant)
    figures = learn_sb3(model, lambda: acting_state(impl, model), run_dir=run_dir, started=started,
                        budget_s=budget_s, max_env_steps=max_env_steps, eval_every=eval_every)
    return {**figures, "wait_fraction": None}


def policy(impl: str, game: str, *, variant: str = "paper"):
    """``(load(state), scores(obs))`` for the evaluator: the same network the trainer
    snapshots, rebuilt from SB3's own classes."""
    import numpy as np
    import torch
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.dqn.policies import QNetwork

    from algorithms.nets import MINATAR_FEATURES
    from envs.registry import EnvFactory

    env = EnvFactory.from_id(env_id(game, variant))()
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    kwargs = policy_kwargs(impl)
    if impl == "sb3-dqn":
        net = QNetwork(obs_space, act_space, features_extractor=kwargs["features_extractor_class"](obs_space),
                       features_dim=MINATAR_FEATURES, net_arch=[])
        return net.load_state_dict, lambda obs: net(torch.as_tensor(np.asarray(obs)))
    net = ActorCriticPolicy(obs_space, act_space, lambda _: 0.0, **kwargs)
    return net.load_state_dict, lambda obs: net.get_distribution(
        torch.as_tensor(np.asarray(obs))).distribution.logits
