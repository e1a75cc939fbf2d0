"""Frame sharing: an observation stack and the next one stored as one array.

With frame stacking (Atari: the last 4 frames), ``next_obs`` repeats most of
``obs``: for a transition over ``shift`` env steps (1, or ``n`` for n-step
returns), ``next_obs[:k - shift] == obs[shift:]`` along the stack axis. Storing
the ``k + shift`` distinct frames once, instead of ``2k``, cuts what an insert
writes and what a sample reads and writes (5 frames instead of 8 for Atari
1-step): sampling hands out ``obs`` and ``next_obs`` as two overlapping views of
one gathered array. The overlap is checked on every insert, so data that does not
have it is refused with the offending row named, never stored half-lost.

The sharing is within one transition. cpprb's ``next_of``/``stack_compress`` and
Tianshou's ``stack_num`` share frames across consecutive transitions too (one
frame per insert), which needs the buffer to know env streams and episode
boundaries; this needs neither, so it holds for any insertion order, for
shards, and for n-step transitions (``shift=n``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rlpar.buffers.spec import FieldSpec
from rlpar.buffers.stream_copy import rows_of


@dataclass(frozen=True)
class SharedFrames:
    """Store ``next_obs`` inside ``obs``'s column: the two are stacks of ``k``
    frames (stack axis first) with ``next_obs[:k - shift] == obs[shift:]``."""

    obs: str = "obs"
    next_obs: str = "next_obs"
    shift: int = 1

    def __post_init__(self) -> None:
        if self.obs == self.next_obs:
            raise ValueError(f"SharedFrames needs two different fields, got {self.obs!r} twice")
        if isinstance(self.shift, bool) or not isinstance(self.shift, int) or self.shift < 1:
            raise ValueError(f"SharedFrames.shift must be an int >= 1, got {self.shift!r}")

    def stored_spec(self, spec: Mapping[str, FieldSpec]) -> dict[str, FieldSpec]:
        """The columns actually stored for a logical ``spec``: ``obs`` widened to
        ``k + shift`` frames, no ``next_obs`` column."""
        for name in (self.obs, self.next_obs):
            if name not in spec:
                raise ValueError(f"SharedFrames field {name!r} is not in the spec {sorted(spec)}")
        o, n = spec[self.obs], spec[self.next_obs]
        if o != n:
            raise ValueError(
                f"SharedFrames fields must have equal shape and dtype: {self.obs!r} is "
                f"{o.shape} {o.dtype}, {self.next_obs!r} is {n.shape} {n.dtype}"
            )
        if len(o.shape) < 1 or o.shape[0] <= self.shift:
            raise ValueError(
                f"SharedFrames needs a stack axis longer than shift={self.shift}: "
                f"{self.obs!r} has shape {o.shape}"
            )
        out = {}
        for name, field in spec.items():
            if name == self.obs:
                out[name] = FieldSpec((o.shape[0] + self.shift, *o.shape[1:]), o.dtype)
            elif name != self.next_obs:
                out[name] = field
        return out

    def check(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Raise if some row's ``next_obs`` does not continue its ``obs``."""
        obs, nxt = arrays[self.obs], arrays[self.next_obs]
        if len(obs) == 0:
            return
        k = obs.shape[1]
        bad = first_unequal_row(rows_of(obs[:, self.shift :]), rows_of(nxt[:, : k - self.shift]))
        if bad >= 0:
            raise ValueError(
                f"row {bad}: {self.next_obs}[:{k - self.shift}] differs from "
                f"{self.obs}[{self.shift}:], but SharedFrames(shift={self.shift}) stores them "
                "once; add unshared transitions to a buffer without shared_frames"
            )

    def split(self, stored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(obs, next_obs)`` views of gathered rows of the stored column."""
        k = stored.shape[1] - self.shift
        return stored[:, :k], stored[:, self.shift :]


_kernel = None


def first_unequal_row(a: np.ndarray, b: np.ndarray) -> int:
    """Index of the first row where 2-D uint8 arrays ``a`` and ``b`` differ, or -1."""
    global _kernel
    if _kernel is None:
        from rlpar.buffers.stream_kernel import first_unequal_row as kernel

        _kernel = kernel
    return int(_kernel(a, b))
