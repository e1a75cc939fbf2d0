"""Proportional prioritized experience replay.

Schaul, Quan, Antonoglou, Silver, "Prioritized Experience Replay", ICLR 2016,
arXiv:1511.05952: item ``i`` is drawn with probability ``P(i) = p_i^a / sum_k p_k^a``
where ``p_i = |delta_i| + eps``, and its update is scaled by the importance weight
``w_i = (N * P(i))^-b / max_j w_j``. Sampling is stratified (one draw from each of
``batch_size`` equal slices of the total mass, Appendix B.2.1), new items get the
largest priority seen so far unless the caller supplies one (Ape-X actors compute
initial priorities themselves), and ``b`` anneals linearly to ``beta_final``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlpar.buffers.frames import SharedFrames
from rlpar.buffers.replay import (
    ReplayBuffer,
    check_batch_size,
    check_indices,
    check_priorities,
    to_tensors,
)
from rlpar.buffers.spec import as_array
from rlpar.buffers.trees import MinTree, SumTree, kernels
from rlpar.protocols import Sample


def annealed_beta(beta0: float, beta_final: float, steps: int, anneal_steps: int) -> float:
    """Importance-sampling exponent annealed linearly from ``beta0`` to ``beta_final``
    over ``anneal_steps`` sample calls (constant when ``anneal_steps`` is 0)."""
    if anneal_steps == 0:
        return beta0
    return beta0 + min(1.0, steps / anneal_steps) * (beta_final - beta0)


def importance_weights(
    leaf: np.ndarray, *, total: float, min_leaf: float, count: int, beta: float
) -> np.ndarray:
    """``(N P(i))^-b / max_j (N P(j))^-b`` with ``P = leaf / total`` (float32).

    ``N`` and ``total`` cancel: the weight is ``(leaf / min_leaf)^-b``, two numpy
    calls on the batch instead of five (they stay arguments so that callers, the
    sharded sampler included, state the full formula's inputs).
    """
    w = np.divide(leaf, min_leaf, dtype=np.float64)
    np.power(w, -beta, out=w)
    return w.astype(np.float32)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional PER over a sum tree and a min tree of ``priority ** alpha``.

    ``indices`` returned by ``sample`` are item serial numbers, so
    ``update_priorities`` drops entries whose slot was overwritten since the
    sample was drawn instead of re-prioritising an unrelated new transition.
    """

    def __init__(
        self,
        *,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_anneal_steps: int = 0,
        eps: float = 1e-6,
        spec: Mapping[str, Any] | None = None,
        seed: int | None = None,
        tree_arity: int = 16,
        shared_frames: SharedFrames | None = None,
    ) -> None:
        super().__init__(capacity=capacity, spec=spec, seed=seed, shared_frames=shared_frames)
        for name, value in (("alpha", alpha), ("beta", beta), ("beta_final", beta_final)):
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if not np.isfinite(eps) or eps < 0:
            raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
        if beta_anneal_steps < 0:
            raise ValueError(f"beta_anneal_steps must be >= 0, got {beta_anneal_steps!r}")
        self.alpha, self.eps = float(alpha), float(eps)
        self.beta0, self.beta_final = float(beta), float(beta_final)
        self.beta_anneal_steps = int(beta_anneal_steps)
        self.sample_steps = 0
        self.max_priority = 1.0  # largest p = |delta| + eps seen; priority of new items
        self.sum_tree = SumTree(capacity=self.capacity, arity=tree_arity)
        self.min_tree = MinTree(capacity=self.capacity, arity=tree_arity)
        # The tree kernels release the GIL: a prefetching thread's sample must not
        # interleave with an update's parent recomputation (a stale parent would stay).
        self._tree_lock = threading.Lock()
        kernels()  # compile now, not inside the first (perhaps remote) sample

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_tree_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._tree_lock = threading.Lock()

    @property
    def beta(self) -> float:
        return annealed_beta(self.beta0, self.beta_final, self.sample_steps, self.beta_anneal_steps)

    def _leaf(self, priorities: np.ndarray) -> np.ndarray:
        return np.power(priorities + self.eps, self.alpha)

    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None:
        arrays, n = self.storage.validate(batch)
        if priorities is not None:
            p = check_priorities(priorities, n)
            leaf = self._leaf(p)
            if n and not leaf.min() > 0.0:
                raise ValueError(
                    f"priorities must be > 0 when eps is {self.eps}: an item of priority 0 "
                    "would never be sampled"
                )
        else:
            leaf = self.max_priority**self.alpha
        # The write may still refuse the batch (shared frames): change nothing before it.
        first, m = self.storage.write(arrays, n)
        if priorities is not None and n:
            self.max_priority = max(self.max_priority, float(p.max()) + self.eps)
        if m == 0:
            return
        if not np.isscalar(leaf):
            leaf = leaf[n - m :]
        start = first % self.capacity
        head = min(m, self.capacity - start)  # contiguous run before the wrap
        with self._tree_lock:
            for tree in (self.sum_tree, self.min_tree):
                if np.isscalar(leaf):
                    tree.set_range(start, leaf, head, checked=True)
                    tree.set_range(0, leaf, m - head, checked=True)
                else:
                    tree.set_range(start, leaf[:head], head, checked=True)
                    tree.set_range(0, leaf[head:], m - head, checked=True)

    def draw(self, fractions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots at positions ``fractions`` (in [0, 1)) of the total priority mass and
        their ``priority ** alpha`` (see ReplayBuffer.draw)."""
        with self._tree_lock:
            values = np.multiply(fractions, self.sum_tree.total, dtype=np.float64)
            slots = self.sum_tree.find_prefix(values)
            return slots, self.sum_tree.leaves[slots]

    @property
    def total_mass(self) -> float:
        with self._tree_lock:
            return self.sum_tree.total

    @property
    def min_mass(self) -> float:
        with self._tree_lock:
            return self.min_tree.min

    def sample(self, batch_size: int) -> Sample:
        n = check_batch_size(batch_size, len(self.storage))
        u = self.rng.random(n)
        slots = np.empty(n, dtype=np.int64)
        serials = np.empty(n, dtype=np.int64)
        weights = np.empty(n, dtype=np.float32)
        sum_tree, min_tree = self.sum_tree, self.min_tree
        with self._tree_lock:
            sum_tree.flush()
            min_tree.flush()
            # One compiled call: stratified search, serials and importance weights.
            kernels().stratified_sample(
                sum_tree._flat,
                min_tree._flat,
                sum_tree._offs,
                sum_tree._shift,
                u,
                self.beta,
                self.storage.next_serial - 1,
                self.capacity,
                slots,
                serials,
                weights,
            )
        self.sample_steps += 1
        return Sample(self.storage.gather(slots), serials, weights)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set ``p = priority + eps`` for the sampled items still in the buffer.

        Entries whose slot was overwritten since the sample are dropped. The batch
        is validated as a whole: on a bad entry nothing is applied.
        """
        idx = check_indices(indices)
        p = as_array(priorities)
        if p.dtype != np.float64 or p.shape != idx.shape:
            p = check_priorities(p, idx.shape[0])
        if idx.size == 0:
            return
        n = idx.size
        sum_tree, min_tree = self.sum_tree, self.min_tree
        last = self.storage.next_serial - 1
        with self._tree_lock:
            sum_tree.flush()
            min_tree.flush()
            status, p_max = kernels().prioritized_update(
                sum_tree._flat,
                min_tree._flat,
                sum_tree._offs,
                sum_tree._shift,
                np.ascontiguousarray(idx),
                np.ascontiguousarray(p),
                last,
                len(self.storage),
                self.capacity,
                self.eps,
                self.alpha,
                np.empty(n, dtype=np.int64),
                np.empty(n, dtype=np.float64),
            )
        if status == 1:
            check_priorities(p, n)  # raises the descriptive error
        elif status == 2:
            raise ValueError(f"indices must be serials returned by sample, in [0, {last + 1})")
        elif status == 3:
            raise ValueError(
                f"priorities must be > 0 when eps is {self.eps}: an item of priority 0 "
                "would never be sampled again"
            )
        if p_max >= 0.0:
            self.max_priority = max(self.max_priority, p_max + self.eps)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        n = len(self.storage)
        state.update(
            to_tensors(
                {
                    "leaves": self.sum_tree.leaves[:n].copy(),
                    "max_priority": self.max_priority,
                    "sample_steps": self.sample_steps,
                    "hyper": {
                        "alpha": self.alpha,
                        "beta": self.beta0,
                        "beta_final": self.beta_final,
                        "beta_anneal_steps": self.beta_anneal_steps,
                        "eps": self.eps,
                    },
                }
            )
        )
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        hyper = state["hyper"]
        self.alpha, self.eps = float(hyper["alpha"]), float(hyper["eps"])
        self.beta0, self.beta_final = float(hyper["beta"]), float(hyper["beta_final"])
        self.beta_anneal_steps = int(hyper["beta_anneal_steps"])
        self.max_priority = float(state["max_priority"])
        self.sample_steps = int(state["sample_steps"])
        leaves = np.asarray(state["leaves"], dtype=np.float64)
        for tree in (self.sum_tree, self.min_tree):
            tree.clear()
            tree.set_range(0, leaves, leaves.shape[0])
