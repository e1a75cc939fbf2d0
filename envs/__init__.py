"""Vector environments (in-process and subprocess), multi-agent adapters, test envs.

``SubprocVectorEnv`` steps W groups of K envs in worker processes with the batch in
shared memory; ``InProcessVectorEnv`` runs the same stepping code in this process.
"""

from envs.inprocess import InProcessVectorEnv
from envs.make import make_vector_env
from envs.subproc import SubprocVectorEnv

__all__ = ["InProcessVectorEnv", "SubprocVectorEnv", "make_vector_env"]
