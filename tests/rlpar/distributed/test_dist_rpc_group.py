"""RpcGroup across launched ranks: services, errors, pickled handles, pairs, barriers."""

from __future__ import annotations

import dist_programs as programs
import pytest
import torch
from dist_group_programs import TOL

from rlpar.distributed import launch


@pytest.fixture(scope="module")
def three_ranks():
    # One launch for many checks: starting a torch process costs seconds here.
    return launch(programs.rpc_roundtrips, nprocs=3, timeout=100)


@pytest.mark.timeout(110)
def test_services_errors_pickling_pairs_and_barriers_across_three_ranks(three_ranks):
    r0, r1, r2 = results = three_ranks
    assert all(r["current_world"] for r in results)
    assert [r["name"] for r in results] == ["rank0", "rank1", "rank2"]
    assert r0["names"] == r1["names"] == r2["names"] == ["rank0", "rank1", "rank2"]
    assert r0["call"] == 49
    assert r0["kwargs"] == [9.0, 9.0]
    assert r0["async"] == [i * i for i in range(20)]
    message, host, remote_tb = r0["remote"]
    assert host == "rank1" and "KeyError" in message and "'fail'" in message
    assert "fail_with_key_error" in remote_tb and "missing thing 5" in remote_tb
    assert "missing thing 6" in r0["remote_async"]
    fut = r0["async_futures"]
    assert fut["wait_all_error"][0] == "RemoteError" and fut["done"]
    assert fut["value_error"][0] == "RemoteError" and "missing thing 8" in fut["traceback"]
    assert fut["wait_all"] == [4, 9] and fut["collect_all"] == [16, 25] and fut["then"] == 37
    assert fut["missing"][0] == "ServiceNotFound"
    # Deferred services answer when their Future completes, with the same errors.
    assert r0["deferred"] == [9, 16]
    assert r0["deferred_fail"][0] == "RemoteError" and "KeyError" in r0["deferred_fail"][1]
    assert r0["not_a_future"][0] == "RemoteError" and "TypeError" in r0["not_a_future"][1]
    assert r0["missing"][0] == "ServiceNotFound" and "'nobody'" in r0["missing"][1]
    assert "'svc'" in r0["missing"][1]
    assert r0["bad_timeout"][0] == "ValueError"
    assert r0["is_registered"] == (True, False)
    assert r0["paired"] == [0.0, 1.0, 2.0, 3.0]
    assert r0["paired_missing"][0] == "ServiceNotFound"
    # The group handle was pickled to rank 2, resolved there and used to call rank 1.
    assert r0["pickled"] == ("rank2", 25)
    assert r0["conflict"][0] == "ValueError"
    assert r0["after_deregister"][0] == "ServiceNotFound"
    assert r1["self_call"] == 36  # a member may call a service it hosts itself
    assert r1["local_rank"] == 1
    assert r0["late"] == 121  # wait_registered saw a key registered after the barrier
    # Duplicate keys: from the host itself and from another member.
    assert r1["dup"][0] == "ValueError" and "'square'" in r1["dup"][1]
    assert r2["dup_other"][0] == "ValueError" and "rank1" in r2["dup_other"][1]


@pytest.mark.timeout(30)
def test_collectives_on_a_subgroup_and_on_the_world_over_gloo(three_ranks):
    r0, r1, r2 = three_ranks
    for r in (r0, r2):
        assert r["all_reduce"] == 4.0  # (0 + 1) + (2 + 1)
        assert r["all_reduce_max"] == 2.0
        assert r["broadcast"] == [2.0, -2.0]
        assert r["all_gather"] == [0.0, 20.0]
        assert r["bad_op"][0] == "ValueError" and "median" in r["bad_op"][1]
        assert r["bad_src"][0] == "ValueError"
    assert r0["reduce"] == 4.0
    assert r2["gather"] == [0.0, 4.0] and r0["gather"] is None
    assert (r0["scatter"], r2["scatter"]) == (5.0, 7.0)
    assert r1["non_member"][0] == "RuntimeError"
    assert {r["world_sum"] for r in three_ranks} == {3.0}


@pytest.mark.timeout(30)
def test_point_to_point_and_the_ring_all_reduce_built_from_it(three_ranks):
    for r in three_ranks:
        torch.testing.assert_close(r["ring"], r["ring_reference"], **TOL)
        assert r["self_send"][0] == "ValueError"
    assert three_ranks[0]["recv"] == [9.0]  # irecv of rank 1's isend
    assert three_ranks[2]["recv"] == [1.0, 2.0]  # recv of rank 0's send


@pytest.mark.timeout(30)
def test_every_listening_socket_is_on_loopback(three_ranks):
    for r in three_ranks:
        assert r["listening"], "each rank listens for RPC"
        assert {host for host, _ in r["listening"]} == {"127.0.0.1"}, r["listening"]


@pytest.mark.timeout(30)
def test_a_peer_that_does_not_answer_in_time_gives_peer_unavailable(three_ranks):
    r0 = three_ranks[0]
    for key in ("silent", "silent_async"):
        kind, message = r0[key]
        assert kind == "PeerUnavailable" and "rank1" in message and "timeout" in message
    # Two calls bounded by their 0.5 s timeouts; ignoring them would take 2 x 3 s.
    assert r0["silent_s"] < 5.0
    assert r0["after_silent"] == 4  # the peer is still usable afterwards
