"""SAC's hyperparameters.

Defaults: learning rates 3e-4 for actor, critics and temperature, ``tau`` 0.005,
``gamma`` 0.99, batch 256, (256, 256) hidden units, target entropy ``-dim(A)`` and
the temperature learned from 1.0: the paper's Table 1 (Haarnoja et al. 2018,
arXiv:1812.05905) as Stable-Baselines3 and CleanRL run it. The log-std bounds
(-5, 2) are CleanRL's. The batch size is the replay's, read by whoever samples
(a job's ``learn`` section), and kept here so one config holds the recipe.
"""

from __future__ import annotations

import dataclasses
import math

from algorithms.fast import check_fast


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclasses.dataclass
class SACConfig:
    """Hyperparameters of :class:`algorithms.sac.SAC` (module docstring: the defaults)."""

    gamma: float = dataclasses.field(default=0.99, metadata=_help(
        "discount per step (an n-step batch carries its own gamma**k as `discount`)"))
    tau: float = dataclasses.field(default=0.005, metadata=_help(
        "Polyak coefficient of the target critics, per update"))
    actor_lr: float = dataclasses.field(default=3e-4, metadata=_help("the actor's Adam learning rate"))
    critic_lr: float = dataclasses.field(default=3e-4, metadata=_help("the critics' Adam learning rate"))
    alpha_lr: float = dataclasses.field(default=3e-4, metadata=_help(
        "the temperature's Adam learning rate (autotune)"))
    batch_size: int = dataclasses.field(default=256, metadata=_help("transitions per update"))
    hidden: tuple[int, ...] = dataclasses.field(default=(256, 256), metadata=_help(
        "hidden layer sizes of the default actor and critics"))
    autotune: bool = dataclasses.field(default=True, metadata=_help(
        "learn the temperature alpha toward the target entropy (else alpha stays fixed)"))
    alpha: float = dataclasses.field(default=1.0, metadata=_help(
        "the temperature: its start with autotune, its fixed value without"))
    target_entropy: float | None = dataclasses.field(default=None, metadata=_help(
        "the policy entropy autotune aims at; None = -dim(A)"))
    log_std_min: float = dataclasses.field(default=-5.0, metadata=_help(
        "the smallest log standard deviation of the pre-tanh Gaussian"))
    log_std_max: float = dataclasses.field(default=2.0, metadata=_help(
        "the largest log standard deviation of the pre-tanh Gaussian"))
    noise_scale: float = dataclasses.field(default=1.0, metadata=_help(
        "exploration: the sampled action's standard deviation times this (0 = tanh(mean)); "
        "an Ape-X actor sets one per env copy"))
    grad_clip: float | None = dataclasses.field(default=None, metadata=_help(
        "clip each step's gradient norm to this (None = no clipping)"))
    priority_eps: float = dataclasses.field(default=1e-6, metadata=_help(
        "added to |TD error| so that no priority is exactly zero"))
    seed: int | None = dataclasses.field(default=None, metadata=_help(
        "seeds the networks and the sampling noise (each actor its own)"))
    fast: str = dataclasses.field(default="auto", metadata=_help(
        "how updates and acting run on CPU (algorithms.fast): auto, off, eager, compile"))

    def validate(self) -> None:
        check_fast(self.fast)
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        for name in ("actor_lr", "critic_lr", "alpha_lr", "alpha"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden):
            raise ValueError(f"hidden must be positive ints, got {self.hidden!r}")
        if self.target_entropy is not None and not math.isfinite(self.target_entropy):
            raise ValueError(f"target_entropy must be finite or None, got {self.target_entropy}")
        if not (math.isfinite(self.log_std_min) and math.isfinite(self.log_std_max)
                and self.log_std_min < self.log_std_max):
            raise ValueError(f"log_std_min < log_std_max (both finite) needed, got "
                             f"{self.log_std_min}, {self.log_std_max}")
        if not self.noise_scale >= 0:
            raise ValueError(f"noise_scale must be >= 0, got {self.noise_scale}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        if not self.priority_eps >= 0:
            raise ValueError(f"priority_eps must be >= 0, got {self.priority_eps}")
