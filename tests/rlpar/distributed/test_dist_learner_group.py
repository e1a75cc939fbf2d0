"""Learner groups: collectives among 2 learners in a world of 4 whose actors die and
rejoin; point to point and the ring all-reduce; gradient averaging; a silent or dead
member; remote handles (values fetched later, passed on, released, a dead host)."""

from __future__ import annotations

import dist_group_programs as programs
import pytest
import torch

from rlpar.distributed import World, launch


@pytest.fixture(scope="module")
def world_of_four():
    # One launch for every check: a torch process costs seconds to start here.
    return launch(programs.learners_and_actors, nprocs=4, timeout=100,
                  restartable={2, 3}, max_restarts=1)


@pytest.mark.timeout(120)
def test_learners_reduce_while_an_actor_dies_and_rejoins(world_of_four):
    (r0, n0, l0), (r1, n1, l1), (r2, n2, a2), (r3, n3, a3) = world_of_four
    assert (r0, n0, r1, n1) == (0, 0, 1, 0)
    assert (r2, n2, r3, n3) == (2, 1, 3, 1)  # both actors are replacements that finished
    assert a2["ping"] == 20  # the replacement called the running learner
    assert not any(r["default_pg"] for r in (l0, l1, a2, a3))  # no all-ranks process group
    # The same counts on both learners: every reduce was met by both.
    assert l0["counts"] == l1["counts"]
    before, during, after = l0["counts"]
    assert before >= 1 and during >= 5 and after == 10
    assert l0["reduce_sums"] == l1["reduce_sums"] == {2.0}


@pytest.mark.timeout(30)
def test_learner_collectives_and_parameters(world_of_four):
    l0, l1 = world_of_four[0][2], world_of_four[1][2]
    assert l0["repr"] == "LearnerGroup(name='learners', ranks=[0, 1], rank=0, backend='gloo')"
    assert l0["group"] == (0, 2, [0, 1], "gloo", "cpu") and l1["group"][0] == 1
    for r in (l0, l1):
        assert r["sum"] == 3.0 and r["max"] == 1.0
        assert r["broadcast"] == [1.0, 5.0]  # from group rank 1
        assert r["all_gather"] == [0.0, 10.0]
        assert r["params_equal"] and r["grads_mean"] and r["unused_grad_zero"] and r["tensors_mean"]
        assert r["conflict"][0] == "ValueError" and "0,1" in r["conflict"][1]
        assert {host for host, _ in r["listening"]} == {"127.0.0.1"}
        if "nccl_on_cpu" in r:  # CPU machines: "nccl" is refused, "auto" chose gloo
            assert r["nccl_on_cpu"][0] == "ValueError" and "needs CUDA" in r["nccl_on_cpu"][1]
        assert r["learners_still"] == 2.0  # the quiet group's failure left this one alone
    for _, _, actor in world_of_four[2:]:  # the replacements (first lives' results died)
        assert actor["non_member"][0] == "ValueError" and "only its members" in actor["non_member"][1]


@pytest.mark.timeout(30)
def test_ring_all_reduce_from_point_to_point_equals_all_reduce(world_of_four):
    for _, _, out in world_of_four[:2]:
        torch.testing.assert_close(out["ring"], out["all_reduce"], **programs.TOL)
    assert world_of_four[1][2]["recv"] == [0.0, 7.0]  # group rank 0 sent to 1, tag 3
    for _, _, out in world_of_four[:2]:
        assert out["self_send"][0] == "ValueError"
        assert out["bad_peer"][0] == "ValueError"
        assert out["after_destroy"][0] == "RuntimeError"


@pytest.mark.timeout(30)
def test_a_silent_or_dead_member_fails_the_group_within_its_timeout(world_of_four):
    l0 = world_of_four[0][2]
    kind, message, seconds = l0["silent"]
    assert kind == "PeerUnavailable" and "'quiet'" in message and "1.0 s" in message
    assert seconds < 10.0  # the group's timeout is 1 s; a hang would reach the launch's
    kind, message, _ = l0["after_silent"]
    assert kind == "PeerUnavailable" and "broken" in message
    assert l0["doomed_first"] == 2.0
    kind, message, seconds = l0["dead_member"]
    assert kind == "PeerUnavailable" and "'doomed'" in message and seconds < 20.0


@pytest.mark.timeout(30)
def test_remote_handles(world_of_four):
    l0 = world_of_four[0][2]
    assert l0["done_before_gate"] is False  # the service waits for the gate
    assert l0["gated"] == (25, 25)
    assert l0["deferred"] == 27
    kind, message, _ = l0["fail"]
    assert kind == "RemoteError" and "KeyError" in message and "no such thing 4" in message
    assert l0["missing"][0] == "ServiceNotFound"
    assert l0["third_rank"] == (True, 36)  # rank 1 fetched it from rank 3 with a pickled handle
    assert l0["after_third"][0] == "ValueError" and "already" in l0["after_third"][1]
    assert l0["released"] is True and l0["after_release"][0] == "ValueError"
    assert l0["dead_host_kept"][0] == "PeerUnavailable"  # its host died holding it
    assert l0["dead_host_new"][0] == "PeerUnavailable"


def test_learner_group_arguments_are_checked_before_anything_starts():
    class Fake:  # only what create_learner_group reads before it touches the store
        rank, world_size, rpc_timeout = 0, 4, 1.0

    create = World.create_learner_group
    with pytest.raises(ValueError, match="backend"):
        create(Fake(), "g", [0, 1], backend="mpi")
    with pytest.raises(ValueError, match="name"):
        create(Fake(), "a/b", [0, 1])
    with pytest.raises(ValueError, match="distinct"):
        create(Fake(), "g", [0, 0])
    with pytest.raises(ValueError, match="size 4"):
        create(Fake(), "g", [0, 4])
    with pytest.raises(ValueError, match="only its members"):
        create(Fake(), "g", [1, 2])
    with pytest.raises(ValueError, match="timeout"):
        create(Fake(), "g", [0, 1], timeout=0)


def test_auto_picks_nccl_only_when_every_member_has_a_gpu_of_its_own():
    from rlpar.distributed.learner_group import choose_backend

    assert choose_backend("auto", ["a:0", "a:1"]) == "nccl"
    assert choose_backend("auto", ["a:0", "b:0"]) == "nccl"  # one GPU on each of two hosts
    assert choose_backend("auto", ["a:0", "a:0"]) == "gloo"  # two learners on one GPU
    assert choose_backend("auto", ["a:0", "-"]) == "gloo"
    assert choose_backend("gloo", ["a:0", "a:1"]) == "gloo"
    with pytest.raises(ValueError, match="GPU of its own"):
        choose_backend("nccl", ["a:0", "a:0"])
