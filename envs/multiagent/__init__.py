"""Multi-agent envs: PettingZoo parallel envs as per-agent arrays, vectorized.

``ParallelEnvAdapter`` (one env), ``MultiAgentVectorEnv`` (many copies, subprocess or
in-process), ``CooperativeEnv`` (tiny built-in cooperative task for tests).
"""

from envs.multiagent.adapter import ParallelEnvAdapter
from envs.multiagent.cooperative import CooperativeEnv
from envs.multiagent.vector import MultiAgentVectorEnv, PackedEnv

__all__ = ["CooperativeEnv", "MultiAgentVectorEnv", "PackedEnv", "ParallelEnvAdapter"]
