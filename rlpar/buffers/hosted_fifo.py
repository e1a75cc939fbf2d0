"""The trajectory queue hosted in one process (a learner's) and filled by others over RPC.

``HostedQueue.host(group, name, queue)`` serves ``<name>/put``, ``<name>/wait`` and
``<name>/stats`` on ``group`` and returns the host's handle (``get``, ``put``, ``stats``, ``close``).
``HostedQueue.connect(group, name)`` returns a producer's :class:`RemoteQueue`, whose
``put`` sends without waiting for the answer, with at most ``max_in_flight`` puts
unanswered: a producer blocks once that many wait for room (back-pressure).

The put service is *deferred* (:meth:`RpcGroup.register`): a put that finds the queue
full leaves its item in line (:meth:`TrajectoryQueue.offer`) and its RPC thread goes
back to the pool at once; the answer leaves when a get makes room. A handler that
waited instead would hold one of the host's RPC threads (16 by default) per waiting
put, so 4 actors with 4 puts in flight would leave none for the host's other services
(parameters, coordinator). Answering a waiting put costs the get that makes room
little: an always-full queue moved as many unrolls as a roomy one
(``python -m experiments.bench.components.trajectory_queue``: 1.3-1.8K unrolls of 396 KB a
second, 500-700 MB/s, with 1-2 producers on a busy 2-core machine).

Waiting for room is a healthy wait, however long the consumer takes (it may wait for
other data, e.g. a peer consumer whose producer starts late), so it must not look like
a dead host to the producer's RPC timeout. Each put therefore carries a *patience*
(half the producer's RPC timeout): a put still in line after that is answered
``None`` ("still waiting") by the host's ticker thread, its item staying in line, and
the producer asks again with a small ``<name>/wait`` call, which waits the same way.
So every exchange ends well within the RPC timeout while the host answers, and a host
that died or hung still fails the producer's next exchange within it
(``PeerUnavailable``). An item is sent once: re-sending whole items while the consumer
is the bottleneck would cost what the deferred answer saves. Items in line are held by
the host, at most ``max_in_flight`` per producer.

An item is one RPC message, and TensorPipe hands a message to the service only once it
arrived whole, so a producer killed mid-send leaves no part of an item anywhere; the
queue, its other producers and their lines go on. Puts of one producer may be run by
RPC threads in any order: each carries the producer's sequence number, and the host
enqueues them in that order, so each producer's items come out in the order it put
them (puts that arrived after one lost with its dead producer are never enqueued).
Arrays travel as tensors (TensorPipe moves their bytes without pickling).
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import torch

from rlpar.buffers.fifo import Item, QueueStats, TrajectoryQueue, _check_timeout
from rlpar.buffers.shard import from_wire, to_wire

# How long the host's ticker thread outlives its last pending answer: when a line
# empties and fills again between gets, starting a thread each time would cost more
# than one that sleeps.
_IDLE_S = 10.0


class _Ticket:
    """One remote put until its producer has its outcome: ``fut``, the pending answer
    (None while the producer has been told "still waiting" and not yet asked again),
    ``outcome`` (True enqueued, False refused; None: still in line) and the deadline of
    the pending answer."""

    __slots__ = ("key", "fut", "outcome", "deadline")

    def __init__(self, key: tuple[str, int], fut: torch.futures.Future) -> None:
        self.key, self.fut = key, fut
        self.outcome: bool | None = None
        self.deadline = 0.0


class _Stream:
    """One producer's puts: the next sequence number to enqueue, and puts that arrived
    before it (run early by another RPC thread)."""

    __slots__ = ("next", "early")

    def __init__(self) -> None:
        self.next = 0
        self.early: dict[int, tuple[Item, _Ticket]] = {}


class HostedQueue:
    """The host's handle of a :class:`TrajectoryQueue` that remote producers fill."""

    def __init__(self, *, queue: TrajectoryQueue) -> None:
        self.queue = queue
        self._streams: dict[str, _Stream] = {}
        self._tickets: dict[tuple[str, int], _Ticket] = {}  # puts not yet answered for good
        self._lock = threading.Lock()  # orders each stream's offers; taken before the queue's
        # The answers pending at their deadlines (at most max_in_flight per producer),
        # and the thread that says "still waiting" when one passes: started when
        # needed, gone when the queue closes or none was pending for _IDLE_S.
        self._pending: set[_Ticket] = set()
        self._due = threading.Condition(self._lock)
        self._ticker: threading.Thread | None = None
        self._wake_at = 0.0  # when the ticker wakes next

    @classmethod
    def host(cls, group: Any, name: str, queue: TrajectoryQueue) -> HostedQueue:
        hosted = cls(queue=queue)
        group.register(f"{name}/put", hosted._put_wired, deferred=True)
        group.register(f"{name}/wait", hosted._wait_wired, deferred=True)
        group.register(f"{name}/stats", queue.stats)
        return hosted

    @staticmethod
    def connect(group: Any, name: str, *, max_in_flight: int = 4,
                timeout: float | None = None) -> RemoteQueue:
        return RemoteQueue(group=group, name=name, max_in_flight=max_in_flight, timeout=timeout)

    def put(self, item: Item, *, timeout: float | None = None) -> bool:
        """A producer in the host's own process: :meth:`TrajectoryQueue.put`."""
        return self.queue.put(item, timeout=timeout)

    def get(self, n: int = 1, *, timeout: float | None = None) -> list[Item]:
        return self.queue.get(n, timeout=timeout)

    def close(self) -> None:
        """Close the queue: every waiting and later put is answered False."""
        self.queue.close()  # answers the puts in line (outside this handle's lock)
        with self._lock:
            early = [ticket for s in self._streams.values() for _, ticket in s.early.values()]
            for stream in self._streams.values():
                stream.early.clear()
            self._pending.clear()  # every put is answered now: the ticker ends
            self._due.notify()
        for ticket in early:
            self._settle(ticket, False)

    def stats(self) -> QueueStats:
        return self.queue.stats()

    def __len__(self) -> int:
        return len(self.queue)

    # ------------------------------------------------------------------ services

    def _put_wired(self, producer: str, seq: int, item: Mapping[str, Any],
                   patience: float) -> torch.futures.Future:
        # Runs in an RPC thread; returns at once. The Future answers the producer: True
        # once the item is enqueued, False if the queue closed first, None if neither
        # happened within ``patience`` seconds (the producer then asks ``wait``).
        _check_patience(patience)
        fut: torch.futures.Future = torch.futures.Future()
        item = from_wire(item)
        ticket = _Ticket((producer, seq), fut)
        answers = []
        with self._lock:
            if self.queue.closed:  # under the lock: close() answers what is parked here
                fut.set_result(False)
                return fut
            stream = self._streams.get(producer)
            if stream is None:
                stream = self._streams[producer] = _Stream()
            if seq < stream.next or seq in stream.early:
                raise ValueError(f"{producer}: put {seq} arrived twice")
            self._tickets[ticket.key] = ticket
            if seq != stream.next:
                stream.early[seq] = (item, ticket)  # wait for the producer's earlier puts
                self._arm(ticket, patience)
                return fut
            ready = [(item, ticket)]
            stream.next += 1
            while stream.next in stream.early:
                ready.append(stream.early.pop(stream.next))
                stream.next += 1
            for each, each_ticket in ready:
                placed = self.queue.offer(each, functools.partial(self._settle, each_ticket))
                if placed is not None:
                    answers.append(self._outcome(each_ticket, placed))
            if ticket.outcome is None:  # in line: "still waiting" if it stays there
                self._arm(ticket, patience)
        for each_fut, placed in answers:  # outside the lock: answering sends a message
            if each_fut is not None:
                each_fut.set_result(placed)
        return fut

    def _wait_wired(self, producer: str, seq: int, patience: float) -> torch.futures.Future:
        # The producer asks again after "still waiting": answered like the put.
        _check_patience(patience)
        fut: torch.futures.Future = torch.futures.Future()
        with self._lock:
            ticket = self._tickets.get((producer, seq))
            if ticket is None or ticket.fut is not None:
                raise ValueError(f"{producer}: put {seq} is not waiting for an answer here")
            if ticket.outcome is None:
                ticket.fut = fut
                self._arm(ticket, patience)
                return fut
            del self._tickets[ticket.key]
        fut.set_result(ticket.outcome)
        return fut

    # ------------------------------------------------------------------ answers

    def _outcome(self, ticket: _Ticket, placed: bool) -> tuple[torch.futures.Future | None, bool]:
        # Under the lock: the put's outcome is known; the answer to send now (None: the
        # producer was told "still waiting" and gets it when it asks again).
        ticket.outcome = placed
        fut, ticket.fut = ticket.fut, None
        if fut is not None:
            del self._tickets[ticket.key]
            self._pending.discard(ticket)
        return fut, placed

    def _settle(self, ticket: _Ticket, placed: bool) -> None:
        # The queue's done callback (a get made room, or it closed): outside its lock.
        with self._lock:
            fut, _ = self._outcome(ticket, placed)
        if fut is not None:
            fut.set_result(placed)

    def _arm(self, ticket: _Ticket, patience: float) -> None:
        # Under the lock: answer "still waiting" after ``patience`` unless settled first.
        ticket.deadline = time.monotonic() + patience
        self._pending.add(ticket)
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="queue-patience", daemon=True)
            self._ticker.start()
        elif ticket.deadline < self._wake_at:
            self._due.notify()

    def _tick(self) -> None:
        idle_since = None
        while True:
            with self._lock:
                while True:  # until an answer is due, or the thread may end
                    now = time.monotonic()
                    due = [ticket for ticket in self._pending if ticket.deadline <= now]
                    if due:
                        break
                    if self._pending:
                        idle_since = None
                        self._wake_at = min(ticket.deadline for ticket in self._pending)
                    else:
                        idle_since = now if idle_since is None else idle_since
                        if self.queue.closed or now - idle_since >= _IDLE_S:
                            self._ticker = None
                            return
                        self._wake_at = idle_since + _IDLE_S
                    self._due.wait(self._wake_at - now)
                answers = []
                for ticket in due:
                    self._pending.discard(ticket)
                    answers.append(ticket.fut)
                    ticket.fut = None
            for fut in answers:  # outside the lock: answering sends a message
                fut.set_result(None)


