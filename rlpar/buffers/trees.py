"""Sum and min segment trees over a fixed number of leaves, fully vectorized.

Proportional prioritized replay (Schaul et al. 2016, arXiv 1511.05952, Appendix
B.2.1) needs ``O(log N)`` priority updates, prefix-sum search and the total and
minimum priority. Here every operation takes a whole batch and runs a constant
number of numpy calls per tree level, never a Python loop per element:

* update: write the leaves, then recompute parents level by level from their
  children, over the sorted unique parent indices of that level;
* search: all queries descend together; the top of the tree (a level of at most
  a few thousand nodes) is searched with one ``cumsum`` + ``searchsorted``, each
  level below with a fixed handful of calls on ``n x arity`` blocks.

Why it is shaped like this: numpy's per-call overhead, not arithmetic, is the
cost. A binary tree over 2**20 leaves is 20 levels; with ``arity=16`` (default)
it is 5, and the top search skips 3 of them. Children of a node are contiguous,
so a batch of blocks is one row gather (``np.take`` on an ``(nodes, arity)``
view, a memcpy per row). Per-row reductions over 16 numbers are slow in numpy
(one inner loop per row), so block sums and exclusive prefix sums are small
matrix products and the child index is a popcount of the ``prefix <= v`` bytes.
Sums are float64 so that the total of a million priorities keeps its precision.
Each level is its own padded array (``levels[-1]`` are the leaves, ``levels[0]``
the top level, of at most 4096 nodes; the root is never stored); padding holds
the identity of the reduction (0 for sum, +inf for min).
``arity`` must be a power of two from 2 to 64 (2 gives the classic binary tree).
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
    if (idx[1:] > idx[:-1]).all():
        return idx, vals  # sorted and distinct: the usual prioritized sample
    if (idx[1:] >= idx[:-1]).all():
        # Already sorted (prioritized samples come out in slot order): no sort.
        last = np.empty(idx.size, dtype=bool)
        last[-1] = True
        np.not_equal(idx[1:], idx[:-1], out=last[:-1])
        return idx[last], vals[last]
    order = np.argsort(idx, kind="stable")
    srt = idx[order]
    last = np.empty(srt.size, dtype=bool)
    last[-1] = True
    np.not_equal(srt[1:], srt[:-1], out=last[:-1])
    return srt[last], vals[order[last]]


def _unique_parents(idx: np.ndarray, shift: int) -> np.ndarray:
    parents = idx >> shift
    if parents.size > 1:
        keep = np.empty(parents.size, dtype=bool)
        keep[0] = True
        np.not_equal(parents[1:], parents[:-1], out=keep[1:])
        parents = parents[keep]
    return parents


def update_sum_min(
    sum_tree: SumTree,
    min_tree: MinTree,
    indices: np.ndarray,
    values: np.ndarray,
    *,
    checked: bool = False,
) -> None:
    """Set the same leaves of a sum and a min tree of equal shape in one pass.

    Prioritized replay always updates both; sharing the parent index arithmetic
    per level saves a third of the numpy calls of two separate updates.
    ``checked=True`` says the caller guarantees equal lengths and in-range indices
    (the bounds check is two reductions, a noticeable share of a 256-leaf update).
    """
    if sum_tree.capacity != min_tree.capacity or sum_tree.arity != min_tree.arity:
        raise ValueError("sum and min trees must have the same capacity and arity")
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    if not checked:
        sum_tree._check(idx, vals)
    if idx.size == 0:
        return
    sum_tree.flush()
    min_tree.flush()
    sum_tree._top_cumsum = None
    sum_tree._top_value = min_tree._top_value = None
    uniq, vals = dedupe_last(idx, vals)
    sum_tree.levels[-1][uniq] = vals
    min_tree.levels[-1][uniq] = vals
    shift = sum_tree._shift
    leaf_depth = len(sum_tree.levels) - 1
    if leaf_depth == 0:
        return
    # Leaf level: the two trees hold the same leaves except where the sum tree has
    # 0 (never-written slots and padding, +inf in the min tree), so the min of a
    # block is read from the sum tree's block just gathered. Reading the min
    # tree's own leaves instead costs a cache miss per block right after a sample
    # (which walked the sum tree only): most of what a sample+update loop spent
    # beyond a separate sample and update.
    parents = _unique_parents(uniq, shift)
    blocks = sum_tree.blocks[leaf_depth].take(parents, axis=0)
    sum_tree.levels[leaf_depth - 1][parents] = sum_tree._reduce_blocks(blocks)
    mins = min_tree._reduce_blocks(blocks)
    zero = mins <= 0.0
    if zero.any():  # rare: recompute those blocks from the min tree's leaves
        mins[zero] = min_tree._reduce_blocks(
            min_tree.blocks[leaf_depth].take(parents[zero], axis=0)
        )
    min_tree.levels[leaf_depth - 1][parents] = mins
    uniq = parents
    for depth in range(leaf_depth - 1, 0, -1):
        parents = _unique_parents(uniq, shift)
        sum_tree.levels[depth - 1][parents] = sum_tree._reduce_blocks(
            sum_tree.blocks[depth].take(parents, axis=0)
        )
        min_tree.levels[depth - 1][parents] = min_tree._reduce_blocks(
            min_tree.blocks[depth].take(parents, axis=0)
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
        if (
            isinstance(arity, bool)
            or not isinstance(arity, (int, np.integer))
            or arity not in (2, 4, 8, 16, 32, 64)
        ):
            raise ValueError(f"arity must be a power of two in [2, 64], got {arity!r}")
        self.capacity = int(capacity)
        self.arity = k = int(arity)
        self._shift = k.bit_length() - 1
        self.fill = fill
        sizes = [self.capacity]
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // k))
        # Pad every level but the root to a multiple of ``arity`` so that the
        # children of any parent form one contiguous block (a row of ``blocks``).
        # The tree stops at the first level of at most _TOP_SEARCH_MAX nodes (the
        # "top"): its total / minimum / cumsum are computed from it when read (one
        # numpy call over a few thousand numbers), which spares every update the
        # 2-3 levels above it.
        top = next(d for d, size in enumerate(sizes) if size <= _TOP_SEARCH_MAX)
        sizes = sizes[: top + 1]
        padded = [-(-s // k) * k for s in sizes]
        self.levels = [np.full(s, fill, dtype=np.float64) for s in reversed(padded)]
        self.blocks = [lv.reshape(-1, k) for lv in self.levels]
        # Real (unpadded) node count per level, top first.
        self.sizes = list(reversed(sizes))
        self._dirty: list[list[int]] = []  # leaf ranges whose parents are stale
        self._top_value: float | None = None  # cached reduction of the top level

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (a view; slots ``>= capacity`` are padding)."""
        return self.levels[-1][: self.capacity]

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.levels[-1][indices]

    def _reduce_blocks(self, blocks: np.ndarray) -> np.ndarray:
        """One value per row of an ``(n, arity)`` block matrix."""
        raise NotImplementedError

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set ``leaves[indices] = values``; for a repeated index the last value wins."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        self._check(idx, vals)
        if idx.size == 0:
            return
        self.flush()
        self._top_value = None
        uniq, last_vals = dedupe_last(idx, vals)
        self.levels[-1][uniq] = last_vals
        for depth in range(len(self.levels) - 1, 0, -1):
            uniq = _unique_parents(uniq, self._shift)
            blocks = self.blocks[depth].take(uniq, axis=0)
            self.levels[depth - 1][uniq] = self._reduce_blocks(blocks)

    def _check(self, idx: np.ndarray, vals: np.ndarray) -> None:
        if idx.shape != vals.shape:
            raise ValueError(f"indices {idx.shape} and values {vals.shape} differ in length")
        if idx.size and (idx.min() < 0 or idx.max() >= self.capacity):
            raise ValueError(
                f"tree indices must lie in [0, {self.capacity}), got {idx.min()}..{idx.max()}"
            )

    def set_range(self, start: int, values: np.ndarray | float, count: int) -> None:
        """Set ``count`` consecutive leaves from ``start`` (no wrap) to ``values``.

        Only the leaves are written now; the parents of the range are recomputed
        when the tree is next read (``total``, ``min``, ``find_prefix``, ``update``).
        A buffer adds many small contiguous chunks between two samples, and one
        pass over their union costs about what one chunk costs (contiguous leaves
        have contiguous parents: a slice of block rows and one reduction per level).
        """
        if count <= 0:
            return
        if start < 0 or start + count > self.capacity:
            raise ValueError(f"range [{start}, {start + count}) outside [0, {self.capacity})")
        self.levels[-1][start : start + count] = values
        self._top_value = None
        dirty = self._dirty
        if dirty and dirty[-1][1] == start:
            dirty[-1][1] = start + count  # the usual case: right after the last chunk
        else:
            dirty.append([start, start + count])
            if len(dirty) > 8:
                self.flush()

    def flush(self) -> None:
        """Recompute the parents of leaves written by ``set_range``."""
        shift = self._shift
        for lo, hi in self._dirty:
            for depth in range(len(self.levels) - 1, 0, -1):
                lo, hi = lo >> shift, ((hi - 1) >> shift) + 1
                self.levels[depth - 1][lo:hi] = self._reduce_blocks(self.blocks[depth][lo:hi])
        self._dirty.clear()

    def clear(self) -> None:
        self._dirty.clear()
        self._top_value = None
        for level in self.levels:
            level.fill(self.fill)


