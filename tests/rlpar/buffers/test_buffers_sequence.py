"""Sequences as replay items (R2D2): stored whole with their start state and mask,
sampled, re-prioritized and checkpointed by the local buffer, and served the same by
its distributed twin (shards reached in-process and over a fake RPC wire) and by a
hosted buffer filled remotely."""

import io

import numpy as np
import pytest
import torch
from fake_group import FakeGroup

from rlpar.buffers import (
    DistributedPrioritizedReplayBuffer,
    FieldSpec,
    HostedBuffer,
    PrioritizedReplayBuffer,
    mix_priorities,
    sequence_spec,
)
from rlpar.buffers.distributed import SHARD_SHIFT

LENGTH, STATE = 6, 3
SPEC = sequence_spec(length=LENGTH, steps={"obs": ((2, 2), np.float32), "action": ((), np.int64)},
                     start={"state": ((2, STATE), np.float32)})


def sequences(ids):
    """Sequence ``i``: ``1 + i % LENGTH`` valid steps (then zero padding), obs
    ``100 i + t``, action ``t``, start state all ``i``."""
    ids = np.asarray(ids)
    t = np.arange(LENGTH)
    mask = t[None, :] < (1 + ids % LENGTH)[:, None]
    obs = (100.0 * ids[:, None] + t[None, :]) * mask
    return {"obs": np.broadcast_to(obs[:, :, None, None], (len(ids), LENGTH, 2, 2)).astype(np.float32),
            "action": np.where(mask, t[None, :], 0).astype(np.int64),
            "state": np.broadcast_to(ids[:, None, None], (len(ids), 2, STATE)).astype(np.float32),
            "mask": mask}


def assert_whole(batch):
    """Every row of ``batch`` is exactly the sequence its start state names."""
    ids = batch["state"][:, 0, 0].astype(np.int64)
    expected = sequences(ids)
    assert batch.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(batch[key], value, err_msg=key)
        assert batch[key].dtype == value.dtype
    return ids


def test_sequence_spec_gives_step_fields_a_time_axis_and_adds_the_mask():
    assert SPEC == {"obs": FieldSpec((LENGTH, 2, 2), np.float32), "action": FieldSpec((LENGTH,), np.int64),
                    "state": FieldSpec((2, STATE), np.float32), "mask": FieldSpec((LENGTH,), bool)}
    with pytest.raises(ValueError, match="length must be an int >= 1"):
        sequence_spec(length=0, steps={"obs": ((1,), np.float32)})
    with pytest.raises(ValueError, match=r"fields \['x'\] are both step and start fields"):
        sequence_spec(length=2, steps={"x": ((1,), np.float32)}, start={"x": ((1,), np.float32)})
    with pytest.raises(ValueError, match="the mask field 'mask' is also"):
        sequence_spec(length=2, steps={"mask": ((), bool)})


def test_a_sequence_of_the_wrong_length_is_refused_at_its_add():
    buffer = PrioritizedReplayBuffer(capacity=8, spec=SPEC)
    bad = sequences([1, 2])
    bad["obs"] = bad["obs"][:, :-1]
    with pytest.raises(ValueError, match=r"field 'obs' has shape \(2, 5, 2, 2\); expected \(batch, \*\(6, 2, 2\)\)"):
        buffer.add(bad)
    assert len(buffer) == 0


def test_mix_priorities_matches_a_loop():
    rng = np.random.default_rng(0)
    per_step = rng.exponential(size=(7, 9))
    mask = rng.random((7, 9)) < 0.6
    mask[3] = False  # no valid step: priority 0
    mixed = mix_priorities(per_step, mask, eta=0.9)
    for i in range(7):
        valid = [per_step[i, t] for t in range(9) if mask[i, t]]
        expected = 0.9 * max(valid) + 0.1 * sum(valid) / len(valid) if valid else 0.0
        assert mixed[i] == pytest.approx(expected, rel=1e-12)
    assert mixed.dtype == np.float64
    # Padding may hold anything (a NaN TD error past an episode's end): it is ignored.
    per_step[~mask] = np.nan
    np.testing.assert_allclose(mix_priorities(per_step, mask, eta=0.9), mixed)
    with pytest.raises(ValueError, match="finite and >= 0 where mask is set"):
        mix_priorities(-per_step, mask, eta=0.9)
    with pytest.raises(ValueError, match="eta must be in"):
        mix_priorities(per_step, mask, eta=1.5)
    with pytest.raises(ValueError, match="of one shape"):
        mix_priorities(per_step, mask[:, :3], eta=0.5)


def test_the_local_buffer_serves_whole_sequences_across_the_wrap_and_reprioritizes_them():
    buffer = PrioritizedReplayBuffer(capacity=8, alpha=0.9, eps=0.0, spec=SPEC, seed=1)
    for start in range(0, 20, 5):  # 20 sequences into 8 slots: the last 8 stay
        buffer.add(sequences(range(start, start + 5)), priorities=np.ones(5))
    assert len(buffer) == 8
    seen = set()
    for _ in range(20):
        sample = buffer.sample(4)
        seen |= set(assert_whole(sample.batch).tolist())
    assert seen == set(range(12, 20))

    sample = buffer.sample(4)
    per_step = np.abs(sample.batch["obs"][:, :, 0, 0]) / 1000.0
    p = mix_priorities(per_step, sample.batch["mask"], eta=0.9)
    buffer.update_priorities(sample.indices, p)
    slots = sample.indices % buffer.capacity
    np.testing.assert_allclose(buffer.sum_tree.leaves[slots], p**0.9)


