"""The compiled (numba) prioritized-replay paths against plain numpy references:
stratified sampling, fused priority updates, bad values, tiny totals, pickling
(where the disk cache goes: test_jit_cache.py)."""

import copy
import pickle

import cloudpickle
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import MinTree, PrioritizedReplayBuffer, SumTree

# The buffer's leaves (p + eps) ** alpha come from np.power's SIMD loop (add; AVX-512
# where the CPU has it) and from numba's pow, i.e. libm (update); the references below
# use numpy's scalar pow (libm too). The two pows need not round alike: on an AVX-512
# CPU np.power and libm differ by at most 1 ulp (measured on 18M inputs per alpha of
# filled_buffers; none for alpha 0 and 1). rtol = 4 * eps allows at least 4 ulps of
# any value (ulp(x) <= eps * |x|): 1 ulp each side plus room for a less exact loop.
POW_RTOL = 4 * np.finfo(np.float64).eps


def rows(start: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + n)
    return {"obs": ids[:, None].astype(np.float32), "action": ids.astype(np.int64)}


@st.composite
def filled_buffers(draw):
    cap = draw(st.integers(1, 150))
    arity = draw(st.sampled_from([2, 8, 16]))
    alpha = draw(st.sampled_from([0.6, 1.0, 0.0]))
    eps = draw(st.sampled_from([1e-6, 0.0, 0.1]))
    chunks = draw(
        st.lists(st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=60), min_size=1, max_size=5)
    )
    return cap, arity, alpha, eps, chunks


def build(cap, arity, alpha, eps, chunks, seed):
    buf = PrioritizedReplayBuffer(
        capacity=cap, alpha=alpha, beta=0.4, eps=eps, seed=seed, tree_arity=arity
    )
    ref = np.zeros(cap)  # reference leaves: (p + eps) ** alpha per slot
    serial = 0
    for chunk in chunks:
        p = np.array(chunk)
        buf.add(rows(serial, p.size), priorities=p)
        for q in p:
            ref[serial % cap] = (q + eps) ** alpha
            serial += 1
    return buf, ref


