"""PPO's hyper-parameters (:mod:`algorithms.ppo.ppo`), in a module of their own like
A2C's: the default networks (:mod:`algorithms.actor_critic`) read the network
fields, which carry the same names and meanings as :class:`A2CConfig`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from algorithms.a2c.config import _choice, _in_unit


@dataclass(frozen=True)
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
    * ``lr_anneal_updates``: anneal the learning rate linearly to 0 over this many
      updates (CleanRL's ``anneal_lr`` with its iteration count); None: constant.
    * ``target_kl``: stop an update's epochs early once an epoch's mean approximate
      KL exceeds it; None: always run every epoch.
    """

    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    epochs: int = 4
    minibatches: int = 4
    normalize_advantages: bool = True
    clip_vloss: bool = True
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float | None = 0.5
    lr: float = 2.5e-4
    lr_anneal_updates: int | None = None
    optimizer_eps: float = 1e-5
    target_kl: float | None = None
    reward_scale: float = 1.0
    # The networks (see A2CConfig): CleanRL's separate 64-64 tanh MLPs by default.
    hidden: tuple[int, ...] = (64, 64)
    activation: Literal["tanh", "relu"] = "tanh"
    shared_network: bool = False
    log_std_init: float = 0.0
    state_dependent_std: bool = False
    action_transform: Literal["clip", "tanh"] = "clip"
    # How updates and acting run on CPU (algorithms.fast): auto, off, eager, compile.
    fast: str = "auto"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        from algorithms.fast import check_fast

        check_fast(self.fast)
        _in_unit("gamma", self.gamma)
        _in_unit("gae_lambda", self.gae_lambda)
        for name in ("epochs", "minibatches"):
            _positive_int(name, getattr(self, name))
        if self.lr_anneal_updates is not None:
            _positive_int("lr_anneal_updates", self.lr_anneal_updates)
        for name in ("clip_coef", "lr", "optimizer_eps", "reward_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("value_coef", "entropy_coef"):
            value = getattr(self, name)
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
        if not self.hidden or any(not isinstance(h, int) or h <= 0 for h in self.hidden):
            raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
        if not math.isfinite(self.log_std_init):
            raise ValueError(f"log_std_init must be finite, got {self.log_std_init}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
