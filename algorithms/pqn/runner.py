"""PQN in one process: collect a ``(T, N)`` rollout from a vector env with the
scheduled epsilon, update on it, repeat (the serial shell of
:mod:`algorithms.pqn`; CleanRL's single-file loop, cut at the algorithm's methods).

A synchronous data-parallel job runs one of these per learner-group member, each
with its own env and ``pqn.grad_hook`` set to the group's all-reduce; nothing here
knows about transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from algorithms.pqn.pqn import PQN
from algorithms.rollout import RolloutCollector


class PQNRunner:
    """Steps ``env`` (a gymnasium-style vector env, either autoreset mode) for
    ``n_steps`` per rollout with ``pqn``'s epsilon-greedy policy and updates ``pqn``
    on every rollout. Epsilon follows ``pqn.epsilon_at(pqn.env_steps)``, so a PQN
    restored from a checkpoint continues its schedule; the env itself starts anew."""

    def __init__(self, *, pqn: PQN, env: Any, n_steps: int, seed: int | None = None) -> None:
        if not isinstance(pqn, PQN):
            raise TypeError(f"pqn must be a PQN, got {type(pqn).__name__}")
        self.pqn = pqn
        self.collector = RolloutCollector(env=env, sample_actions=self._sample, n_steps=n_steps,
                                          seed=seed)
        self.rollouts = 0
        self._max_q: list[np.ndarray] = []

    def _sample(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The Q values the policy computes anyway: the update reuses them for its targets.
        actions, max_q = self.pqn.act_and_max_q(obs, explore=True)
        self._max_q.append(max_q)
        return actions, actions

    def step(self) -> dict[str, float]:
        """One rollout and one update. Metrics: the update's, plus ``epsilon``,
        ``env_steps`` (learned from, all told), ``episodes`` finished in this rollout
        and, when there were any, their mean undiscounted ``episodic_return`` and
        ``episodic_length``; ``collect_s`` and ``update_s`` time the two halves."""
        pqn = self.pqn
        pqn.epsilon = epsilon = pqn.epsilon_at(pqn.env_steps)
        t0 = time.perf_counter()
        self._max_q = []
        rollout = self.collector.collect()
        rollout["max_q"] = np.stack(self._max_q)
        t1 = time.perf_counter()
        metrics = pqn.update(rollout)
        t2 = time.perf_counter()
        self.rollouts += 1
        returns, lengths = self.collector.drain_episodes()
        metrics.update(epsilon=float(epsilon), env_steps=float(pqn.env_steps), episodes=float(len(returns)),
                       collect_s=t1 - t0, update_s=t2 - t1)
        if returns:
            metrics.update(episodic_return=float(np.mean(returns)),
                           episodic_length=float(np.mean(lengths)))
        return metrics

    def run(self, *, env_steps: int,
            on_step: Callable[[dict[str, float]], Any] | None = None) -> dict[str, float]:
        """Step until ``pqn.env_steps`` reaches ``env_steps`` (counting what a restored
        PQN had learned already); ``on_step(metrics)`` after every rollout, and a true
        return value from it stops the run. Returns the last step's metrics."""
        if not isinstance(env_steps, int) or env_steps < 0:
            raise ValueError(f"env_steps must be an int >= 0, got {env_steps!r}")
        metrics: dict[str, float] = {}
        while self.pqn.env_steps < env_steps:
            metrics = self.step()
            if on_step is not None and on_step(metrics):
                break
        return metrics