def _check_patience(patience: float) -> None:
    if isinstance(patience, bool) or not isinstance(patience, (int, float)) or not patience > 0:
        raise ValueError(f"patience must be > 0 seconds, got {patience!r}")


class RemoteQueue:
    """A producer's handle of a hosted queue (an :class:`~rlpar.protocols.ItemSink`).

    ``put`` returns True once the item is sent; it waits (up to ``timeout``) while
    ``max_in_flight`` puts are unanswered, else returns False and counts the item in
    ``dropped``/``timeouts``. Once the host answers that its queue is closed, ``closed``
    is True and puts return False. A put waits for room at the host for as long as the
    host's consumer takes, the host answering "still waiting" every half RPC
    ``timeout`` (default the world's); a failed exchange (the host died, or did not
    answer within the RPC timeout) makes this handle raise that error from every later
    call; connect again to go on. The arrays of a put are sent from where they lie:
    leave them unchanged until :meth:`wait` returns (an unroll adder makes new arrays
    per unroll).
    """

    def __init__(self, *, group: Any, name: str, max_in_flight: int = 4,
                 timeout: float | None = None) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        self.group, self.name = group, name
        self.max_in_flight, self.timeout = max_in_flight, timeout
        # How long the host keeps an answer before it says "still waiting": half the
        # RPC timeout leaves the other half for sending the item and the answer.
        self.patience = (group.rpc_timeout if timeout is None else timeout) / 2
        # A new stream per handle: a producer restarted under the same rank name starts
        # its sequence numbers again without meeting its predecessor's.
        self.producer = f"{group.current_member}/{uuid.uuid4().hex}"
        self.sent = self.dropped = self.timeouts = 0
        self.closed = False
        self._seq = self._in_flight = 0
        self._error: BaseException | None = None
        self._cond = threading.Condition()

    def put(self, item: Item, *, timeout: float | None = None) -> bool:
        _check_timeout(timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._in_flight < self.max_in_flight
                                or self.closed or self._error is not None, timeout)
            self._raise()
            if self.closed or self._in_flight >= self.max_in_flight:
                self.dropped += 1
                self.timeouts += not self.closed
                return False
            self._in_flight += 1
            seq, self._seq = self._seq, self._seq + 1
        try:
            fut = self.group.call_async(f"{self.name}/put", self.producer, seq,
                                        to_wire(dict(item)), self.patience, timeout=self.timeout)
        except BaseException as exc:
            self._settle(None, exc)  # a gap in the sequence: this handle is done
            raise
        fut.add_done_callback(functools.partial(self._answered, seq))
        self.sent += 1
        return True

    def _answered(self, seq: int, fut: torch.futures.Future) -> None:
        try:
            placed = fut.wait()
            if placed is None:  # still in line at the host: ask again
                again = self.group.call_async(f"{self.name}/wait", self.producer, seq, self.patience,
                                              timeout=self.timeout)
                again.add_done_callback(functools.partial(self._answered, seq))
                return
        except BaseException as exc:  # noqa: B036 - raised to the producer by its next call
            self._settle(None, exc)
            return
        self._settle(placed, None)

    def _settle(self, placed: bool | None, error: BaseException | None) -> None:
        with self._cond:
            self._in_flight -= 1
            if placed is False:
                self.closed = True
                self.dropped += 1
            if error is not None and self._error is None:
                self._error = error
            self._cond.notify_all()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def wait(self, *, timeout: float | None = None) -> bool:
        """Wait until every put sent so far is answered (True), or ``timeout`` passed
        (False); raise the error of a put that failed."""
        _check_timeout(timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._in_flight == 0 or self._error is not None, timeout)
            self._raise()
            return self._in_flight == 0

    def stats(self) -> QueueStats:
        """The host queue's counters (one round trip)."""
        return self.group.call(f"{self.name}/stats", timeout=self.timeout)

    def __len__(self) -> int:
        return self.stats().depth
