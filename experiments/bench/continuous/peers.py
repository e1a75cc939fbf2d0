"""The Stable-Baselines3 peers of ``experiments.bench.continuous.budget``: TD3 and SAC with
rl-baselines3-zoo's hyperparameters for each env (``hyperparams/td3.yml`` and
``sac.yml`` at DLR-RM/rl-baselines3-zoo 22e3ff2, April 2026; the zoo lists the
MuJoCo tasks as ``-v4``, the same settings here on ``-v5``), SB3's defaults for
everything the zoo leaves out, one process on the CPU.

- ``sb3-td3``: Pendulum-v1: gamma 0.98, buffer 200K, 10K random steps before
  learning, Gaussian exploration noise of std 0.1, lr 1e-3, a [400, 300] MLP, one
  gradient step of 256 per env step. MuJoCo: 10K random steps, noise 0.1, lr 1e-3,
  batch 256, [400, 300], one step per env step (SB3: gamma 0.99, buffer 1M, tau
  0.005, policy delay 2, target noise 0.2 clipped at 0.5).
- ``sb3-sac``: Pendulum-v1: lr 1e-3 (SB3 otherwise: 100 random steps, batch 256,
  [256, 256], automatic entropy coefficient). MuJoCo: 10K random steps, SB3's
  defaults otherwise (lr 3e-4, batch 256, buffer 1M, [256, 256], one step per env step).

Torch threads: ``threads`` (the bench's ``--peer-threads``, default 1). A peer is
one process, so intra-op threads are its only way to use the machine's other core,
and on an idle machine two do help: SB3 TD3's update (batch 256, [400, 300]) took
6.6 ms with 2 threads against 9.2-9.6 ms with 1 (SAC: 7.5 against 9.6-9.8). But two
threads collapse as soon as anything else wants a core: with about one core busy
elsewhere (load average 2-2.7) 3 of 4 two-thread measurements took 53-77 ms per
update, and at load 6-9 180-750 ms, while one thread stayed at 9.2-9.6 ms (27-38 ms
at load 9). The bench's own niced evaluator runs beside the trainer, so one thread
is the setting whose speed does not depend on what else happens to run.

Each trainer stops at the wall-clock budget (counted from its process's launch) or
the env-step cap, writes the actor every ``eval_every`` env steps and a final one,
and returns the run's figures: ``updates`` is SB3's gradient-step count;
``wait_fraction`` the share of the time after learning started that the loop spent
outside gradient steps (acting, stepping the env): a serial loop's learner waits then.
"""

from __future__ import annotations

import time
from typing import Any

MODULE = "stable_baselines3"
PENDULUM = "Pendulum-v1"
ZOO = {
    ("sb3-td3", PENDULUM): {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000, "noise_std": 0.1,
                            "learning_rate": 1e-3, "net_arch": [400, 300]},
    ("sb3-td3", "mujoco"): {"learning_starts": 10_000, "noise_std": 0.1, "learning_rate": 1e-3, "batch_size": 256,
                            "net_arch": [400, 300]},
    ("sb3-sac", PENDULUM): {"learning_rate": 1e-3},
    ("sb3-sac", "mujoco"): {"learning_starts": 10_000},
}


def settings(impl: str, env_id: str, *, quick: bool = False) -> dict[str, Any]:
    """The zoo's settings of ``impl`` on ``env_id`` (MuJoCo's for any other env)."""
    if impl not in ("sb3-td3", "sb3-sac"):
        raise ValueError(f"unknown SB3 implementation {impl!r}; choose from ['sb3-sac', 'sb3-td3']")
    chosen = dict(ZOO[(impl, env_id if env_id == PENDULUM else "mujoco")])
    if quick:  # a smoke test: learning starts within a second, small networks
        chosen.update(learning_starts=200, buffer_size=5_000, batch_size=64, net_arch=[32, 32])
    return chosen


def make_model(impl: str, env_id: str, *, seed: int, quick: bool):
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    from envs.registry import EnvFactory

    kwargs = settings(impl, env_id, quick=quick)
    env = EnvFactory.from_id(env_id)()
    kwargs["policy_kwargs"] = {"net_arch": kwargs.pop("net_arch")} if "net_arch" in kwargs else None
    if impl == "sb3-td3":
        std = kwargs.pop("noise_std")
        n = int(np.prod(env.action_space.shape))
        kwargs["action_noise"] = NormalActionNoise(mean=np.zeros(n), sigma=std * np.ones(n))
    cls = TD3 if impl == "sb3-td3" else SAC
    return cls("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def train(impl: str, env_id: str, *, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, quick: bool, threads: int) -> dict[str, Any]:
    import torch

    from experiments.bench.tools.wallclock import learn_sb3

    torch.set_num_threads(threads)
    model = make_model(impl, env_id, seed=seed, quick=quick)
    timing = {"train_s": 0.0, "learning_since": None}
    train_step = model.train

    def timed_train(*args: Any, **kwargs: Any) -> None:  # SB3 calls it only once learning started
        t0 = time.perf_counter()
        if timing["learning_since"] is None:
            timing["learning_since"] = t0
        train_step(*args, **kwargs)
        timing["train_s"] += time.perf_counter() - t0

    model.train = timed_train

    figures = learn_sb3(model, model.actor.state_dict, run_dir=run_dir, started=started, budget_s=budget_s,
                        max_env_steps=max_env_steps, eval_every=eval_every)
    ended = time.perf_counter()  # after the final snapshot: a few ms in a run of minutes
    learning = ended - timing["learning_since"] if timing["learning_since"] is not None else 0.0
    return {**figures, "wait_fraction": 1.0 - timing["train_s"] / learning if learning > 0 else None,
            "settings": {**settings(impl, env_id, quick=quick), "torch_threads": threads}}


def policy(impl: str, env_id: str, *, quick: bool):
    """``(load(actor_state), act(obs))`` for the evaluator: the SB3 policy the trainer
    built, its actor loaded; ``act`` is ``predict(deterministic=True)`` (TD3's
    actor; SAC's mean action), rescaled to the env's Box."""
    from stable_baselines3.common.utils import ConstantSchedule
    from stable_baselines3.sac.policies import SACPolicy
    from stable_baselines3.td3.policies import TD3Policy

    from envs.registry import EnvFactory

    env = EnvFactory.from_id(env_id)()
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    chosen = settings(impl, env_id, quick=quick)
    kwargs = {"net_arch": chosen["net_arch"]} if "net_arch" in chosen else {}
    cls = TD3Policy if impl == "sb3-td3" else SACPolicy
    net = cls(obs_space, act_space, ConstantSchedule(1e-3), **kwargs)
    net.set_training_mode(False)
    return net.actor.load_state_dict, lambda obs: net.predict(obs, deterministic=True)[0]
