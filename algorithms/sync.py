"""What the synchronous data-parallel program needs from an algorithm: its builder.

Synchronous data parallelism (DD-PPO: Wijmans et al. 2020, "DD-PPO: Learning
Near-Perfect PointGoal Navigators from 2.5 Billion Frames", ICLR; PQN: Gallici et al.
2025, "Simplifying Deep Temporal Difference Learning", ICLR) runs one copy of an
on-policy algorithm per member of a learner group: each member collects a rollout
from its own vector env, updates on it, and the group averages every minibatch's
gradient, so the parameters stay identical on every member. What the program
(``experiments/roles/sync/``) needs from an algorithm is a :class:`SyncBuilder`:

- :meth:`SyncBuilder.make_algorithm`: the algorithm, with the same initial weights on
  every member (``seed``), its own stream of samples (``sample_seed``) and the
  group's averaging as ``grad_hook`` (called between backward and the optimizer step,
  the same number of times on every member) and ``mean_hook`` (a group mean, for
  decisions every member must take alike);
- :meth:`SyncBuilder.make_runner`: the member's :class:`SyncRunner` on its env:
  collect a rollout (cut short when ``should_stop`` says so: DD-PPO's preemption of
  stragglers), learn from it, and follow the group's env step count for schedules;
- the evaluation policy (:meth:`~SyncBuilder.greedy`), and what a member restored
  from the lead's state does to sample on its own again (:meth:`~SyncBuilder.reseed`).

Checkpoints hold the algorithm's ``state_dict()``, ``policy.pt`` its
``policy_state()``. Nothing here imports transport: the all-reduce arrives as a hook.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from algorithms.builder import EnvSpec
from algorithms.rollout import RolloutCollector

Hook = Callable[[Any], Any]


class SyncRunner:
    """One member's loop body: :meth:`collect` a ``(T, N)`` rollout from ``env``
    (``T = n_steps``, fewer when preempted), :meth:`learn` from it. A subclass
    changes how actions are sampled (:meth:`sample_actions`), what happens before a
    rollout (:meth:`before_collect`), or what the update gets (:meth:`learn`).
    ``env`` is a gymnasium-style vector env, in either autoreset mode."""

    def __init__(self, *, algorithm: Any, env: Any, n_steps: int, seed: int | None = None) -> None:
        self.algorithm = algorithm
        self.collector = RolloutCollector(env=env, sample_actions=self.sample_actions, n_steps=n_steps,
                                          seed=seed)

    @property
    def n_steps(self) -> int:
        return self.collector.n_steps

    @property
    def env_steps(self) -> int:
        """Valid env steps this member collected, all told."""
        return self.collector.env_steps

    def sample_actions(self, obs: np.ndarray) -> Any:
        """Hook: ``(actions, env_actions[, extras])`` for a batch (the collector's
        contract); the algorithm's ``sample_actions``."""
        return self.algorithm.sample_actions(obs)

    def before_collect(self) -> None:
        """Hook: called before every rollout (e.g. set the exploration rate)."""

    def collect(self, *, should_stop: Callable[[int], bool] | None = None,
                min_steps: int | None = None) -> dict[str, np.ndarray]:
        """One rollout; ``should_stop(steps)`` may end it after ``min_steps`` steps."""
        self.before_collect()
        return self.collector.collect(should_stop=should_stop, min_steps=min_steps)

    def learn(self, rollout: dict[str, np.ndarray]) -> dict[str, float]:
        """Hook: one update on ``rollout``; its metrics (the algorithm's ``update``)."""
        return self.algorithm.update(rollout)

    def set_progress(self, env_steps: int) -> None:
        """Hook: the group's env steps so far (every member's together, the same
        number on every member), for schedules that count env steps."""

    def drain_episodes(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes finished since the last call."""
        return self.collector.drain_episodes()


class SyncBuilder(abc.ABC):
    """One algorithm as the synchronous data-parallel program runs it (see the module
    docstring). ``algorithm``: the user's subclass of :attr:`algorithm_base` (None:
    the builder's own); ``network``: ``network(observation_space, action_space) ->
    nn.Module`` replacing the default one, as the algorithm's docs say."""

    algorithm_base: ClassVar[type]
    # The key of the algorithm's state in a checkpoint.
    state_key: ClassVar[str] = "algorithm"

    def __init__(self, *, spec: EnvSpec, network: Callable[[Any, Any], Any] | None = None,
                 algorithm: type | None = None) -> None:
        base = self.algorithm_base
        if algorithm is not None and not (isinstance(algorithm, type) and issubclass(algorithm, base)):
            raise TypeError(f"algorithm must be a subclass of {base.__module__}.{base.__qualname__}, "
                            f"got {algorithm!r}")
        if network is not None and not callable(network):
            raise TypeError(f"network must be a callable factory, got {network!r}")
        self.spec, self.network = spec, network
        self.algorithm_cls = algorithm or base

    @property
    @abc.abstractmethod
    def n_steps(self) -> int:
        """Steps per env in a full rollout (``T``)."""

    @property
    def minibatch_steps(self) -> int:
        """Gradient steps of one update (each one ``grad_hook`` call): a rollout must
        hold at least this many env steps (a preempted one too)."""
        return 1

    @abc.abstractmethod
    def make_algorithm(self, *, device: Any, seed: int, sample_seed: int, grad_hook: Hook | None = None,
                       mean_hook: Hook | None = None) -> Any:
        """The algorithm on ``device``: initial weights from ``seed`` (every member the
        same), samples from ``sample_seed`` (each member its own), ``grad_hook``
        (average a list of parameters' gradients in place) and ``mean_hook`` (the
        group mean of a tensor) when it is a member of a group of several."""

    @abc.abstractmethod
    def make_runner(self, algorithm: Any, *, env: Any, seed: int) -> SyncRunner:
        """The member's runner of ``algorithm`` on its vector env (reset with ``seed``)."""

    @abc.abstractmethod
    def reseed(self, algorithm: Any, sample_seed: int) -> None:
        """Give ``algorithm`` its own sample stream again after it loaded another
        member's state (a resumed run: every member loads the lead's checkpoint)."""

    def greedy(self, algorithm: Any) -> Callable[[np.ndarray], np.ndarray]:
        """The evaluation policy: ``act(obs batch) -> actions`` without exploration."""
        return functools.partial(algorithm.act, explore=False)

    def network_of(self, algorithm: Any) -> Any:
        """The module the evaluation policy runs (its ReLUs are watched for dead units)."""
        return algorithm.network

    def algorithm_calls(self) -> dict[str, str]:
        """What the program calls on this builder's algorithm besides what its runner
        calls (:class:`SyncRunner`: ``sample_actions``, ``update``): method name -> its
        signature and caller (:func:`algorithms.builder.check_algorithm`)."""
        calls = {
            "policy_state": "policy_state() -> dict of tensors: what evaluations record and policy.pt holds",
            "load_policy_state": "load_policy_state(state): experiments.evaluate",
            "state_dict": "state_dict(): the checkpoint",
            "load_state_dict": "load_state_dict(state): a resume",
        }
        if type(self).greedy is SyncBuilder.greedy:
            calls["act"] = "act(obs, explore=False) -> actions: the evaluation policy (SyncBuilder.greedy)"
        return calls
