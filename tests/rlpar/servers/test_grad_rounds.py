"""Reduce rounds with named sources: one gradient per worker and step, a round that
closes without a dead worker, waits answered when the round closes."""

import time

import pytest
import torch
from torch import nn

from rlpar.protocols import GradientSink
from rlpar.servers import GradServer

WAIT_S = 10.0  # generous bound for a waiter that must be answered (never asserted as speed)


class Vec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))


def server(**kwargs) -> GradServer:
    kwargs = {"mode": "reduce", "reduce_batch_size": 2, "max_staleness": 0, **kwargs}
    return GradServer(model=Vec(), optimizer_factory=lambda p: torch.optim.SGD(p, lr=1.0), **kwargs)


def g(*values):
    return {"w": torch.tensor(values, dtype=torch.float32)}


def test_a_round_takes_one_gradient_per_source_and_steps_once():
    srv = server()
    assert srv.push_gradients(g(2, 0, 0), 0, source=0)
    # Source 0 again before source 1: not a second share of the round.
    assert not srv.push_gradients(g(100, 0, 0), 0, source=0)
    assert srv.version == 0 and srv.waiting(0) and not srv.waiting(1)
    assert srv.push_gradients(g(0, 4, 0), 0, source=1)
    state, version = srv.pull()
    assert version == 1 and torch.equal(state["w"], torch.tensor([-1.0, -2.0, 0.0]))
    m = srv.metrics()
    assert (m["steps"], m["applied"], m["dropped"], m["short_rounds"], m["absent"]) == (1, 2, 1, 0, 0)
    assert not srv.waiting(0)


def test_a_gradient_of_an_older_version_is_never_mixed_into_a_round():
    srv = server()
    srv.push_gradients(g(1, 0, 0), 0, source=0)
    srv.push_gradients(g(1, 0, 0), 0, source=1)  # version 1
    assert not srv.push_gradients(g(50, 0, 0), 0, source=0)  # computed on version 0
    assert srv.metrics()["pending"] == 0 and not srv.waiting(0)


def test_a_wait_is_answered_when_the_round_closes():
    srv = server()
    first = srv.push_gradients_and_wait(g(2, 0, 0), 0, newer_than=0, source=0)
    assert not first.done()
    second = srv.push_gradients_and_wait(g(0, 2, 0), 0, newer_than=0, source=1)
    for fut in (first, second):
        accepted, (state, version) = fut.wait()
        assert accepted and version == 1 and torch.equal(state["w"], torch.tensor([-1.0, -1.0, 0.0]))
    # A dropped gradient waits for nothing: the newest parameters come back at once.
    stale = srv.push_gradients_and_wait(g(1, 1, 1), 0, newer_than=0, source=0)
    assert stale.done() and stale.wait()[0] is False and stale.wait()[1][1] == 1


def test_a_round_without_a_dead_source_closes_at_its_deadline():
    srv = server(round_timeout=0.05)
    fut = srv.push_gradients_and_wait(g(2, 0, 0), 0, newer_than=0, source=0)
    accepted, (state, version) = fut.wait()  # answered by the server's round watcher
    assert accepted and version == 1 and torch.equal(state["w"], torch.tensor([-2.0, 0.0, 0.0]))
    m = srv.metrics()
    assert (m["short_rounds"], m["absent"]) == (1, 1)


def test_an_expired_round_stops_waiting_for_the_missing_source_until_it_pushes_again():
    srv = server()
    srv.push_gradients(g(2, 0, 0), 0, source=0)
    srv.expire_round()  # what the deadline does (deterministic here)
    m = srv.metrics()
    assert (m["version"], m["short_rounds"], m["absent"]) == (1, 1, 1)
    # Source 1 is absent: source 0 alone closes the next round, at once.
    assert srv.push_gradients(g(1, 0, 0), 1, source=0) and srv.version == 2
    # Source 1 comes back (a restarted worker) with a gradient of an old version:
    # dropped, and the next round waits for it again.
    assert not srv.push_gradients(g(9, 9, 9), 0, source=1)
    assert srv.metrics()["absent"] == 0
    srv.push_gradients(g(1, 0, 0), 2, source=0)
    assert srv.version == 2 and srv.waiting(0)
    srv.push_gradients(g(1, 0, 0), 2, source=1)
    assert srv.version == 3 and srv.metrics()["short_rounds"] == 2  # the two rounds of 1


def test_member_views_and_release():
    srv = server()
    zero, one = srv.member(0), srv.member(1)
    assert isinstance(zero, GradientSink)
    accepted, pulled = zero.push_gradients_and_pull(g(1, 1, 1), 0, newer_than=0)
    assert accepted and pulled is None and zero.waiting and not zero.wait(timeout=0.01)
    waiting = srv.push_gradients_and_wait(g(1, 1, 1), 0, newer_than=0, source=0)  # a duplicate
    assert not waiting.done()
    srv.release()  # the job ends: nobody waits for the round any more
    assert waiting.wait() == (False, None) and srv.version == 0
    assert srv.push_gradients_and_wait(g(1, 1, 1), 0, source=0).done()
    one.push_gradients(g(3, 3, 3), 0)  # the open round still closes when full
    assert one.version == 1 and zero.wait(timeout=WAIT_S)


def test_checkpoints_keep_the_short_rounds_and_forget_the_open_round():
    srv = server(round_timeout=0.05)
    srv.push_gradients_and_wait(g(1, 0, 0), 0, source=0).wait()
    srv.push_gradients(g(1, 0, 0), 1, source=0)
    state = srv.state_dict()
    other = server()
    other.push_gradients(g(5, 5, 5), 0, source=1)
    other.load_state_dict(state)
    m = other.metrics()
    assert (m["version"], m["short_rounds"], m["pending"], m["absent"]) == (2, 2, 0, 0)
    del state["counters"]["short_rounds"]  # a checkpoint from before rounds had sources
    other.load_state_dict(state)
    assert other.metrics()["short_rounds"] == 0


def test_invalid_sources_and_timeouts():
    srv = server()
    for bad in (2, -1, "0", True):
        with pytest.raises(ValueError, match="source"):
            srv.push_gradients(g(1, 1, 1), 0, source=bad)
    with pytest.raises(ValueError, match="round_timeout"):
        server(mode="async", reduce_batch_size=1, round_timeout=1.0)
    with pytest.raises(ValueError, match="round_timeout"):
        server(round_timeout=0)


def test_one_watcher_thread_serves_many_rounds():
    srv = server(round_timeout=30.0)
    srv.push_gradients(g(1, 0, 0), 0, source=0)
    first = srv._watcher  # started by the first round with a deadline
    srv.push_gradients(g(1, 0, 0), 0, source=1)
    for v in range(1, 20):
        time.sleep(0.01)  # room for the watcher to see no open round between two
        srv.push_gradients(g(1, 0, 0), v, source=0)
        srv.push_gradients(g(1, 0, 0), v, source=1)
    # Not a thread per round: the same one, still waiting for the next deadline.
    assert srv.version == 20 and srv._watcher is first and first.is_alive()
