"""PQN's hyperparameters, in a module of their own (as :mod:`algorithms.a2c.config`):
the network builder reads them without importing the algorithm's module."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal


@dataclasses.dataclass
class PQNConfig:
    """Hyperparameters of :class:`PQN`; the defaults are the authors' MinAtar ones
    (purejaxql ``pqn_minatar``: 128 envs x 32 steps per rollout). Schedules count env
    steps, the steps of the rollouts this PQN has learned from."""

    gamma: float = 0.99
    lam: float = 0.65  # Q(lambda)'s lambda
    lr: float = 5e-4
    # Linear decay of lr to 0 over this many env steps (the authors decay it over the
    # whole budget); 0 = a constant lr.
    lr_decay_steps: int = 0
    optimizer: Literal["radam", "adam"] = "radam"
    adam_eps: float = 1e-8
    max_grad_norm: float | None = 10.0
    epochs: int = 2
    minibatches: int = 32  # per epoch
    huber_delta: float | None = None  # None: the authors' 0.5 * squared error
    reward_scale: float = 1.0
    # Epsilon-greedy: linear from start to end over the first decay_steps env steps
    # (the authors: 1 -> 0.05 over 10% of 10M steps).
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_steps: int = 1_000_000
    # The default network (pqn_network): LayerNorm on, hidden sizes of the vector MLP.
    layer_norm: bool = True
    # How forwards and updates run on CPU (algorithms.fast): auto, off, eager, compile.
    fast: str = "auto"
    hidden: tuple[int, ...] = (128, 128)

    def validate(self) -> None:
        from algorithms.fast import check_fast

        check_fast(self.fast)
        for name in ("gamma", "lam", "epsilon_start", "epsilon_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("lr", "adam_eps", "reward_scale"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        for name in ("epochs", "minibatches"):
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
