"""PPO's hyper-parameters (:mod:`algorithms.ppo.ppo`), in a module of their own like
A2C's: the default networks (:mod:`algorithms.actor_critic`) read the network
fields, which carry the same names and meanings as :class:`A2CConfig`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from algorithms.a2c.config import _choice, _in_unit
from algorithms.params import RUN_BUDGET, Cnn, check_cnn, cnn_param, internal, param


@dataclass
class PPOConfig:
    """PPO hyper-parameters. The defaults are those of Schulman et al. 2017 for
    Atari as CleanRL's ``ppo.py`` uses them (Adam 2.5e-4 with eps 1e-5, 4 epochs of
    4 minibatches, clip 0.2, GAE 0.95, entropy 0.01, value 0.5, grad norm 0.5,
    value clipping on), so its recorded results are a reference for ours.

    * ``minibatches``: minibatches per rollout, a *count*, not a size: ranks of a
      learner group whose rollouts differ in length (DD-PPO preemption) still take
      the same number of optimizer steps, which their all-reduces need.
    * ``normalize_advantages``: per minibatch (and per rank in a learner group).
    * ``clip_vloss``: clip the value change like the ratio (Schulman's baselines;
      Andrychowicz et al. 2021 find it neutral to harmful; kept on for parity).
    * ``lr``, ``entropy_coef``, ``lr_anneal_steps``: None until the job fills them
      by the env's observation family (the algorithm refuses None).
    * ``lr_anneal_updates``: anneal the learning rate linearly to 0 over this many
      updates (CleanRL's ``anneal_lr`` with its iteration count); None: constant.
    * ``target_kl``: stop an update's epochs early once an epoch's mean approximate
      KL exceeds it; None: always run every epoch.
    """

    # The job's flags, in its --help order (their help says what the job fills "by
    # observation family": the PPO job's section has None there, see experiments.ppo).
    n_steps: int = param(128, help="steps per env in a member's rollout")
    lr: float | None = param(2.5e-4, help=(
        "Adam learning rate (none: by observation family, 1e-3; 7e-4 for MinAtar, 2.5e-4 for frames)"))
    lr_anneal_steps: int | None = param(0, help=(
        "anneal the learning rate linearly to 0 over this many env steps, all members together "
        "(0: constant; none: by observation family, 0 for vectors, the run's --max-env-steps for images)"))
    epochs: int = param(4, help="passes over each rollout")
    minibatches: int = param(4, help="minibatches per pass (a count: every member takes as many steps)")
    gamma: float = param(0.99, help="discount")
    gae_lambda: float = param(0.95, help="GAE lambda")
    clip_coef: float | None = param(0.2, help=(
        "surrogate clipping range, of the value change too with --clip-vloss "
        "(none: by observation family, 0.2; 0.1 for frames)"))
    clip_vloss: bool = param(True, help="clip the value change like the ratio")
    normalize_advantages: bool = param(True, help="normalize advantages per minibatch")
    entropy_coef: float | None = param(0.01, help=(
        "entropy bonus weight (none: by observation family, 0.01; 0.05 for MinAtar)"))
    value_coef: float = param(0.5, help="value loss weight")
    max_grad_norm: float | None = param(0.5, help="clip the averaged gradient to this norm ('none': no clipping)")
    target_kl: float | None = param(None, help=(
        "stop an update's epochs once an epoch's mean KL (over all members) passes this"))
    reward_scale: float = param(1.0, help="multiply rewards by this")
    # The networks (see A2CConfig): CleanRL's separate 64-64 tanh MLPs by default.
    hidden: tuple[int, ...] = param((64, 64), help="MLP hidden sizes for vector observations, comma separated")
    cnn: Cnn = cnn_param()
    activation: Literal["tanh", "relu"] = param("tanh", help="MLP hidden activation")
    shared_network: bool = param(False, help="one body for actor and critic")
    # The library's only. lr_anneal_updates: what the algorithm anneals over; a job's
    # builder derives it from lr_anneal_steps and the env steps of one update.
    lr_anneal_updates: int | None = internal(None)
    optimizer_eps: float = internal(1e-5)
    log_std_init: float = internal(0.0)
    state_dependent_std: bool = internal(False)
    action_transform: Literal["clip", "tanh"] = internal("clip")
    # How updates and acting run on CPU (algorithms.fast): auto, off, eager, compile.
    fast: str = internal("auto")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        from algorithms.fast import check_fast

        check_fast(self.fast)
        _in_unit("gamma", self.gamma)
        _in_unit("gae_lambda", self.gae_lambda)
        for name in ("n_steps", "epochs", "minibatches"):
            _positive_int(name, getattr(self, name))
        if self.lr_anneal_steps is not None and (isinstance(self.lr_anneal_steps, bool) or self.lr_anneal_steps < 0):
            raise ValueError(f"lr_anneal_steps must be >= 0, got {self.lr_anneal_steps}")
        if self.lr_anneal_updates is not None:
            _positive_int("lr_anneal_updates", self.lr_anneal_updates)
        for name in ("clip_coef", "lr", "optimizer_eps", "reward_scale"):
            value = getattr(self, name)
            if value is None and name in ("clip_coef", "lr"):  # filled by the job (require)
                continue
            if isinstance(value, bool) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("value_coef", "entropy_coef"):
            value = getattr(self, name)
            if value is None and name == "entropy_coef":
                continue
            if isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("max_grad_norm", "target_kl"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0 or None, got {value!r}")
        for name in ("normalize_advantages", "clip_vloss", "shared_network", "state_dependent_std"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        _choice("activation", self.activation, ("tanh", "relu"))
        _choice("action_transform", self.action_transform, ("clip", "tanh"))
        check_cnn(self.cnn)
        if not self.hidden or any(not isinstance(h, int) or h <= 0 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
        if not math.isfinite(self.log_std_init):
            raise ValueError(f"log_std_init must be finite, got {self.log_std_init}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


# Filled by a job from the env's observation family (None until then).
BY_FAMILY = ("lr", "entropy_coef", "lr_anneal_steps", "clip_coef")


# By observation family, for the fields left unset. Measured in one process
# (experiments/bench/learning/ppo_single.py, 8 envs x 128 steps, 2 shared cores): CartPole-v1
# with lr 1e-3 constant solved (greedy 475) in a median 16.7K env steps / 1.4 s over 20
# seeds, against 27.2K / 2.1 s with CleanRL's 2.5e-4 annealed. MinAtar: experiments/tuning.md
# ("PPO on MinAtar": 7e-4 annealed over the run's budget, from 30-minute runs of
# Breakout and SpaceInvaders against 1e-3 over 2M or 5M and 5e-4 over 5M; 32 envs and an
# entropy bonus of 0.05, which left Breakout's plateau at seeds where 8 envs and 0.01
# stayed on it, and step faster). Frames: CleanRL's ppo_atari settings, annealed over
# the run as CleanRL does, its clip of 0.1 included: on Pong (2 cores, 60 min, small CNN,
# seed 1) -5.4 where 0.2 reached -13.8 (experiments/tuning.md, "PPO on Pong").
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 1e-3, "lr_anneal_steps": 0, "entropy_coef": 0.01, "clip_coef": 0.2},
    "small_image": {"lr": 7e-4, "lr_anneal_steps": RUN_BUDGET, "entropy_coef": 0.05, "clip_coef": 0.2},
    "frames": {"lr": 2.5e-4, "lr_anneal_steps": RUN_BUDGET, "entropy_coef": 0.01, "clip_coef": 0.1},
    "other": {"lr": 1e-3, "lr_anneal_steps": 0, "entropy_coef": 0.01, "clip_coef": 0.2},
}

# The job's --num-envs per member by observation family, when not given.
ENV_DEFAULTS_BY_FAMILY: dict[str, dict[str, int]] = {
    "vector": {"num_envs": 8},
    "small_image": {"num_envs": 32},
    "frames": {"num_envs": 8},
    "other": {"num_envs": 8},
}
