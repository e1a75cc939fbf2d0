"""Asynchronous advantage actor-critic (A3C), the worker's side.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (arXiv
1602.01783), Algorithm S3: each worker keeps a local copy of the parameters,
collects a rollout with it, computes the gradient of the actor-critic loss on
that rollout, sends the gradient to the shared parameters, and copies the shared
parameters back. Here the shared parameters sit behind a
:class:`~rlpar.protocols.GradientSink` (``push_gradients(grads, version)`` /
``pull(newer_than)``, and ``push_gradients_and_pull`` in one call where the sink
has it): an in-process :class:`rlpar.servers.grad.GradServer` in
tests, an RPC accessor to a remote one in experiments. This module never sees
which, and imports no transport.

Every rollout's gradient is pushed as a fresh copy (``A2C.compute_gradients``
clones ``.grad`` before the next rollout clears it), tagged with the version of
the parameters it was computed on, so the server can measure or bound its
staleness.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from algorithms.a2c.a2c import A2C
from algorithms.base import Algorithm
from rlpar.protocols import GradientSink
from rlpar.state import StatePath, integer, mapping


class A3C(Algorithm):
    """One A3C worker around an :class:`A2C` (its loss, networks and policy head).

    The A2C's own optimizer is not used: the sink applies the gradients. The
    first :meth:`update` (or an explicit :meth:`sync`) pulls the shared parameters.
    """

    def __init__(self, *, agent: A2C, sink: GradientSink) -> None:
        if not isinstance(agent, A2C):
            raise TypeError(f"agent must be an A2C, got {type(agent).__name__}")
        for method in ("push_gradients", "pull"):
            if not callable(getattr(sink, method, None)):
                raise TypeError(f"sink must have a {method}() method (a GradientSink), "
                                f"got {type(sink).__name__}")
        self.agent, self.sink = agent, sink
        self.device = agent.device
        self.version = -1
        self.pushed = self.accepted = 0

    def sync(self) -> bool:
        """Load the shared parameters if they are newer than ours; True if loaded."""
        pulled = self.sink.pull(newer_than=self.version)
        return self._load(pulled)

    def _load(self, pulled: tuple[Mapping[str, Any], int] | None) -> bool:
        if pulled is None:
            return False
        state, version = pulled
        self.agent.load_policy_state(state)
        self.version = int(version)
        return True

    def sample_actions(self, obs: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.agent.sample_actions(obs)

    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        return self.agent.act(obs, explore=explore)

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """Push the rollout's gradient (computed on the local parameters) and pull.

        Metrics add ``accepted`` (1 unless the sink dropped the gradient as too
        stale), ``version`` (after the pull) and ``version_lag`` (how many
        versions the pull advanced: 1 when nobody else pushed meanwhile).
        """
        if self.version < 0 and not self.sync():
            raise RuntimeError("the gradient sink returned no parameters to start from")
        grads, metrics = self.compute_gradients(batch)
        computed_on = self.version
        exchange = getattr(self.sink, "push_gradients_and_pull", None)
        if exchange is not None:  # one round trip instead of two
            accepted, pulled = exchange(grads, computed_on, computed_on)
            self._load(pulled)
        else:
            accepted = self.sink.push_gradients(grads, computed_on)
            self.sync()
        accepted = bool(accepted)
        self.pushed += 1
        self.accepted += accepted
        metrics.update(accepted=float(accepted), version=float(self.version),
                       version_lag=float(self.version - computed_on))
        return metrics

    def compute_gradients(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """Hook: the gradient to push (the A2C loss's by default)."""
        return self.agent.compute_gradients(batch)

    def state_dict(self) -> dict[str, Any]:
        return {"agent": self.agent.state_dict(), "version": self.version,
                "pushed": self.pushed, "accepted": self.accepted}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        state = mapping(state, where, required=("agent", "version", "pushed", "accepted"))
        # version -1: never synced with the sink yet.
        counters = {k: integer(state[k], where[k], low=-1 if k == "version" else 0)
                    for k in ("version", "pushed", "accepted")}
        self.agent.load_state_dict(state["agent"])  # checks it whole before loading
        self.version, self.pushed, self.accepted = (counters[k] for k in ("version", "pushed", "accepted"))


def run_worker(
    worker: A3C,
    collect: Callable[[], Mapping[str, Any]],
    *,
    max_updates: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_update: Callable[[dict[str, float]], None] | None = None,
) -> int:
    """The worker loop: collect, update (push + pull), repeat until ``max_updates``
    or ``should_stop()``. Returns the number of updates made."""
    if max_updates is not None and max_updates < 0:
        raise ValueError(f"max_updates must be >= 0 or None, got {max_updates}")
    if max_updates is None and should_stop is None:
        raise ValueError("run_worker needs max_updates or should_stop, or it never ends")
    done = 0
    while (max_updates is None or done < max_updates) and not (should_stop and should_stop()):
        metrics = worker.update(collect())
        done += 1
        if on_update is not None:
            on_update(metrics)
    return done
