"""PQN's hyperparameters, in a module of their own (as :mod:`algorithms.a2c.config`):
the network builder reads them without importing the algorithm's module."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from algorithms.params import RUN_BUDGET, Cnn, check_cnn, cnn_param, internal, param

# Filled by a job from the env's observation family (None until then).
BY_FAMILY = ("n_steps", "lr", "lr_decay_steps", "epochs", "minibatches", "lam", "reward_scale", "epsilon_end",
             "epsilon_decay_steps", "hidden")


def _by_family(what: str) -> str:
    return f"none: by observation family, {what}"


@dataclasses.dataclass
class PQNConfig:
    """Hyperparameters of :class:`PQN`; the defaults are the authors' MinAtar ones
    (purejaxql ``pqn_minatar``: 128 envs x 32 steps per rollout). Schedules count env
    steps, the steps of the rollouts this PQN has learned from."""

    # The job's flags, in its --help order. Those the job fills "by observation
    # family" are None in its section (experiments.pqn) until the env is known.
    n_steps: int | None = param(32, help=f"steps per env in a member's rollout ({_by_family('64; 32 for images')})")
    lr: float | None = param(5e-4, help=f"learning rate ({_by_family('1e-4; 5e-4 for MinAtar')})")
    # Linear decay of lr to 0 over this many env steps (the authors decay it over the
    # whole budget); 0 = a constant lr.
    lr_decay_steps: int | None = param(0, help=(
        "decay the lr linearly to 0 over this many env steps of all members (0: constant; "
        + _by_family("500K; 0 for MinAtar; the run's --max-env-steps for frames") + ")"))
    optimizer: Literal["radam", "adam"] = param("radam", help="optimizer")
    epochs: int | None = param(2, help=f"passes over each rollout ({_by_family('4; 2 for images')})")
    minibatches: int | None = param(32, help=f"minibatches per pass ({_by_family('16; 32 for images')})")
    gamma: float = param(0.99, help="discount")
    lam: float | None = param(0.65, help=f"Q(lambda)'s lambda ({_by_family('0.95; 0.65 for images')})")
    reward_scale: float | None = param(1.0, help=f"multiply rewards by this ({_by_family('0.1; 1 for images')})")
    max_grad_norm: float | None = param(10.0, help="clip the averaged gradient to this norm ('none': no clipping)")
    # Epsilon-greedy: linear from start to end over the first decay_steps env steps
    # (the authors: 1 -> 0.05 on MinAtar, 1 -> 0.001 on Atari, over 10% of 10M steps).
    epsilon_start: float = param(1.0, help="exploration rate at the start")
    epsilon_end: float | None = param(0.05, help=(
        f"exploration rate after the decay ({_by_family('0.2; 0.05 for MinAtar; 0.001 for frames')})"))
    epsilon_decay_steps: int | None = param(1_000_000, help=(
        f"env steps of all members over which epsilon decays linearly ({_by_family('100K; 1M for images')})"))
    # The default network (pqn_network): LayerNorm on, hidden sizes of the vector MLP.
    layer_norm: bool = param(True, help="LayerNorm in the default network (what keeps PQN stable)")
    hidden: tuple[int, ...] | None = param((128, 128), help=(
        f"MLP hidden sizes for vector observations ({_by_family('256,256')})"))
    cnn: Cnn = cnn_param()
    # The library's only.
    adam_eps: float = internal(1e-8)
    huber_delta: float | None = internal(None)  # None: the authors' 0.5 * squared error
    # How forwards and updates run on CPU (algorithms.fast): auto, off, eager, compile.
    fast: str = internal("auto")

    def validate(self) -> None:
        from algorithms.fast import check_fast

        check_cnn(self.cnn)
        check_fast(self.fast)
        if any(getattr(self, name) is None for name in BY_FAMILY):  # checked once filled
            return dataclasses.replace(self, **{n: getattr(PQNConfig, n) for n in BY_FAMILY
                                                if getattr(self, n) is None}).validate()
        for name in ("gamma", "lam", "epsilon_start", "epsilon_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("lr", "adam_eps", "reward_scale"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        for name in ("n_steps", "epochs", "minibatches"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        for name in ("lr_decay_steps", "epsilon_decay_steps"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an int >= 0, got {getattr(self, name)!r}")
        if self.optimizer not in ("radam", "adam"):
            raise ValueError(f"optimizer must be 'radam' or 'adam', got {self.optimizer!r}")
        for name in ("max_grad_norm", "huber_delta"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 or None, got {getattr(self, name)}")
        if not self.hidden or any(not isinstance(h, int) or h < 1 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")


# By observation family, for the fields left unset: the authors' settings (purejaxql),
# measured in one process (experiments/bench/learning/pqn_single.py, 2 shared cores):
# - vector (pqn_cartpole): 32 envs x 64 steps, 4 epochs x 16 minibatches, RAdam 1e-4
#   decaying over 500K env steps, epsilon 1 -> 0.2 over 100K, rewards x 0.1, lambda
#   0.95, 256-256 MLP: CartPole-v1 solved at 61-82K env steps in 6.5-9 s (seeds 0-3);
# - small_image (pqn_minatar): 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam
#   5e-4, lambda 0.65, epsilon 1 -> 0.05 over 1M: Breakout training return 8.8 at 1.0M
#   env steps, 20 at 1.5M, about 30 from 3M, 11.2K env steps/s;
# - frames (pqn_atari): the MinAtar settings at lr 2.5e-4 and epsilon ending at 0.001;
#   the lr decays to 0 over the run's --max-env-steps (the authors keep it constant on
#   Atari; decayed, the last Pong snapshot of an hour played 15.3 where constant rates'
#   played 4-12). Pong, 2 cores, `--cnn small --num-workers 2 --num-envs 64`:
#   experiments/tuning.md ("PQN on Pong").
DEFAULTS_BY_FAMILY: dict[str, dict[str, Any]] = {
    "vector": {"n_steps": 64, "lr": 1e-4, "lr_decay_steps": 500_000, "epochs": 4, "minibatches": 16,
               "lam": 0.95, "reward_scale": 0.1, "epsilon_end": 0.2, "epsilon_decay_steps": 100_000,
               "hidden": (256, 256)},
    "small_image": {"n_steps": 32, "lr": 5e-4, "lr_decay_steps": 0, "epochs": 2, "minibatches": 32,
                    "lam": 0.65, "reward_scale": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 1_000_000,
                    "hidden": (128, 128)},
    "frames": {"n_steps": 32, "lr": 2.5e-4, "lr_decay_steps": RUN_BUDGET, "epochs": 2, "minibatches": 32,
               "lam": 0.65, "reward_scale": 1.0, "epsilon_end": 0.001, "epsilon_decay_steps": 1_000_000,
               "hidden": (128, 128)},
}
DEFAULTS_BY_FAMILY["other"] = DEFAULTS_BY_FAMILY["vector"]

# The job's --num-envs per member by observation family, when not given.
ENV_DEFAULTS_BY_FAMILY: dict[str, dict[str, int]] = {
    "vector": {"num_envs": 32},
    "small_image": {"num_envs": 128},
    "frames": {"num_envs": 128},
    "other": {"num_envs": 32},
}
