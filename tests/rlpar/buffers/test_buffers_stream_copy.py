"""Streaming-store copies: byte-exact at every alignment and length, fallbacks, ring writes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import RingStorage
from rlpar.buffers.stream_copy import STREAM_MIN_BYTES, stream_copy


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 3 * 16 + 5),  # extra bytes past the threshold: head/tail remainders
    st.integers(0, 31),  # destination misalignment
    st.integers(0, 31),  # source misalignment
)
def test_copy_is_exact_and_stays_in_bounds(extra, dst_off, src_off):
    n = STREAM_MIN_BYTES + extra
    rng = np.random.default_rng(extra)
    dst_mem = np.zeros(n + 64, np.uint8)
    src_mem = rng.integers(0, 256, n + 64, dtype=np.uint8)
    dst, src = dst_mem[dst_off : dst_off + n], src_mem[src_off : src_off + n]
    stream_copy(dst, src)
    np.testing.assert_array_equal(dst, src)
    assert not dst_mem[:dst_off].any() and not dst_mem[dst_off + n :].any()


def test_multidimensional_rows():
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, (40, 4, 84, 84), dtype=np.uint8)
    dst = np.zeros((100, 4, 84, 84), np.uint8)
    stream_copy(dst[30:70], src)
    np.testing.assert_array_equal(dst[30:70], src)
    assert not dst[:30].any() and not dst[70:].any()


@pytest.mark.parametrize(
    "src",
    [
        np.arange(STREAM_MIN_BYTES // 8, dtype=np.int64)[::-1],  # negative stride
        np.arange(STREAM_MIN_BYTES, dtype=np.int32),  # dtype differs: numpy casts
        np.arange(8, dtype=np.float64),  # small: plain assignment
        np.float64(3.0),  # broadcast
    ],
)
def test_fallbacks_keep_numpy_semantics(src):
    n = np.asarray(src).size if np.ndim(src) else 8
    dst, expect = np.zeros(n, np.float64), np.zeros(n, np.float64)
    stream_copy(dst, src)
    expect[...] = src
    np.testing.assert_array_equal(dst, expect)


def test_read_only_destination_raises_like_numpy():
    dst = np.zeros(STREAM_MIN_BYTES, np.uint8)
    dst.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        stream_copy(dst, np.ones_like(dst))


def test_ring_storage_frame_writes_wrap_exactly():
    # 64 frame rows per add (1.8 MB per field): the streaming path, across the wrap.
    rng = np.random.default_rng(1)
    storage = RingStorage(capacity=100)
    kept = {}
    for start in range(0, 256, 64):
        frames = rng.integers(0, 256, (64, 4, 84, 84), dtype=np.uint8)
        arrays, n = storage.validate({"obs": frames, "action": np.arange(start, start + 64)})
        storage.write(arrays, n)
        kept.update({start + i: frames[i] for i in range(64)})
    slots = np.arange(100)
    got = storage.gather(slots)
    for slot, serial in zip(slots, storage.serials_of(slots)):
        assert got["action"][slot] == serial
        np.testing.assert_array_equal(got["obs"][slot], kept[serial])
