"""Sum and min segment trees over a fixed number of leaves, batched and compiled.

Proportional prioritized replay (Schaul et al. 2016, arXiv 1511.05952, Appendix
B.2.1) needs ``O(log N)`` priority updates, prefix-sum search and the total and
minimum priority. Every operation here takes a whole batch and is one call into
a numba kernel (:mod:`rlpar.buffers.tree_kernels`), so the cost is the tree walk
itself, not Python or numpy per-call overhead.

Layout: a k-ary tree (``arity`` k, a power of two from 2 to 64) in one flat
float64 array, root level first, every level padded to a multiple of k with the
reduction's identity (0 for sums, +inf for minima). The k children of a node are
contiguous, so a walk touches one or two cache lines per level: with k = 16 a
million leaves are 5 levels deep instead of a binary tree's 20. Sums are float64
so that the total of a million priorities keeps its precision; parents are
always recomputed from their children, so there is no drift.

numba (and the compiled kernels, cached on disk) load on first use, not at import.
The kernels release the GIL, so a tree is not thread-safe on its own: callers
that share one between threads lock around it (PrioritizedReplayBuffer does).
"""

from __future__ import annotations

import numpy as np

_kernels = None


def kernels():
    """The compiled kernels module. The first call imports numba and compiles (or
    loads from numba's disk cache) every kernel at once, so that no later call
    pays a compile."""
    global _kernels
    if _kernels is None:
        from rlpar.buffers import tree_kernels

        tree_kernels.warm_up()
        _kernels = tree_kernels
    return _kernels


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


