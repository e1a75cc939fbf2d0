"""A2C and A3C: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement
Learning" (arXiv 1602.01783).

The synchronous learner (:mod:`algorithms.a2c.a2c`), its hyper-parameters
(:mod:`algorithms.a2c.config`), the asynchronous worker that pushes its gradients
to shared parameters (:mod:`algorithms.a2c.a3c`) and both as builders of the two
programs (:mod:`algorithms.a2c.builder`: synchronous A2C, A3C). The networks are
:mod:`algorithms.actor_critic`'s, shared with IMPALA and PPO.
"""

from algorithms.a2c.a2c import A2C, make_optimizer
from algorithms.a2c.a3c import A3C
from algorithms.a2c.builder import A2CBuilder, A3CActor, A3CBuilder, A3CLearner
from algorithms.a2c.config import A2CConfig

__all__ = ["A2C", "A2CConfig", "make_optimizer", "A3C", "A2CBuilder", "A3CBuilder", "A3CActor", "A3CLearner"]
