"""rl_games PPO on EnvPool, the GPU peer of ``experiments.bench.atari --device cuda``
(``pip install rl-games==1.6.5 envpool``; not in the ``bench`` extra).

The config (:func:`config`) is rl_games' own ``rl_games/configs/atari/ppo_pong_envpool.yaml``
(Nature-CNN-shaped conv torso with ELU, 512 units, PPO with clip 0.2, 3 mini-epochs,
horizon 256, adaptive lr from 3e-4 at KL 0.01, input and value normalization,
gamma 0.999, 24 envs) with the bench's protocol in place of its env settings: EnvPool
with ``episodic_life=False`` (the yaml asks ``episode_life: True``), sticky actions
0.25, no FIRE reset, 108K frames, rewards clipped to their sign for training
(``reward_shaper`` min/max 1, as the yaml has). Only the env settings and the
budget differ from the yaml; ``num_actors`` is 64 on the GPU (16 cores: the yaml's
24 leaves EnvPool's threads idle), 4 with ``--cpu-smoke``.

The trainer registers a subclass of rl_games' discrete A2C agent
(:func:`timed_agent_class`) that writes ``model.state_dict()`` every ``eval_every``
frames (agent steps) and stops the run at the budget (rl_games ends its loop once
``frame >= max_frames``). The evaluator rebuilds the network from the same config
with rl_games' ``ModelBuilder`` and takes its ``logits`` on ``obs / 255`` (rl_games
scales uint8 observations so before the model's own input normalization).

Not run on this machine (no rl_games here, no GPU): its first run is the device call.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import time
from typing import Any

from experiments.bench.atari.cleanrl import ENVPOOL_PROTOCOL, envpool_id

PONG_ENVPOOL: dict[str, Any] = {  # rl_games/configs/atari/ppo_pong_envpool.yaml, params
    "seed": 322,
    "algo": {"name": "a2c_discrete"},
    "model": {"name": "discrete_a2c"},
    "network": {
        "name": "actor_critic", "separate": False, "space": {"discrete": {}},
        "cnn": {"permute_input": False, "type": "conv2d", "activation": "elu",
                "initializer": {"name": "default"}, "regularizer": {"name": "None"},
                "convs": [{"filters": 32, "kernel_size": 8, "strides": 4, "padding": 0},
                          {"filters": 64, "kernel_size": 4, "strides": 2, "padding": 0},
                          {"filters": 64, "kernel_size": 3, "strides": 1, "padding": 0}]},
        "mlp": {"units": [512], "activation": "elu",
                "initializer": {"name": "orthogonal_initializer", "gain": 1.41421356237}},
    },
    "config": {
        "reward_shaper": {"min_val": -1, "max_val": 1}, "normalize_advantage": True, "gamma": 0.999,
        "tau": 0.95, "learning_rate": 3e-4, "name": "Pong_envpool_bench", "score_to_win": 20.0,
        "grad_norm": 10, "entropy_coef": 0.01, "truncate_grads": True, "env_name": "envpool", "ppo": True,
        "e_clip": 0.2, "clip_value": False, "num_actors": 24, "horizon_length": 256, "minibatch_size": 768,
        "mini_epochs": 3, "critic_coef": 1, "lr_schedule": "adaptive", "kl_threshold": 0.01,
        "normalize_value": True, "normalize_input": True, "max_epochs": -1,
        "env_config": {"env_name": "Pong-v5", "episode_life": True},
        "player": {"render": False, "games_num": 100, "n_game_life": 1, "determenistic": True},
    },
}
GPU_ACTORS, SMOKE_ACTORS = 64, 4


def missing(device: str) -> str | None:
    for module, name in (("rl_games", "rl-games"), ("envpool", "envpool")):
        if importlib.util.find_spec(module) is None:
            return f"{name} is not installed (pip install rl-games==1.6.5 envpool)"
    return None


def config(env_id: str, *, seed: int, max_env_steps: int, device: str, smoke: bool = False) -> dict[str, Any]:
    """rl_games' Pong EnvPool params with the protocol's env and the run's budget."""
    params = copy.deepcopy(PONG_ENVPOOL)
    params["seed"] = seed
    cfg = params["config"]
    actors = SMOKE_ACTORS if smoke else GPU_ACTORS
    cfg.update({"num_actors": actors, "max_frames": max_env_steps, "device": device, "device_name": device,
                "multi_gpu": False, "env_config": {"env_name": envpool_id(env_id), "has_lives": False,
                                                   **ENVPOOL_PROTOCOL, "seed": seed}})
    if smoke:  # a batch within seconds on the CPU
        cfg.update({"horizon_length": 16, "minibatch_size": 32, "mini_epochs": 1})
    else:  # minibatches divide the batch (64 x 256)
        cfg["minibatch_size"] = 4096
    return {"params": params}


