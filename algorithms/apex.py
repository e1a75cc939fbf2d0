"""Ape-X DQN: many epsilon-greedy actors feed one prioritized replay; one learner.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR,
arXiv:1803.00933). Actor ``i`` of ``N`` explores with

    eps_i = eps ** (1 + i / (N - 1) * alpha)        (eps = 0.4, alpha = 7)

assembles n-step transitions locally, computes their *initial* priorities from its
own Q estimates (so new data is not sampled blindly), adds them to the replay and
now and then pulls the learner's newest parameters. The learner samples
prioritized batches, updates a :class:`~algorithms.dqn.DQN`, sends the new
priorities back and publishes its parameters every ``push_every`` updates.

:class:`ApexActor` and :class:`ApexLearner` only see a
:class:`~rlpar.protocols.Buffer` and a :class:`~rlpar.protocols.ParameterStore`:
with in-memory parts they run in one process (:class:`DQNApex`, used by tests);
with RPC accessors the same objects run in separate processes
(``experiments/apex.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from algorithms.actor_learner import Actor, Learner
from algorithms.adders import NStepAdder
from algorithms.dqn import DQN
from algorithms.pacing import Pacing
from algorithms.rollout import evaluate as evaluate_policy
from rlpar.protocols import Buffer, ParameterStore


def actor_epsilon(index: int, num_actors: int, *, eps: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X's per-actor exploration rate; a single actor uses ``eps``."""
    if num_actors < 1 or not 0 <= index < num_actors:
        raise ValueError(f"actor index must be in [0, {num_actors}), got {index}")
    if num_actors == 1:
        return eps
    return eps ** (1.0 + index / (num_actors - 1) * alpha)


def exploration_rates(index: int, num_actors: int, num_envs: int, *, eps: float = 0.4,
                      alpha: float = 7.0, per_env: bool = True) -> float | np.ndarray:
    """Actor ``index``'s exploration: one :func:`actor_epsilon` per env copy (array of
    ``num_envs``, the schedule spread over ``num_actors * num_envs`` copies) or,
    with ``per_env=False``, one rate for the whole actor."""
    if not per_env:
        return actor_epsilon(index, num_actors, eps=eps, alpha=alpha)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    total = num_actors * num_envs
    actor_epsilon(index, num_actors)  # validates index
    return np.array([actor_epsilon(index * num_envs + k, total, eps=eps, alpha=alpha)
                     for k in range(num_envs)])


