"""The hosted queue's two halves without RPC: the host's put service (puts run out of
order by RPC threads are enqueued in each producer's order; close answers every put
it holds) and the producer's handle (bounded puts in flight, timeouts, a closed
queue, a failed put, a put that waits for room longer than the RPC timeout while its
host answers, one whose host stops answering) over a group that calls the host
directly and times calls out as RPC does."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from rlpar.buffers import HostedQueue, RemoteQueue, TrajectoryQueue
from rlpar.buffers.shard import to_wire
from rlpar.errors import PeerUnavailable
from rlpar.protocols import ItemSink, ItemSource

PATIENCE = 60.0  # seconds the host keeps a put's answer before it says "still waiting"


def item(i: int) -> dict:
    return {"obs": np.full(3, i, np.float32), "id": np.array([i])}


def ids(items) -> list[int]:
    return [int(x["id"][0]) for x in items]


class DirectGroup:
    """Stands in for an RpcGroup: calls the host's services in this process, failing a
    call its host did not answer within the RPC timeout with PeerUnavailable, as
    torch's RPC does; with ``fail`` set, every call fails with it at once, as a call to
    a dead host would; with ``hung``, the host answers no call (a frozen process)."""

    current_member = "rank1"

    def __init__(self, hosted: HostedQueue, *, rpc_timeout: float = 60.0) -> None:
        self.hosted, self.rpc_timeout = hosted, rpc_timeout
        self.fail: BaseException | None = None
        self.hung = False
        self.calls: list[str] = []

    def call_async(self, key: str, *args, timeout=None) -> torch.futures.Future:
        assert key in ("traj/put", "traj/wait")
        self.calls.append(key)
        out = torch.futures.Future()
        if self.fail is not None:
            out.set_exception(self.fail)
            return out
        answered = threading.Lock()

        def answer(value=None, error=None):
            if answered.acquire(blocking=False):  # the first of the answer and the timeout
                timer.cancel()
                out.set_result(value) if error is None else out.set_exception(error)

        timer = threading.Timer(self.rpc_timeout if timeout is None else timeout, answer,
                                kwargs={"error": PeerUnavailable(f"call {key!r} did not answer in time")})
        timer.daemon = True
        timer.start()
        if not self.hung:
            service = self.hosted._put_wired if key == "traj/put" else self.hosted._wait_wired
            service(*args).add_done_callback(lambda fut: answer(fut.value()))
        return out

    def call(self, key: str, timeout=None):
        assert key == "traj/stats"
        return self.hosted.stats()


@pytest.mark.timeout(10)
def test_puts_run_out_of_order_are_enqueued_in_each_producers_order():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=8))
    assert isinstance(hosted, ItemSink) and isinstance(hosted, ItemSource)
    later = [hosted._put_wired("a", seq, to_wire(item(seq)), PATIENCE) for seq in (2, 1)]
    other = hosted._put_wired("b", 0, to_wire(item(10)), PATIENCE)
    assert not any(f.done() for f in later) and other.wait() is True
    first = hosted._put_wired("a", 0, to_wire(item(0)), PATIENCE)
    assert [f.wait() for f in (first, *later)] == [True, True, True]
    assert ids(hosted.get(4)) == [10, 0, 1, 2]
    with pytest.raises(ValueError, match="twice"):
        hosted._put_wired("a", 1, to_wire(item(1)), PATIENCE)


@pytest.mark.timeout(10)
def test_close_answers_puts_waiting_for_room_or_for_an_earlier_put():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    assert hosted._put_wired("a", 0, to_wire(item(0)), PATIENCE).wait() is True
    waits_for_room = hosted._put_wired("a", 1, to_wire(item(1)), PATIENCE)
    waits_for_seq = hosted._put_wired("b", 1, to_wire(item(2)), PATIENCE)
    assert not waits_for_room.done() and not waits_for_seq.done()
    hosted.close()
    assert waits_for_room.wait() is False and waits_for_seq.wait() is False
    assert hosted._put_wired("b", 0, to_wire(item(3)), PATIENCE).wait() is False
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


@pytest.mark.timeout(10)
def test_a_put_in_line_is_told_still_waiting_after_its_patience_and_asks_again():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    assert hosted._put_wired("a", 0, to_wire(item(0)), 0.05).wait() is True
    in_line = hosted._put_wired("a", 1, to_wire(item(1)), 0.05)
    early = hosted._put_wired("a", 3, to_wire(item(3)), 0.05)  # waits for put 2
    assert in_line.wait() is None and early.wait() is None  # "still waiting"
    assert hosted.stats().waiting == 1  # the item stays in line
    asked = hosted._wait_wired("a", 1, PATIENCE)
    assert not asked.done()
    assert ids(hosted.get(1)) == [0] and asked.wait() is True  # answered when enqueued
    with pytest.raises(ValueError, match="not waiting"):
        hosted._wait_wired("a", 1, PATIENCE)  # answered for good
    # Enqueued between "still waiting" and the next ask: that ask is answered at once.
    after = hosted._put_wired("a", 2, to_wire(item(2)), 0.05)  # put 3 follows it in line
    assert after.wait() is None and ids(hosted.get(1)) == [1]
    assert hosted._wait_wired("a", 2, PATIENCE).wait() is True
    waits = hosted._wait_wired("a", 3, PATIENCE)
    ticker = hosted._ticker
    hosted.close()
    assert waits.wait() is False and hosted.stats().dropped == 1 and not hosted._tickets
    ticker.join(5)
    assert not ticker.is_alive()  # nothing left to answer: the host's thread is gone
    with pytest.raises(ValueError, match="patience"):
        hosted._put_wired("b", 0, to_wire(item(4)), 0)


@pytest.mark.timeout(20)
def test_a_put_waits_for_room_longer_than_the_rpc_timeout_while_the_host_answers():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    group = DirectGroup(hosted, rpc_timeout=0.5)
    remote = RemoteQueue(group=group, name="traj", max_in_flight=2)
    assert remote.put(item(0)) and remote.put(item(1))  # the second waits for room
    time.sleep(1.5)  # three RPC timeouts: a healthy wait, not a dead host
    assert remote.wait(timeout=0) is False  # still waiting, and no error
    assert group.calls.count("traj/wait") >= 2  # told "still waiting", it asked again
    assert ids(hosted.get(1)) == [0]
    assert remote.wait(timeout=5) is True and ids(hosted.get(1)) == [1]
    held = hosted.stats()
    assert (held.put_count, held.got, held.dropped, held.timeouts) == (2, 2, 0, 0)
    assert (remote.sent, remote.dropped, remote.timeouts, remote.closed) == (2, 0, 0, False)
    assert not hosted._tickets
    assert remote.patience == 0.25  # half the RPC timeout: the other half for the transfers


@pytest.mark.timeout(20)
def test_a_waiting_put_still_fails_within_the_rpc_timeout_once_its_host_stops_answering():
    hosted = HostedQueue(queue=TrajectoryQueue(capacity=1))
    group = DirectGroup(hosted, rpc_timeout=0.5)
    remote = RemoteQueue(group=group, name="traj")
    assert remote.put(item(0)) and remote.put(item(1))
    deadline = time.monotonic() + 5
    while "traj/wait" not in group.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert remote.wait(timeout=0) is False  # told "still waiting" at least once, no error
    group.hung = True  # a frozen host: no call is answered
    with pytest.raises(PeerUnavailable, match="did not answer in time"):
        remote.wait(timeout=10)
    with pytest.raises(PeerUnavailable):
        remote.put(item(2))


def test_bad_producer_arguments_are_refused():
    group = DirectGroup(HostedQueue(queue=TrajectoryQueue(capacity=1)))
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="max_in_flight"):
            RemoteQueue(group=group, name="traj", max_in_flight=bad)
    with pytest.raises(ValueError, match="timeout"):
        RemoteQueue(group=group, name="traj", timeout=0)
