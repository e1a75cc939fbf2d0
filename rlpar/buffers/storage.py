"""Columnar ring storage: one preallocated array per field.

A batch of ``n`` rows is written with one slice copy per field (two when it
wraps past the end), so the cost of an insert is a handful of ``memcpy`` calls
regardless of ``n``; large ones use streaming stores (``stream_copy``). Every
item has a serial number (the count of items added before it); ``serial % capacity`` is its slot, and it stays there until item
``serial + capacity`` overwrites it. So a serial names both the slot and the
exact write (the per-slot version that lets priority updates for overwritten
slots be dropped), and both directions are arithmetic on ``next_serial``: no
per-slot array is stored or read (a random read costs a cache miss per item).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rlpar.buffers.frame_pool import FramePool
from rlpar.buffers.frames import SharedFrames
from rlpar.buffers.spec import FieldSpec, check_batch, infer_spec, normalize_spec
from rlpar.buffers.stream_copy import rows_of, stream_copy
from rlpar.state import StatePath, array, describe, integer, mapping, sequence

_POOL_MIN_BYTES = 1 << 18  # below this, a fresh np.empty is as cheap as reuse
_POOL_PER_SHAPE = 4
SPARE_ROWS = 256  # extra rows of a shared-frames column (see RingStorage._rows)


class OutputPool:
    """Recycles large output arrays once nothing references them any more.

    A fresh multi-megabyte array comes from ``mmap`` and costs a page fault per 4 KB
    on first write, which for a 256 x 2 x 28 KB frame batch takes longer than the
    copy itself. An array is handed out again only when the pool holds the sole
    reference to it (CPython reference count): the caller dropped the batch and no
    view, tensor (``torch.from_numpy`` keeps a reference) or dict still uses it, so
    what a caller holds is never overwritten.
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()  # two threads must not both claim a free array

    def __getstate__(self) -> dict:
        return {}  # a pickled copy (another process) starts with an empty pool

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < _POOL_MIN_BYTES:
            return np.empty(shape, dtype)
        with self._lock:
            arrays = self._arrays.setdefault((shape, dtype.str), [])
            for i in range(len(arrays)):
                # 2 = the pool's list slot + getrefcount's own argument.
                if sys.getrefcount(arrays[i]) == 2:
                    return arrays[i]
            out = np.empty(shape, dtype)
            if len(arrays) < _POOL_PER_SHAPE:
                arrays.append(out)
            return out


