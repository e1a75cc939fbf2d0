"""TensorQueue: copy and share policies, in one process and across processes."""

from __future__ import annotations

import queue

import pytest
import torch
import torch.multiprocessing

from rlpar.parallel import Process, TensorQueue


def nested(t: torch.Tensor) -> dict:
    return {"obs": t, "pair": (t + 1, [t * 2, "label"]), "n": 3}


def assert_nested_equal(got: dict, t: torch.Tensor) -> None:
    assert got["n"] == 3 and got["pair"][1][1] == "label"
    assert torch.equal(got["obs"], t)
    assert torch.equal(got["pair"][0], t + 1) and torch.equal(got["pair"][1][0], t * 2)


@pytest.mark.timeout(20)
def test_copy_policy_round_trips_a_snapshot() -> None:
    q = TensorQueue(policy="copy", start_method="forkserver")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    q.put(nested(t))
    q.put(lambda x: x + 1)  # cloudpickle: even closures travel
    t += 100  # after put: the copy must not see this
    got = q.get(timeout=5)
    assert_nested_equal(got, t - 100)
    assert not got["obs"].is_shared()
    assert q.get(timeout=5)(1) == 2
    with pytest.raises(queue.Empty):
        q.get(timeout=0.01)
    q.close()
    q.join_thread()


@pytest.mark.timeout(20)
def test_share_policy_moves_tensors_to_shared_memory() -> None:
    strategy = torch.multiprocessing.get_sharing_strategy()
    q = TensorQueue(policy="share", start_method="forkserver")
    assert torch.multiprocessing.get_sharing_strategy() == strategy  # no global change
    t = torch.zeros(4)
    q.put(nested(t))
    got = q.get(timeout=5)
    assert_nested_equal(got, t)
    assert got["obs"].is_shared() and t.is_shared()
    got["obs"][0] = 5.0  # same memory on both ends
    assert t[0].item() == 5.0
    q.close()
    q.join_thread()


@pytest.mark.timeout(30)
def test_policies_across_processes() -> None:
    # fork: the child inherits the already imported torch instead of importing it
    # again (seconds on a busy 2-core box); the queues work the same with spawn.
    shared_q = TensorQueue(policy="share", start_method="fork")
    copy_q = TensorQueue(policy="copy", start_method="fork")
    t = torch.zeros(3)

    def round_trip(shared_q: TensorQueue, copy_q: TensorQueue) -> None:
        received = shared_q.get(timeout=20)
        received["obs"].add_(1)  # in place, in shared memory
        copy_q.put({"echo": nested(received["obs"].clone())})

    child = Process(target=round_trip, args=(shared_q, copy_q), start_method="fork")
    child.start()
    try:
        shared_q.put({"obs": t})
        reply = copy_q.get(timeout=25)
    finally:
        child.join(25)
    assert torch.equal(t, torch.ones(3))  # the child's write is visible here
    assert_nested_equal(reply["echo"], torch.ones(3))
    for q in (shared_q, copy_q):
        q.close()
        q.join_thread()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="'borrow'"):
        TensorQueue(policy="borrow")
    with pytest.raises(ValueError, match="maxsize"):
        TensorQueue(policy="copy", maxsize=-1)
    with pytest.raises(ValueError, match="start_method"):
        TensorQueue(policy="copy", start_method="threads")
    q = TensorQueue(policy="copy", start_method="forkserver")
    with pytest.raises(ValueError, match="timeout"):
        q.get(timeout=-1)
    q.close()
