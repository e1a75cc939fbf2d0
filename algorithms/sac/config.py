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
from algorithms.params import internal, param


@dataclasses.dataclass
class SACConfig:
    """Hyperparameters of :class:`algorithms.sac.SAC` (module docstring: the defaults),
    also the Ape-X job's ``sac`` section: the fields with help are SAC's own flags there;
    the :func:`~algorithms.params.internal` ones the job derives from its ``learn`` and
    ``continuous`` sections (:class:`algorithms.sac.SACBuilder`), which already declare them."""

    # Derived by the Ape-X job (learn: gamma, tau, lr, batch_size, hidden, fast;
    # continuous: critic_lr): a discount per step (an n-step batch carries its own
    # gamma**k as ``discount``), the target critics' Polyak coefficient per update, the
    # Adam learning rates, the transitions per update, the default MLPs' hidden sizes.
    gamma: float = internal(0.99)
    tau: float = internal(0.005)
    actor_lr: float = internal(3e-4)
    critic_lr: float = internal(3e-4)
    alpha_lr: float = param(3e-4, help="SAC: the temperature's Adam learning rate (with --autotune)")
    batch_size: int = internal(256)
    hidden: tuple[int, ...] = internal((256, 256))
    autotune: bool = param(True, help=(
        "SAC: learn the temperature alpha toward --target-entropy (Haarnoja et al. 2018, eq. 18); "
        "--no-autotune keeps it at --alpha"))
    alpha: float = param(1.0, help="SAC: the temperature: its start with --autotune, its fixed value without")
    target_entropy: float | None = param(None, help=(
        "SAC: the policy entropy --autotune aims at (none: -dim(A))"))
    log_std_min: float = param(-5.0, help="SAC: the smallest log standard deviation of the pre-tanh Gaussian")
    log_std_max: float = param(2.0, help="SAC: the largest log standard deviation of the pre-tanh Gaussian")
    # Exploration: the sampled action's standard deviation times this (0 = tanh(mean));
    # an Ape-X actor sets one per env copy (the job's: 1, the policy's own).
    noise_scale: float = internal(1.0)
    # Clip each step's gradient norm to this (None = no clipping).
    grad_clip: float | None = internal(None)
    # Added to |TD error| so that no priority is exactly zero.
    priority_eps: float = internal(1e-6)
    # Seeds the networks and the sampling noise (each actor its own; the job: by rank).
    seed: int | None = internal(None)
    # How updates and acting run on CPU (algorithms.fast): auto, off, eager, compile.
    fast: str = internal("auto")

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
