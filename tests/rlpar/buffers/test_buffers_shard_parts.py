"""Replay shards in checkpoints and across a member's restart, in one process: members
of a fake group (one registry of services, calls made in-process) host the shards."""

import numpy as np
import pytest
from fake_group import FakeGroup

from rlpar.buffers import DistributedPrioritizedReplayBuffer
from rlpar.buffers.distributed import SHARD_SHIFT
from rlpar.checkpoint import load_checkpoint, save_checkpoint, save_part
from rlpar.errors import CheckpointMismatch, PeerUnavailable, StateError

MEMBERS = ["learner", "actor0", "actor1"]
SHARDS = MEMBERS[1:]


def world(dead, **kw):
    """Every member's buffer over one registry (the shards are on the actors)."""
    registry = {}
    return {m: DistributedPrioritizedReplayBuffer(
        group=FakeGroup(registry, MEMBERS, m, dead), name="replay", capacity=64, shard_members=SHARDS,
        on_shard_failure="drop", seed=3, **kw) for m in MEMBERS}


def fill(buffers, n=20):
    for k, member in enumerate(SHARDS):
        obs = np.arange(n, dtype=np.float32)[:, None] + 100 * k
        buffers[member].add({"obs": obs, "action": np.arange(n)}, np.linspace(0.5, 2.0, n) + k)


def test_every_shard_saves_its_part_and_a_new_world_loads_them(tmp_path):
    buffers = world(dead=set())
    fill(buffers)
    sampler = buffers["learner"]
    sample = sampler.sample(16)
    sampler.update_priorities(sample.indices, np.full(16, 5.0))
    saved = {m: buffers[m].state_dict() for m in SHARDS}
    names = sampler.part_names()
    assert names == ["shard-0-of-2", "shard-1-of-2"]
    assert sampler.save_parts(tmp_path, step=7, kind="t", meta={"job": "x"}) > 0
    main = save_checkpoint(tmp_path, {"learner": 1}, kind="t", step=7, parts=names)

    again = world(dead=set())
    assert again["learner"].load_parts(str(main), kind="t", meta={"job": "x"}) == 40
    for member in SHARDS:
        loaded = again[member].state_dict()
        np.testing.assert_array_equal(loaded["leaves"], saved[member]["leaves"])
        assert loaded["max_priority"] == saved[member]["max_priority"]
    assert len(again["learner"]) == 40
    assert again["learner"].sample(8).indices.size == 8

    # A layout of three shards finds parts of two: a mismatch, not a skip.
    with pytest.raises(CheckpointMismatch, match="parts"):
        load_checkpoint(tmp_path, kind="t", parts=["shard-0-of-3", "shard-1-of-3", "shard-2-of-3"])
    with pytest.raises(CheckpointMismatch, match="meta\\['job'\\]"):
        again["learner"].load_parts(str(main), kind="t", meta={"job": "y"})


def test_a_dead_members_shard_is_skipped_then_rehosted_empty_and_sampled_again(tmp_path, caplog):
    dead = set()
    buffers = world(dead)
    fill(buffers)
    sampler = buffers["learner"]
    before = sampler.sample(8)
    dead.add("actor1")  # killed: its calls fail at once
    with caplog.at_level("WARNING"):
        for _ in range(3):
            sample = sampler.sample(8)
            assert set((sample.indices >> SHARD_SHIFT).tolist()) == {0}
    assert "dropping replay shard 'actor1'" in caplog.text
    with pytest.raises(PeerUnavailable, match="shard\\(s\\) down \\['actor1'\\]"):
        sampler.save_parts(tmp_path, step=1, kind="t")

    # Its replacement: the learner hosts a fresh shard under actor1's keys, and the
    # new process (rehosted: no shard of its own) adds there.
    assert sampler.rehost("actor1") == 20
    dead.discard("actor1")
    replacement = DistributedPrioritizedReplayBuffer(
        group=FakeGroup(buffers["actor0"].group.registry, MEMBERS, "actor1", dead), name="replay",
        capacity=64, shard_members=SHARDS, rehosted=True)
    assert replacement.shard is None
    replacement.add({"obs": np.full((30, 1), -1.0, np.float32), "action": np.zeros(30, np.int64)},
                    np.full(30, 50.0))
    shards = set()
    for _ in range(5):
        sample = sampler.sample(16)
        shards |= set((sample.indices >> SHARD_SHIFT).tolist())
    assert shards == {0, 2}  # shard 2 serves actor1 now; shard 1 (the dead one) is gone
    # Updates for the dead shard's items are dropped, never applied to the new one.
    sampler.update_priorities(before.indices, np.full(8, 9.0))
    assert sampler.sampler.update_errors == 0
    sampler.save_parts(tmp_path, step=2, kind="t")
    state, _ = load_checkpoint(tmp_path / "ckpt-000000000002.shard-1-of-2.pt", kind="t")
    assert len(state["leaves"]) == 30  # the rehosted shard wrote actor1's part
    with pytest.raises(ValueError, match="hosts no shard"):
        sampler.rehost("learner")


