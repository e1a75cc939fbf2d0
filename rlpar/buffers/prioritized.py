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
from rlpar.errors import StateError
from rlpar.protocols import Sample
from rlpar.state import StatePath, array, integer, mapping, number


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
        hyper = {"alpha": alpha, "beta": beta, "beta_final": beta_final,
                 "beta_anneal_steps": beta_anneal_steps, "eps": eps}
        try:
            self._set_hyper(check_hyper(hyper, StatePath(f"{type(self).__name__}()", "arguments")))
        except StateError as exc:  # not a state: a plain ValueError, same words
            raise ValueError(str(exc)) from None
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

    def _set_hyper(self, hyper: Mapping[str, Any]) -> None:
        self.alpha, self.eps = hyper["alpha"], hyper["eps"]
        self.beta0, self.beta_final = hyper["beta"], hyper["beta_final"]
        self.beta_anneal_steps = hyper["beta_anneal_steps"]

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

    STATE_KEYS = (*ReplayBuffer.STATE_KEYS, "leaves", "max_priority", "sample_steps", "hyper")

    def _kind_hint(self, state: Mapping[str, Any]) -> str:
        if "leaves" not in state:
            return " (a uniform ReplayBuffer's state? it holds no priorities)"
        return ""

    def _check_state(self, state: Any, where: StatePath) -> dict[str, Any]:
        checked = super()._check_state(state, where)
        n = min(checked["storage"].next_serial, self.capacity)
        leaves = array(state["leaves"], where["leaves"], ndim=1, kinds="f")
        if leaves.shape[0] != n:
            raise where["leaves"].error(f"holds {leaves.shape[0]} priorities for the {n} items stored")
        # Every stored item has a positive, finite mass (add and update_priorities
        # refuse others): a NaN or negative one would break the trees' search.
        if n and not (leaves.min() > 0.0 and leaves.max() < np.inf):
            raise where["leaves"].error(
                f"must be finite and > 0, got {leaves[~((leaves > 0) & (leaves < np.inf))][:5]}")
        checked.update(
            hyper=check_hyper(state["hyper"], where["hyper"]),
            leaves=leaves.astype(np.float64, copy=False),
            max_priority=number(state["max_priority"], where["max_priority"], low=0.0, open_low=True),
            sample_steps=integer(state["sample_steps"], where["sample_steps"]),
        )
        return checked

    def _restore(self, checked: Mapping[str, Any]) -> None:
        super()._restore(checked)
        self._set_hyper(checked["hyper"])
        self.max_priority, self.sample_steps = checked["max_priority"], checked["sample_steps"]
        leaves = checked["leaves"]
        with self._tree_lock:
            for tree in (self.sum_tree, self.min_tree):
                tree.clear()
                tree.set_range(0, leaves, leaves.shape[0])


def check_hyper(value: Any, where: StatePath) -> dict[str, Any]:
    """PER's hyper-parameters (a constructor's or a loaded state's), checked: alpha
    and eps finite and >= 0, beta and beta_final in [0, 1] (Schaul et al. anneal b
    to 1: full correction), beta_anneal_steps an int >= 0."""
    hyper = mapping(value, where, required=("alpha", "beta", "beta_final", "beta_anneal_steps", "eps"))
    out: dict[str, Any] = {name: number(hyper[name], where[name], low=0.0) for name in ("alpha", "eps")}
    for name in ("beta", "beta_final"):
        out[name] = number(hyper[name], where[name], low=0.0, high=1.0)
    out["beta_anneal_steps"] = integer(hyper["beta_anneal_steps"], where["beta_anneal_steps"])
    return out