@dataclasses.dataclass
class ApexConfig:
    """Ape-X hyperparameters besides the DQN ones (see :class:`~algorithms.dqn.DQNConfig`)."""

    n_step: int = 3
    batch_size: int = 128
    learning_starts: int = 1000  # replay size before the learner starts
    push_every: int = 8  # learner updates between parameter publications
    pull_every: int = 64  # actor env steps between parameter pulls
    add_every: int = 16  # actor vector steps buffered before one add (with priorities)
    eps: float = 0.4
    eps_alpha: float = 7.0
    # Spread the eps_i schedule over every env copy (actor i's env k is "actor"
    # i * envs_per_actor + k) rather than over actor processes: the paper's actors
    # step one env each, and with few vectorized actors (2 on a small box) a
    # per-process schedule leaves only eps = 0.4 and eps ~ 0.0007.
    eps_per_env: bool = True

    def validate(self) -> None:
        for name in ("n_step", "batch_size", "push_every", "pull_every", "add_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if not 0.0 <= self.eps <= 1.0:
            raise ValueError(f"eps must be in [0, 1], got {self.eps}")
        if self.eps_alpha < 0:
            raise ValueError(f"eps_alpha must be >= 0, got {self.eps_alpha}")


class ApexActor(Actor):
    """One Ape-X actor (:class:`~algorithms.actor_learner.Actor`) with a DQN copy:
    epsilon-greedy at its ``eps_i`` (per env copy), n-step transitions, initial
    priorities from its own Q estimates; ``dqn.act`` is its behaviour, so a DQN
    subclass that explores otherwise (e.g. Boltzmann) changes what it does. Envs
    whose worker process was replaced lost their step (see ``Actor``): their n-step
    windows end at the last observation they reached."""

    def __init__(
        self,
        *,
        dqn: DQN,
        env: Any,
        buffer: Buffer,
        params: ParameterStore,
        index: int,
        num_actors: int,
        config: ApexConfig,
        seed: int | None = None,
    ) -> None:
        config.validate()
        self.dqn, self.config, self.index = dqn, config, index
        dqn.tie_target()
        dqn.epsilon = exploration_rates(index, num_actors, env.num_envs, eps=config.eps,
                                        alpha=config.eps_alpha, per_env=config.eps_per_env)
        super().__init__(acting=dqn, behave=self.behaviour, env=env, sink=buffer, params=params,
                         adder=NStepAdder(num_envs=env.num_envs, n=config.n_step, gamma=dqn.config.gamma),
                         add_every=config.add_every, pull_every=config.pull_every, prioritized=True, seed=seed)

    @property
    def buffer(self) -> Buffer:
        return self.sink

    def behaviour(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.dqn.act(obs, explore=True), {}


class ApexDPGActor(Actor):
    """An Ape-X actor for continuous actions (Ape-X DPG, Horgan et al. 2018, with a
    DDPG or TD3 copy): Gaussian exploration at its scales sigma_i
    (:func:`algorithms.noise.exploration_scales`, per env copy), n-step transitions,
    initial priorities from its own critic; ``ddpg.act`` is its behaviour."""

    def __init__(self, *, ddpg: Any, env: Any, buffer: Buffer, params: ParameterStore, index: int,
                 num_actors: int, config: ApexConfig, sigma: float, sigma_alpha: float,
                 seed: int | None = None) -> None:
        from algorithms.noise import exploration_scales

        config.validate()
        self.ddpg, self.config, self.index = ddpg, config, index
        ddpg.tie_target()
        ddpg.noise_scale = exploration_scales(index, num_actors, env.num_envs, sigma=sigma, alpha=sigma_alpha,
                                              per_env=config.eps_per_env)
        super().__init__(acting=ddpg, behave=self.behaviour, env=env, sink=buffer, params=params,
                         adder=NStepAdder(num_envs=env.num_envs, n=config.n_step, gamma=ddpg.config.gamma),
                         add_every=config.add_every, pull_every=config.pull_every, prioritized=True, seed=seed)

    def behaviour(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.ddpg.act(obs, explore=True), {}


class ApexLearner(Learner):
    """The Ape-X learner (:class:`~algorithms.actor_learner.Learner`) of a DQN:
    prioritized batches in, new priorities and parameters out."""

    def __init__(self, *, dqn: DQN, buffer: Buffer, params: ParameterStore, config: ApexConfig) -> None:
        config.validate()
        self.dqn, self.buffer, self.config = dqn, buffer, config
        super().__init__(algorithm=dqn, source=buffer, params=params, batch_size=config.batch_size,
                         push_every=config.push_every, weighted=True)

    def ready(self) -> bool:
        return len(self.buffer) >= max(self.config.learning_starts, self.config.batch_size)


class DQNApex:
    """Ape-X in one process: actors and learner share in-memory parts and take
    turns, ``updates_per_step`` learner updates per env step (deterministic given
    seeds). The distributed run uses the same :class:`ApexActor`/:class:`ApexLearner`."""

    def __init__(self, *, actors: Sequence[ApexActor], learner: ApexLearner,
                 updates_per_step: float = 0.25) -> None:
        if not actors:
            raise ValueError("DQNApex needs at least one actor")
        if updates_per_step <= 0:
            raise ValueError(f"updates_per_step must be positive, got {updates_per_step}")
        self.actors, self.learner = list(actors), learner
        self.pacing = Pacing(updates_per_step=updates_per_step,
                             learning_starts=learner.config.learning_starts)
        self._learning_since: float | None = None  # env steps when the learner could first sample

    @classmethod
    def local(
        cls,
        *,
        make_dqn: Callable[[], DQN],
        make_env: Callable[[int], Any],
        num_actors: int,
        config: ApexConfig,
        capacity: int = 50_000,
        alpha: float = 0.6,
        beta: float = 0.4,
        updates_per_step: float = 0.25,
        seed: int = 0,
    ) -> DQNApex:
        """Wire actors and a learner around a local prioritized replay and model store."""
        from rlpar.buffers import PrioritizedReplayBuffer
        from rlpar.servers.model import ModelStore

        buffer = PrioritizedReplayBuffer(capacity=capacity, alpha=alpha, beta=beta, seed=seed)
        params = ModelStore()
        learner = ApexLearner(dqn=make_dqn(), buffer=buffer, params=params, config=config)
        actors = []
        for i in range(num_actors):
            actor = ApexActor(dqn=make_dqn(), env=make_env(i), buffer=buffer, params=params,
                              index=i, num_actors=num_actors, config=config, seed=seed + 1000 * i)
            actor.sync()
            actors.append(actor)
        return cls(actors=actors, learner=learner, updates_per_step=updates_per_step)

    @property
    def env_steps(self) -> int:
        return sum(actor.env_steps for actor in self.actors)

    def run(self, *, env_steps: int, stop: Callable[[], bool] | None = None,
            check_every: int = 1000) -> int:
        """Step until ``env_steps`` more env steps are taken or ``stop()`` is true
        (asked every ``check_every`` env steps); returns env steps taken."""
        start = self.env_steps
        next_check = start + check_every
        while self.env_steps - start < env_steps:
            for actor in self.actors:
                actor.step()
                if self._learning_since is None and self.learner.ready():
                    self._learning_since = self.env_steps - self.learner.updates / self.pacing.updates_per_step
                if self._learning_since is not None:
                    for _ in range(self.pacing.updates_due(env_steps=self.env_steps, updates=self.learner.updates,
                                                           started_at=self._learning_since)):
                        self.learner.step()
            if stop is not None and self.env_steps >= next_check:
                next_check = self.env_steps + check_every
                if stop():
                    break
        return self.env_steps - start


def evaluate(dqn: DQN, env: Any, *, episodes: int, seed: int | None = None) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes on a vector env with ``episodes`` envs
    (each env's first episode, so short episodes are not over-represented)."""
    return evaluate_policy(functools.partial(dqn.act, explore=False), env, episodes=episodes,
                           seed=seed)
