"""A bounded FIFO of items (each a mapping of arrays, e.g. one unroll of an actor):
the trajectory queue between actors and a learner (Espeholt et al. 2018, IMPALA).

``put`` blocks while the queue is full: back-pressure slows producers to the rate the
consumer takes items, as IMPALA's actors block on a full queue. Items are made with
the producers' current parameters and grow stale as those move on, so their age
matters: a put that waits ``timeout`` gives up (False, counted), and
``when_full="drop_oldest"`` never blocks, replacing the oldest item instead (counted
in ``dropped``; actor time is wasted instead of data going stale behind a blocked
actor). Blocking is the default because nothing is lost and an item's age stays
bounded: it waits behind at most ``capacity`` items plus one per blocked producer.

``get(n)`` blocks until ``n`` items are there and takes them at once (a consumer never
holds part of a batch while another waits), raising ``TimeoutError`` after
``timeout`` and :class:`~rlpar.errors.QueueClosed` once the queue is closed and holds
fewer than ``n``. Waiting happens on conditions, never while the lock is held, so
puts go on while a get waits. ``close()`` wakes every waiter.

Producers waiting for room are served first come, first served, whether they are
threads blocked in ``put`` or callbacks left by ``offer`` (which never blocks: the
hosted twin answers remote puts with it, so no RPC thread waits for room). The queue
keeps the items themselves, not copies, and has no state to checkpoint: items made
with old parameters are of no use to a restarted consumer.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rlpar.errors import QueueClosed

log = logging.getLogger(__name__)

Item = Mapping[str, Any]
Done = Callable[[bool], None]


@dataclass(frozen=True)
class QueueStats:
    """Counters for a job's curves. ``put_count``: items enqueued; ``got``: items taken;
    ``dropped``: items not kept (timed out, refused when closed, or evicted by
    ``drop_oldest``), of which ``timeouts`` timed out; ``waiting``: producers waiting
    for room now; ``max_depth``: the most items held at once."""

    depth: int
    max_depth: int
    waiting: int
    put_count: int
    got: int
    dropped: int
    timeouts: int
    closed: bool


class _Waiter:
    __slots__ = ("item", "done", "admitted")

    def __init__(self, item: Item, done: Done | None) -> None:
        self.item, self.done = item, done
        self.admitted: bool | None = None  # None: still waiting


class TrajectoryQueue:
    """Bounded, thread-safe FIFO of items; see the module docstring."""

    def __init__(self, *, capacity: int, when_full: Literal["block", "drop_oldest"] = "block") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        if when_full not in ("block", "drop_oldest"):
            raise ValueError(f"when_full must be 'block' or 'drop_oldest', got {when_full!r}")
        self.capacity, self.when_full = capacity, when_full
        self.put_count = self.got = self.dropped = self.timeouts = self.max_depth = 0
        self._items: deque[Item] = deque()
        self._waiting: deque[_Waiter] = deque()
        self._closed = False
        lock = threading.Lock()
        self._has_items = threading.Condition(lock)  # getters wait here
        self._admitted = threading.Condition(lock)  # blocked putters wait here

    # ------------------------------------------------------------------ producers

    def put(self, item: Item, *, timeout: float | None = None) -> bool:
        """Enqueue ``item``, waiting while the queue is full (forever with ``timeout``
        None). False, and the item counted as dropped, if it timed out or the queue is
        closed."""
        _check_timeout(timeout)
        with self._admitted:
            placed = self._place(item, None)
            if placed is not None:
                return placed
            waiter = self._waiting[-1]
            self._admitted.wait_for(lambda: waiter.admitted is not None, timeout)
            if waiter.admitted is None:  # timed out: leave the line
                self._waiting.remove(waiter)
                self.dropped += 1
                self.timeouts += 1
                return False
            return waiter.admitted

    def offer(self, item: Item, done: Done) -> bool | None:
        """Enqueue ``item`` without waiting. True: enqueued now; False: refused (closed);
        None: it waits for room in line with blocked puts, and ``done(True)`` is called
        once it is enqueued (from the thread of the get that made room) or
        ``done(False)`` if the queue closes first. ``done`` runs outside the lock."""
        with self._admitted:
            return self._place(item, done)

    def _place(self, item: Item, done: Done | None) -> bool | None:
        # Under the lock. None: a waiter was appended to the line.
        if self._closed:
            self.dropped += 1
            return False
        if len(self._items) >= self.capacity and self.when_full == "drop_oldest":
            self._items.popleft()
            self.dropped += 1
        elif self._waiting or len(self._items) >= self.capacity:
            self._waiting.append(_Waiter(item, done))
            return None
        self._append(item)
        return True

    def _append(self, item: Item) -> None:
        self._items.append(item)
        self.put_count += 1
        self.max_depth = max(self.max_depth, len(self._items))
        self._has_items.notify_all()

    # ------------------------------------------------------------------ consumers

    def get(self, n: int = 1, *, timeout: float | None = None) -> list[Item]:
        """The ``n`` oldest items, waiting until there are ``n`` (forever with
        ``timeout`` None). TimeoutError after ``timeout``; QueueClosed once closed with
        fewer than ``n`` left (a closed queue still hands out what it holds)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.capacity:
            raise ValueError(f"n must be an int in 1..capacity={self.capacity}, got {n!r}")
        _check_timeout(timeout)
        with self._has_items:
            self._has_items.wait_for(lambda: len(self._items) >= n or self._closed, timeout)
            if len(self._items) < n:
                if self._closed:
                    raise QueueClosed(f"the queue is closed and holds {len(self._items)} < {n} items")
                raise TimeoutError(f"{n} items were not there within {timeout} s "
                                   f"(the queue holds {len(self._items)})")
            out = [self._items.popleft() for _ in range(n)]
            self.got += n
            callbacks = self._admit()
        _call(callbacks, True)
        return out

    def _admit(self) -> list[Done]:
        # Under the lock: move waiters into the room a get made, oldest first.
        callbacks = []
        while self._waiting and len(self._items) < self.capacity:
            waiter = self._waiting.popleft()
            self._append(waiter.item)
            waiter.admitted = True
            if waiter.done is not None:
                callbacks.append(waiter.done)
        self._admitted.notify_all()
        return callbacks

    # ------------------------------------------------------------------ state

    def close(self) -> None:
        """Refuse every later put; waiting puts return False (their items dropped) and
        waiting gets take what is there or raise QueueClosed. Idempotent."""
        with self._admitted:
            self._closed = True
            callbacks = []
            for waiter in self._waiting:
                waiter.admitted = False
                if waiter.done is not None:
                    callbacks.append(waiter.done)
            self.dropped += len(self._waiting)
            self._waiting.clear()
            self._admitted.notify_all()
            self._has_items.notify_all()
        _call(callbacks, False)

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> QueueStats:
        with self._admitted:
            return QueueStats(len(self._items), self.max_depth, len(self._waiting),
                              self.put_count, self.got, self.dropped, self.timeouts, self._closed)

    def __len__(self) -> int:
        return len(self._items)


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout!r}")


def _call(callbacks: list[Done], value: bool) -> None:
    # Outside the lock: a callback may answer an RPC. One that fails must not keep the
    # others (or the get that made room) from going on.
    for done in callbacks:
        try:
            done(value)
        except Exception:
            log.exception("a queue's done callback failed")
