"""The hosted queue's two halves without RPC: the host's put service (puts run out of
order by RPC threads are enqueued in each producer's order; close answers every put
it holds) and the producer's handle (bounded puts in flight, timeouts, a closed
queue, a failed put) over a group that calls the host directly."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from rlpar.buffers import HostedQueue, RemoteQueue, TrajectoryQueue
from rlpar.buffers.shard import to_wire
from rlpar.errors import PeerUnavailable
from rlpar.protocols import ItemSink, ItemSource


def item(i: int) -> dict:
    return {"obs": np.full(3, i, np.float32), "id": np.array([i])}


def ids(items) -> list[int]:
    return [int(x["id"][0]) for x in items]


class DirectGroup:
    """Stands in for an RpcGroup: calls the host's services in this process; with
    ``fail`` set, every put fails with it, as a call to a dead host would."""

    current_member = "rank1"

    def __init__(self, hosted: HostedQueue) -> None:
        self.hosted = hosted
        self.fail: BaseException | None = None

    def call_async(self, key: str, *args, timeout=None) -> torch.futures.Future:
        assert key == "traj/put"
        if self.fail is not None:
            fut = torch.futures.Future()
            fut.set_exception(self.fail)
            return fut
        return self.hosted._put_wired(*args)

    def call(self, key: str, timeout=None):
        assert key == "traj/stats"
        return self.hosted.stats()


@pytest.mark.timeout(10)
def test_puts_run_out_of_order_are_enqueued_in_each_producers_order():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=8))
    assert isinstance(hosted, ItemSink) and isinstance(hosted, ItemSource)
    later = [hosted._put_wired("a", seq, to_wire(item(seq))) for seq in (2, 1)]
    other = hosted._put_wired("b", 0, to_wire(item(10)))
    assert not any(f.done() for f in later) and other.wait() is True
    first = hosted._put_wired("a", 0, to_wire(item(0)))
    assert [f.wait() for f in (first, *later)] == [True, True, True]
    assert ids(hosted.get(4)) == [10, 0, 1, 2]
    with pytest.raises(ValueError, match="twice"):
        hosted._put_wired("a", 1, to_wire(item(1)))


@pytest.mark.timeout(10)
def test_close_answers_puts_waiting_for_room_or_for_an_earlier_put():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    assert hosted._put_wired("a", 0, to_wire(item(0))).wait() is True
    waits_for_room = hosted._put_wired("a", 1, to_wire(item(1)))
    waits_for_seq = hosted._put_wired("b", 1, to_wire(item(2)))
    assert not waits_for_room.done() and not waits_for_seq.done()
    hosted.close()
    assert waits_for_room.wait() is False and waits_for_seq.wait() is False
    assert hosted._put_wired("b", 0, to_wire(item(3))).wait() is False
    assert ids(hosted.get(1)) == [0]


@pytest.mark.timeout(10)
def test_a_producer_holds_at_most_max_in_flight_unanswered_puts():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    remote = RemoteQueue(group=DirectGroup(hosted), name="traj", max_in_flight=2)
    assert isinstance(remote, ItemSink)
    assert remote.put(item(0)) is True  # enqueued at once: answered
    assert remote.put(item(1)) and remote.put(item(2))  # both wait for room
    assert remote.put(item(3), timeout=0.05) is False  # two unanswered: back-pressure
    assert (remote.sent, remote.dropped, remote.timeouts) == (3, 1, 1)
    assert remote.wait(timeout=0.01) is False
    blocked = threading.Thread(target=remote.put, args=(item(4),), daemon=True)
    blocked.start()
    assert ids(hosted.get(1)) == [0]  # room for 1: answers put 1, which frees put 4
    blocked.join(5)
    assert not blocked.is_alive() and len(remote) == 1
    assert ids(hosted.get(1)) == [1] and ids(hosted.get(1)) == [2] and ids(hosted.get(1)) == [4]
    assert remote.wait(timeout=5) is True


@pytest.mark.timeout(10)
def test_a_closed_queue_refuses_and_a_failed_put_is_raised_by_every_later_call():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    group = DirectGroup(hosted)
    remote = RemoteQueue(group=group, name="traj", max_in_flight=2)
    remote.put(item(0)), remote.put(item(1))
    hosted.close()
    assert remote.closed and remote.put(item(2)) is False and remote.dropped == 2

    failing = RemoteQueue(group=group, name="traj")
    group.fail = PeerUnavailable("host gone")
    assert failing.put(item(3)) is True  # sent; the failure comes back later
    for call in (lambda: failing.put(item(4)), failing.wait):
        with pytest.raises(PeerUnavailable, match="host gone"):
            call()


def test_bad_producer_arguments_are_refused():
    group = DirectGroup(HostedQueue(queue=TrajectoryQueue(capacity=1)))
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="max_in_flight"):
            RemoteQueue(group=group, name="traj", max_in_flight=bad)
    with pytest.raises(ValueError, match="timeout"):
        RemoteQueue(group=group, name="traj", timeout=0)