class RingStorage:
    """Fixed-capacity FIFO of transitions stored column by column.

    With ``shared_frames``, an observation stack and the next one are stored as one
    column of frame slots in a pool where each distinct frame is stored once (see
    :mod:`rlpar.buffers.frames`); ``spec`` and the batches going in and out keep both
    fields at their own shapes.
    """

    def __init__(
        self,
        *,
        capacity: int,
        spec: Mapping[str, Any] | None = None,
        shared_frames: SharedFrames | None = None,
    ) -> None:
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, (int, np.integer))
            or capacity <= 0
        ):
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if shared_frames is not None and not isinstance(shared_frames, SharedFrames):
            raise TypeError(f"shared_frames must be a SharedFrames, got {shared_frames!r}")
        self.capacity = int(capacity)
        self.shared = shared_frames
        self.spec: dict[str, FieldSpec] | None = None
        self.columns: dict[str, np.ndarray] = {}
        self.frames: FramePool | None = None  # with shared_frames: the distinct frames
        self.next_serial = 0  # items ever added; the next item's serial
        self._pool = OutputPool()
        if spec is not None:
            self._allocate(normalize_spec(spec))

    def _allocate(self, spec: dict[str, FieldSpec]) -> None:
        stored = spec if self.shared is None else self.shared.stored_spec(spec)
        self.spec = spec
        # np.empty leaves pages untouched until written, so a large, mostly empty
        # buffer costs no resident memory.
        self.columns = {}
        for k, f in stored.items():
            if self.shared is not None and k == self.shared.obs:
                # Each row's frame slots (-1: none); the frames are in the pool.
                self.columns[k] = np.full((self._rows(k), f.shape[0]), -1, np.int64)
            else:
                self.columns[k] = np.empty((self._rows(k), *f.shape), f.dtype)
        if self.shared is not None:
            frames = stored[self.shared.obs]
            rows = self._rows(self.shared.obs)
            self.frames = FramePool(frame_shape=frames.shape[1:], dtype=frames.dtype, rows=rows,
                                    per_row=frames.shape[0])

    def _rows(self, name: str) -> int:
        """Rows of a column: ``capacity``, and ``SPARE_ROWS`` more for shared frames,
        where the item of serial ``x`` lives in row ``x % rows``. An add of up to
        ``SPARE_ROWS`` items then writes only rows of items already evicted, so it
        can check each row's frames as it pools them (one pass over the input) and
        still leave every live row untouched when a row turns out bad."""
        if self.shared is not None and name == self.shared.obs:
            return self.capacity + SPARE_ROWS
        return self.capacity

    def __len__(self) -> int:
        return min(self.next_serial, self.capacity)

    @property
    def cursor(self) -> int:
        """Slot the next item goes to."""
        return self.next_serial % self.capacity

    def validate(self, batch: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """Check ``batch`` (allocating columns from it on first use); return arrays, size."""
        if self.spec is None:
            spec = infer_spec(batch)
            arrays, n = check_batch(spec, batch)
            self._allocate(spec)
        else:
            arrays, n = check_batch(self.spec, batch)
        if self.shared is not None:
            # A larger add would overwrite live rows before finding a bad one, and one
            # beyond capacity skips rows that are never written: check those first.
            check = n > SPARE_ROWS or n > self.capacity
            arrays = self.shared.prepare(arrays, self.spec, check=check)
        return arrays, n

    def write(self, arrays: Mapping[str, np.ndarray], n: int) -> tuple[int, int]:
        """Write ``n`` validated rows; return ``(first_serial, n_written)``.

        When ``n`` exceeds the capacity only the newest ``capacity`` rows survive,
        exactly as if they had been added one at a time.
        """
        first = self.next_serial
        if n == 0:
            return first, 0
        skip = max(0, n - self.capacity)
        m = n - skip
        start = (first + skip) % self.capacity
        end = start + m
        if self.shared is not None:  # first: it may still refuse the batch
            steps = np.empty(n, np.uint8)
            refs = self.columns[self.shared.obs]
            steps[skip:] = self.shared.write(refs, self.frames, first + skip, arrays, skip, n)
            arrays = {**arrays, self.shared.steps_field: steps}
        if end <= self.capacity:
            self._put(start, end, arrays, skip, n)
        else:
            k = self.capacity - start
            self._put(start, self.capacity, arrays, skip, skip + k)
            self._put(0, end - self.capacity, arrays, skip + k, n)
        self.next_serial = first + n
        return first + skip, m

    def _put(self, start: int, end: int, arrays: Mapping[str, np.ndarray], lo: int, hi: int) -> None:
        """Rows ``lo:hi`` of ``arrays`` into slots ``start:end``."""
        for name, col in self.columns.items():
            if self.shared is None or name != self.shared.obs:  # shared frames: written
                stream_copy(col[start:end], arrays[name][lo:hi])

    def serials_of(self, slots: np.ndarray) -> np.ndarray:
        """Serials of the items now in ``slots`` (which must be filled)."""
        last = self.next_serial - 1
        return last - (last - slots) % self.capacity

    def live(self, serials: np.ndarray) -> np.ndarray:
        """Which ``serials`` (all ``< next_serial``) are still stored."""
        return serials >= self.next_serial - self.capacity

    @property
    def serials(self) -> np.ndarray:
        """Serial of the item in every slot (-1 where nothing was written yet)."""
        out = np.full(self.capacity, -1, dtype=np.int64)
        n = len(self)
        if n:
            out[:n] = self.serials_of(np.arange(n))
        return out

    def gather(self, slots: np.ndarray, *, split: bool = True) -> dict[str, np.ndarray]:
        """Arrays holding the rows at ``slots``, owned by the caller (large ones are
        recycled from an :class:`OutputPool` only after the caller dropped them).
        ``split=False`` leaves shared frames as stored (a shard's reply: fewer bytes
        on the wire; the sampler splits the merged batch)."""
        n = len(slots)
        out = {}
        for k, col in self.columns.items():
            rows = slots if len(col) == self.capacity else self.serials_of(slots) % len(col)
            if self.shared is not None and k == self.shared.obs:
                dst = self._pool.empty((n, col.shape[1], *self.frames.frame_shape), self.frames.dtype)
                out[k] = self.frames.take(col[rows], dst)
            elif col.ndim == 1:
                out[k] = col[rows]  # numpy's fastest path for 1-D gathers
            else:
                # np.take on axis 0 copies whole rows with one memcpy each (2-D
                # fancy indexing is ~2x slower); mode="clip" lets it write to out.
                dst = self._pool.empty((n, *col.shape[1:]), col.dtype)
                out[k] = col.take(rows, axis=0, out=dst, mode="clip")
        if split and self.shared is not None and self.columns:
            out = self.shared.split(out, self._pool.empty)
            out = {k: out[k] for k in self.spec}
        return out

    def state_dict(self) -> dict[str, Any]:
        """Capacity, layout and the stored rows. Each column's rows are saved in serial
        order (oldest first) as one or two slices of the column itself (two when they
        wrap), never gathered into a copy; with shared frames, the frame pool's used
        slots as one slice too (1M Atari transitions hold about 7 GB of frames)."""
        n = len(self)
        state = {
            "capacity": self.capacity,
            "next_serial": self.next_serial,
            "shared_frames": None if self.shared is None else self.shared.to_state(),
            "spec": None
            if self.spec is None
            else {k: (list(f.shape), f.dtype.str) for k, f in self.spec.items()},
            "columns": {
                k: [col[rows] for rows in self._serial_rows(col, n)]
                for k, col in self.columns.items()
            },
        }
        if self.frames is not None:
            state["frames"] = [self.frames.frames[: self.frames.high_water]]
        return state

    def _serial_rows(self, col: np.ndarray, n: int) -> list[slice]:
        """Slices of ``col`` holding the newest ``n`` items, oldest first (the item of
        serial ``x`` lives in row ``x % len(col)``)."""
        if n == 0:
            return []
        start = (self.next_serial - n) % len(col)
        if start + n <= len(col):
            return [slice(start, start + n)]
        return [slice(start, len(col)), slice(0, start + n - len(col))]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.restore(self.check_state(state, where=StatePath.of(self)))

    def check_state(self, state: Any, *, where: StatePath) -> Restore:
        """What :meth:`state_dict` returned, checked against this storage (capacity,
        layout, declared spec) without changing it; StateError names what is wrong."""
        # Older states have no shared_frames, nor frames (their shared frames were stored
        # per row: interned into the pool on restore).
        state = mapping(state, where, required=("capacity", "next_serial", "spec", "columns"),
                        optional=("shared_frames", "frames"))
        capacity = integer(state["capacity"], where["capacity"], low=1)
        if capacity != self.capacity:
            raise where["capacity"].error(f"is {capacity}, this storage's capacity is {self.capacity}")
        saved = state.get("shared_frames")
        try:
            saved = None if saved is None else SharedFrames.from_state(saved)
        except ValueError as exc:
            raise where["shared_frames"].error(str(exc)) from None
        # A plain state into the layout that holds obs and next_obs whole (shift = the
        # stack): its rows are pooled on restore. Replays of n-step transitions with n
        # >= the stack were kept plain before that layout existed.
        plain = saved is None and self.shared is not None and "frames" not in state and self._whole(state)
        if saved != self.shared and not plain:
            raise where["shared_frames"].error(
                f"was saved with shared_frames={saved}, this storage has {self.shared}")
        # Serials are int64 (the sampler's index arithmetic): a larger one cannot be used.
        next_serial = integer(state["next_serial"], where["next_serial"], low=0, high=2**62)
        spec = self._check_spec(state["spec"], where["spec"])
        columns = mapping(state["columns"], where["columns"], optional=None)
        if spec is None:
            # No spec: nothing was ever added (the declared spec, if any, stays).
            if next_serial or columns:
                raise where["spec"].error(
                    f"is None (nothing added), but next_serial is {next_serial} and "
                    f"columns {list(columns)}")
            return Restore(None, 0, {})
        stored = spec if self.shared is None or plain else self.shared.stored_spec(spec)
        pooled = self.shared is not None and "frames" in state
        if "frames" in state and not pooled:
            raise where["frames"].error("holds pooled frames, but this storage has shared_frames=None")
        layout = dict(stored)
        if pooled:  # obs's column: each row's frame slots
            layout[self.shared.obs] = FieldSpec((stored[self.shared.obs].shape[0],), np.dtype(np.int64))
        columns = mapping(columns, where["columns"], required=list(layout))
        n = min(next_serial, self.capacity)
        parts = {k: self._check_column(columns[k], where["columns"][k], field, n)
                 for k, field in layout.items()}
        frames = None
        if plain:
            obs, nxt = (parts[name] for name in (self.shared.obs, self.shared.next_obs))
            if [len(p) for p in obs] != [len(p) for p in nxt]:  # pooled pairwise on restore
                raise where["columns"][self.shared.next_obs].error(
                    f"holds parts of {[len(p) for p in nxt]} rows, {self.shared.obs!r} of {[len(p) for p in obs]}")
            k = spec[self.shared.obs].shape[0]
            parts[self.shared.steps_field] = [np.full(len(p), k, np.uint8) for p in parts[self.shared.obs]]
            return Restore(spec, next_serial, parts, plain=True)
        if self.shared is not None and n:
            # The step count of each row picks next_obs's frames when sampling.
            steps = np.concatenate(parts[self.shared.steps_field])
            if steps.min() < 1 or steps.max() > self.shared.shift:
                raise where["columns"][self.shared.steps_field].error(
                    f"must hold step counts in [1, {self.shared.shift}], got "
                    f"[{steps.min()}, {steps.max()}]")
        if pooled:
            frames = self._check_frames(state["frames"], where, stored[self.shared.obs], parts, n)
        return Restore(spec, next_serial, parts, frames)

    def _whole(self, state: Mapping[str, Any]) -> bool:
        """Whether a plain state's spec has obs and next_obs stacks as long as this
        storage's shift (the layout that stores both whole); False for anything else,
        which check_state then refuses as a layout that differs."""
        spec = state.get("spec")
        try:
            shape = spec[self.shared.obs][0]
            return spec[self.shared.next_obs] == spec[self.shared.obs] and int(shape[0]) == self.shared.shift
        except (TypeError, KeyError, IndexError, ValueError):
            return False

    def _check_frames(self, value: Any, where: StatePath, frames: FieldSpec, parts: dict, n: int) -> list:
        """A saved frame pool: arrays of frames, and every saved row's slots in range
        (-1 only where the row's step count leaves a place unused)."""
        shape = frames.shape[1:]
        out = [array(p, where["frames"][i], ndim=len(shape) + 1, dtype=frames.dtype)
               for i, p in enumerate(sequence(value, where["frames"]))]
        for i, p in enumerate(out):
            if p.shape[1:] != shape:
                raise where["frames"][i].error(f"holds frames of shape {p.shape[1:]}; expected {shape}")
        count = sum(len(p) for p in out)
        if count > frames.shape[0] * self._rows(self.shared.obs):
            raise where["frames"].error(f"holds {count} frames, more than this storage's rows can refer to")
        if n:
            refs = np.concatenate(parts[self.shared.obs])
            steps = np.concatenate(parts[self.shared.steps_field])
            used = np.arange(refs.shape[1]) < (refs.shape[1] - self.shared.shift + steps.astype(np.int64))[:, None]
            if refs.max() >= count or refs.min() < -1 or (refs[used] < 0).any():
                where_ = where["columns"][self.shared.obs]
                raise where_.error(f"must hold frame slots in [0, {count}) (the saved frames), -1 only past "
                                   f"each row's step count; got [{refs.min()}, {refs.max()}]")
        return out

    def _check_spec(self, value: Any, where: StatePath) -> dict[str, FieldSpec] | None:
        if value is None:
            return None
        spec = {}
        for name, field in mapping(value, where, optional=None).items():
            if not isinstance(name, str):
                raise where.error(f"has a field name {name!r} that is not a str")
            shape, dtype = sequence(field, where[name], length=2)
            dims = [integer(s, where[name][0][i]) for i, s in enumerate(sequence(shape, where[name][0]))]
            try:  # state_dict saves dtype.str; np.dtype(None) would be float64
                dtype = np.dtype(dtype) if isinstance(dtype, str) else None
            except (TypeError, ValueError, KeyError):
                dtype = None
            if dtype is None:
                raise where[name][1].error(f"is not a numpy dtype string, got {describe(field[1])}")
            if dtype.kind not in "biuf":
                raise where[name][1].error(f"is dtype {dtype}; only numeric/bool columns are stored")
            spec[name] = FieldSpec(tuple(dims), dtype)
        if not spec:
            raise where.error("holds no field (a spec has at least one)")
        if self.spec is not None and spec != self.spec:
            differ = sorted(set(spec) ^ set(self.spec)) or [k for k in spec if spec[k] != self.spec[k]]
            saved = {k: spec.get(k) for k in differ}
            raise where.error(f"differs from this storage's spec at {differ}: saved {saved}, "
                              f"this storage has { {k: self.spec.get(k) for k in differ} }")
        if self.shared is not None:
            try:
                self.shared.stored_spec(spec)
            except ValueError as exc:
                raise where.error(f"does not fit shared_frames={self.shared}: {exc}") from None
        return spec

    def _check_column(self, value: Any, where: StatePath, field: FieldSpec, n: int) -> list[np.ndarray]:
        """A column's saved rows: arrays of ``field``'s item shape and dtype, ``n`` rows in all."""
        parts = [array(p, where[i], ndim=len(field.shape) + 1, dtype=field.dtype)
                 for i, p in enumerate(sequence(value, where))]
        for i, p in enumerate(parts):
            if p.shape[1:] != field.shape:
                raise where[i].error(f"holds rows of shape {p.shape[1:]}; expected {field.shape}")
        rows = sum(len(p) for p in parts)
        if rows != n:
            raise where.error(f"holds {rows} rows; expected {n} (min(next_serial, capacity))")
        return parts

    def restore(self, checked: Restore) -> None:
        """Put in a state that :meth:`check_state` accepted (nothing here can fail)."""
        if checked.spec is not None and checked.spec != self.spec:
            self._allocate(checked.spec)
        self.next_serial = checked.next_serial  # before _serial_rows, which reads it
        n = len(self)
        for k, col in self.columns.items():
            if self.shared is not None and k == self.shared.obs:
                self._restore_frames(col, checked, n)
            elif n:
                _copy_rows([col[rows] for rows in self._serial_rows(col, n)], checked.parts[k])

    def _restore_frames(self, refs: np.ndarray, checked: Restore, n: int) -> None:
        """The frame slots' column and the pool, from a pooled state (slots as saved)
        or from frames saved per row (pooled again here)."""
        refs.fill(-1)  # rows not restored hold no frames
        if checked.plain:
            from rlpar.buffers.frame_pool_kernel import intern_rows

            self.frames.reset()
            done = 0
            for obs, nxt in zip(checked.parts[self.shared.obs], checked.parts[self.shared.next_obs], strict=True):
                steps = np.empty(len(obs), np.uint8)  # every row fits: shift = the stack
                intern_rows(refs, self.next_serial - n + done, rows_of(obs), rows_of(nxt), self.frames.frame_bytes,
                            self.shared.shift, steps, *self.frames.kernel_args())
                done += len(obs)
            return
        if checked.frames is not None:
            if n:
                _copy_rows([refs[rows] for rows in self._serial_rows(refs, n)], checked.parts[self.shared.obs])
            self.frames.load(checked.frames, refs)
            return
        from rlpar.buffers.frame_pool_kernel import intern_stored

        self.frames.reset()
        if not n:
            return
        steps = np.concatenate(checked.parts[self.shared.steps_field])
        k = refs.shape[1] - self.shared.shift
        done = 0
        for part in checked.parts[self.shared.obs]:
            intern_stored(refs, self.next_serial - n + done, rows_of(part), self.frames.frame_bytes, k,
                          steps[done : done + len(part)], *self.frames.kernel_args())
            done += len(part)


class Restore(NamedTuple):
    """A checked storage state: its spec (None: nothing added), serial, rows per column,
    and with shared frames the pool's saved frames (None: saved per row); ``plain``: a
    state saved without shared frames, whose obs and next_obs rows are pooled."""

    spec: dict[str, FieldSpec] | None
    next_serial: int
    parts: dict[str, list[np.ndarray]]
    frames: list[np.ndarray] | None = None
    plain: bool = False


def _copy_rows(dst: list[np.ndarray], src: list[np.ndarray]) -> None:
    """Copy the rows of ``src`` (arrays in order) into those of ``dst`` (same total)."""
    i = j = at_dst = at_src = 0
    while i < len(dst) and j < len(src):
        k = min(len(dst[i]) - at_dst, len(src[j]) - at_src)
        dst[i][at_dst : at_dst + k] = src[j][at_src : at_src + k]
        at_dst, at_src = at_dst + k, at_src + k
        if at_dst == len(dst[i]):
            i, at_dst = i + 1, 0
        if at_src == len(src[j]):
            j, at_src = j + 1, 0
