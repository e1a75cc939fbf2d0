"""The actor and the learner of every actor-learner algorithm, transport-free.

Ape-X (Horgan et al. 2018, arXiv:1803.00933) and IMPALA (Espeholt et al. 2018,
arXiv:1802.01561) share one shape: actors step their envs with a recent copy of the
parameters and send what they saw to a data path; one learner takes batches from it,
learns, and publishes new parameters. What differs is *what* flows: n-step
transitions with initial priorities into a prioritized replay (Ape-X DQN and TD3),
or whole unrolls with the behaviour policy's log-probs into a FIFO queue (IMPALA).
An algorithm's :class:`~algorithms.builder.Builder` says which; :class:`Actor` and
:class:`Learner` below run either, and only see

- a sink: a :class:`~rlpar.protocols.Buffer` (``add(batch, priorities)``) for
  prioritized transitions, an :class:`~rlpar.protocols.ItemSink` (``put(item)``)
  for unrolls; a source with ``sample(n) -> Sample`` and ``update_priorities``: a
  local replay or queue in one process, an RPC accessor in many, the same semantics;
- a :class:`~rlpar.protocols.ParameterStore` (``push``/``pull(newer_than=)``).

So the same objects run in one process (tests, ``--serial``) and distributed
(``experiments/roles/actor_learner/``), with no change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from algorithms.rollout import game_rewards
from rlpar.protocols import Buffer, ParameterStore

if TYPE_CHECKING:  # torch is imported by the algorithms, not by the program's plumbing
    from algorithms.base import Learned

Batch = dict[str, np.ndarray]


class Adder(Protocol):
    """Turns vector-env steps into the items the data path takes (n-step
    transitions, unrolls). ``add`` gets one step of every env: ``next_obs`` is the
    *true* successor (the final observation where an episode ended), ``reset_obs``
    what the env returned (same-step autoreset: the next episode's first observation
    there), ``extras`` what the behaviour policy said besides its actions (e.g.
    log-probs), ``cut`` (None, or a bool per env) the envs whose step never happened
    (their worker process died and was replaced: ``reset_obs`` is a fresh reset and
    the last observation they reached is ``obs``); it returns the items completed by
    this step (possibly none)."""

    def add(self, *, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
            reset_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            extras: Mapping[str, np.ndarray], cut: np.ndarray | None) -> list[Batch]: ...


class Acting(Protocol):
    """An actor's copy of the algorithm: it acts, loads published parameters and,
    for prioritized data, scores new items (``initial_priorities``)."""

    def load_policy_state(self, state: Mapping[str, Any]) -> None: ...


Behave = Callable[[np.ndarray], tuple[np.ndarray, dict[str, np.ndarray]]]


class Actor:
    """One actor on a gymnasium ``VectorEnv`` in same-step autoreset mode (the true
    last observation of an episode is in ``infos["final_obs"]``). Envs flagged in
    ``infos["env_restarted"]`` (their worker process was replaced) lost that step:
    the adder is told, their cut episode is not reported, the step is not counted.
    Episode returns count the game's rewards (``algorithms.rollout.game_rewards``);
    the adder gets the rewards the env gives.

    ``behave(obs) -> (actions, extras)`` is the exploring policy of ``acting`` (the
    builder's, with this actor's exploration); ``adder`` makes items of the steps.
    ``prioritized``: every ``add_every`` items (one per vector step) go to ``sink``
    as one ``add``, with priorities from :meth:`initial_priorities`; else each item
    (an unroll) is ``put`` whole, in order, and while the sink has no room for one
    (``put`` gives False after ``put_timeout`` seconds) the actor takes no step:
    back-pressure, with the caller's loop still turning (reports, stop). Every
    ``pull_every`` env steps the newest parameters are pulled from ``params``.
    """

    def __init__(self, *, acting: Any, behave: Behave, adder: Adder, env: Any, sink: Buffer,
                 params: ParameterStore, add_every: int, pull_every: int, prioritized: bool,
                 seed: int | None = None, put_timeout: float = 0.05) -> None:
        if add_every < 1 or pull_every < 1:
            raise ValueError(f"add_every and pull_every must be >= 1, got {add_every}, {pull_every}")
        self.acting, self.behave, self.adder, self.env = acting, behave, adder, env
        self.sink, self.params = sink, params
        self.add_every, self.pull_every, self.prioritized = add_every, pull_every, prioritized
        self.put_timeout = put_timeout
        self.version = -1
        self.env_steps = 0
        self.transitions_added = 0  # items sent to the sink (transitions, unroll steps or sequences)
        self.finished_episodes: list[tuple[float, int]] = []  # (return, length), drained by callers
        self.dropped_episodes = 0  # episodes cut by env worker restarts (never finished)
        self._pending: list[Batch] = []
        self._steps_since_pull = 0
        self._obs, _ = env.reset(seed=seed)
        self._returns = np.zeros(env.num_envs)
        self._lengths = np.zeros(env.num_envs, dtype=np.int64)

    @property
    def waiting(self) -> bool:
        """Unrolls are waiting for room in the sink: no step until they are sent."""
        return bool(self._pending) and not self.prioritized

    def step(self) -> int:
        """One vector step of every env; returns the number of env steps taken (0
        while :attr:`waiting` and the sink still has no room)."""
        if self.waiting:
            self.flush()
            if self.waiting:
                return 0
        obs = self._obs
        action, extras = self.behave(obs)
        reset_obs, reward, terminated, truncated, infos = self.env.step(action)
        cut = infos.get("env_restarted")  # a subprocess vector env's restart_on_crash
        done = np.logical_or(terminated, truncated)
        next_obs = reset_obs
        if done.any() and "final_obs" in infos:
            next_obs = np.array(reset_obs, copy=True)
            for i in np.flatnonzero(infos["_final_obs"]):
                next_obs[i] = infos["final_obs"][i]
        for item in self.adder.add(obs=obs, action=action, reward=reward, next_obs=next_obs,
                                   reset_obs=reset_obs, terminated=terminated, truncated=truncated,
                                   extras=extras, cut=cut):
            if len(next(iter(item.values()))) > 0:
                self._pending.append(item)
        self._track_episodes(game_rewards(reward, infos), done, cut)
        self.rewarded(reward)
        started = done if cut is None else done | np.asarray(cut, dtype=bool)
        if started.any():
            self.episodes_started(started)
        self._obs = reset_obs
        n = self.env.num_envs - (0 if cut is None else int(np.count_nonzero(cut)))
        self.env_steps += n
        self._steps_since_pull += n
        if len(self._pending) >= (self.add_every if self.prioritized else 1):
            self.flush()
        if self._steps_since_pull >= self.pull_every:
            self.sync()
        return n

    def _track_episodes(self, reward: np.ndarray, done: np.ndarray, cut: np.ndarray | None) -> None:
        self._returns += reward
        self._lengths += 1
        if cut is not None:  # a cut episode is dropped: its return was never made
            self.dropped_episodes += int(np.count_nonzero(cut & (self._lengths > 1)))
            done = done & ~cut
            self._returns[cut], self._lengths[cut] = 0.0, 0
        for i in np.flatnonzero(done):
            self.finished_episodes.append((float(self._returns[i]), int(self._lengths[i])))
            self._returns[i] = 0.0
            self._lengths[i] = 0

    def rewarded(self, reward: np.ndarray) -> None:
        """Hook: the rewards that followed this step's actions, one per env, before
        :meth:`episodes_started` (a recurrent policy that takes the previous reward
        keeps it here: R2D2's)."""

    def episodes_started(self, mask: np.ndarray) -> None:
        """Hook: the envs where ``mask`` is true begin a new episode at the next step
        (theirs ended, or a worker restart cut it). Per-episode exploration state (an
        Ornstein-Uhlenbeck process, a per-episode temperature) restarts here."""

    def flush(self) -> None:
        """Send the pending items: transitions with priorities from this actor's
        parameters; unrolls in order, as far as the sink has room."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if self.prioritized:  # transitions: one add of all of them, one priority pass
            batch = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            priorities = self.initial_priorities(batch)
            self.sink.add(batch, priorities)
            self.transitions_added += len(priorities)
            return
        for i, item in enumerate(pending):  # unrolls: each one whole, in order
            if not self.sink.put(item, timeout=self.put_timeout):
                self._pending = pending[i:]  # no room yet: sent before the next step
                return
            self.transitions_added += _steps_of(item)

    def finish(self) -> None:
        """The actor ends (the run's end): :meth:`flush`, with the items the adder
        still holds that are worth adding incomplete (:meth:`held_items`) first
        pending."""
        held = [item for item in self.held_items() if len(next(iter(item.values()))) > 0]
        if held:
            self._pending += held
        self.flush()

    def held_items(self) -> list[Batch]:
        """Hook: at the end, the adder's incomplete items to add anyway (R2D2's partial
        sequences, padded and masked); none by default (an n-step window's steps are
        only a transition once the window or the episode is full)."""
        return []

    def held_steps(self) -> int:
        """Hook: env steps taken whose data is not in the sink yet (in the adder or
        pending): what this actor's death loses. By default, the env steps minus the
        rows added, as each step makes one row (a transition, or an unroll's step)."""
        return self.env_steps - self.transitions_added

    def initial_priorities(self, batch: Batch) -> np.ndarray:
        """Hook: priorities of new transitions from this actor's copy (Ape-X sec. 3:
        new data is not sampled blindly); the algorithm's ``initial_priorities``."""
        return self.acting.initial_priorities(batch)

    def sync(self) -> bool:
        """Load the learner's parameters if a newer version exists; True if loaded."""
        self._steps_since_pull = 0
        pulled = self.params.pull(newer_than=self.version)
        if pulled is None:
            return False
        state, self.version = pulled
        self.acting.load_policy_state(state)
        return True

    def drain_metrics(self) -> tuple[dict[str, float], int]:
        """Hook: sums of this actor's own metrics since the last call and how many steps
        they sum (an actor that learns, A3C's: its losses, logged as ``losses/...``);
        none here."""
        return {}, 0


def _steps_of(item: Batch) -> int:
    """Env steps an item carries: an unroll's T x envs (its ``reward`` array)."""
    return int(np.asarray(item["reward"]).size)


class Learner:
    """The learner: batches from ``source`` in, ``algorithm.learn`` on each, new
    priorities back to the source when the algorithm has them, parameters out to
    ``params`` every ``push_every`` updates (version = update count).

    ``source.sample(batch_size)`` gives a :class:`~rlpar.protocols.Sample`; its
    importance ``weights`` go into the batch when ``weighted`` (prioritized replay).
    """

    def __init__(self, *, algorithm: Any, source: Any, params: ParameterStore, batch_size: int,
                 push_every: int, weighted: bool) -> None:
        if batch_size < 1 or push_every < 1:
            raise ValueError(f"batch_size and push_every must be >= 1, got {batch_size}, {push_every}")
        self.algorithm, self.source, self.params = algorithm, source, params
        self.batch_size, self.push_every, self.weighted = batch_size, push_every, weighted
        self.sample_seconds = 0.0  # time spent obtaining batches (waiting for data)
        self.update_seconds = 0.0
        self.priorities_sent = 0  # new priorities sent back to the source (rows)
        self.publish()  # version 0, so actors act with the learner's initial weights

    @property
    def updates(self) -> int:
        return self.algorithm.updates

    def step(self) -> dict[str, float]:
        """One update; returns its metrics (priorities already sent back)."""
        t0 = time.perf_counter()
        sample = self.source.sample(self.batch_size)
        t1 = time.perf_counter()
        batch = dict(sample.batch)
        if self.weighted:
            batch["weights"] = sample.weights
        metrics, priorities = self.learn(batch)
        metrics = dict(metrics)
        if priorities is not None:
            self.source.update_priorities(sample.indices, priorities)
            self.priorities_sent += len(priorities)
            metrics["priority_mean"] = float(priorities.mean())
            metrics["priority_max"] = float(priorities.max())
            metrics["weight_min"] = float(np.min(sample.weights))
        if self.updates % self.push_every == 0:
            self.publish()
        self.sample_seconds += t1 - t0
        self.update_seconds += time.perf_counter() - t1
        return metrics

    def learn(self, batch: Batch) -> Learned:
        """Hook: one learning step on ``batch`` (the algorithm's ``learn``)."""
        return self.algorithm.learn(batch)

    def publish(self) -> int:
        """Push the acting parameters; their version is the learner's update count."""
        return self.params.push(self.algorithm.policy_state(), version=self.updates)

    def scalars(self) -> dict[str, float]:
        """Hook: this learner's own curves at each tick (A3C's: its gradient server's
        ``server/...``); none here."""
        return {}

    def figures(self) -> dict[str, Any]:
        """Hook: this learner's own entries in the job summary; none here."""
        return {}

    def settle(self) -> None:
        """Hook: called once the actors' final reports are in, before the last tick and
        checkpoint (a learner that follows a server catches up with it); nothing here."""