@settings(max_examples=40, deadline=None)
@given(filled_buffers(), st.integers(0, 2**32 - 1), st.data())
def test_stratified_sample_matches_reference(case, seed, data):
    buf, ref = build(*case, seed)
    n = data.draw(st.integers(1, len(buf)))
    rng = copy.deepcopy(buf.rng)
    sample = buf.sample(n)
    u = rng.random(n)
    total = buf.sum_tree.total
    # <= 150 leaves summed in another order (tree blocks vs numpy), each <= 4 ulps off:
    # a relative difference below 2 * 150 * eps + POW_RTOL, about 7e-14.
    assert total == pytest.approx(ref.sum(), rel=1e-12)
    # One draw from each of n equal slices of the total mass.
    v = (np.arange(n) + u) * (total / n)
    slots = np.minimum(np.searchsorted(np.cumsum(ref), v, side="right"), len(buf) - 1)
    # Exact: the tree's partial sums and cumsum(ref) differ by a few ulps of the total,
    # so a draw lands in another slot only within that of a boundary (odds ~1e-9 a run).
    np.testing.assert_array_equal(sample.indices % buf.capacity, slots)
    np.testing.assert_array_equal(sample.batch["action"], sample.indices)
    live = ref[: len(buf)]
    expected = (live[slots] / live.min()) ** -0.4
    np.testing.assert_allclose(sample.weights, expected, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(filled_buffers(), st.integers(0, 2**32 - 1), st.data())
def test_fused_update_matches_reference(case, seed, data):
    cap, arity, alpha, eps, chunks = case
    buf, ref = build(*case, seed)
    last = buf.storage.next_serial - 1
    # Any issued serial: live ones apply (last write wins), overwritten ones are dropped.
    serials = np.array(
        data.draw(st.lists(st.integers(0, last), min_size=1, max_size=40)), dtype=np.int64
    )
    prios = np.array(
        data.draw(st.lists(st.floats(0.5, 50), min_size=serials.size, max_size=serials.size))
    )
    max_before = buf.max_priority
    buf.update_priorities(serials, prios)
    live = serials > last - len(buf)
    for s, p in zip(serials[live], prios[live], strict=True):
        ref[s % cap] = (p + eps) ** alpha
    np.testing.assert_allclose(
        buf.sum_tree.leaves[: len(buf)], ref[: len(buf)], rtol=POW_RTOL, atol=0
    )
    assert buf.sum_tree.total == pytest.approx(ref.sum(), rel=1e-12)  # see the test above
    assert buf.min_tree.min == pytest.approx(ref[: len(buf)].min(), rel=POW_RTOL, abs=0)
    # Exact: the buffer computes max_priority with these same two IEEE operations.
    expected_max = max(max_before, prios[live].max() + eps) if live.any() else max_before
    assert buf.max_priority == expected_max


def test_bad_batch_is_rejected_whole():
    buf = PrioritizedReplayBuffer(capacity=8, seed=0)
    buf.add(rows(0, 8), priorities=np.arange(1.0, 9.0))
    before = buf.sum_tree.leaves.copy()
    sample = buf.sample(4)
    for bad, message in [(np.nan, "finite"), (-1.0, "non-negative"), (np.inf, "finite")]:
        with pytest.raises(ValueError, match=message):
            buf.update_priorities(sample.indices, np.array([2.0, 3.0, 4.0, bad]))
        np.testing.assert_array_equal(buf.sum_tree.leaves, before)
    with pytest.raises(ValueError, match="serials"):
        buf.update_priorities(np.array([0, 99]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(buf.sum_tree.leaves, before)


def test_zero_priority_needs_positive_eps():
    buf = PrioritizedReplayBuffer(capacity=4, eps=0.0, seed=0)
    with pytest.raises(ValueError, match="never be sampled"):
        buf.add(rows(0, 2), priorities=np.array([1.0, 0.0]))
    buf.add(rows(0, 2), priorities=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="never be sampled"):
        buf.update_priorities(np.array([0, 1]), np.array([0.0, 1.0]))
    ok = PrioritizedReplayBuffer(capacity=4, eps=1e-3, alpha=1.0, seed=0)
    ok.add(rows(0, 2), priorities=np.zeros(2))
    ok.update_priorities(np.array([0]), np.array([0.0]))
    assert ok.sum_tree.leaves[0] == pytest.approx(1e-3)


@pytest.mark.parametrize("tiny", [1e-300, 5e-324])
def test_sampling_when_total_is_tiny(tiny):
    buf = PrioritizedReplayBuffer(capacity=37, alpha=1.0, eps=0.0, seed=0)
    buf.add(rows(0, 37), priorities=np.full(37, tiny))
    assert 0 < buf.sum_tree.total < 1e-290
    sample = buf.sample(37)
    assert 0 <= sample.indices.min() and sample.indices.max() < 37
    if tiny > 1e-307:  # subnormal totals have too few bits left for 37 slices
        assert sorted(sample.indices.tolist()) == list(range(37))  # one per slice
    np.testing.assert_array_equal(sample.weights, np.ones(37, np.float32))
    # A few huge priorities next to tiny ones: the tiny ones are (almost) never drawn,
    # and nothing lands on an empty slot or the padding.
    buf.update_priorities(np.array([3, 30]), np.array([1.0, 2.0]))
    drawn = np.concatenate([buf.sample(8).indices for _ in range(20)])
    assert set(drawn.tolist()) <= {3, 30}


def test_partly_filled_tree_never_returns_empty_slots():
    buf = PrioritizedReplayBuffer(capacity=1000, seed=0)  # 3 levels at arity 16
    buf.add(rows(0, 5), priorities=np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    drawn = np.concatenate([buf.sample(5).indices for _ in range(50)])
    assert drawn.min() >= 0 and drawn.max() <= 4
    # Rounding past the total still lands on the last positive leaf.
    slots, _ = buf.draw(np.array([np.nextafter(1.0, 0.0), 1.0, 1.5]))
    np.testing.assert_array_equal(slots, [4, 4, 4])


@pytest.mark.parametrize("cls", [SumTree, MinTree])
def test_trees_reject_bad_values(cls):
    tree = cls(capacity=10)
    for bad in (np.nan, -1.0):
        with pytest.raises(ValueError, match="non-negative"):
            tree.update(np.array([1, 2]), np.array([1.0, bad]))
        with pytest.raises(ValueError, match="non-negative"):
            tree.set_range(0, np.array([1.0, bad]), 2)
    if cls is SumTree:
        with pytest.raises(ValueError, match="finite"):
            tree.update(np.array([1]), np.array([np.inf]))
    else:  # +inf is the min tree's empty value
        tree.update(np.array([1]), np.array([np.inf]))
        assert tree.min == np.inf
    with pytest.raises(ValueError, match="shape"):
        tree.set_range(0, np.ones(3), 2)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_pickled_buffer_samples_and_updates_the_same(dumps):
    buf = PrioritizedReplayBuffer(capacity=100, seed=3)
    buf.add(rows(0, 130), priorities=np.linspace(0.1, 5.0, 130))
    buf.add(rows(130, 7))  # parents still pending (lazy): pickling must flush them
    clone = pickle.loads(dumps(buf))
    assert clone.sum_tree._flat.ctypes.data % 64 == 0
    for b in (buf, clone):
        b.update_priorities(np.array([40, 129, 135]), np.array([9.0, 0.3, 2.0]))
    a, c = buf.sample(32), clone.sample(32)
    np.testing.assert_array_equal(a.indices, c.indices)
    np.testing.assert_array_equal(a.weights, c.weights)
    np.testing.assert_array_equal(buf.sum_tree.leaves, clone.sum_tree.leaves)
    assert buf.sum_tree.total == clone.sum_tree.total and buf.min_tree.min == clone.min_tree.min


def assert_parents_consistent(tree, reduce):
    tree.flush()  # the last adds' parents are computed lazily
    levels = tree.levels
    for parent, child in zip(levels[:-1], levels[1:], strict=True):
        blocks = child.reshape(-1, tree.arity)
        np.testing.assert_allclose(parent[: blocks.shape[0]], reduce(blocks, axis=1), rtol=1e-12)


@pytest.mark.timeout(60)
def test_prefetch_thread_and_updates_keep_trees_consistent():
    from rlpar.buffers import PrefetchingSampler

    buf = PrioritizedReplayBuffer(capacity=3000, seed=0, tree_arity=4)
    buf.add(rows(0, 3000), priorities=np.linspace(0.1, 3.0, 3000))
    rng = np.random.default_rng(0)
    # The kernels release the GIL: samples on the prefetch thread run while this
    # thread adds and updates, and every parent must still be exact afterwards
    # (a consistency check; the race the buffer's lock prevents is rare to hit).
    with PrefetchingSampler(buffer=buf, batch_size=64, depth=2) as pre:
        for i in range(300):
            s = pre.sample()
            buf.update_priorities(s.indices, rng.random(64) * 5)
            buf.add(rows(3000 + 8 * i, 8))
    assert_parents_consistent(buf.sum_tree, np.sum)
    assert_parents_consistent(buf.min_tree, np.min)
    assert buf.sum_tree.total == pytest.approx(buf.sum_tree.leaves.sum(), rel=1e-12)
    assert buf.min_tree.min == buf.min_tree.leaves.min()
