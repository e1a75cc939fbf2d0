"""TrajectoryQueue in one process: FIFO order, back-pressure, timeouts, close, the
drop-oldest policy, offer's callbacks, and threads that neither lose nor repeat items."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import QueueStats, TrajectoryQueue
from rlpar.errors import QueueClosed
from rlpar.protocols import ItemSink, ItemSource


def item(i: int) -> dict:
    return {"obs": np.full((2, 3), i, np.float32), "id": np.array([i])}


def ids(items) -> list[int]:
    return [int(x["id"][0]) for x in items]


def started(fn, *args) -> tuple[threading.Thread, list]:
    out: list = []

    def run():
        try:
            out.append(fn(*args))
        except Exception as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


@pytest.mark.timeout(10)
def test_items_come_out_in_the_order_they_went_in_and_are_the_same_objects():
    q = TrajectoryQueue(capacity=5)
    assert isinstance(q, ItemSink) and isinstance(q, ItemSource)
    items = [item(i) for i in range(5)]
    assert all(q.put(x) for x in items)
    assert len(q) == 5
    out = q.get(2) + q.get(3)
    assert ids(out) == [0, 1, 2, 3, 4] and all(a is b for a, b in zip(out, items, strict=True))
    assert q.stats() == QueueStats(depth=0, max_depth=5, waiting=0, put_count=5, got=5,
                                   dropped=0, timeouts=0, closed=False)


@pytest.mark.timeout(10)
def test_a_put_into_a_full_queue_blocks_until_a_get_makes_room():
    q = TrajectoryQueue(capacity=2)
    q.put(item(0)), q.put(item(1))
    thread, out = started(q.put, item(2))
    wait_until(lambda: q.stats().waiting == 1)
    assert not out and len(q) == 2  # back-pressure: the producer waits
    assert ids(q.get(1)) == [0]
    thread.join(5)
    assert out == [True] and ids(q.get(2)) == [1, 2]


@pytest.mark.timeout(10)
def test_a_put_that_times_out_returns_false_and_is_counted():
    q = TrajectoryQueue(capacity=1)
    q.put(item(0))
    assert q.put(item(1), timeout=0.05) is False
    assert q.put(item(2), timeout=0) is False
    s = q.stats()
    assert (s.dropped, s.timeouts, s.waiting, s.put_count) == (2, 2, 0, 1)
    assert ids(q.get(1)) == [0] and len(q) == 0  # the timed-out items left the line


@pytest.mark.timeout(10)
def test_get_waits_for_n_items_and_times_out_with_a_clear_error():
    q = TrajectoryQueue(capacity=4)
    q.put(item(0))
    with pytest.raises(TimeoutError, match="holds 1"):
        q.get(3, timeout=0.05)
    thread, out = started(q.get, 3)
    q.put(item(1))
    time.sleep(0.02)
    assert not out  # two items are not three
    q.put(item(2))
    thread.join(5)
    assert ids(out[0]) == [0, 1, 2]
    with pytest.raises(ValueError, match="capacity"):
        q.get(5)


@pytest.mark.timeout(10)
def test_close_wakes_every_waiter():
    full, empty = TrajectoryQueue(capacity=1), TrajectoryQueue(capacity=3)
    full.put(item(0))
    putter, put_out = started(full.put, item(1))
    empty.put(item(7))
    getter, get_out = started(empty.get, 2)
    wait_until(lambda: full.stats().waiting == 1)
    offered = []
    assert full.offer(item(2), offered.append) is None
    full.close()
    empty.close()
    putter.join(5), getter.join(5)
    assert put_out == [False] and offered == [False]
    assert isinstance(get_out[0], QueueClosed)
    assert full.put(item(3)) is False and full.offer(item(4), offered.append) is False
    assert full.stats().dropped == 4 and full.stats().closed
    assert ids(full.get(1)) == [0]  # a closed queue still hands out what it holds
    assert ids(empty.get(1)) == [7]


@pytest.mark.timeout(10)
def test_offers_wait_in_line_with_blocked_puts_and_are_answered_by_the_get():
    q = TrajectoryQueue(capacity=1)
    answers: list = []
    assert q.offer(item(0), answers.append) is True
    assert q.offer(item(1), lambda ok: answers.append(("first", ok))) is None
    putter, out = started(q.put, item(2))
    wait_until(lambda: q.stats().waiting == 2)
    assert q.offer(item(3), lambda ok: answers.append(("last", ok))) is None
    assert ids(q.get(1)) == [0] and answers == [("first", True)]  # first come, first served
    assert ids(q.get(1)) == [1]
    putter.join(5)
    assert out == [True] and ids(q.get(1)) == [2] and ids(q.get(1)) == [3]
    assert answers == [("first", True), ("last", True)]


@pytest.mark.timeout(10)
def test_drop_oldest_never_blocks_and_keeps_the_newest_items():
    q = TrajectoryQueue(capacity=3, when_full="drop_oldest")
    assert all(q.put(item(i)) for i in range(7))
    assert ids(q.get(3)) == [4, 5, 6]
    assert q.stats().dropped == 4 and q.stats().timeouts == 0


def test_bad_arguments_are_refused():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="capacity"):
            TrajectoryQueue(capacity=bad)
    with pytest.raises(ValueError, match="when_full"):
        TrajectoryQueue(capacity=1, when_full="drop_newest")
    q = TrajectoryQueue(capacity=1)
    with pytest.raises(ValueError, match="timeout"):
        q.put(item(0), timeout=-1)
    with pytest.raises(ValueError, match="n must"):
        q.get(0)


def run_threads(producers: int, per: int, capacity: int, batch: int) -> list[tuple[int, int]]:
    """``producers`` threads put ``per`` items each into a small queue while one
    consumer takes batches of ``batch``; returns (producer, seq) in the order taken."""
    q = TrajectoryQueue(capacity=capacity)
    total = producers * per

    def produce(p):
        for s in range(per):
            assert q.put({"id": np.array([p, s])}, timeout=10)

    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(producers)]
    for t in threads:
        t.start()
    taken = []
    while len(taken) < total:
        n = min(batch, total - len(taken))
        taken += [tuple(int(v) for v in x["id"]) for x in q.get(n, timeout=10)]
    for t in threads:
        t.join(5)
    assert q.stats().max_depth <= capacity and len(q) == 0
    return taken


@pytest.mark.timeout(60)
@settings(max_examples=15)
@given(producers=st.integers(1, 4), per=st.integers(0, 40), capacity=st.integers(1, 6),
       batch=st.integers(1, 6))
def test_concurrent_producers_and_a_consumer_lose_and_repeat_nothing(producers, per, capacity, batch):
    taken = run_threads(producers, per, capacity, min(batch, capacity))
    assert sorted(taken) == [(p, s) for p in range(producers) for s in range(per)]
    for p in range(producers):  # each producer's items in its own order
        assert [s for q, s in taken if q == p] == list(range(per))