def timed_agent_class(*, run_dir: str, started: float, budget_s: float, eval_every: int, figures: dict[str, Any]):
    from rl_games.algos_torch.a2c_discrete import DiscreteA2CAgent

    from experiments.bench.tools.wallclock import Every, write_snapshot

    clock = Every(eval_every)

    class TimedAgent(DiscreteA2CAgent):
        def train_epoch(self):
            out = super().train_epoch()
            figures.setdefault("began", time.time())
            frames = int(self.frame + self.curr_frames)
            figures.update(frames=frames, epochs=int(self.epoch_num))
            if clock.passed(frames):
                write_snapshot(run_dir, self.model.state_dict(), env_steps=frames, wall_s=time.time() - started,
                               updates=int(self.epoch_num))
            if time.time() - started >= budget_s:
                self.max_frames = 1  # rl_games ends its loop once frame >= max_frames
            figures["model"] = self.model
            return out

    return TimedAgent


def train(env_id: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
          eval_every: int, device: str = "cuda", smoke: bool = False) -> dict[str, Any]:
    from rl_games.torch_runner import Runner

    from experiments.bench.tools.wallclock import write_snapshot

    figures: dict[str, Any] = {}
    agent_class = timed_agent_class(run_dir=run_dir, started=started, budget_s=budget_s, eval_every=eval_every,
                                    figures=figures)
    runner = Runner()
    runner.algo_factory.register_builder("a2c_discrete", lambda **kwargs: agent_class(**kwargs))
    runner.load(config(env_id, seed=seed, max_env_steps=max_env_steps, device=device, smoke=smoke))
    cwd = os.getcwd()
    os.chdir(run_dir)  # rl_games writes runs/ (checkpoints, summaries) under the working directory
    try:
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    finally:
        os.chdir(cwd)
    if "model" not in figures:
        raise RuntimeError("rl_games ran no epoch")
    frames, epochs = figures["frames"], figures["epochs"]
    write_snapshot(run_dir, figures["model"].state_dict(), env_steps=frames, wall_s=time.time() - started,
                   updates=epochs, final=True)
    active = time.time() - figures["began"]
    return {"env_steps": frames, "updates": epochs, "env_steps_per_s": frames / active if active > 0 else 0.0,
            "updates_per_s": epochs / active if active > 0 else 0.0, "startup_s": figures["began"] - started,
            "wait_fraction": None, "settings": config(env_id, seed=seed, max_env_steps=max_env_steps,
                                                      device=device, smoke=smoke)["params"]["config"]}


def policy(env_id: str, *, smoke: bool = False):
    """``(load(state), scores(obs))``: the trainer's rl_games network, on the CPU."""
    import numpy as np
    import torch
    from rl_games.algos_torch import model_builder

    from experiments.bench.atari.protocol import make_env

    env = make_env(env_id)
    obs_space, n = env.observation_space, int(env.action_space.n)
    env.close()
    params = config(env_id, seed=0, max_env_steps=1, device="cpu", smoke=smoke)["params"]
    net = model_builder.ModelBuilder().load(params).build({
        "actions_num": n, "input_shape": obs_space.shape, "num_seqs": 1, "value_size": 1,
        "normalize_value": params["config"]["normalize_value"],
        "normalize_input": params["config"]["normalize_input"]})
    net.eval()

    def scores(obs: Any):
        x = torch.as_tensor(np.asarray(obs)).float() / 255.0
        return net({"is_train": False, "prev_actions": None, "obs": x, "rnn_states": None})["logits"]

    return net.load_state_dict, scores
