"""Sum and min segment trees over a fixed number of leaves, fully vectorized.

Proportional prioritized replay (Schaul et al. 2016, arXiv 1511.05952, Appendix
B.2.1) needs ``O(log N)`` priority updates, prefix-sum search and the total and
minimum priority. Here every operation takes a whole batch and runs a constant
number of numpy calls per tree level, never a Python loop per element:

* update: write the leaves, then recompute parents level by level from their
  children, over the (sorted, unique) parent indices of that level;
* search: all queries descend together; the top of the tree is a short array
  searched with one ``cumsum`` + ``searchsorted``, the levels below are
  ``arity``-way blocks (gather ``n x arity`` children, ``cumsum``, count).

The tree is ``arity``-ary (default 16): a binary tree over 2**20 leaves is 20
levels deep, and numpy's per-call overhead, not the arithmetic, is what costs; 16
children per node make it 5 levels. ``arity=2`` gives the classic binary tree.
Sums are float64 so that the total of a million priorities keeps its precision.
Each level is its own padded array (``levels[-1]`` are the leaves, ``levels[0]``
the root); padding holds the identity of the reduction (0 for sum, +inf for min).
"""

from __future__ import annotations

import numpy as np

_TOP_SEARCH_MAX = 4096  # largest level searched with one cumsum + searchsorted


