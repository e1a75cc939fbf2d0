"""Shared frames: stacked obs/next_obs stored once, sampled back exactly; data
without the overlap is refused and nothing is stored."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import (
    LocalShardClient,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplayShard,
    RingStorage,
    ShardedSampler,
    SharedFrames,
)
from rlpar.buffers.shard import from_wire, to_wire
from rlpar.buffers.storage import SPARE_ROWS

STACK, SIDE = 4, 84  # frame-sized rows: a chunk of 64 takes the streaming-store path


def frame_stream(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n + 16, SIDE, SIDE), dtype=np.uint8)


def chunk(frames, start, n, shift=1):
    """Transitions ``start .. start+n-1`` of one stream: obs = frames t..t+3,
    next_obs = frames t+shift..t+shift+3; the action records t."""
    t = np.arange(start, start + n)
    return {
        "obs": np.stack([frames[i : i + STACK] for i in t]),
        "action": t.astype(np.int64),
        "next_obs": np.stack([frames[i + shift : i + shift + STACK] for i in t]),
        "terminated": t % 7 == 0,
    }


def assert_rows_match(batch, frames, shift=1):
    for j, t in enumerate(batch["action"]):
        np.testing.assert_array_equal(batch["obs"][j], frames[t : t + STACK])
        np.testing.assert_array_equal(batch["next_obs"][j], frames[t + shift : t + shift + STACK])
        assert batch["terminated"][j] == (t % 7 == 0)


@pytest.mark.parametrize("shift", [1, 3])
@pytest.mark.parametrize("prioritized", [False, True])
def test_samples_return_what_was_added_across_the_wrap(shift, prioritized):
    frames = frame_stream(300)
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    buf = cls(capacity=100, seed=0, shared_frames=SharedFrames(shift=shift))
    for start in range(0, 280, 64):  # 64-row chunks wrap the 100 slots
        buf.add(chunk(frames, start, min(64, 280 - start), shift))
    assert len(buf) == 100
    # k + shift frame slots per row, no next_obs column; each distinct frame stored
    # once: the 280 rows (none overwritten yet: 100 + SPARE_ROWS rows) show frames
    # 0 .. 279 + shift + STACK - 1.
    assert buf.storage.columns["obs"].shape[1:] == (STACK + shift,)
    assert "next_obs" not in buf.storage.columns
    assert buf.storage.frames.live == buf.storage.frames.high_water == 280 + STACK - 1 + shift
    sample = buf.sample(64)
    batch = sample.batch
    assert list(batch) == ["obs", "action", "next_obs", "terminated"]  # spec order
    assert batch["obs"].shape == batch["next_obs"].shape == (64, STACK, SIDE, SIDE)
    assert np.all(batch["action"] == sample.indices)  # the serial is the step here
    assert np.all(batch["action"] >= 280 - 100)  # only the newest 100 survive
    assert_rows_match(batch, frames, shift)


@pytest.mark.parametrize("steps", [4, 10])
def test_transitions_over_as_many_steps_as_the_stack_or_more_pool_their_frames(steps):
    # n-step returns with n >= the stack (DrQ's n = 10): obs and next_obs share no
    # frame, so a row holds both whole (shift = the stack), and the pool still stores
    # each frame once across the rows: about one a transition, not eight.
    frames = frame_stream(300)
    buf = PrioritizedReplayBuffer(capacity=100, seed=0, shared_frames=SharedFrames(shift=STACK))
    for start in range(0, 280, 64):
        buf.add(chunk(frames, start, min(64, 280 - start), steps))
    assert buf.storage.columns["obs"].shape[1:] == (2 * STACK,)
    assert set(buf.storage.columns["obs.steps"][: len(buf)]) == {STACK}
    assert buf.storage.frames.live == buf.storage.frames.high_water == 280 + STACK - 1 + steps
    sample = buf.sample(64)
    assert_rows_match(sample.batch, frames, steps)
    back = PrioritizedReplayBuffer(capacity=100, seed=0, shared_frames=SharedFrames(shift=STACK))
    back.load_state_dict(buf.state_dict())
    again = back.sample(64)
    assert_rows_match(again.batch, frames, steps)


def test_a_plain_state_of_such_transitions_resumes_into_pooled_frames(tmp_path):
    # Replays of n-step transitions with n >= the stack were kept plain before the
    # layout above existed: their checkpoints resume into it. A layout that needs the
    # overlap (shift below the stack) still refuses them.
    frames = frame_stream(300)
    plain = PrioritizedReplayBuffer(capacity=100, seed=0)
    for start in range(0, 280, 64):
        plain.add(chunk(frames, start, min(64, 280 - start), 10))
    torch.save(plain.state_dict(), tmp_path / "plain.pt")
    state = torch.load(tmp_path / "plain.pt", weights_only=True)
    pooled = PrioritizedReplayBuffer(capacity=100, seed=0, shared_frames=SharedFrames(shift=STACK))
    pooled.load_state_dict(state)
    assert len(pooled) == len(plain) == 100
    assert pooled.storage.frames.live == 100 + STACK - 1 + 10  # the surviving rows' frames
    a, b = plain.sample(64), pooled.sample(64)
    np.testing.assert_array_equal(a.indices, b.indices)
    for k in a.batch:
        np.testing.assert_array_equal(a.batch[k], b.batch[k])
    pooled.add(chunk(frames, 280, 8, 10))  # and it goes on filling
    assert_rows_match(pooled.sample(64).batch, frames, 10)
    with pytest.raises(ValueError, match="saved with shared_frames=None"):
        PrioritizedReplayBuffer(capacity=100, shared_frames=SharedFrames(shift=3)).load_state_dict(state)
    # Columns split into other parts than obs's are named, not pooled out of step.
    columns = state["storage"]["columns"]
    assert len(columns["obs"]) == 2  # the saved rows wrap: two parts
    uneven = {**state, "storage": {**state["storage"],
                                   "columns": {**columns, "next_obs": [np.concatenate(columns["next_obs"])]}}}
    with pytest.raises(ValueError, match="next_obs.*holds parts of"):
        PrioritizedReplayBuffer(capacity=100, shared_frames=SharedFrames(shift=STACK)).load_state_dict(uneven)


def test_one_add_larger_than_capacity_keeps_the_newest_rows():
    frames = frame_stream(150)
    buf = ReplayBuffer(capacity=50, seed=1, shared_frames=SharedFrames())
    buf.add(chunk(frames, 0, 130))
    got = buf.storage.gather(np.arange(50))
    assert sorted(got["action"]) == list(range(80, 130))
    assert_rows_match(got, frames)


@pytest.mark.parametrize("bad_size", [64, SPARE_ROWS + 40])
def test_a_row_without_the_overlap_is_refused_and_nothing_is_stored(bad_size):
    # A full ring past its wrap: a refused add leaves every stored item as it was,
    # whether it is checked while copying (up to SPARE_ROWS rows) or before.
    frames = frame_stream(1200)
    buf = PrioritizedReplayBuffer(capacity=100, seed=0, shared_frames=SharedFrames())
    for start in range(0, 250, 50):
        buf.add(chunk(frames, start, 50))
    before = buf.storage.gather(np.arange(100))
    bad = chunk(frames, 250, bad_size)
    bad["next_obs"][bad_size - 27, 1, 5, 9] ^= 1  # one byte of a frame obs should repeat
    with pytest.raises(
        ValueError, match=f"row {bad_size - 27}: next_obs does not continue obs by 1 to 1 steps"
    ):
        buf.add(bad, priorities=np.full(bad_size, 99.0))
    assert len(buf) == 100 and buf.storage.next_serial == 250
    assert buf.max_priority == 1.0  # the refused batch's priorities left no trace
    after = buf.storage.gather(np.arange(100))
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])
    assert_rows_match(after, frames)
    # A 3-step transition in a 1-step buffer: refused too.
    with pytest.raises(ValueError, match="row 0: .* by 1 to 1 steps"):
        buf.add(chunk(frames, 250, 8, shift=3))
    buf.add(chunk(frames, 250, 8))  # the buffer still takes good data
    assert buf.storage.next_serial == 258
    assert_rows_match(buf.storage.gather(np.arange(100)), frames)


def test_shorter_windows_are_stored_with_their_own_step_count():
    # n-step windows flushed at an episode's end span fewer than n steps: their
    # next_obs is 1 or 2 steps ahead in a buffer made for 3.
    frames = frame_stream(200)
    steps = np.array([3, 3, 1, 3, 2, 3, 3, 2] * 8)
    batch = chunk(frames, 0, 64, shift=3)
    for r in np.flatnonzero(steps != 3):
        batch["next_obs"][r] = frames[r + steps[r] : r + steps[r] + STACK]
    buf = ReplayBuffer(capacity=64, seed=0, shared_frames=SharedFrames(shift=3))
    buf.add(batch)
    np.testing.assert_array_equal(buf.storage.columns["obs.steps"], steps)
    big = ReplayBuffer(capacity=600, seed=0, shared_frames=SharedFrames(shift=3))
    big.add({k: np.concatenate([v] * 5) for k, v in batch.items()})  # checked before copying
    np.testing.assert_array_equal(big.storage.columns["obs.steps"][:320], np.tile(steps, 5))
    mixed = buf.storage.gather(np.arange(64))
    for k in batch:
        np.testing.assert_array_equal(mixed[k], batch[k])
    assert not np.shares_memory(mixed["obs"], mixed["next_obs"])  # a copy for odd rows
    full = buf.storage.gather(np.flatnonzero(steps == 3))
    assert np.shares_memory(full["obs"], full["next_obs"])  # views when all are 3 steps
    np.testing.assert_array_equal(full["next_obs"], batch["next_obs"][steps == 3])


def test_the_step_count_column_name_is_reserved():
    with pytest.raises(ValueError, match="'obs.steps' is reserved"):
        ReplayBuffer(
            capacity=4,
            spec={f: ((4, 2), np.uint8) for f in ("obs", "next_obs", "obs.steps")},
            shared_frames=SharedFrames(),
        )


def test_the_newest_frames_are_free_to_differ():
    # Only next_obs[:k-shift] must repeat obs; its newest frame is new data.
    frames = frame_stream(10)
    batch = chunk(frames, 0, 4)
    batch["next_obs"][:, -1] = 255 - batch["next_obs"][:, -1]
    buf = ReplayBuffer(capacity=8, shared_frames=SharedFrames())
    buf.add(batch)
    got = buf.storage.gather(np.arange(4))
    np.testing.assert_array_equal(got["next_obs"], batch["next_obs"])
    np.testing.assert_array_equal(got["obs"], batch["obs"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"obs": "x", "next_obs": "x"}, "two different fields"),
        ({"shift": 0}, "shift must be an int >= 1"),
        ({"shift": True}, "shift must be an int >= 1"),
        ({"shift": 1.0}, "shift must be an int >= 1"),
        ({"shift": 256}, "at most 255"),
    ],
)
def test_invalid_shared_frames(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SharedFrames(**kwargs)


@pytest.mark.parametrize(
    ("spec", "shared", "match"),
    [
        ({"obs": ((4, 2), np.uint8)}, SharedFrames(), "'next_obs' is not in the spec"),
        (
            {"obs": ((4, 2), np.uint8), "next_obs": ((4, 3), np.uint8)},
            SharedFrames(),
            "equal shape and dtype",
        ),
        (
            {"obs": ((4, 2), np.uint8), "next_obs": ((4, 2), np.float32)},
            SharedFrames(),
            "equal shape and dtype",
        ),
        (
            {"obs": ((4, 2), np.uint8), "next_obs": ((4, 2), np.uint8)},
            SharedFrames(shift=5),
            "stack axis at least shift=5 long",
        ),
        ({"obs": ((), np.float32), "next_obs": ((), np.float32)}, SharedFrames(), "stack axis"),
    ],
)
def test_specs_that_cannot_share_frames(spec, shared, match):
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(capacity=4, spec=spec, shared_frames=shared)


def test_an_inferred_spec_is_checked_at_the_first_add():
    buf = ReplayBuffer(capacity=4, shared_frames=SharedFrames(obs="o", next_obs="o2"))
    with pytest.raises(ValueError, match="'o' is not in the spec"):
        buf.add({"obs": np.zeros((2, 4, 3)), "next_obs": np.zeros((2, 4, 3))})
    assert len(buf) == 0


def test_shared_frames_must_be_the_dataclass():
    with pytest.raises(TypeError, match="shared_frames must be a SharedFrames"):
        RingStorage(capacity=4, shared_frames=("obs", "next_obs"))


def test_state_dict_round_trip_through_disk(tmp_path):
    frames = frame_stream(200)
    buf = PrioritizedReplayBuffer(capacity=100, seed=3, shared_frames=SharedFrames())
    for start in range(0, 160, 40):
        buf.add(chunk(frames, start, 40))
    torch.save(buf.state_dict(), tmp_path / "buf.pt")
    state = torch.load(tmp_path / "buf.pt", weights_only=True)
    back = PrioritizedReplayBuffer(capacity=100, seed=99, shared_frames=SharedFrames())
    back.load_state_dict(state)
    a, b = buf.sample(32), back.sample(32)
    np.testing.assert_array_equal(a.indices, b.indices)
    for k in a.batch:
        np.testing.assert_array_equal(a.batch[k], b.batch[k])
    assert_rows_match(b.batch, frames)
    # A buffer laid out differently cannot take the state.
    with pytest.raises(ValueError, match="saved with shared_frames"):
        PrioritizedReplayBuffer(capacity=100).load_state_dict(state)
    plain = PrioritizedReplayBuffer(capacity=100)
    plain.add(chunk(frames, 0, 4))
    with pytest.raises(ValueError, match="saved with shared_frames=None"):
        PrioritizedReplayBuffer(capacity=100, shared_frames=SharedFrames()).load_state_dict(
            plain.state_dict()
        )


class Wire(LocalShardClient):
    """Replies cross the tensor wire, as over RPC."""

    def sample_at(self, fractions):
        out = torch.futures.Future()
        out.set_result(from_wire(to_wire(self.shard.sample_at(fractions))))
        return out


def test_sharded_sampling_over_shared_frame_shards():
    # Shards reply with frames as stored (5 per row, not 8); the sampler splits the
    # merged batch once.
    frames = frame_stream(400)
    shards = [
        ReplayShard(PrioritizedReplayBuffer(capacity=100, seed=s, shared_frames=SharedFrames()))
        for s in range(2)
    ]
    shards[0].add(chunk(frames, 0, 90), None)
    shards[1].add(chunk(frames, 200, 120), None)
    reply = shards[0].sample_at(np.array([0.1, 0.5]))
    assert reply.batch["obs"].shape == (2, STACK + 1, SIDE, SIDE) and "next_obs" not in reply.batch
    assert reply.shared == SharedFrames()

    sampler = ShardedSampler(
        clients=[Wire(s, f"shard{i}") for i, s in enumerate(shards)], prioritized=True, seed=0
    )
    batch = sampler.sample(64).batch
    assert set(batch) == {"obs", "action", "next_obs", "terminated"}
    assert_rows_match(batch, frames)
    assert set(batch["action"] // 200) == {0, 1}  # both shards answered


def test_sharded_sampling_with_shorter_windows_and_mixed_layouts():
    frames = frame_stream(200)
    batch = chunk(frames, 0, 40, shift=2)
    batch["next_obs"][::5] = np.stack([frames[t + 1 : t + 1 + STACK] for t in range(0, 40, 5)])
    shared = ReplayShard(ReplayBuffer(capacity=50, seed=0, shared_frames=SharedFrames(shift=2)))
    shared.add(batch, None)
    sampler = ShardedSampler(clients=[Wire(shared, "a")], prioritized=False, seed=0)
    got = sampler.sample(40).batch
    for j, t in enumerate(got["action"]):
        ahead = 1 if t % 5 == 0 else 2
        np.testing.assert_array_equal(got["next_obs"][j], frames[t + ahead : t + ahead + STACK])
        np.testing.assert_array_equal(got["obs"][j], frames[t : t + STACK])
    plain = ReplayShard(ReplayBuffer(capacity=50, seed=1))
    plain.add(batch, None)
    mixed = ShardedSampler(
        clients=[Wire(shared, "a"), Wire(plain, "b")], prioritized=False, seed=0
    )
    with pytest.raises(ValueError, match="shards store frames differently"):
        mixed.sample(40)


def test_frames_of_another_dtype_compare_as_stored():
    # uint32 obs and uint16 next_obs into a uint8 column: both are cast before the
    # byte comparison (comparing raw bytes of different widths would be wrong).
    frames = frame_stream(20)
    batch = chunk(frames, 0, 8)
    batch["obs"] = batch["obs"].astype(np.uint32)
    batch["next_obs"] = batch["next_obs"].astype(np.uint16)
    spec = {"obs": ((STACK, SIDE, SIDE), np.uint8), "next_obs": ((STACK, SIDE, SIDE), np.uint8),
            "action": ((), np.int64), "terminated": ((), np.bool_)}
    buf = ReplayBuffer(capacity=8, spec=spec, shared_frames=SharedFrames())
    buf.add(batch)
    assert_rows_match(buf.storage.gather(np.arange(8)), frames)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 70),  # frame bytes: head, vector body and tail of every copy
    st.integers(2, 4),  # stack
    st.integers(1, 3),  # shift (clipped below the stack)
    st.integers(0, 10**6),  # where a byte is flipped, if anywhere
    st.booleans(),
    st.sampled_from([32, 8]),  # 32 holds the 20 rows: checked while copying; 8: before
)
def test_every_byte_of_the_overlap_is_checked(frame_bytes, stack, shift, where, flip, capacity):
    shift = min(shift, stack - 1)
    rng = np.random.default_rng(frame_bytes * 97 + stack)
    frames = rng.integers(0, 256, (40, frame_bytes), dtype=np.uint8)
    t = np.arange(20)
    batch = {
        "obs": np.stack([frames[i : i + stack] for i in t]),
        "next_obs": np.stack([frames[i + shift : i + shift + stack] for i in t]),
        "action": t,
    }
    row, byte = divmod(where % (20 * (stack - shift) * frame_bytes), (stack - shift) * frame_bytes)
    if flip:
        batch["next_obs"][row].reshape(-1)[byte] ^= 0x10  # inside next_obs[:k-shift]
    buf = ReplayBuffer(capacity=capacity, shared_frames=SharedFrames(shift=shift))
    if flip:
        with pytest.raises(ValueError, match=f"row {row}: "):
            buf.add(batch)
        assert len(buf) == 0
    else:
        buf.add(batch)
        got = buf.storage.gather(np.arange(min(capacity, 20)))
        for k in batch:
            np.testing.assert_array_equal(got[k], batch[k][got["action"]])


def test_state_dict_saves_rows_in_serial_order_without_copying_the_frames():
    frames = frame_stream(400)
    buf = ReplayBuffer(capacity=100, seed=0, shared_frames=SharedFrames(shift=3))
    for start in range(0, 370, 37):  # the frame column (100 + SPARE_ROWS rows) wraps
        buf.add(chunk(frames, start, 37, shift=3))
    state = buf.state_dict()
    column = buf.storage.columns["obs"]
    parts = state["storage"]["columns"]["obs"]
    assert len(parts) == 2  # the live rows wrap past the column's end
    assert all(np.shares_memory(p.numpy(), column) for p in parts)  # views, not copies
    [pool] = [p.numpy() for p in state["storage"]["frames"]]
    assert np.shares_memory(pool, buf.storage.frames.frames)
    first = np.concatenate([p.numpy() for p in parts])[:, :STACK]
    np.testing.assert_array_equal(pool[first[0]], frames[270:274])  # oldest live item first
    steps = np.concatenate([p.numpy() for p in state["storage"]["columns"]["obs.steps"]])
    assert steps.tolist() == [3] * 100
    back = ReplayBuffer(capacity=100, seed=1, shared_frames=SharedFrames(shift=3))
    back.load_state_dict(state)
    got = back.storage.gather(np.arange(100))
    assert sorted(got["action"]) == list(range(270, 370))
    assert_rows_match(got, frames, shift=3)
    bad = {**state["storage"], "columns": {**state["storage"]["columns"], "obs": parts[:1]}}
    with pytest.raises(ValueError, match=r"state\['columns'\]\['obs'\] holds 86 rows; expected 100"):
        back.storage.load_state_dict(bad)
