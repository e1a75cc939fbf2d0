"""A2C's hyper-parameters, in a module of their own: the networks
(:mod:`algorithms.actor_critic`) and the algorithm (:mod:`algorithms.a2c.a2c`) both
read them, and neither imports the other for it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class A2CConfig:
    """A2C hyper-parameters. The defaults are the A2C baselines' (RMSprop 7e-4, no
    entropy bonus, n-step returns); ``experiments.a3c`` overrides some for speed."""

    gamma: float = 0.99
    gae_lambda: float = 1.0
    advantage: Literal["gae", "nstep"] = "gae"
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    max_grad_norm: float | None = 0.5
    normalize_advantages: bool = False
    reward_scale: float = 1.0
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    lr: float = 7e-4
    optimizer_eps: float = 1e-5
    rmsprop_alpha: float = 0.99
    hidden: tuple[int, ...] = (64, 64)
    activation: Literal["tanh", "relu"] = "tanh"
    shared_network: bool = False
    log_std_init: float = 0.0
    state_dependent_std: bool = False
    action_transform: Literal["clip", "tanh"] = "clip"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _in_unit("gamma", self.gamma)
        _in_unit("gae_lambda", self.gae_lambda)
        _choice("advantage", self.advantage, ("gae", "nstep"))
        _choice("optimizer", self.optimizer, ("rmsprop", "adam"))
        _choice("activation", self.activation, ("tanh", "relu"))
        _choice("action_transform", self.action_transform, ("clip", "tanh"))
        for name in ("value_coef", "entropy_coef"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("lr", "optimizer_eps", "reward_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
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
