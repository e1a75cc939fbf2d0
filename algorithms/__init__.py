"""RL algorithms as plain in-process objects (no transport imports).

Each agent has its folder, ``algorithms/<agent>/`` (dqn, td3, impala, ppo, pqn, a2c,
maddpg): its learning code, config and builder. What several share sits here.
"""

from algorithms import _moved

_moved.install()  # the flat layout's old module paths name their new place
