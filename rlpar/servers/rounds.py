"""Rounds of a reducing gradient server (``GradServer(mode="reduce")``).

Synchronous data-parallel SGD (synchronous A2C: Mnih et al. 2016, the A2C of OpenAI
Baselines) averages one gradient per worker for each step. A push may name its
``source`` (a worker index in ``[0, reduce_batch_size)``): the open round then holds
at most one gradient per source, and it closes (one optimizer step on the mean) when
every source has pushed, not when any ``reduce_batch_size`` gradients have arrived, so
a fast worker cannot fill a round alone.

A worker that dies leaves the others waiting for its gradient. Two rules keep a round
from hanging on it, without mixing in what it computed on old parameters:

* with ``round_timeout``, the open round closes that many seconds after its first
  gradient with what it holds (a *short round*), and the sources missing from it are
  marked *absent*: later rounds do not wait for them, so the survivors go on at full
  speed instead of paying the timeout every round;
* an absent source counts again from its next push (a restarted worker's first
  gradient, or a slow one's late one). A late gradient was computed on parameters the
  server has moved past: with ``max_staleness=0`` it is dropped, never averaged into
  a newer round, and its worker pulls the newest parameters and fills its slot in the
  next round.

A source that pushes again into a round already holding its gradient (a restarted
worker whose predecessor pushed before dying) is dropped: the round keeps the first.
Pushes without a source count as before: any ``reduce_batch_size`` of them close a round.

:class:`Rounds` is state that the server changes under its own lock; :class:`GradMember`
is a worker's view of a server in its own process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class Rounds:
    """The open round: its sources, the absent ones, its deadline, and the pushes
    waiting for it to close (``(future, newer_than, accepted)``)."""

    def __init__(self, *, size: int, timeout: float | None) -> None:
        self.size, self.timeout = size, timeout
        self.members: set[int] = set()
        self.absent: set[int] = set()
        self.deadline: float | None = None
        self.waiters: list[tuple[torch.futures.Future, int, bool]] = []
        self.short = 0  # rounds that averaged fewer than `size` gradients
        self.released = False

    def check_source(self, source: Any) -> None:
        if source is None:
            return
        if not isinstance(source, int) or isinstance(source, bool) or not 0 <= source < self.size:
            raise ValueError(
                f"source must be None or an int in [0, {self.size}) (reduce_batch_size), got {source!r}"
            )

    def seen(self, source: int | None) -> None:
        """A push from ``source`` (accepted or not): it is alive, wait for it again."""
        if source is not None:
            self.absent.discard(source)

    def holds(self, source: int | None) -> bool:
        return source is not None and source in self.members

    def join(self, source: int | None, now: float) -> None:
        if source is not None:
            self.members.add(source)
        if self.deadline is None and self.timeout is not None:
            self.deadline = now + self.timeout

    def full(self, count: int) -> bool:
        return count + len(self.absent) >= self.size

    def close(self, count: int, *, expired: bool) -> list[tuple[torch.futures.Future, int, bool]]:
        """End the open round of ``count`` gradients; returns its waiters (to answer
        outside the lock). An expired round marks the sources it lacks absent."""
        if expired and self.members:
            self.absent |= set(range(self.size)) - self.members
        if 0 < count < self.size:
            self.short += 1
        self.members.clear()
        self.deadline = None
        waiters, self.waiters = self.waiters, []
        return waiters

    def reset(self) -> list[tuple[torch.futures.Future, int, bool]]:
        """Forget the open round (its gradients were dropped) and every absence."""
        self.absent.clear()
        return self.close(0, expired=False)


class GradMember:
    """The :class:`~rlpar.protocols.GradientSink` of worker ``source`` in the server's
    own process (serial mode, a hosting rank's worker): its pushes name it, and
    ``waiting``/``wait`` tell whether its round is still open, so a loop that has
    other work (a lead's evaluations) need not block on the round."""

    def __init__(self, server: Any, source: int) -> None:  # a GradServer (no import cycle)
        if server.config.mode == "reduce":
            server._rounds.check_source(source)
        self.server, self.source = server, source

    def push_gradients(self, grads: Mapping[str, Any], version: int) -> bool:
        return self.server.push_gradients(grads, version, self.source)

    def push_gradients_and_pull(self, grads: Mapping[str, Any], version: int, newer_than: int = -1):
        return self.server.push_gradients_and_pull(grads, version, newer_than, self.source)

    def push(self, state: Mapping[str, Any], version: int | None = None) -> int:
        return self.server.push(state, version)

    def pull(self, newer_than: int = -1) -> tuple[dict[str, Any], int] | None:
        return self.server.pull(newer_than)

    @property
    def version(self) -> int:
        return self.server.version

    @property
    def waiting(self) -> bool:
        return self.server.waiting(self.source)

    def wait(self, timeout: float | None = None) -> bool:
        return self.server.wait_round(self.source, timeout)