def dedupe_last(idx: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``idx`` and, for each, the value given LAST for it.

    numpy leaves the winner of a repeated fancy assignment undefined; a stable
    sort puts repeats next to each other in call order, so the last of each run
    wins. Sorted indices also make per-level de-duplication a neighbour compare.
    """
    if idx.size == 1:
        return idx, vals
    order = np.argsort(idx, kind="stable")
    srt = idx[order]
    last = np.empty(srt.size, dtype=bool)
    last[-1] = True
    np.not_equal(srt[1:], srt[:-1], out=last[:-1])
    return srt[last], vals[order[last]]


def _unique_parents(idx: np.ndarray, k: int) -> np.ndarray:
    parents = idx // k
    if parents.size > 1:
        keep = np.empty(parents.size, dtype=bool)
        keep[0] = True
        np.not_equal(parents[1:], parents[:-1], out=keep[1:])
        parents = parents[keep]
    return parents


def update_sum_min(
    sum_tree: SumTree, min_tree: MinTree, indices: np.ndarray, values: np.ndarray
) -> None:
    """Set the same leaves of a sum and a min tree of equal shape in one pass.

    Prioritized replay always updates both; sharing the parent index arithmetic
    per level roughly halves the numpy calls of two separate updates.
    """
    if sum_tree.capacity != min_tree.capacity or sum_tree.arity != min_tree.arity:
        raise ValueError("sum and min trees must have the same capacity and arity")
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    sum_tree._check(idx, vals)
    if idx.size == 0:
        return
    sum_tree._top_cumsum = None
    uniq, vals = dedupe_last(idx, vals)
    sum_tree.levels[-1][uniq] = vals
    min_tree.levels[-1][uniq] = vals
    k, col = sum_tree.arity, sum_tree._col
    for depth in range(len(sum_tree.levels) - 1, 0, -1):
        parents = _unique_parents(uniq, k)
        children = col + parents * k
        sum_tree.levels[depth - 1][parents] = np.add.reduce(
            np.take(sum_tree.levels[depth], children), axis=0
        )
        min_tree.levels[depth - 1][parents] = np.minimum.reduce(
            np.take(min_tree.levels[depth], children), axis=0
        )
        uniq = parents


class _Tree:
    def __init__(self, *, capacity: int, arity: int, fill: float) -> None:
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, (int, np.integer))
            or capacity <= 0
        ):
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if isinstance(arity, bool) or not isinstance(arity, (int, np.integer)) or arity < 2:
            raise ValueError(f"arity must be an int >= 2, got {arity!r}")
        self.capacity = int(capacity)
        self.arity = k = int(arity)
        self.fill = fill
        sizes = [self.capacity]
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // k))
        # Pad every level but the root to a multiple of ``arity`` so that the
        # children of any parent form one contiguous, reshape-able block.
        padded = [-(-s // k) * k for s in sizes[:-1]] + [1]
        self.levels = [np.full(s, fill, dtype=np.float64) for s in reversed(padded)]
        self._col = np.arange(k, dtype=np.int64)[:, None]  # child offsets as a column
        # Real (unpadded) node count per level, root first.
        self.sizes = list(reversed(sizes))

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (a view; slots ``>= capacity`` are padding)."""
        return self.levels[-1][: self.capacity]

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.levels[-1][indices]

    def _reduce_blocks(self, blocks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set ``leaves[indices] = values``; for a repeated index the last value wins."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        self._check(idx, vals)
        if idx.size == 0:
            return
        uniq, last_vals = dedupe_last(idx, vals)
        self.levels[-1][uniq] = last_vals
        self._recompute(uniq)

    def _check(self, idx: np.ndarray, vals: np.ndarray) -> None:
        if idx.shape != vals.shape:
            raise ValueError(f"indices {idx.shape} and values {vals.shape} differ in length")
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise ValueError(
                f"tree indices must lie in [0, {self.capacity}), got {idx.min()}..{idx.max()}"
            )

    def _recompute(self, idx: np.ndarray) -> None:
        k, col = self.arity, self._col
        for depth in range(len(self.levels) - 1, 0, -1):
            parents = _unique_parents(idx, k)
            # Children gathered as (arity, n): the reduction then runs over
            # contiguous rows of n, not n tiny rows of arity (several times faster).
            blocks = np.take(self.levels[depth], col + parents * k)
            self.levels[depth - 1][parents] = self._reduce_blocks(blocks)
            idx = parents

    def set_range(self, start: int, values: np.ndarray | float, count: int) -> None:
        """Set ``count`` consecutive leaves from ``start`` (no wrap) to ``values``.

        Contiguous leaves have contiguous parents, so every level is one reshape
        and one reduction over slices, with no index arrays at all.
        """
        if count <= 0:
            return
        if start < 0 or start + count > self.capacity:
            raise ValueError(f"range [{start}, {start + count}) outside [0, {self.capacity})")
        k = self.arity
        self.levels[-1][start : start + count] = values
        lo, hi = start, start + count
        for depth in range(len(self.levels) - 1, 0, -1):
            lo, hi = lo // k, (hi - 1) // k + 1
            blocks = self.levels[depth][lo * k : hi * k].reshape(hi - lo, k).T
            self.levels[depth - 1][lo:hi] = self._reduce_blocks(blocks)

    def clear(self) -> None:
        for level in self.levels:
            level.fill(self.fill)


class SumTree(_Tree):
    """Leaf values with their total and batched prefix-sum search."""

    def __init__(self, *, capacity: int, arity: int = 16) -> None:
        super().__init__(capacity=capacity, arity=arity, fill=0.0)
        # The deepest level short enough to search in one shot; below it, blocks.
        self._top = max(d for d, lv in enumerate(self.levels) if lv.size <= _TOP_SEARCH_MAX)
        self._top_cumsum: np.ndarray | None = None

    def _reduce_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return np.add.reduce(blocks, axis=0)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        self._top_cumsum = None
        super().update(indices, values)

    def set_range(self, start: int, values: np.ndarray | float, count: int) -> None:
        self._top_cumsum = None
        super().set_range(start, values, count)

    def clear(self) -> None:
        self._top_cumsum = None
        super().clear()

    @property
    def total(self) -> float:
        return float(self.levels[0][0])

    def find_prefix(self, values: np.ndarray) -> np.ndarray:
        """For each ``v`` in ``values`` the leaf ``i`` with ``S(i) <= v < S(i+1)``,
        where ``S(i)`` is the sum of leaves before ``i``; ``v`` must lie in
        ``[0, total)``. Leaves with value 0 are never returned."""
        v = np.array(values, dtype=np.float64).reshape(-1)
        if v.size == 0:
            return np.empty(0, dtype=np.int64)
        k, col = self.arity, self._col
        top = self.levels[self._top]
        if self._top_cumsum is None:
            self._top_cumsum = np.cumsum(top)
        cs = self._top_cumsum
        idx = np.searchsorted(cs, v, side="right")
        np.minimum(idx, self.sizes[self._top] - 1, out=idx)
        v -= cs[idx] - top[idx]
        cols = None
        for depth in range(self._top + 1, len(self.levels)):
            # (arity, n) layout as in _recompute: cumsum and count run down rows.
            blocks = np.take(self.levels[depth], col + idx * k, mode="clip")
            csum = np.cumsum(blocks, axis=0)
            child = np.count_nonzero(csum <= v, axis=0)
            np.minimum(child, k - 1, out=child)
            if cols is None:
                cols = np.arange(v.size)
            flat = child * v.size + cols
            v -= np.take(csum, flat) - np.take(blocks, flat)
            idx = idx * k + child
        return self._fix_rounding(idx, values)

    def _fix_rounding(self, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        # Rounding can, with probability ~1e-16 per query, push a query past the
        # last positive child into a zero-valued leaf or the padding; answer those
        # few exactly from the full leaf cumsum (O(capacity), but never in practice).
        leaves = self.levels[-1]
        bad = (idx >= self.capacity) | (leaves[np.minimum(idx, leaves.size - 1)] <= 0.0)
        if not bad.any():
            return idx
        cs = np.cumsum(self.leaves)
        fixed = np.searchsorted(
            cs, np.asarray(values, dtype=np.float64).reshape(-1)[bad], side="right"
        )
        last_positive = int(np.flatnonzero(self.leaves > 0)[-1]) if cs[-1] > 0 else 0
        idx[bad] = np.minimum(fixed, last_positive)
        return idx


class MinTree(_Tree):
    """Leaf values and their minimum (empty leaves are +inf)."""

    def __init__(self, *, capacity: int, arity: int = 16) -> None:
        super().__init__(capacity=capacity, arity=arity, fill=np.inf)

    def _reduce_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return np.minimum.reduce(blocks, axis=0)

    @property
    def min(self) -> float:
        return float(self.levels[0][0])
