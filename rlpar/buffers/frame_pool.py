"""A pool of distinct frames shared by every stored transition that shows them.

Consecutive transitions of one env repeat most of their frames: with a stack of 4
and n-step returns, transition ``t``'s next_obs holds frames ``t+1 .. t+n+3`` and
transition ``t+1``'s obs holds ``t-2 .. t+1``, so in a stream each transition brings
one frame the pool has not seen (a 1M-transition Atari replay with 3-step returns:
about 7 GB of frames instead of 49 GB with each transition's 7 distinct frames stored
once, 56 GB with none shared). The pool finds a frame it holds by content (a hash,
then a byte compare), so it needs no env ids, stream order or episode boundaries:
any insertion order, shard or resumed state stores the same way, and duplicates
across envs (the reset screen) are stored once too.

Each stored row holds ``k + shift`` slot numbers (the :class:`SharedFrames` layout:
obs's frames, then next_obs's newest); a slot counts the rows that refer to it and
is freed when that count drops to zero (its row overwritten). Frames are reserved
for the worst case (no frame shared: every row's ``k + shift``) as address space
only, and freed slots are reused newest first, so the resident pages are those of
the most frames ever live at once.
"""

from __future__ import annotations

import math
import mmap
import sys

import numpy as np

from rlpar.buffers.stream_copy import rows_of


def reserve(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized array whose pages cost memory only once written. The address
    space is reserved without commit accounting (``MAP_NORESERVE``), so a pool sized
    for the worst case is allowed beside a heuristic overcommit limit."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    # Python < 3.13 has no mmap.MAP_NORESERVE; Linux's value is 0x4000 on every arch.
    noreserve = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | noreserve
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), dtype).reshape(shape)


class FramePool:
    """Distinct frames of ``frame_shape`` and ``dtype``, for ``rows`` rows of
    ``per_row`` references each."""

    def __init__(self, *, frame_shape: tuple[int, ...], dtype: np.dtype, rows: int, per_row: int) -> None:
        self.frame_shape = tuple(frame_shape)
        self.dtype = np.dtype(dtype)
        self.slots = rows * per_row  # no frame shared at all
        self._allocate_slots()
        # About one live frame per row in a stream, filed in groups of 4 entries (see
        # the kernels): 4 entries per row.
        self.table = np.full(1 << max(4, (4 * rows - 1).bit_length()), -1, np.int64)
        # Slots ever used (high water), free count, frames filed (the table's clock).
        self.state = np.zeros(3, np.int64)

    def __getstate__(self) -> dict:
        """Only the used slots travel (a pickled buffer, e.g. sent to another process):
        the rest is unwritten address space, which a copy would make real memory."""
        high = self.high_water
        state = dict(self.__dict__)
        for name in ("frames", "refcount", "hashes", "free"):
            state[name] = getattr(self, name)[:high].copy()
        return state

    def __setstate__(self, state: dict) -> None:
        used = {name: state.pop(name) for name in ("frames", "refcount", "hashes", "free")}
        self.__dict__.update(state)
        self._allocate_slots()
        for name, part in used.items():
            getattr(self, name)[: len(part)] = part

    def _allocate_slots(self) -> None:
        """Every slot's frame, reference count, hash and free-list entry, as address
        space: np.zeros gives calloc'd pages, untouched (no memory) until a slot is used."""
        self.frames = reserve((self.slots, *self.frame_shape), self.dtype)
        self.refcount = np.zeros(self.slots, np.int64)
        self.hashes = np.zeros(self.slots, np.uint64)
        self.free = np.zeros(self.slots, np.int64)

    @property
    def live(self) -> int:
        """Frames referenced by some row: every used slot but the freed ones."""
        return int(self.state[0] - self.state[1])

    @property
    def high_water(self) -> int:
        """Slots ever used: the frames' resident pages."""
        return int(self.state[0])

    @property
    def frame_bytes(self) -> int:
        return math.prod(self.frame_shape) * self.dtype.itemsize

    def kernel_args(self) -> tuple:
        """The pool's arrays as the kernels take them."""
        return (rows_of(self.frames), self.refcount, self.hashes, self.free, self.table, self.state)

    def take(self, refs: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[i, j] = frames[refs[i, j]]`` (slot -1, an unused place: slot 0)."""
        flat = out.reshape(-1, *self.frame_shape)
        self.frames.take(refs.reshape(-1), axis=0, out=flat, mode="clip")
        return out

    def reset(self) -> None:
        """Empty (every row's references dropped with it)."""
        self.refcount[: self.high_water] = 0
        self.table.fill(-1)
        self.state[:] = 0

    def load(self, frames: list[np.ndarray], refs: np.ndarray) -> None:
        """Hold ``frames`` (concatenated, in slot order) as the only frames, referenced
        by ``refs`` (every row's slots; -1 for none), which must all be below their count."""
        from rlpar.buffers.frame_pool_kernel import file_frames

        self.reset()
        high = 0
        for part in frames:
            self.frames[high : high + len(part)] = part
            high += len(part)
        used = refs[refs >= 0]
        self.refcount[:high] = np.bincount(used, minlength=high)
        unused = np.flatnonzero(self.refcount[:high] == 0)
        # Freed newest first: the lowest unused slot is taken first.
        self.free[: len(unused)] = unused[::-1]
        self.state[:] = (high, len(unused), 0)
        file_frames(rows_of(self.frames), self.refcount, self.hashes, self.table, high)
