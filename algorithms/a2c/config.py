"""A2C's hyper-parameters, in a module of their own: the networks
(:mod:`algorithms.actor_critic`) and the algorithm (:mod:`algorithms.a2c.a2c`) both
read them, and neither imports the other for it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from algorithms.params import Cnn, check_cnn, cnn_param, internal, param

# By observation family (``algorithms.nets.observation_family``, the rule that picks the
# default network), the fields the A3C job leaves unset (None; ``experiments/a3c.py``):
# - vector (CartPole-v1): measured, see A2CConfig below.
# - small_image (MinAtar's 10x10xC, the MinAtar conv): measured on Breakout-v0 (one
#   in-process worker, 8 envs, one seed, bench minatar: epsilon-0.1 / greedy return of
#   30 episodes, 2-core machine, nothing else running): the vector defaults (16 steps,
#   no entropy bonus, RMSProp 2e-3) 4.7 / 5.7 at 2.0M env steps (150 s) and 6.5 / 8.5
#   at 4.0M (300 s), 13.5K env steps/s; lr 7e-4 with entropy 0.01: 5.8 / 6.5 at 4.0M;
#   5 steps, entropy 0.01, 2e-3: 7.0 / 8.8 at 1.0M (134 s), best 7.7 / 9.4 at 1.4M
#   (185 s), 7.7K env steps/s (3x the gradients per env step); 5 steps without the
#   entropy bonus at 1e-3: 5.1 / 5.4 at 1.4M. Short runs: the choice is of the faster
#   start, not of the final score.
#   value_coef 0.25 without per-rollout advantage normalization (SB3's A2C settings
#   for Atari in rl-baselines3-zoo), against 0.5 with it, measured with the rest of
#   these defaults for 5M env steps (bench minatar, one seed, 2-core machine, nothing
#   else running; epsilon-0.1 / greedy evaluation of 30 episodes every 50K env steps,
#   window means over 0-100 / 100-200 / 200-300 / 300-400 s, then the last 10):
#   SpaceInvaders-v0 29.1 / 45.6 / 53.5 / 61.9, last 10 67.2 (160.0), against 28.4 /
#   44.7 / 46.4 / 43.9, last 10 43.8 (101.7) (lr 7e-4 with 0.5 and normalization:
#   24.4 / 31.1 / 41.7 / 49.0, 48.3 (120.3)); SB3 A2C itself 19.7 / 31.6 / 34.6 /
#   50.4, 56.6 (116.2). Breakout-v0 (0-100 / 100-200 / 200-300 s; 5M env steps take
#   290 s): 7.3 / 11.2 / 14.5, last 10 17.1 (32.7), the DQN paper's 10 at 63 s, against
#   5.8 / 6.4 / 6.7, 6.2 (8.3); SB3 A2C 3.9 / 4.6 / 4.6, 4.6 (5.1). Normalizing 80
#   advantages per rollout rescales every gradient to the same size whatever the
#   returns, which on these games (rewards of 1, values of 1-10) seems to cost more
#   than it steadies; not isolated from the value weight (one run each).
# - frames (Atari 84x84 stacks, the Nature CNN): A3C's Atari settings (Mnih et al.
#   2016: t_max 5, entropy 0.01) at the A2C rate of OpenAI Baselines and SB3 (7e-4),
#   with the zoo's value_coef 0.25 and no advantage normalization, not measured here
#   (an Atari run takes hours on 2 cores).
# - other (a user's network on other observations): the vector defaults.
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | bool]] = {
    "vector": {"n_steps": 16, "lr": 2e-3, "entropy_coef": 0.0, "value_coef": 0.5, "normalize_advantages": True},
    "small_image": {"n_steps": 5, "lr": 2e-3, "entropy_coef": 0.01, "value_coef": 0.25,
                    "normalize_advantages": False},
    "frames": {"n_steps": 5, "lr": 7e-4, "entropy_coef": 0.01, "value_coef": 0.25, "normalize_advantages": False},
    "other": {"n_steps": 16, "lr": 2e-3, "entropy_coef": 0.0, "value_coef": 0.5, "normalize_advantages": True},
}
BY_FAMILY = tuple(DEFAULTS_BY_FAMILY["vector"])

# Env copies per worker (an A3C actor, a synchronous A2C member), by observation
# family (``--num-envs`` when not given):
# - vector: 8, the CartPole measurement in algorithms.a2c.config.A2CConfig (16 envs:
#   19.2k env steps to solve against 7.7k).
# - small_image: 16, measured on SpaceInvaders-v0 (bench minatar, one in-process
#   worker, 5 steps, 360 s each, one seed, 2-core machine, nothing else running):
#   8 envs ran 8.8K env steps/s at 219 updates/s and ended at 18.6 / 39.4
#   (epsilon-0.1 / greedy, best 45.7); 16 envs ran 13.3K env steps/s at 166
#   updates/s, reached the DQN paper's 45 at 121 s and ended at 71.6 / 120.6 (its
#   best). Each acting forward and each gradient pays a fixed cost that 16 envs
#   spread over twice the samples; SB3's A2C also steps 16 envs on Atari.
# - frames: 16, as OpenAI Baselines' and SB3's A2C on Atari (not measured here).
ENV_DEFAULTS_BY_FAMILY: dict[str, dict[str, int]] = {
    "vector": {"num_envs": 8},
    "small_image": {"num_envs": 16},
    "frames": {"num_envs": 16},
    "other": {"num_envs": 8},
}


@dataclass
class A2CConfig:
    """A2C hyper-parameters, also the A3C job's ``learn`` section (which leaves
    ``BY_FAMILY`` None, filled by observation family; the algorithm refuses None). The
    defaults are the A2C baselines' (RMSprop 7e-4, no entropy bonus, n-step returns).

    The A3C job's, by family, are tuned for CartPole-v1 on a small machine: 8 envs x 16
    steps per gradient, the paper's RMSProp (its statistics shared on the server) at lr
    2e-3, n-step returns, per-rollout advantage normalization. Chosen by env steps to a
    greedy 475 in an in-process simulation (one worker, seeds 0-7, eval every 2,560
    steps): RMSProp 2e-3 median 7.7k steps (max 25.6k); RMSProp 1e-3 10.2k; RMSProp
    3e-3 7.7k (max 30.7k); Adam 3e-3 15.4k (6 seeds; max 30.7k); Adam 5e-3 10.2k; 8
    steps/rollout 25.6k; 32 steps 16.6k; 4 envs 11.5k (max 46k); 16 envs 19.2k; GAE
    0.95 14.1k; hidden 32 19.2k, 128 21.8k; relu 16.6k; max_grad_norm 1.0 24.3k.
    Two real ranks are staler (0.6-0.9 versions) and then a policy near 475
    sometimes collapses: ``--lr 1.4e-3`` (2e-3 / sqrt 2) solved in 6.3-11.1k env
    steps against 4.1-57.7k at 2e-3 (bench, 3 seeds each)."""

    # The A3C job's flags, in its --help order.
    n_steps: int | None = param(5, help=(
        "rollout length per gradient (none: by observation family, 16 for vectors, 5 for images)"))
    optimizer: Literal["rmsprop", "adam"] = param("rmsprop", help=(
        "optimizer of the gradient server (its statistics are shared by all workers)"))
    lr: float | None = param(7e-4, help=(
        "learning rate (none: by observation family, 2e-3 for vectors and MinAtar-size images, "
        "7e-4 for 84x84 frames)"))
    gamma: float = param(0.99, help="discount")
    gae_lambda: float = param(1.0, help="GAE lambda (1.0: n-step returns)")
    entropy_coef: float | None = param(0.0, help=(
        "entropy bonus weight (none: by observation family, 0 for vectors, 0.01 for images)"))
    value_coef: float | None = param(0.5, help=(
        "value loss weight (none: by observation family, 0.5 for vectors, 0.25 for images)"))
    max_grad_norm: float | None = param(0.5, help="clip each pushed gradient to this norm ('none': no clipping)")
    normalize_advantages: bool | None = param(False, help=(
        "normalize advantages per rollout (none: by observation family, on for vectors, off for images)"))
    reward_scale: float = param(1.0, help="multiply rewards by this")
    hidden: tuple[int, ...] = param((64, 64), help="MLP hidden sizes, comma separated")
    cnn: Cnn = cnn_param()
    activation: Literal["tanh", "relu"] = param("tanh", help="hidden activation")
    shared_network: bool = param(False, help="one body for actor and critic")
    log_std_init: float = param(0.0, help="initial log-std of Gaussian policies")
    state_dependent_std: bool = param(False, help="Gaussian log-std from the network instead of a free parameter")
    action_transform: Literal["clip", "tanh"] = param("clip", help=(
        "map Gaussian samples into the action box by clipping or tanh squashing"))
    # The library's only.
    advantage: Literal["gae", "nstep"] = internal("gae")
    optimizer_eps: float = internal(1e-5)
    rmsprop_alpha: float = internal(0.99)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _in_unit("gamma", self.gamma)
        _in_unit("gae_lambda", self.gae_lambda)
        _choice("advantage", self.advantage, ("gae", "nstep"))
        _choice("optimizer", self.optimizer, ("rmsprop", "adam"))
        _choice("activation", self.activation, ("tanh", "relu"))
        _choice("action_transform", self.action_transform, ("clip", "tanh"))
        check_cnn(self.cnn)
        if self.n_steps is not None and (isinstance(self.n_steps, bool) or self.n_steps < 1):
            raise ValueError(f"n_steps must be >= 1, got {self.n_steps}")
        for name in ("value_coef", "entropy_coef"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("lr", "optimizer_eps", "reward_scale"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        _in_unit("rmsprop_alpha", self.rmsprop_alpha)
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if not self.hidden or any(not isinstance(h, int) or h <= 0 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
        if not math.isfinite(self.log_std_init):
            raise ValueError(f"log_std_init must be finite, got {self.log_std_init}")


def _in_unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
