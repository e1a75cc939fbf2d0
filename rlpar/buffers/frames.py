"""Frame sharing: an observation stack and the next one stored as one array.

With frame stacking (Atari: the last 4 frames), ``next_obs`` repeats most of
``obs``: for a transition over ``s`` env steps (1, or ``n`` for n-step returns),
``next_obs[:k - s] == obs[s:]`` along the stack axis. Storing the ``k + s``
distinct frames once, instead of ``2k``, cuts what an insert writes and what a
sample reads and writes (5 frames instead of 8 for Atari 1-step): sampling hands
out ``obs`` and ``next_obs`` as two overlapping views of one gathered array.

Each row's step count is found on insert by comparing frames, not assumed: n-step
windows flushed at an episode's end span fewer than ``n`` steps, and they are
stored with their own count (a batch that contains one gets ``next_obs`` as a
copy instead of a view). A row that continues its ``obs`` by no count from 1 to
``shift`` is refused with its index named, and nothing of its batch is stored.
Each row is checked before its frames are pooled, and the column has spare rows
(``RingStorage._rows``), so an insert writes only rows of evicted items until it
has seen every row.

A ``shift`` equal to the stack ``k`` lays a row out as obs's ``k`` frames, then
next_obs's ``k``, and every row fits (step count ``k``): the layout of n-step returns
with ``n >= k``, where obs and next_obs share no frame. Each distinct frame is still
stored once across transitions (the pool below), which is most of the saving.

Frames are shared across transitions too: the stored column holds, per row, the
slots of its ``k + shift`` frames in a :class:`~rlpar.buffers.frame_pool.FramePool`,
where each distinct frame is stored once however many rows show it (in an env's
stream, one new frame per transition). Sampling gathers the frames back into this
layout, so shards' replies and what a sampler splits are as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlpar.buffers.spec import FieldSpec
from rlpar.buffers.stream_copy import rows_of

if TYPE_CHECKING:
    from rlpar.buffers.frame_pool import FramePool


@dataclass(frozen=True)
class SharedFrames:
    """Store ``next_obs`` inside ``obs``'s column: the two are stacks of ``k``
    frames (stack axis first), ``next_obs`` ``shift`` steps (or fewer) ahead."""

    obs: str = "obs"
    next_obs: str = "next_obs"
    shift: int = 1

    def __post_init__(self) -> None:
        if self.obs == self.next_obs:
            raise ValueError(f"SharedFrames needs two different fields, got {self.obs!r} twice")
        if isinstance(self.shift, bool) or not isinstance(self.shift, int) or self.shift < 1:
            raise ValueError(f"SharedFrames.shift must be an int >= 1, got {self.shift!r}")
        if self.shift > 255:
            raise ValueError(f"SharedFrames.shift must be at most 255, got {self.shift}")

    @classmethod
    def for_steps(cls, n_step: int, *, stack: int) -> SharedFrames:
        """The layout of transitions over ``n_step`` env steps of ``stack``-frame
        stacks: next_obs continues obs by ``n_step``, or, from ``n_step >= stack`` on,
        shares no frame with it (shift = the stack: both held whole)."""
        return cls(shift=min(n_step, stack))

    def to_state(self) -> list:
        """Plain values for a state dict (``torch.load(weights_only=True)`` takes them)."""
        return [self.obs, self.next_obs, self.shift]

    @classmethod
    def from_state(cls, state: Any) -> SharedFrames:
        """The inverse of :meth:`to_state`; ValueError for anything else (it comes
        from a checkpoint, and str()/int() would turn junk into a layout)."""
        if not isinstance(state, (list, tuple)) or len(state) != 3:
            raise ValueError(f"must be [obs, next_obs, shift], got {state!r}")
        obs, next_obs, shift = state
        if not isinstance(obs, str) or not isinstance(next_obs, str) or not isinstance(shift, int):
            raise ValueError(f"must be [obs, next_obs, shift] (str, str, int), got {state!r}")
        return cls(obs, next_obs, shift)

    @property
    def steps_field(self) -> str:
        """The stored column of per-row step counts."""
        return f"{self.obs}.steps"

    def stored_spec(self, spec: Mapping[str, FieldSpec]) -> dict[str, FieldSpec]:
        """The columns actually stored for a logical ``spec``: ``obs`` widened to
        ``k + shift`` frames, each row's step count, no ``next_obs`` column."""
        for name in (self.obs, self.next_obs):
            if name not in spec:
                raise ValueError(f"SharedFrames field {name!r} is not in the spec {sorted(spec)}")
        if self.steps_field in spec:
            raise ValueError(f"field {self.steps_field!r} is reserved by SharedFrames")
        o, n = spec[self.obs], spec[self.next_obs]
        if o != n:
            raise ValueError(
                f"SharedFrames fields must have equal shape and dtype: {self.obs!r} is "
                f"{o.shape} {o.dtype}, {self.next_obs!r} is {n.shape} {n.dtype}"
            )
        if len(o.shape) < 1 or o.shape[0] < self.shift:
            raise ValueError(
                f"SharedFrames needs a stack axis at least shift={self.shift} long "
                f"(shift = stack: next_obs shares no frame with obs): {self.obs!r} has shape {o.shape}"
            )
        out = {}
        for name, field in spec.items():
            if name == self.obs:
                out[name] = FieldSpec((o.shape[0] + self.shift, *o.shape[1:]), o.dtype)
                out[self.steps_field] = FieldSpec((), np.uint8)
            elif name != self.next_obs:
                out[name] = field
        return out

    def prepare(
        self, arrays: Mapping[str, np.ndarray], spec: Mapping[str, FieldSpec], *, check: bool
    ) -> dict[str, np.ndarray]:
        """``arrays`` with obs and next_obs as the column's dtype (so frames compare
        as they will be stored). ``check``: also raise now for a row that fits no step
        count; otherwise :meth:`write` finds it, before any live row is touched."""
        dtype = spec[self.obs].dtype
        obs = arrays[self.obs].astype(dtype, copy=False)
        nxt = arrays[self.next_obs].astype(dtype, copy=False)
        if check and len(obs):
            k = obs.shape[1]
            fits = np.zeros(len(obs), np.bool_)
            for t in range(self.shift, 0, -1):
                differ = np.empty(len(obs), np.bool_)
                _kernels()[0](rows_of(obs[:, t:]), rows_of(nxt[:, : k - t]), differ)
                fits |= ~differ
            if not fits.all():
                raise self._no_fit(int(np.flatnonzero(~fits)[0]))
        return {**arrays, self.obs: obs, self.next_obs: nxt}

    def write(
        self, refs: np.ndarray, pool: FramePool, first: int, arrays: Mapping[str, np.ndarray], lo: int, hi: int
    ) -> np.ndarray:
        """Rows ``lo:hi`` of prepared ``arrays`` into ``pool``, their slots into row
        ``(first + j) % len(refs)`` of ``refs``; returns each row's step count. Raises
        for a row that fits no step count, with rows before it written: the caller
        keeps ``hi - lo`` rows of ``refs`` out of use (spare) so that they are dead ones."""
        obs, nxt = arrays[self.obs][lo:hi], arrays[self.next_obs][lo:hi]
        steps = np.empty(hi - lo, np.uint8)
        bad = _kernels()[1](
            refs, first, rows_of(obs), rows_of(nxt), pool.frame_bytes, self.shift, steps, *pool.kernel_args()
        )
        if bad >= 0:
            raise self._no_fit(lo + int(bad))
        return steps

    def _no_fit(self, row: int) -> ValueError:
        return ValueError(
            f"row {row}: {self.next_obs} does not continue {self.obs} by 1 to {self.shift} "
            f"steps ({self.next_obs}[:k-t] == {self.obs}[t:] for no t), but SharedFrames "
            "stores the two once; add such transitions to a buffer without shared_frames"
        )

    def split(
        self, stored: Mapping[str, np.ndarray], empty: Callable[..., np.ndarray] = np.empty
    ) -> dict[str, np.ndarray]:
        """Gathered stored columns -> the logical batch: ``obs`` and ``next_obs`` in
        place of the stored frames and step counts. ``empty(shape, dtype)`` makes the
        ``next_obs`` array when some row is not a view (an ``OutputPool``'s, to
        recycle it)."""
        frames, steps = stored[self.obs], stored[self.steps_field]
        s = self.shift
        k = frames.shape[1] - s
        nxt = frames[:, s:]
        odd = steps != s
        if odd.any():
            nxt = empty(nxt.shape, nxt.dtype)
            nxt[...] = frames[:, s:]
            for t in np.unique(steps[odd]):
                rows = np.flatnonzero(steps == t)
                nxt[rows] = frames[rows, t : t + k]
        out = {}
        for name, value in stored.items():
            if name == self.obs:
                out[name] = frames[:, :k]
            elif name == self.steps_field:
                out[self.next_obs] = nxt
            else:
                out[name] = value
        return out


_loaded = None


def _kernels():
    global _loaded
    if _loaded is None:
        from rlpar.buffers.frame_pool_kernel import intern_rows
        from rlpar.buffers.stream_kernel import rows_differ

        _loaded = rows_differ, intern_rows
    return _loaded
