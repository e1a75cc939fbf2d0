"""TD3 and DDPG, the deterministic continuous-action actor-critics, ready for Ape-X.

TD3: Fujimoto, van Hoof, Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods" (ICML, arXiv:1802.09477), :mod:`algorithms.td3.td3`. DDPG:
Lillicrap et al. 2016, "Continuous control with deep reinforcement learning" (ICLR,
arXiv:1509.02971), :mod:`algorithms.td3.ddpg`. Both learn from Ape-X's n-step,
prioritized batches (Horgan et al. 2018, arXiv:1803.00933); their builder is
:mod:`algorithms.td3.builder`, the parts they share :mod:`algorithms.td3.continuous`.
"""

from algorithms.td3.builder import TD3Builder
from algorithms.td3.ddpg import DDPG, DDPGConfig
from algorithms.td3.td3 import TD3, TD3Config, reinitialized

__all__ = ["TD3", "TD3Config", "reinitialized", "DDPG", "DDPGConfig", "TD3Builder"]
