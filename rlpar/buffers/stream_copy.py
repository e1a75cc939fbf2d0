"""Copies into replay storage with non-temporal (streaming) stores.

A row written into a replay ring is read back only when some later sample happens
to pick it, long after it left every cache. An ordinary store first reads the
destination line into the cache (read-for-ownership) and then evicts something
useful to make room; a non-temporal store writes the line straight to memory. For
frame-sized rows (a chunk of 64 Atari transitions is 3.6 MB) that removes a third
of the memory traffic of an insert: about 1.8x more transitions/s on the 2-core
benchmark machine (``python -m experiments.bench.components.replay --cases atari``).

Small copies keep plain numpy assignment: below ``STREAM_MIN_BYTES`` the call
overhead and the cache bypass (a small batch may well be read soon) cost more
than they save. The kernel (``stream_kernel``) loads on the first large copy and is
cached on disk like the tree kernels.
"""

from __future__ import annotations

import math

import numpy as np

STREAM_MIN_BYTES = 1 << 18

_kernel = None


def stream_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``; large C-contiguous same-dtype copies bypass the cache."""
    if (
        dst.nbytes < STREAM_MIN_BYTES
        or dst.dtype != src.dtype
        or dst.shape != src.shape
        or not dst.flags.c_contiguous
        or not src.flags.c_contiguous
        or not dst.flags.writeable
    ):
        dst[...] = src
        return
    global _kernel
    if _kernel is None:
        from rlpar.buffers.stream_kernel import stream_copy_bytes

        _kernel = stream_copy_bytes
    _kernel(dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8))


def rows_of(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a 2-D uint8 array of its rows' bytes, for the kernels; no copy when
    each row is contiguous (the rows may be strided, as in ``obs[:, 1:]``)."""
    row = math.prod(arr.shape[1:])
    if arr.ndim < 2 or not (len(arr) and arr[0].flags.c_contiguous):
        arr = np.ascontiguousarray(arr)
    view = arr.view()
    view.shape = (arr.shape[0], row)  # raises rather than copying
    return view.view(np.uint8)