def test_what_a_dead_shard_lost_counts_adds_after_its_last_reply_and_a_second_death_keeps_the_rehosted_shard():
    dead = set()
    buffers = world(dead)
    fill(buffers)
    sampler = buffers["learner"]
    sampler.sample(8)  # the last reply from actor1's shard: 20 transitions
    buffers["actor1"].add({"obs": np.ones((30, 1), np.float32), "action": np.zeros(30, np.int64)},
                          np.ones(30))
    dead.add("actor1")
    # It reported 50 adds; its last reply said 20: 50 were lost, up to the shard's 64.
    assert sampler.rehost("actor1", added=50) == 50
    assert not sampler.hosts_shard_of("actor0") and sampler.hosts_shard_of("actor1")
    replacement = DistributedPrioritizedReplayBuffer(
        group=FakeGroup(buffers["actor0"].group.registry, MEMBERS, "actor1", dead - {"actor1"}),
        name="replay", capacity=64, shard_members=SHARDS, rehosted=True)
    replacement.add({"obs": np.full((10, 1), -1.0, np.float32), "action": np.zeros(10, np.int64)}, np.ones(10))
    # The replacement died too: its shard lives in the learner, so it is kept as is.
    assert sampler.rehost("actor1", added=10) == 0
    assert len(sampler.sample(8).indices) == 8 and len(sampler) == 20 + 10
    with pytest.raises(ValueError, match="added must be an int >= 0"):
        sampler.rehost("actor0", added=-1)
    with pytest.raises(ValueError, match="hosts no shard"):
        sampler.hosts_shard_of("nobody")
    # Bounded by a shard's capacity: a shard holds at most 64.
    assert world(set())["learner"].rehost("actor0", added=1_000) == 64


def test_a_corrupt_part_is_named_and_leaves_that_shard_as_it_was(tmp_path):
    buffers = world(dead=set())
    fill(buffers)
    good = buffers["actor0"].shard.buffer
    names = buffers["learner"].part_names()
    bad = buffers["actor1"].state_dict()
    bad["hyper"]["alpha"] = -1.0
    save_part(tmp_path, buffers["actor0"].state_dict(), kind="t", step=3, part=names[0],
              meta={"shard": 0, "shards": 2})
    save_part(tmp_path, bad, kind="t", step=3, part=names[1], meta={"shard": 1, "shards": 2})
    main = save_checkpoint(tmp_path, {}, kind="t", step=3, parts=names)
    again = world(dead=set())
    again["actor1"].add({"obs": np.ones((5, 1), np.float32), "action": np.arange(5)})
    with pytest.raises(StateError, match=r"state\['hyper'\]\['alpha'\] must be a finite number"):
        again["learner"].load_parts(str(main), kind="t")
    assert len(again["actor1"].shard) == 5  # the failed load changed nothing
    assert len(again["actor0"].shard) == len(good)  # the good part loaded


def test_a_member_without_a_shard_refuses_a_shards_state():
    buffers = world(dead=set())
    fill(buffers)
    buffers["learner"].load_state_dict({})  # what it saves: nothing
    with pytest.raises(StateError, match="'learner' hosts none of 'replay'"):
        buffers["learner"].load_state_dict(buffers["actor0"].state_dict())
