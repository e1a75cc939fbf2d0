"""Streaming-store copies: byte-exact at every alignment and length, fallbacks, ring writes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import RingStorage
from rlpar.buffers.stream_copy import STREAM_MIN_BYTES, stream_copy, stream_copy_joined


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


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(0, 3), st.integers(1, 4))
def test_strided_rows_are_copied_exactly(row_extra, lo, width):
    # Rows of a column slice ([:, lo:lo+width] of wider rows): each row contiguous,
    # rows strided; odd row sizes exercise every row's head and tail.
    item = (width, 2000 + row_extra)
    rows = STREAM_MIN_BYTES // (width * 2000) + 2
    rng = np.random.default_rng(row_extra)
    src = rng.integers(0, 256, (rows, *item), dtype=np.uint8)
    col = np.zeros((rows + 2, 8, item[1]), np.uint8)
    dst = col[1 : rows + 1, lo : lo + width]
    assert not dst.flags.c_contiguous and dst.nbytes >= STREAM_MIN_BYTES
    stream_copy(dst, src)
    np.testing.assert_array_equal(dst, src)
    col[1 : rows + 1, lo : lo + width] = 0
    assert not col.any()  # nothing outside the slice was touched


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 3), st.integers(0, 1))
def test_joined_rows_are_copied_exactly(extra, tail, strided_b):
    # dst row = a row + b row: the shared-frames write (obs, then next_obs's newest
    # frames); odd widths put row and part boundaries off every alignment.
    width = 1000 + extra
    rows = STREAM_MIN_BYTES // ((4 + tail) * width) + 2
    rng = np.random.default_rng(extra)
    a = rng.integers(0, 256, (rows, 4, width), dtype=np.uint8)
    b_full = rng.integers(0, 256, (rows, 4, width), dtype=np.uint8)
    b = b_full[:, 4 - tail :] if strided_b else np.ascontiguousarray(b_full[:, 4 - tail :])
    col = np.zeros((rows + 2, 4 + tail, width), np.uint8)
    stream_copy_joined(col[1 : rows + 1], a, b)
    np.testing.assert_array_equal(col[1 : rows + 1, :4], a)
    np.testing.assert_array_equal(col[1 : rows + 1, 4:], b)
    assert not col[0].any() and not col[-1].any()


def test_joined_copy_falls_back_for_small_or_mismatched_parts():
    dst = np.zeros((3, 5, 2), np.float64)
    a = np.arange(24, dtype=np.int32).reshape(3, 4, 2)  # dtype differs: numpy casts
    b = np.ones((3, 1, 2), np.float64)
    stream_copy_joined(dst, a, b)
    np.testing.assert_array_equal(dst[:, :4], a)
    np.testing.assert_array_equal(dst[:, 4:], b)
