"""The trajectory queue hosted in one process (a learner's) and filled by others over RPC.

``HostedQueue.host(group, name, queue)`` serves ``<name>/put`` and ``<name>/stats`` on
``group`` and returns the host's handle (``get``, ``put``, ``stats``, ``close``).
``HostedQueue.connect(group, name)`` returns a producer's :class:`RemoteQueue`, whose
``put`` sends without waiting for the answer, with at most ``max_in_flight`` puts
unanswered: a producer blocks once that many wait for room (back-pressure).

The put service is *deferred* (:meth:`RpcGroup.register`): a put that finds the queue
full leaves its item in line (:meth:`TrajectoryQueue.offer`) and its RPC thread goes
back to the pool at once; the answer leaves when a get makes room. The alternatives
were worse: a handler that waits holds one of the host's RPC threads (16 by default)
per waiting put, so 4 actors with 4 puts in flight would leave none for the host's
other services (parameters, coordinator); a bounded wait then "retry" makes producers
send whole items again and again while the consumer is the bottleneck. The costs here:
items in line are held by the host, at most ``max_in_flight`` per producer, and a put
that waits longer than the producer's RPC timeout fails there (a consumer that takes
nothing for that long is taken for hung). Answering a waiting put costs the get that
makes room little: an always-full queue moved as many unrolls as a roomy one
(``python -m experiments.bench.components.trajectory_queue``: 1.3-1.8K unrolls of 396 KB a
second, 500-700 MB/s, with 1-2 producers on a busy 2-core machine).

An item is one RPC message, and TensorPipe hands a message to the service only once it
arrived whole, so a producer killed mid-send leaves no part of an item anywhere; the
queue, its other producers and their lines go on. Puts of one producer may be run by
RPC threads in any order: each carries the producer's sequence number, and the host
enqueues them in that order, so each producer's items come out in the order it put
them (puts that arrived after one lost with its dead producer are never enqueued).
Arrays travel as tensors (TensorPipe moves their bytes without pickling).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

import torch

from rlpar.buffers.fifo import Item, QueueStats, TrajectoryQueue, _check_timeout
from rlpar.buffers.shard import from_wire, to_wire


class _Stream:
    """One producer's puts: the next sequence number to enqueue, and puts that arrived
    before it (run early by another RPC thread)."""

    __slots__ = ("next", "early")

    def __init__(self) -> None:
        self.next = 0
        self.early: dict[int, tuple[Item, torch.futures.Future]] = {}


class HostedQueue:
    """The host's handle of a :class:`TrajectoryQueue` that remote producers fill."""

    def __init__(self, *, queue: TrajectoryQueue) -> None:
        self.queue = queue
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()  # orders each stream's offers; taken before the queue's

    @classmethod
    def host(cls, group: Any, name: str, queue: TrajectoryQueue) -> HostedQueue:
        hosted = cls(queue=queue)
        group.register(f"{name}/put", hosted._put_wired, deferred=True)
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
        self.queue.close()
        with self._lock:
            early = [fut for s in self._streams.values() for _, fut in s.early.values()]
            for stream in self._streams.values():
                stream.early.clear()
        for fut in early:
            fut.set_result(False)

    def stats(self) -> QueueStats:
        return self.queue.stats()

    def __len__(self) -> int:
        return len(self.queue)

    def _put_wired(self, producer: str, seq: int, item: Mapping[str, Any]) -> torch.futures.Future:
        # Runs in an RPC thread; returns at once. The Future answers the producer: True
        # once the item is enqueued, False if the queue closed first.
        fut: torch.futures.Future = torch.futures.Future()
        item = from_wire(item)
        answers = []
        with self._lock:
            if self.queue.closed:  # under the lock: close() answers what is parked here
                fut.set_result(False)
                return fut
            stream = self._streams.get(producer)
            if stream is None:
                stream = self._streams[producer] = _Stream()
            if seq != stream.next:
                if seq < stream.next or seq in stream.early:
                    raise ValueError(f"{producer}: put {seq} arrived twice")
                stream.early[seq] = (item, fut)  # wait for the producer's earlier puts
                return fut
            ready = [(item, fut)]
            stream.next += 1
            while stream.next in stream.early:
                ready.append(stream.early.pop(stream.next))
                stream.next += 1
            for each, each_fut in ready:
                placed = self.queue.offer(each, each_fut.set_result)
                if placed is not None:
                    answers.append((each_fut, placed))
        for each_fut, placed in answers:  # outside the lock: answering sends a message
            each_fut.set_result(placed)
        return fut


class RemoteQueue:
    """A producer's handle of a hosted queue (an :class:`~rlpar.protocols.ItemSink`).

    ``put`` returns True once the item is sent; it waits (up to ``timeout``) while
    ``max_in_flight`` puts are unanswered, else returns False and counts the item in
    ``dropped``/``timeouts``. Once the host answers that its queue is closed, ``closed``
    is True and puts return False. A failed put (the host died, or did not answer within
    the RPC ``timeout``, default the world's: the consumer stopped taking items for that
    long) makes this handle raise that error from every later call; connect again to go
    on. The arrays of a put are sent from where they lie: leave them unchanged until
    :meth:`wait` returns (an unroll adder makes new arrays per unroll).
    """

    def __init__(self, *, group: Any, name: str, max_in_flight: int = 4,
                 timeout: float | None = None) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        self.group, self.name = group, name
        self.max_in_flight, self.timeout = max_in_flight, timeout
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
                                        to_wire(dict(item)), timeout=self.timeout)
        except BaseException as exc:
            self._settle(None, exc)  # a gap in the sequence: this handle is done
            raise
        fut.add_done_callback(self._settled)
        self.sent += 1
        return True

    def _settled(self, fut: torch.futures.Future) -> None:
        try:
            self._settle(fut.wait(), None)
        except BaseException as exc:  # noqa: B036 - raised to the producer by its next call
            self._settle(None, exc)

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