class _Tree:
    _is_min = False
    fill = 0.0

    def __init__(self, *, capacity: int, arity: int) -> None:
        self.capacity = _check_positive_int("capacity", capacity)
        if (
            isinstance(arity, bool)
            or not isinstance(arity, (int, np.integer))
            or arity not in (2, 4, 8, 16, 32, 64)
        ):
            raise ValueError(f"arity must be a power of two in [2, 64], got {arity!r}")
        self.arity = k = int(arity)
        self._shift = k.bit_length() - 1
        sizes = [self.capacity]  # leaves first, up to the root
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // k))
        padded = [-(-s // k) * k for s in reversed(sizes)]  # root level first
        self._offs = np.zeros(len(padded) + 1, dtype=np.int64)
        np.cumsum(padded, out=self._offs[1:])
        # 64-byte aligned, so that a block of 8 children is exactly one cache line.
        raw = np.full(int(self._offs[-1]) + 8, self.fill, dtype=np.float64)
        lead = (-raw.ctypes.data % 64) // 8
        self._flat = raw[lead : lead + int(self._offs[-1])]
        self._root = int(self._offs[0])
        self._leaf0 = int(self._offs[-2])
        self._dirty: list[list[int]] = []  # leaf ranges whose ancestors are stale

    def __getstate__(self) -> dict:
        # Pickle the values only: the aligned view is rebuilt (a copy would lose it).
        self.flush()
        state = dict(self.__dict__)
        state["_flat"] = self._flat.copy()
        return state

    def __setstate__(self, state: dict) -> None:
        flat = state.pop("_flat")
        self.__dict__.update(state)
        raw = np.empty(flat.size + 8, dtype=np.float64)
        lead = (-raw.ctypes.data % 64) // 8
        self._flat = raw[lead : lead + flat.size]
        self._flat[:] = flat

    @property
    def levels(self) -> list[np.ndarray]:
        """Views of every level, root level first (padding included)."""
        o = self._offs
        return [self._flat[o[d] : o[d + 1]] for d in range(o.size - 1)]

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (a writable view; write through ``update``/``set_range``)."""
        return self._flat[self._leaf0 : self._leaf0 + self.capacity]

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.leaves[indices]

    def _check_values(self, vals: np.ndarray) -> None:
        # NaN fails both comparisons; +inf is the min tree's "empty", never a sum.
        if vals.size and not (vals.min() >= 0.0 and (self._is_min or vals.max() < np.inf)):
            bad = vals[~((vals >= 0.0) & (self._is_min | (vals < np.inf)))][:5]
            kind = "non-negative" if self._is_min else "finite and non-negative"
            raise ValueError(f"tree values must be {kind}, got {bad}")

    def _check(self, idx: np.ndarray, vals: np.ndarray) -> None:
        if idx.shape != vals.shape:
            raise ValueError(f"indices {idx.shape} and values {vals.shape} differ in length")
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise ValueError(
                f"tree indices must lie in [0, {self.capacity}), got {idx.min()}..{idx.max()}"
            )
        self._check_values(vals)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set ``leaves[indices] = values``; for a repeated index the last value wins."""
        idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
        vals = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        self._check(idx, vals)
        if idx.size == 0:
            return
        self.flush()
        kernels().tree_update(self._flat, self._offs, self._shift, idx, vals, self._is_min)

    def set_range(
        self, start: int, values: np.ndarray | float, count: int, *, checked: bool = False
    ) -> None:
        """Set ``count`` consecutive leaves from ``start`` (no wrap) to ``values``.

        Only the leaves are written now; their ancestors are recomputed when the
        tree is next read. A buffer adds many small contiguous chunks between two
        samples, and one pass over their union costs about what one chunk costs.
        ``checked=True`` says the caller guarantees a valid range and values.
        """
        if count <= 0:
            return
        if not checked:
            if start < 0 or start + count > self.capacity:
                raise ValueError(f"range [{start}, {start + count}) outside [0, {self.capacity})")
            if not np.isscalar(values):
                values = np.asarray(values, dtype=np.float64).reshape(-1)
                if values.shape != (count,):
                    raise ValueError(f"values has shape {values.shape}; expected ({count},)")
            self._check_values(np.asarray(values, dtype=np.float64).reshape(-1))
        lo = self._leaf0 + start
        self._flat[lo : lo + count] = values
        dirty = self._dirty
        if dirty and dirty[-1][1] == start:
            dirty[-1][1] = start + count  # the usual case: right after the last chunk
        else:
            dirty.append([start, start + count])
            if len(dirty) > 8:
                self.flush()

    def flush(self) -> None:
        """Recompute the ancestors of leaves written by ``set_range``."""
        if self._dirty:
            fix = kernels().fix_range
            dirty, self._dirty = self._dirty, []
            for lo, hi in dirty:
                fix(self._flat, self._offs, self._shift, lo, hi, self._is_min)

    def clear(self) -> None:
        self._dirty.clear()
        self._flat.fill(self.fill)

    def _root_value(self) -> float:
        if self._dirty:
            self.flush()
        return float(self._flat[self._root])


class SumTree(_Tree):
    """Leaf values with their total and batched prefix-sum search."""

    def __init__(self, *, capacity: int, arity: int = 16) -> None:
        super().__init__(capacity=capacity, arity=arity)

    @property
    def total(self) -> float:
        return self._root_value()

    def find_prefix(self, values: np.ndarray) -> np.ndarray:
        """For each ``v`` in ``values`` the leaf ``i`` with ``S(i) <= v < S(i+1)``,
        where ``S(i)`` is the sum of leaves before ``i``; ``v`` should lie in
        ``[0, total)`` (values past the total, from rounding, give the last positive
        leaf). Leaves with value 0 are never returned while the total is positive."""
        v = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        out = np.empty(v.size, dtype=np.int64)
        self.flush()
        kernels().find_prefix(self._flat, self._offs, self._shift, v, out)
        return out


class MinTree(_Tree):
    """Leaf values and their minimum (empty leaves are +inf)."""

    _is_min = True
    fill = np.inf

    def __init__(self, *, capacity: int, arity: int = 16) -> None:
        super().__init__(capacity=capacity, arity=arity)

    @property
    def min(self) -> float:
        return self._root_value()


def update_sum_min(
    sum_tree: SumTree,
    min_tree: MinTree,
    indices: np.ndarray,
    values: np.ndarray,
    *,
    checked: bool = False,
) -> None:
    """Set the same leaves of a sum and a min tree of equal shape in one pass.

    Prioritized replay always updates both; one kernel call walks both (the min
    tree's lowest parents are reduced from the sum tree's leaf blocks, already in
    cache). ``checked=True`` says the caller guarantees equal lengths, in-range
    indices and valid values.
    """
    if sum_tree.capacity != min_tree.capacity or sum_tree.arity != min_tree.arity:
        raise ValueError("sum and min trees must have the same capacity and arity")
    idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
    vals = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    if not checked:
        sum_tree._check(idx, vals)
    if idx.size == 0:
        return
    sum_tree.flush()
    min_tree.flush()
    kernels().sum_min_update(
        sum_tree._flat, min_tree._flat, sum_tree._offs, sum_tree._shift, idx, vals, idx.size
    )
