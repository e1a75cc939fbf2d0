"""Envs that kill the env worker stepping them (test_maddpg_faults, test_env_faults_in_jobs),
in a module of their own: an env worker unpickles its env factory by importing the
class's module, and this one imports no torch (a test module's import cost each
worker about 2 s of CPU)."""

import multiprocessing
import os
import signal

from envs.multiagent import CooperativeEnv
from envs.testing import FaultyEnv


def _in_env_worker() -> bool:
    return multiprocessing.current_process().name.startswith("rlpar-env-worker")


class KillsItsWorker(CooperativeEnv):
    """CooperativeEnv that SIGKILLs the env worker process it lives in (never a rank:
    evaluation envs step in the evaluating actor) at its ``after``-th step; only once
    in all when ``marker`` is a path (the first env to create it kills its worker),
    every time when it is None."""

    def __init__(self, *, after: int, marker: str | None, n_agents: int = 2, max_steps: int = 25) -> None:
        super().__init__(n_agents=n_agents, max_steps=max_steps)
        self.after, self.marker, self.steps = after, marker, 0

    def step(self, actions):
        self.steps += 1
        if _in_env_worker() and self.steps >= self.after:
            if self.marker is None:
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                try:  # atomic: envs of several workers reach the step together
                    os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    return super().step(actions)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().step(actions)


class KillsItsWorkerOnce(FaultyEnv):
    """FaultyEnv that SIGKILLs the env worker process stepping it at step ``at`` of an
    episode (never a rank's own process: its evaluation envs step there), once in all:
    the first env to create ``marker`` does it."""

    def __init__(self, *, marker: str, at: int = 20) -> None:
        super().__init__(episode_length=50)
        self.marker, self.at = marker, at

    def step(self, action):
        if self.count + 1 == self.at and _in_env_worker():
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)
