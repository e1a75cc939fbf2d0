"""Ape-X TD3/DDPG's settings besides those shared with DQN in
:class:`~algorithms.dqn.config.ApexConfig`: the Ape-X job's ``continuous`` section (of which
SAC, :mod:`algorithms.sac.builder`, reads ``critic_lr``, ``critic_layer_norm``, ``random_start``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from algorithms.params import param

# The fields of ApexConfig the job leaves unset, for TD3 and DDPG (continuous actions,
# vector observations): the authors' reference settings (lr 3e-4, tau 0.005, 256x256,
# one-step targets; Fujimoto et al. 2018, sfujim/TD3) with a replay ratio of 0.125
# updates of 256 per env step. Not Ape-X's n-step returns: uncorrected, they value the
# actors' noisy behaviour (sigma up to 0.5) rather than the greedy policy, and
# HalfCheetah-v5 then stayed on its back more often. The ratio: the learner is the bound
# (one core at ~175 updates/s on 2 cores) while actors held to 0.25 used an eighth of a
# core each; at 0.125 they feed it twice the data for no loss of updates, and Hopper-v5
# took off sooner (experiments/tuning.md, "Ape-X TD3 on HalfCheetah" and "The replay ratio").
CONTINUOUS_DEFAULTS: dict[str, float | int | tuple[int, ...]] = {
    "lr": 3e-4, "tau": 0.005, "hidden": (256, 256), "batch_size": 256,
    "n_step": 1, "updates_per_step": 0.125}


@dataclass
class ContinuousConfig:
    """Ape-X for continuous actions: TD3 (and DDPG) settings besides ``learn``'s."""

    critic_lr: float | None = param(None, help="TD3/DDPG/SAC: the critics' learning rate (none: --lr)")
    policy_delay: int = param(2, help="TD3: critic updates per actor and target update")
    critic_layer_norm: bool = param(False, help=(
        "TD3/DDPG/SAC: a LayerNorm before each hidden activation of the critics (RLPD, Ball et al. 2023)"))
    target_noise: float = param(0.2, help=(
        "TD3: std of the target policy's smoothing noise, in actions normalized to [-1, 1]"))
    target_noise_clip: float = param(0.5, help="TD3: the smoothing noise is clipped to +-this")
    noise: Literal["gaussian", "ou"] = param("gaussian", help=(
        "TD3/DDPG actors' exploration: independent Gaussian noise (TD3's), or an Ornstein-Uhlenbeck "
        "process restarted with each episode (the DDPG paper's), at the scales below"))
    sigma: float = param(0.5, help=(
        "TD3/DDPG actors' widest exploration scale (normalized actions): env copy j of J explores at "
        "sigma^(1 + sigma_alpha j / (J - 1)); the Gaussian noise's std, or with --noise ou the OU process's "
        "sigma (theta 0.15, dt 0.01: from 0 at each episode's start, its std nears 1.8 sigma only after "
        "hundreds of steps)"))
    sigma_alpha: float = param(3.0, help="TD3/DDPG: the exponent of that schedule (0: every copy at sigma)")
    random_start: bool = param(True, help=(
        "TD3/DDPG/SAC: actors act uniformly at random until they pull the learner's first trained "
        "parameters (learning starts after --learning-starts env steps), as the TD3 reference and SB3 "
        "start; --no-random-start: by the fresh policy plus exploration noise from the first step"))

    def validate(self) -> None:
        if self.critic_lr is not None and not self.critic_lr > 0:
            raise ValueError(f"critic_lr must be > 0, got {self.critic_lr}")
        if self.policy_delay < 1:
            raise ValueError(f"policy_delay must be >= 1, got {self.policy_delay}")
        for name in ("target_noise", "target_noise_clip", "sigma_alpha"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.sigma <= 1.0:
            raise ValueError(f"sigma must be in (0, 1], got {self.sigma}")
