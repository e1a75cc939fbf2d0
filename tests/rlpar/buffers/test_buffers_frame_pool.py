"""The frame pool behind shared frames: each distinct frame stored once across
transitions, freed with the last row that shows it, found again only by content,
and saved and restored (also from states saved before frames were pooled)."""

import pickle

import numpy as np
import pytest
import torch

from rlpar.buffers import PrioritizedReplayBuffer, ReplayBuffer, SharedFrames
from rlpar.buffers.frame_pool import reserve
from rlpar.buffers.storage import SPARE_ROWS

STACK, SIDE = 4, 12


def stream(n, seed):
    return np.random.default_rng(seed).integers(0, 256, (n + 16, SIDE, SIDE), dtype=np.uint8)


def transitions(frames, t, shift, env=0):
    """Transitions ``t`` (an array of steps) of one env's stream, n-step ``shift``."""
    return {
        "obs": np.stack([frames[i : i + STACK] for i in t]),
        "action": (t * 10 + env).astype(np.int64),
        "next_obs": np.stack([frames[i + shift : i + shift + STACK] for i in t]),
    }


def check(got, streams, shift):
    for j, a in enumerate(got["action"]):
        t, env = divmod(int(a), 10)
        np.testing.assert_array_equal(got["obs"][j], streams[env][t : t + STACK])
        np.testing.assert_array_equal(got["next_obs"][j], streams[env][t + shift : t + shift + STACK])


def interleaved(streams, start, n, shift):
    """Step ``start .. start+n-1`` of every env, env-major within each step (as a
    vector env's actor adds them)."""
    parts = [transitions(streams[e], np.arange(start, start + n), shift, e) for e in range(len(streams))]
    order = np.arange(n * len(streams)).reshape(len(streams), n).T.reshape(-1)
    return {k: np.concatenate([p[k] for p in parts])[order] for k in parts[0]}


@pytest.mark.parametrize("shift", [1, 3])
def test_each_env_stream_adds_one_frame_per_transition_and_evicted_frames_are_reused(shift):
    streams = [stream(900, seed) for seed in range(3)]
    buf = ReplayBuffer(capacity=150, seed=0, shared_frames=SharedFrames(shift=shift))
    for start in range(0, 800, 20):
        buf.add(interleaved(streams, start, 20, shift))
    pool = buf.storage.frames
    rows = 150 + SPARE_ROWS  # rows hold their frames until overwritten
    # Each stored row brings one new frame of its env; the oldest row of each env
    # brings its stack's other k + shift - 1 too.
    assert pool.live == rows + 3 * (STACK - 1 + shift)
    assert pool.high_water <= pool.live + 20 * 3  # slots freed by an add are reused by it
    check(buf.storage.gather(np.arange(150)), streams, shift)


def test_a_frame_shown_by_many_rows_lives_until_the_last_one_goes():
    # Reset screens: every episode starts from the same frame stacked k times.
    reset = np.full((SIDE, SIDE), 7, np.uint8)
    frames = stream(300, 0)
    frames[::10] = reset  # every 10th frame is the reset screen
    buf = ReplayBuffer(capacity=30, seed=0, shared_frames=SharedFrames())
    for start in range(0, 250, 13):
        buf.add(transitions(frames, np.arange(start, min(start + 13, 250)), 1))
    pool = buf.storage.frames
    distinct = {frames[i].tobytes() for i in range(250 + STACK)}
    assert pool.live == len(distinct) == 250 + STACK - 25  # no row overwritten yet
    check(buf.storage.gather(np.arange(30)), [frames], 1)
    for start in range(250, 290, 13):  # the reset screen's first rows go: it stays
        buf.add(transitions(frames, np.arange(start, min(start + 13, 290)), 1))
    check(buf.storage.gather(np.arange(30)), [frames], 1)


def test_frames_are_found_by_content_so_colliding_buckets_only_cost_duplicates():
    frames = stream(300, 1)
    buf = ReplayBuffer(capacity=50, seed=0, shared_frames=SharedFrames(shift=2))
    buf.add(transitions(frames, np.arange(0, 4), 2))
    buf.storage.frames.table = np.full(4, -1, np.int64)  # one group: almost every lookup collides
    for start in range(4, 280, 23):
        buf.add(transitions(frames, np.arange(start, min(start + 23, 280)), 2))
    check(buf.storage.gather(np.arange(50)), [frames], 2)
    assert buf.storage.frames.live > 280 + STACK + 1  # duplicates, not wrong frames


def test_a_refused_batch_keeps_the_counts_right():
    frames = stream(3000, 2)
    buf = PrioritizedReplayBuffer(capacity=40, seed=0, shared_frames=SharedFrames())
    buf.add(transitions(frames, np.arange(0, 100), 1))
    bad = transitions(frames, np.arange(100, 150), 1)
    bad["next_obs"][30, 0, 0, 0] ^= 1
    with pytest.raises(ValueError, match="row 30: next_obs does not continue obs"):
        buf.add(bad)
    for start in range(100, 2900, 25):  # wrap the rows many times: counts never leak
        buf.add(transitions(frames, np.arange(start, start + 25), 1))
    pool = buf.storage.frames
    assert pool.live == 40 + SPARE_ROWS + STACK
    assert pool.high_water <= pool.live + 25 + 30
    check(buf.storage.gather(np.arange(40)), [frames], 1)


