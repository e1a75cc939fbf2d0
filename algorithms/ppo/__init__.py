"""PPO: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv 1707.06347.

The clipped-surrogate learner (:mod:`algorithms.ppo.ppo`), its hyper-parameters
(:mod:`algorithms.ppo.config`) and its synchronous data-parallel builder
(:mod:`algorithms.ppo.builder`).
"""

from algorithms.ppo.builder import PPOBuilder
from algorithms.ppo.config import PPOConfig
from algorithms.ppo.ppo import (
    PPO,
    ROLLOUT,
    SAMPLE_KEYS,
    GradHook,
    MeanHook,
    clipped_surrogate_loss,
    normalize,
    value_loss,
)

__all__ = ["PPO", "PPOConfig", "PPOBuilder", "GradHook", "MeanHook", "clipped_surrogate_loss",
           "value_loss", "normalize", "ROLLOUT", "SAMPLE_KEYS"]
