"""PQN: Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR,
arXiv 2407.04811).

The learner (:mod:`algorithms.pqn.pqn`), its hyper-parameters (:mod:`algorithms.pqn.config`),
its single-process loop (:mod:`algorithms.pqn.runner`) and its synchronous data-parallel
builder (:mod:`algorithms.pqn.builder`).
"""

from algorithms.pqn.builder import PQNBuilder
from algorithms.pqn.config import PQNConfig
from algorithms.pqn.pqn import PQN, ROLLOUT_KEYS, GradHook, linear_schedule, pqn_network
from algorithms.pqn.runner import PQNRunner

__all__ = ["PQN", "PQNConfig", "PQNRunner", "PQNBuilder", "GradHook", "ROLLOUT_KEYS",
           "linear_schedule", "pqn_network"]