def test_state_round_trip_keeps_slots_and_rebuilds_the_counts(tmp_path):
    streams = [stream(600, seed) for seed in range(2)]
    buf = PrioritizedReplayBuffer(capacity=80, seed=3, shared_frames=SharedFrames(shift=3))
    for start in range(0, 560, 35):
        buf.add(interleaved(streams, start, 35, 3))
    torch.save(buf.state_dict(), tmp_path / "buf.pt")
    back = PrioritizedReplayBuffer(capacity=80, seed=9, shared_frames=SharedFrames(shift=3))
    back.load_state_dict(torch.load(tmp_path / "buf.pt", weights_only=True))
    a, b = buf.sample(64), back.sample(64)
    for k in a.batch:
        np.testing.assert_array_equal(a.batch[k], b.batch[k])
    check(b.batch, streams, 3)
    # Only the live rows' frames are referenced after the load; it goes on sharing.
    assert back.storage.frames.live == 80 + 2 * (STACK - 1 + 3)
    back.add(interleaved(streams, 560, 20, 3))
    buf.add(interleaved(streams, 560, 20, 3))
    check(back.storage.gather(np.arange(80)), streams, 3)
    assert back.storage.frames.live == 80 + 40 + 2 * (STACK - 1 + 3)


def test_a_state_saved_with_frames_per_row_is_pooled_on_load():
    # The layout before the pool: obs's column held each row's k + shift frames.
    frames = stream(300, 4)
    buf = ReplayBuffer(capacity=50, seed=0, shared_frames=SharedFrames(shift=3))
    for start in range(0, 240, 30):
        buf.add(transitions(frames, np.arange(start, start + 30), 3))
    state = buf.storage.state_dict()
    [pool] = state.pop("frames")
    state["columns"]["obs"] = [pool[refs.clip(0)] for refs in state["columns"]["obs"]]
    back = ReplayBuffer(capacity=50, seed=0, shared_frames=SharedFrames(shift=3))
    back.storage.load_state_dict(state)
    assert back.storage.frames.live == 50 + STACK - 1 + 3
    check(back.storage.gather(np.arange(50)), [frames], 3)


def test_a_malformed_pooled_state_is_refused_naming_the_part():
    frames = stream(100, 5)
    buf = ReplayBuffer(capacity=20, seed=0, shared_frames=SharedFrames())
    buf.add(transitions(frames, np.arange(0, 30), 1))
    state = buf.storage.state_dict()
    fresh = lambda: ReplayBuffer(capacity=20, shared_frames=SharedFrames()).storage  # noqa: E731
    out = {**state, "columns": {**state["columns"], "obs": [p + 1000 for p in state["columns"]["obs"]]}}
    with pytest.raises(ValueError, match=r"\['columns'\]\['obs'\] must hold frame slots in \[0, 24\)"):
        fresh().load_state_dict(out)
    hole = [p.copy() for p in state["columns"]["obs"]]
    hole[0][3, 1] = -1  # an obs frame no row can do without
    with pytest.raises(ValueError, match="-1 only past each row's step count"):
        fresh().load_state_dict({**state, "columns": {**state["columns"], "obs": hole}})
    with pytest.raises(ValueError, match=r"\['frames'\]\[0\] holds frames of shape \(12, 11\)"):
        fresh().load_state_dict({**state, "frames": [state["frames"][0][:, :, :11]]})
    with pytest.raises(ValueError, match="saved with shared_frames=SharedFrames"):
        ReplayBuffer(capacity=20).storage.load_state_dict(state)
    with pytest.raises(ValueError, match="holds pooled frames, but this storage has shared_frames=None"):
        ReplayBuffer(capacity=20).storage.load_state_dict({**state, "shared_frames": None})


def test_a_pickled_buffer_carries_only_the_used_slots_and_goes_on_sharing():
    streams = [stream(300, seed) for seed in range(2)]
    buf = PrioritizedReplayBuffer(capacity=100, seed=0, shared_frames=SharedFrames(shift=3))
    buf.add(interleaved(streams, 0, 40, 3))
    data = pickle.dumps(buf)
    assert len(data) < 2 * buf.storage.frames.high_water * SIDE * SIDE + 100_000  # not every slot
    back = pickle.loads(data)
    assert back.storage.frames.frames.shape == buf.storage.frames.frames.shape
    for b in (buf, back):
        b.add(interleaved(streams, 40, 30, 3))
    got, want = back.storage.gather(np.arange(100)), buf.storage.gather(np.arange(100))
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    check(got, streams, 3)
    assert back.storage.frames.live == buf.storage.frames.live == 140 + 2 * (STACK - 1 + 3)


def test_reserved_frames_cost_no_memory_until_written():
    # Far beyond this machine's memory and any overcommit heuristic's limit: address
    # space only.
    big = reserve(((1 << 36) // (84 * 84), 84, 84), np.uint8)
    assert big.nbytes > (1 << 36) - 84 * 84
    big[123] = 5
    assert big[123].sum() == 5 * 84 * 84 and big[124].sum() == 0