class SumTree(_Tree):
    """Leaf values with their total and batched prefix-sum search."""

    def __init__(self, *, capacity: int, arity: int = 16) -> None:
        super().__init__(capacity=capacity, arity=arity, fill=0.0)
        k = self.arity
        self._ones = np.ones(k)
        # excl[:, j] = sum of the children before j: blocks @ strictly-upper ones.
        self._excl = np.triu(np.ones((k, k)), 1)
        self._top_cumsum: np.ndarray | None = None
        # Bytes of ``prefix <= v`` per row read as little-endian words: a popcount
        # of those words counts the children whose prefix is <= v.
        self._words = max(1, k // 8)
        self._word_dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}.get(k, np.uint64)

    def _reduce_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return blocks @ self._ones

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        self._top_cumsum = None
        super().update(indices, values)

    def set_range(self, start: int, values: np.ndarray | float, count: int) -> None:
        self._top_cumsum = None
        super().set_range(start, values, count)

    def clear(self) -> None:
        self._top_cumsum = None
        super().clear()

    def flush(self) -> None:
        if self._dirty:
            self._top_cumsum = None
            super().flush()

    def _cumsum(self) -> np.ndarray:
        self.flush()
        if self._top_cumsum is None:
            self._top_cumsum = np.cumsum(self.levels[0])
        return self._top_cumsum

    @property
    def total(self) -> float:
        # The last entry of the very cumsum that find_prefix searches: the two agree
        # to the last bit.
        if self._top_value is None or self._top_cumsum is None:
            self._top_value = float(self._cumsum()[-1])
        return self._top_value

    def find_prefix(self, values: np.ndarray) -> np.ndarray:
        """For each ``v`` in ``values`` the leaf ``i`` with ``S(i) <= v < S(i+1)``,
        where ``S(i)`` is the sum of leaves before ``i``; ``v`` must lie in
        ``[0, total)``. Leaves with value 0 are never returned."""
        v = np.array(values, dtype=np.float64).reshape(-1)
        n = v.size
        if n == 0:
            return np.empty(0, dtype=np.int64)
        cs = self._cumsum()
        top = self.levels[0]
        idx = np.searchsorted(cs, v, side="right")
        np.minimum(idx, self.sizes[0] - 1, out=idx)
        v -= cs[idx] - top[idx]
        if len(self.levels) > 1:
            vcol = v[:, None]  # a view: updating v updates it
            row_base = np.arange(n, dtype=np.int64) * self.arity
            for depth in range(1, len(self.levels)):
                blocks = self.blocks[depth].take(idx, axis=0, mode="clip")
                excl = blocks @ self._excl
                below = excl <= vcol  # excl[:, 0] == 0, so at least one is True
                child = self._count_rows(below)
                child -= 1
                v -= excl.take(row_base + child)
                idx <<= self._shift
                idx += child
        return self._fix_rounding(idx, values)

    def _count_rows(self, mask: np.ndarray) -> np.ndarray:
        words = np.bitwise_count(mask.view(self._word_dtype))
        if self._words == 1:
            return words.reshape(-1).astype(np.int64)
        if self._words == 2:  # a column add beats numpy's per-row reduction
            return words[:, 0].astype(np.int64) + words[:, 1]
        return words.sum(axis=1, dtype=np.int64)

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
        # Reducing contiguous rows of the transposed copy is ~3x faster than numpy's
        # per-row inner loop over ``arity`` numbers.
        return np.minimum.reduce(blocks.T.copy(), axis=0)

    @property
    def min(self) -> float:
        if self._top_value is None:
            self.flush()
            self._top_value = float(self.levels[0].min())
        return self._top_value
