"""Soft Actor-Critic with automatic entropy tuning.

Haarnoja, Zhou, Hartikainen, Tucker, Ha, Tan, Kumar, Zhu, Gupta, Abbeel, Levine 2018,
"Soft Actor-Critic Algorithms and Applications" (arXiv:1812.05905): a squashed
Gaussian actor (:mod:`algorithms.sac.squashed`), twin critics with Polyak targets
and a temperature learned toward a target entropy (:mod:`algorithms.sac.sac`),
hyperparameters in :mod:`algorithms.sac.config`. It learns from the same n-step,
prioritized batches as TD3 (Ape-X, Horgan et al. 2018, arXiv:1803.00933); its
builder, :mod:`algorithms.sac.builder`, runs it in the Ape-X job (``--algorithm sac``).
"""

from algorithms.sac.builder import SACBuilder
from algorithms.sac.config import SACConfig
from algorithms.sac.sac import SAC, Temperature

__all__ = ["SAC", "SACBuilder", "SACConfig", "Temperature"]
