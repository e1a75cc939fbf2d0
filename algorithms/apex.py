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
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

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


class ApexActor:
    """One Ape-X actor on a gymnasium ``VectorEnv`` in same-step autoreset mode
    (the true last observation of an episode is in ``infos["final_obs"]``). Envs
    flagged in ``infos["env_restarted"]`` (their worker process was replaced) lost
    that step: their n-step windows end at the last observation they reached, and
    the cut episode is not reported."""

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
        from rlpar.buffers import NStepAssembler

        config.validate()
        self.dqn, self.env, self.buffer, self.params, self.config = dqn, env, buffer, params, config
        dqn.tie_target()
        self.index = index
        self.dqn.epsilon = exploration_rates(index, num_actors, env.num_envs, eps=config.eps,
                                             alpha=config.eps_alpha, per_env=config.eps_per_env)
        self.assembler = NStepAssembler(num_envs=env.num_envs, n=config.n_step, gamma=dqn.config.gamma)
        self.version = -1
        self.env_steps = 0
        self.transitions_added = 0
        self.finished_episodes: list[tuple[float, int]] = []  # (return, length), drained by callers
        self._pending: list[dict[str, np.ndarray]] = []
        self._steps_since_pull = 0
        self._obs, _ = env.reset(seed=seed)
        self._returns = np.zeros(env.num_envs)
        self._lengths = np.zeros(env.num_envs, dtype=np.int64)

    def step(self) -> int:
        """One vector step of every env; returns the number of env steps taken."""
        obs = self._obs
        action = self.dqn.act(obs, explore=True)
        next_obs, reward, terminated, truncated, infos = self.env.step(action)
        # Envs whose worker process died and was replaced (a subprocess vector env's
        # restart_on_crash): their step never happened and next_obs is a fresh reset.
        cut = infos.get("env_restarted")
        done = np.logical_or(terminated, truncated)
        true_next = next_obs
        if done.any() and "final_obs" in infos:
            true_next = np.array(next_obs, copy=True)
            for i in np.flatnonzero(infos["_final_obs"]):
                true_next[i] = infos["final_obs"][i]
        completed = self.assembler.step(obs=obs, action=action, reward=reward, next_obs=true_next,
                                        terminated=terminated, truncated=truncated, cut=cut)
        if completed and len(completed["reward"]) > 0:
            self._pending.append(completed)
        self._track_episodes(reward, done, cut)
        self._obs = next_obs
        n = self.env.num_envs - (0 if cut is None else int(np.count_nonzero(cut)))
        self.env_steps += n
        self._steps_since_pull += n
        if len(self._pending) >= self.config.add_every:
            self.flush()
        if self._steps_since_pull >= self.config.pull_every:
            self.sync()
        return n

    def _track_episodes(self, reward: np.ndarray, done: np.ndarray, cut: np.ndarray | None = None) -> None:
        self._returns += reward
        self._lengths += 1
        if cut is not None:  # a cut episode is dropped: its return was never made
            done = done & ~cut
            self._returns[cut], self._lengths[cut] = 0.0, 0
        for i in np.flatnonzero(done):
            self.finished_episodes.append((float(self._returns[i]), int(self._lengths[i])))
            self._returns[i] = 0.0
            self._lengths[i] = 0

    def flush(self) -> None:
        """Add the buffered transitions with priorities from this actor's Q estimates."""
        if not self._pending:
            return
        batch = {k: np.concatenate([p[k] for p in self._pending]) for k in self._pending[0]}
        self._pending.clear()
        priorities = self.initial_priorities(batch)
        self.buffer.add(batch, priorities)
        self.transitions_added += len(priorities)

    def initial_priorities(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """The DQN's :meth:`~algorithms.dqn.DQN.initial_priorities` hook, with this
        actor's parameters (its target network is its online one)."""
        return self.dqn.initial_priorities(batch)

    def sync(self) -> bool:
        """Load the learner's parameters if a newer version exists; True if loaded."""
        self._steps_since_pull = 0
        pulled = self.params.pull(newer_than=self.version)
        if pulled is None:
            return False
        state, self.version = pulled
        self.dqn.load_policy_state(state)
        return True


class ApexLearner:
    """The Ape-X learner: prioritized batches in, new priorities and parameters out."""

    def __init__(self, *, dqn: DQN, buffer: Buffer, params: ParameterStore, config: ApexConfig) -> None:
        config.validate()
        self.dqn, self.buffer, self.params, self.config = dqn, buffer, params, config
        self.sample_seconds = 0.0  # time spent obtaining batches (waiting for data)
        self.update_seconds = 0.0
        self.publish()  # version 0, so actors act with the learner's initial weights

    @property
    def updates(self) -> int:
        return self.dqn.updates

    def ready(self) -> bool:
        return len(self.buffer) >= max(self.config.learning_starts, self.config.batch_size)

    def step(self) -> dict[str, Any]:
        """One update; returns the DQN's metrics (``priorities`` already sent back)."""
        t0 = time.perf_counter()
        sample = self.buffer.sample(self.config.batch_size)
        t1 = time.perf_counter()
        batch = dict(sample.batch)
        batch["weights"] = sample.weights
        metrics, priorities = self.dqn.learn(batch)
        self.buffer.update_priorities(sample.indices, priorities)
        metrics["priority_mean"] = float(priorities.mean())
        metrics["priority_max"] = float(priorities.max())
        metrics["weight_min"] = float(np.min(sample.weights))
        if self.dqn.updates % self.config.push_every == 0:
            self.publish()
        self.sample_seconds += t1 - t0
        self.update_seconds += time.perf_counter() - t1
        return metrics

    def publish(self) -> int:
        """Push the online network; its version is the learner's update count."""
        return self.params.push(self.dqn.policy_state(), version=self.dqn.updates)


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