def make_world(dead=()):
    """A learner hosting a shard, an actor hosting one, and an actor without a shard
    (its adds go over the wire to the learner's shard). Each member's twin is built
    alike; the learner reaches actor0's shard through RPC services, its own directly."""
    registry, members = {}, ["learner", "actor0", "actor1"]
    return {m: DistributedPrioritizedReplayBuffer(
        group=FakeGroup(registry, members, m, set(dead)), name="seq", capacity=16, alpha=0.9,
        eps=0.0, shard_members=["learner", "actor0"], home_shard="learner" if m == "actor1" else None,
        spec=SPEC, seed=2) for m in members}


def test_the_distributed_twin_serves_the_sequences_the_local_buffer_does_and_takes_their_priorities():
    world = make_world()
    adds = {"learner": range(0, 6), "actor0": range(6, 14), "actor1": range(14, 20)}
    local = PrioritizedReplayBuffer(capacity=48, alpha=0.9, eps=0.0, spec=SPEC, seed=2)
    for member, ids in adds.items():
        world[member].add(sequences(ids), priorities=np.ones(len(ids)))
        local.add(sequences(ids), priorities=np.ones(len(ids)))
    learner = world["learner"]
    assert len(learner) == len(local) == 20
    assert world["learner"].local_size == 12 and world["actor0"].local_size == 8
    served, served_locally, shards = set(), set(), set()
    for _ in range(40):
        sample = learner.sample(8)
        served |= set(assert_whole(sample.batch).tolist())
        served_locally |= set(assert_whole(local.sample(8).batch).tolist())
        shards |= set((sample.indices >> SHARD_SHIFT).tolist())
    assert served == served_locally == set(range(20)) and shards == {0, 1}

    # Sequence priorities from per-step ones reach the shard holding each sequence.
    sample = learner.sample(8)
    ids = sample.batch["state"][:, 0, 0].astype(np.int64)
    p = mix_priorities(np.abs(sample.batch["obs"][:, :, 0, 0]) + 1.0, sample.batch["mask"], eta=0.9)
    learner.update_priorities(sample.indices, p)
    learner.flush_updates()
    for member, shard in (("learner", 0), ("actor0", 1)):
        mine = (sample.indices >> SHARD_SHIFT) == shard
        leaves = world[member].shard.buffer.sum_tree.leaves
        slots = (sample.indices[mine] & ((1 << SHARD_SHIFT) - 1)) % 16
        # A sequence drawn twice in a batch takes the later priority, as in the local buffer.
        last = {int(s): float(q) for s, q in zip(slots, p[mine])}
        np.testing.assert_allclose(leaves[list(last)], np.array(list(last.values())) ** 0.9)
    assert set(ids.tolist()) <= set(range(20))


def test_a_hosted_buffer_filled_over_the_wire_serves_whole_sequences():
    registry = {}
    host = HostedBuffer.host(FakeGroup(registry, ["learner", "actor"], "learner", set()), "seqs",
                             PrioritizedReplayBuffer(capacity=32, spec=SPEC, seed=3))
    remote = HostedBuffer.connect(FakeGroup(registry, ["learner", "actor"], "actor", set()), "seqs")
    remote.add(sequences(range(10)), priorities=np.linspace(0.5, 2.0, 10))
    remote.wait()
    assert len(remote) == len(host) == 10 and host.added == 10
    assert set(assert_whole(host.sample(10).batch).tolist()) <= set(range(10))


def test_sequences_survive_a_checkpoint_round_trip_locally_and_shard_by_shard(tmp_path):
    from rlpar.checkpoint import save_checkpoint

    buffer = PrioritizedReplayBuffer(capacity=8, alpha=0.9, spec=SPEC, seed=4)
    buffer.add(sequences(range(11)), priorities=np.arange(1.0, 12.0))
    file = io.BytesIO()
    torch.save(buffer.state_dict(), file)
    file.seek(0)
    again = PrioritizedReplayBuffer(capacity=8, alpha=0.9, spec=SPEC, seed=99)
    again.load_state_dict(torch.load(file, weights_only=True))
    a, b = buffer.sample(6), again.sample(6)  # the rng travels with the state
    np.testing.assert_array_equal(a.indices, b.indices)
    assert_whole(b.batch)
    np.testing.assert_array_equal(assert_whole(a.batch), assert_whole(b.batch))
    np.testing.assert_allclose(again.sum_tree.leaves[:8], buffer.sum_tree.leaves[:8])

    world = make_world()
    world["learner"].add(sequences(range(5)))
    world["actor0"].add(sequences(range(5, 9)))
    names = world["learner"].part_names()
    world["learner"].save_parts(tmp_path, step=1, kind="t")
    main = save_checkpoint(tmp_path, {}, kind="t", step=1, parts=names)
    restored = make_world()
    assert restored["learner"].load_parts(str(main), kind="t") == 9
    assert set(assert_whole(restored["learner"].sample(9).batch).tolist()) <= set(range(9))
    for member in ("learner", "actor0"):
        for key, col in restored[member].shard.buffer.storage.columns.items():
            np.testing.assert_array_equal(col[: restored[member].local_size],
                                          world[member].shard.buffer.storage.columns[key][: world[member].local_size])
