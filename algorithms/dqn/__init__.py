"""DQN and Ape-X DQN.

DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning"
(Nature 518), with double Q-learning, dueling heads, n-step returns, prioritized
replay and noisy nets (Fortunato et al. 2018, "Noisy Networks for Exploration", ICLR,
arXiv:1706.10295; :mod:`algorithms.noisy`) as config switches (:mod:`algorithms.dqn.dqn`).
C51: Bellemare, Dabney, Munos 2017, "A Distributional Perspective on Reinforcement
Learning" (ICML, arXiv:1707.06887), DQN with distributional hooks
(:mod:`algorithms.dqn.c51`). Ape-X: Horgan et al. 2018,
"Distributed Prioritized Experience Replay" (ICLR, arXiv:1803.00933): its actors and
learner (:mod:`algorithms.dqn.apex`, also the DPG actor that Ape-X TD3/DDPG use) and
the builder the actor-learner program runs (:mod:`algorithms.dqn.builder`).
"""

from algorithms.dqn.apex import ApexActor, ApexConfig, ApexDPGActor, ApexLearner, DQNApex
from algorithms.dqn.builder import DQNBuilder
from algorithms.dqn.c51 import CategoricalDQN, categorical_projection
from algorithms.dqn.dqn import DQN, DQNConfig

__all__ = ["DQN", "DQNConfig", "CategoricalDQN", "categorical_projection", "ApexConfig", "ApexActor", "ApexDPGActor", "ApexLearner", "DQNApex",
           "DQNBuilder"]
