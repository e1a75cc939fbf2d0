"""The hosted trajectory queue across 3 real ranks (TensorPipe RPC on loopback): items
arrive whole and in each producer's order, back-pressure holds producers without
holding the host's RPC threads, a put waits for room longer than its RPC timeout while
its host answers and fails soon once its host freezes, and a producer SIGKILLed
mid-send leaves only whole items while the other producer goes on. One world for every check: starting torch
ranks costs seconds here."""

from __future__ import annotations

import os
import pickle
import secrets
import subprocess
import sys

import cloudpickle
import fifo_programs as programs
import pytest

from rlpar.distributed import free_port


@pytest.fixture(scope="module")
def world_results(tmp_path_factory):
    # The ranks are forked by launch's helper but not supervised by launch, which
    # would end the world as soon as the killed rank dies.
    tmp = tmp_path_factory.mktemp("hosted_fifo")
    payload = tmp / "entry.pkl"
    with open(payload, "wb") as f:
        pickle.dump(list(sys.path), f)
        cloudpickle.dump((programs.hosted_queue_world, (10.0,)), f)
    env = dict(os.environ, WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1",
               RLPAR_RUN_SECRET=secrets.token_hex(16))  # what launch() would give them
    zygote = subprocess.Popen([sys.executable, "-m", "rlpar.distributed._zygote", str(payload),
                               str(tmp), "3", "torch"], env=env)
    try:
        zygote.wait(timeout=60)
    finally:
        if zygote.poll() is None:
            zygote.terminate()  # kills and reaps the ranks
            zygote.wait()
    codes = [int((tmp / f"exit{rank}").read_text().split()[0]) for rank in range(3)]
    results = []
    for rank in (0, 1):
        with open(tmp / f"result{rank}.pkl", "rb") as f:
            status, value = pickle.load(f)
        assert status == "ok", value
        results.append(value)
    return codes, results


@pytest.mark.timeout(70)
def test_items_arrive_whole_and_in_each_producers_order(world_results):
    _, (host, producer) = world_results
    taken = host["ordered"]
    assert sorted(taken) == [(p, s) for p in (1, 2) for s in range(programs.PER)]
    for p in (1, 2):
        assert [s for q, s in taken if q == p] == list(range(programs.PER))
    assert host["ordered_whole"]
    assert 0 <= producer["depth_seen"] <= programs.CAPACITY  # len() of the remote handle


@pytest.mark.timeout(70)
def test_a_full_queue_holds_producers_back_without_holding_rpc_threads(world_results):
    _, (host, _) = world_results
    assert host["full"], "the producers' puts did not all wait for room"
    held = host["held"]
    # Each producer's unanswered puts wait for room: nothing more was sent, nothing lost.
    assert (held.depth, held.waiting) == (programs.CAPACITY, 2 * programs.IN_FLIGHT)
    assert (held.put_count, held.got, held.dropped) == (programs.CAPACITY + 1, 1, 0)
    # More puts waited than the host has RPC threads, and a service still answered.
    assert held.waiting > programs.THREADS and host["ping"] == 2


@pytest.mark.timeout(70)
def test_a_put_waits_for_room_past_its_rpc_timeout_and_fails_soon_once_its_host_freezes(world_results):
    _, (host, _) = world_results
    # Rank 2's put waited at the full queue for 3 of its 1 s RPC timeouts, then went in.
    assert host["slow_producer"] == "True 0 0" and host["slow_ids"] == [0, 1]
    assert host["slow_held"] >= 3 * programs.SHORT
    # Rank 0's put, told "still waiting" by rank 1 until rank 1 froze, failed then.
    assert host["frozen_failed"] == "PeerUnavailable", host["frozen_failed"]
    assert host["frozen_failed_after"] < 10.0  # the wait's own timeout: bounded by the RPC's


@pytest.mark.timeout(70)
def test_a_producer_killed_mid_send_leaves_whole_items_and_the_other_goes_on(world_results):
    codes, (host, producer) = world_results
    assert codes == [0, 0, -9]
    seen = host["seen"]
    assert host["killed_whole"] and host["big"] == {programs.BIG}
    # Each producer's items: a gapless prefix of what it sent, in order.
    assert seen[2] == list(range(len(seen[2]))) and len(seen[2]) >= 3
    assert seen[1] == list(range(len(seen[1]))) and len(seen[1]) >= 20
    # Closing answered rank 1's waiting puts False; its later puts are refused.
    assert host["bye"] and producer["closed"] and producer["refused"] is False
    assert producer["sent"] >= len(seen[1]) and producer["dropped"] >= 1
    assert host["stats"].closed and host["stats"].max_depth <= programs.CAPACITY
