"""MADDPG: Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments" (arXiv 1706.02275).

The learner (:mod:`algorithms.maddpg.maddpg`), the agents' specs and the config
(:mod:`algorithms.maddpg.spec`), its actor-learner builder
(:mod:`algorithms.maddpg.builder`), the stacked fast path for homogeneous agents
(:mod:`algorithms.maddpg.stacked`) and the Gumbel-softmax of discrete actions
(:mod:`algorithms.maddpg.gumbel`).
"""

from algorithms.maddpg.builder import MADDPGActor, MADDPGBuilder, MADDPGLearner
from algorithms.maddpg.maddpg import CRITIC_AUTO_MAX_PARAMS, MADDPG, clip_per_network, clip_stacked
from algorithms.maddpg.spec import AgentSpec, MADDPGConfig

__all__ = ["MADDPG", "MADDPGConfig", "AgentSpec", "CRITIC_AUTO_MAX_PARAMS", "clip_stacked",
           "clip_per_network", "MADDPGBuilder", "MADDPGActor", "MADDPGLearner"]
