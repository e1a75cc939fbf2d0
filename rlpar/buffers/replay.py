"""Uniform experience replay over columnar ring storage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlpar.buffers.frames import SharedFrames
from rlpar.buffers.spec import as_array
from rlpar.buffers.storage import RingStorage
from rlpar.protocols import Sample
from rlpar.state import StatePath, generator_state, mapping


def check_batch_size(batch_size: Any, stored: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size must be an int, got {batch_size!r}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if stored == 0:
        raise ValueError("cannot sample from an empty replay buffer")
    if batch_size > stored:
        raise ValueError(f"batch_size {batch_size} exceeds the {stored} transitions stored")
    return int(batch_size)


def check_priorities(priorities: Any, n: int, name: str = "priorities") -> np.ndarray:
    """``priorities`` as a float64 vector of length ``n``, finite and non-negative."""
    p = as_array(priorities)
    if p.ndim != 1 or p.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},), got {p.shape}")
    if p.dtype.kind not in "fiub":
        raise ValueError(f"{name} must be numeric, got dtype {p.dtype}")
    p = p.astype(np.float64, copy=False)
    # One min and one max decide it (NaN propagates through both) on the hot path.
    if n and not (p.min() >= 0.0 and p.max() < np.inf):
        if not np.isfinite(p).all():
            raise ValueError(f"{name} must be finite, got {p[~np.isfinite(p)][:5]}")
        raise ValueError(f"{name} must be non-negative, got {p[p < 0][:5]}")
    return p


def check_indices(indices: Any, name: str = "indices") -> np.ndarray:
    idx = as_array(indices)
    if idx.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {idx.shape}")
    if idx.size and idx.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers (as returned by sample), got dtype {idx.dtype}")
    return idx.astype(np.int64, copy=False)


def to_tensors(state: Any) -> Any:
    """numpy arrays -> CPU tensors (zero copy), so ``torch.load(weights_only=True)`` loads it."""
    if isinstance(state, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(state))
    if isinstance(state, dict):
        return {k: to_tensors(v) for k, v in state.items()}
    if isinstance(state, list):
        return [to_tensors(v) for v in state]
    return state


class ReplayBuffer:
    """FIFO replay with uniform sampling (with replacement).

    ``sample`` returns ``Sample(batch, indices, weights)``: fresh arrays the caller
    owns, the serial numbers of the sampled items (``serial % capacity`` is the
    slot) and all-one weights. ``update_priorities`` is accepted and ignored so
    that uniform and prioritized buffers are interchangeable.
    Every field is its own column, except with ``shared_frames``: then stacked
    ``obs`` and ``next_obs`` are stored once as their distinct frames and sampled
    as overlapping views (:mod:`rlpar.buffers.frames`).
    """

    def __init__(
        self,
        *,
        capacity: int,
        spec: Mapping[str, Any] | None = None,
        seed: int | None = None,
        shared_frames: SharedFrames | None = None,
    ) -> None:
        self.storage = RingStorage(capacity=capacity, spec=spec, shared_frames=shared_frames)
        self.rng = np.random.default_rng(seed)

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    @property
    def spec(self):
        return self.storage.spec

    def __len__(self) -> int:
        return len(self.storage)

    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None:
        """Append rows (each array has a leading batch axis), overwriting the oldest."""
        arrays, n = self.storage.validate(batch)
        if priorities is not None:
            check_priorities(priorities, n)
        self.storage.write(arrays, n)

    def sample(self, batch_size: int) -> Sample:
        n = check_batch_size(batch_size, len(self.storage))
        slots = self.rng.integers(0, len(self.storage), size=n)
        return Sample(
            self.storage.gather(slots),
            self.storage.serials_of(slots),
            np.ones(n, dtype=np.float32),
        )

    def draw(self, fractions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots at positions ``fractions`` (each in [0, 1)) of the buffer's sampling
        mass, and each slot's mass (1 for uniform replay). A sharded sampler sends
        each shard the positions of the draws that fall into its share of the mass."""
        n = len(self.storage)
        slots = (np.asarray(fractions, dtype=np.float64) * n).astype(np.int64)
        np.minimum(slots, n - 1, out=slots)
        return slots, np.ones(slots.size)

    @property
    def total_mass(self) -> float:
        """Sum of sampling masses (the item count for uniform replay)."""
        return float(len(self.storage))

    @property
    def min_mass(self) -> float:
        return 1.0

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """No-op for uniform replay (kept so the Buffer protocol holds)."""

    def state_dict(self) -> dict[str, Any]:
        return to_tensors(
            {"storage": self.storage.state_dict(), "rng": self.rng.bit_generator.state}
        )

    # The keys of state_dict(); a prioritized buffer's add its priorities.
    STATE_KEYS: tuple[str, ...] = ("storage", "rng")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        self._restore(self._check_state(state, StatePath.of(self)))

    def _check_state(self, state: Any, where: StatePath) -> dict[str, Any]:
        """The parts of ``state`` checked, ready for :meth:`_restore` (which cannot fail)."""
        hint = self._kind_hint(state) if isinstance(state, Mapping) else ""
        state = mapping(state, where, required=self.STATE_KEYS, hint=hint)
        return {"storage": self.storage.check_state(state["storage"], where=where["storage"]),
                "rng": generator_state(state["rng"], where["rng"], self.rng)}

    def _kind_hint(self, state: Mapping[str, Any]) -> str:
        """Why the keys may not fit: a state of the other kind of buffer."""
        if "leaves" in state:
            return " (a prioritized buffer's state: load it into a PrioritizedReplayBuffer)"
        return ""

    def _restore(self, checked: Mapping[str, Any]) -> None:
        self.storage.restore(checked["storage"])
        self.rng.bit_generator.state = checked["rng"]
