"""Adders: what an actor turns its vector-env steps into for the data path.

:class:`NStepAdder` makes n-step transitions (Sutton & Barto 2018, sec. 7.1; Ape-X,
Horgan et al. 2018) for a replay: ``(obs, action, R^(k), next_obs, terminated,
gamma^k)``, the learner's target ``reward + discount * (1 - terminated) * V(next_obs)``.
The unroll adder of IMPALA, which keeps whole stretches of steps with the behaviour
policy's log-probs, is :class:`algorithms.unroll.UnrollAdder`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Batch = dict[str, np.ndarray]


class NStepAdder:
    """n-step transitions of ``num_envs`` lock-stepped envs (see
    :class:`rlpar.buffers.NStepAssembler`, which does the work): each step returns
    the transitions it completed, as one batch (none while every window fills)."""

    def __init__(self, *, num_envs: int, n: int, gamma: float) -> None:
        from rlpar.buffers import NStepAssembler

        self.assembler = NStepAssembler(num_envs=num_envs, n=n, gamma=gamma)

    def add(self, *, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
            reset_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            extras: Mapping[str, np.ndarray], cut: np.ndarray | None = None) -> list[Batch]:
        completed = self.assembler.step(obs=obs, action=action, reward=reward, next_obs=next_obs,
                                        terminated=terminated, truncated=truncated, cut=cut)
        return [completed] if len(completed["reward"]) else []
