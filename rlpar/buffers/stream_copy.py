"""Copies into replay storage with non-temporal (streaming) stores.

A row written into a replay ring is read back only when some later sample happens
to pick it, long after it left every cache. An ordinary store first reads the
destination line into the cache (read-for-ownership) and then evicts something
useful to make room; a non-temporal store writes the line straight to memory. For
frame-sized rows (a chunk of 64 Atari transitions is 3.6 MB) that removes a third
of the memory traffic of an insert: about 1.8x more transitions/s on the 2-core
benchmark machine (``python -m experiments.bench.replay --cases atari``).

Small copies keep plain numpy assignment: below ``STREAM_MIN_BYTES`` the call
overhead and the cache bypass (a small batch may well be read soon) cost more
than they save. The kernel (``stream_kernel``) loads on the first large copy and is
cached on disk like the tree kernels.
"""

from __future__ import annotations

import math

import numpy as np

STREAM_MIN_BYTES = 1 << 18

_kernels = None


def _loaded():
    global _kernels
    if _kernels is None:
        from rlpar.buffers.stream_kernel import (
            stream_copy_bytes,
            stream_copy_joined_rows,
            stream_copy_rows,
        )

        _kernels = stream_copy_bytes, stream_copy_rows, stream_copy_joined_rows
    return _kernels


def stream_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``; large same-dtype copies whose rows are contiguous bypass the
    cache (the rows of ``dst`` may be strided: a slice of a shared-frames column)."""
    contiguous = dst.flags.c_contiguous and src.flags.c_contiguous
    if (
        dst.nbytes < STREAM_MIN_BYTES
        or dst.dtype != src.dtype
        or dst.shape != src.shape
        or not dst.flags.writeable
        or not (contiguous or (_rows_contiguous(dst) and _rows_contiguous(src)))
    ):
        dst[...] = src
        return
    if contiguous:
        _loaded()[0](dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8))
    else:
        _loaded()[1](rows_of(dst), rows_of(src))


def stream_copy_joined(dst: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``dst[:, :k] = a; dst[:, k:] = b`` (``k = a.shape[1]``), row by row, so that
    each destination row is written front to back in one pass."""
    k = a.shape[1]
    if (
        dst.nbytes < STREAM_MIN_BYTES
        or not dst.dtype == a.dtype == b.dtype
        or dst[:, :k].shape != a.shape
        or dst[:, k:].shape != b.shape
        or not dst.flags.writeable
        or not all(_rows_contiguous(x) for x in (dst, a, b))
    ):
        dst[:, :k] = a
        dst[:, k:] = b
        return
    _loaded()[2](rows_of(dst), rows_of(a), rows_of(b))


def _rows_contiguous(arr: np.ndarray) -> bool:
    return arr.ndim >= 2 and arr.shape[0] > 0 and arr[0].flags.c_contiguous


def rows_of(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a 2-D uint8 array of its rows' bytes; no copy when each row is
    contiguous (the rows may be strided, as in a slice of a shared-frames column)."""
    row = math.prod(arr.shape[1:])
    if not _rows_contiguous(arr):
        arr = np.ascontiguousarray(arr)
    view = arr.view()
    view.shape = (arr.shape[0], row)  # raises rather than copying
    return view.view(np.uint8)
