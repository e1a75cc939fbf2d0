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
import torch

from algorithms.actor_learner import Actor, Learner
from algorithms.adders import NStepAdder, one_step_transitions
from algorithms.dqn.config import ApexConfig
from algorithms.dqn.dqn import DQN
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
        # A subclass that acts or scores otherwise keeps its own hooks, scored by a forward.
        own_hooks = (type(self).behaviour is not ApexActor.behaviour
                     or type(self).initial_priorities is not ApexActor.initial_priorities)
        self.scores = ActingScores(dqn) if ActingScores.applies(dqn, config) and not own_hooks else None
        if self.scores is not None:
            self.adder = _ScoringAdder(gamma=dqn.config.gamma, scores=self.scores)

    @property
    def buffer(self) -> Buffer:
        return self.sink

    def behaviour(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.scores is None:
            return self.dqn.act(obs, explore=True), {}
        return self.dqn.choose(self.scores.acted_on(obs, self.version), explore=True), {}

    def initial_priorities(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        if self.scores is not None:
            priorities = self.scores.take(self._obs, self.version, rows=len(batch["reward"]))
            if priorities is not None:
                return priorities
        return super().initial_priorities(batch)


class ActingScores:
    """Initial priorities from the Q values an Ape-X actor computed to act (Horgan et
    al. 2018, sec. 3: "the actors ... already compute Q values for acting"), instead
    of another forward over each flushed batch's obs and next_obs (8.5 us of a MinAtar
    actor's ~50 per env step). A one-step transition ``(s, a, r, s')`` has
    ``|r + gamma (1 - terminated) max_a' Q(s', a') - Q(s, a)|``: ``Q(s, .)`` is this
    step's act, ``Q(s', .)`` the next step's (``s'`` is the observation acted on
    next, except where an episode ended: terminated rows need none, truncated ones
    get a forward over their final observations). The transitions of the last step
    before a flush are scored with ``Q`` of the observations about to be acted on,
    which that act then reuses. Values are the actor's own, with the parameters it
    acted with; they equal the forward path's up to float rounding and, across a
    parameter pull, the version the Q values came from.

    Used where it is the same computation (:meth:`applies`): one-step transitions
    (``n_step`` 1), ``fast`` on, and a DQN whose acting, target and priority hooks
    are the stock ones; otherwise the actor scores each flush with
    ``dqn.initial_priorities``."""

    HOOKS = ("act", "choose", "q_values", "online", "preprocess", "target", "bootstrap", "initial_priorities")

    def __init__(self, dqn: DQN) -> None:
        self.dqn = dqn
        self._q: np.ndarray | None = None  # Q of the observations last acted on
        # Q of the observations about to be acted on, computed at a flush:
        # (those observations, their Q, the parameter version), for the next act.
        self._next: tuple[np.ndarray, np.ndarray, int] | None = None
        self._open: _OpenStep | None = None  # the last step's transitions, waiting for Q(s')
        self._scored: list[np.ndarray] = []  # TD errors of the transitions since the last flush

    @classmethod
    def applies(cls, dqn: DQN, config: ApexConfig) -> bool:
        stock = all(getattr(type(dqn), name) is getattr(DQN, name) for name in cls.HOOKS)
        return stock and config.n_step == 1 and dqn.fast != "off" and dqn.target_network is dqn.network

    def _q_values(self, obs: np.ndarray) -> np.ndarray:
        return self.dqn.q_values(obs).float().cpu().numpy()

    def acted_on(self, obs: np.ndarray, version: int) -> np.ndarray:
        """The Q values the actor acts on (for ``dqn.choose``): the ones a
        flush computed for these very observations at this version, or a forward.
        They finish the previous step's transitions."""
        handed, self._next = self._next, None
        if handed is not None and handed[0] is obs and handed[2] == version:
            q = handed[1]
        else:
            q = self._q_values(obs)
        self._q = q
        self._finish(q)
        return q

    def opened(self, item: dict[str, np.ndarray], rows: np.ndarray, actions: np.ndarray,
               truncated: np.ndarray) -> None:
        """A step's transitions (``rows``: their envs; ``actions``, ``truncated``: per
        row), acted on with the last :meth:`acted_on`'s Q values, wait for ``Q(s', .)``."""
        if self._q is None:
            raise RuntimeError("ActingScores: transitions added before any act")
        terminated = item["terminated"]
        final_v = np.zeros(len(rows), dtype=np.float32)
        cut_short = ~terminated & truncated  # a time limit: s' is the episode's final observation
        if cut_short.any():
            final_v[cut_short] = self._q_values(item["next_obs"][cut_short]).max(-1)
        self._open = _OpenStep(rows=rows, ended=terminated | truncated, final_v=final_v,
                               q_taken=self._q[rows, actions], reward=item["reward"],
                               discount=item["discount"], terminated=terminated)

    def _finish(self, q_next: np.ndarray) -> None:
        step, self._open = self._open, None
        if step is None:
            return
        v = np.where(step.ended, step.final_v, q_next.max(-1)[step.rows])
        # The adder's rows are float32 already (its reward and discount columns).
        target = step.reward + step.discount * ~step.terminated * v
        self._scored.append(target - step.q_taken)

    def take(self, next_obs: np.ndarray, version: int, *, rows: int) -> np.ndarray | None:
        """The priorities of every transition since the last call (in the order they
        were added), the last step's finished with ``Q(next_obs, .)`` (kept for the
        act on ``next_obs``); None (and nothing kept) if they are not ``rows``
        transitions."""
        if self._open is not None:
            q = self._q_values(next_obs)
            self._next = (next_obs, q, version)
            self._finish(q)
        scored, self._scored = self._scored, []
        td = np.concatenate(scored) if scored else np.zeros(0, dtype=np.float32)
        if len(td) != rows:
            return None
        return self.dqn.priorities(torch.from_numpy(td))


@dataclasses.dataclass
class _OpenStep:
    rows: np.ndarray
    ended: np.ndarray
    final_v: np.ndarray
    q_taken: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    terminated: np.ndarray


class _ScoringAdder:
    """The actor's adder while :class:`ActingScores` scores: one-step transitions (as
    ``NStepAdder`` makes them for n = 1), each step's handed to the scores with the Q
    values it was acted with."""

    def __init__(self, *, gamma: float, scores: ActingScores) -> None:
        self.gamma, self.scores = gamma, scores

    def add(self, *, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
            reset_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            extras: Any, cut: np.ndarray | None = None) -> list[dict[str, np.ndarray]]:
        truncated = np.asarray(truncated, dtype=bool)
        action = np.asarray(action)
        item, rows = one_step_transitions(obs=np.asarray(obs), action=action, reward=np.asarray(reward),
                                          next_obs=np.asarray(next_obs), terminated=np.asarray(terminated),
                                          truncated=truncated, cut=cut, gamma=self.gamma)
        if item is None:
            return []
        self.scores.opened(item, rows, action[rows], truncated[rows])
        return [item]


class ApexDPGActor(Actor):
    """An Ape-X actor for continuous actions (Ape-X DPG, Horgan et al. 2018, with a
    DDPG or TD3 copy): exploration noise (the copy's ``config.noise``: Gaussian, or an
    Ornstein-Uhlenbeck process restarted each episode) at its scales sigma_i
    (:func:`algorithms.noise.exploration_scales`, per env copy), n-step transitions,
    initial priorities from its own critic; ``ddpg.act`` is its behaviour. With
    ``random_start``, actions are uniformly random until the actor holds parameters the
    learner has trained (version > 0), as the TD3 reference starts (Fujimoto et al.
    2018, ``start_timesteps``): a fresh policy plus small noise would fill the replay
    with nearly one action per state. A resumed run's or a restarted actor's first pull
    is trained already, so they act by policy at once."""

    def __init__(self, *, ddpg: Any, env: Any, buffer: Buffer, params: ParameterStore, index: int,
                 num_actors: int, config: ApexConfig, sigma: float, sigma_alpha: float,
                 random_start: bool = True, seed: int | None = None) -> None:
        from algorithms.noise import exploration_scales

        config.validate()
        self.ddpg, self.config, self.index = ddpg, config, index
        self.random_start, self._uniform = random_start, np.random.default_rng(seed)
        ddpg.tie_target()
        ddpg.noise_scale = exploration_scales(index, num_actors, env.num_envs, sigma=sigma, alpha=sigma_alpha,
                                              per_env=config.eps_per_env)
        super().__init__(acting=ddpg, behave=self.behaviour, env=env, sink=buffer, params=params,
                         adder=NStepAdder(num_envs=env.num_envs, n=config.n_step, gamma=ddpg.config.gamma),
                         add_every=config.add_every, pull_every=config.pull_every, prioritized=True, seed=seed)

    def behaviour(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.random_start and self.version <= 0:  # the learner's initial weights, or none yet
            return self.ddpg.to_env(self._uniform.uniform(-1.0, 1.0, size=(len(obs), self.ddpg.action_dim))), {}
        return self.ddpg.act(obs, explore=True), {}

    def episodes_started(self, mask: np.ndarray) -> None:
        # Correlated (OU) noise starts afresh with each episode, as in DDPG.
        self.ddpg.reset_noise(mask)


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
