"""Sum/min trees: batched updates and prefix search equal a brute-force model."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import MinTree, SumTree
from rlpar.buffers.trees import update_sum_min

capacities = st.integers(min_value=1, max_value=300)
arities = st.sampled_from([2, 4, 8, 16, 64])


@st.composite
def update_batches(draw):
    cap = draw(capacities)
    batches = draw(
        st.lists(
            st.lists(
                st.tuples(
                    st.integers(0, cap - 1),
                    st.one_of(st.just(0.0), st.floats(1e-3, 1e3)),
                ),
                min_size=1,
                max_size=40,
            ),
            min_size=1,
            max_size=6,
        )
    )
    return cap, batches


@settings(max_examples=50, deadline=None)
@given(update_batches(), arities, st.booleans(), st.integers(0, 2**32 - 1))
def test_trees_match_brute_force(case, arity, fused, seed):
    cap, batches = case
    sum_tree, min_tree = SumTree(capacity=cap, arity=arity), MinTree(capacity=cap, arity=arity)
    ref_sum, ref_min = np.zeros(cap), np.full(cap, np.inf)
    rng = np.random.default_rng(seed)
    for batch in batches:
        # Repeated indices are part of the strategy: the last value must win.
        idx = np.array([i for i, _ in batch])
        vals = np.array([v for _, v in batch])
        if fused:
            update_sum_min(sum_tree, min_tree, idx, vals)
        else:
            sum_tree.update(idx, vals)
            min_tree.update(idx, vals)
        for i, v in batch:
            ref_sum[i], ref_min[i] = v, v
        # Interleave a contiguous write (parents recomputed lazily, at the next read).
        start = int(rng.integers(0, cap))
        count = int(rng.integers(0, cap - start + 1))
        block = rng.random(count) * 5
        sum_tree.set_range(start, block, count)
        min_tree.set_range(start, block, count)
        ref_sum[start : start + count] = block
        ref_min[start : start + count] = block
        np.testing.assert_array_equal(sum_tree.leaves, ref_sum)
        assert sum_tree.total == pytest.approx(ref_sum.sum(), rel=1e-12, abs=1e-12)
        assert min_tree.min == ref_min.min()
        if ref_sum.sum() > 0:
            queries = rng.random(64) * sum_tree.total
            found = sum_tree.find_prefix(queries)
            expected = np.searchsorted(np.cumsum(ref_sum), queries, side="right")
            # Exact: the tree's partial sums and cumsum differ by a few ulps of the total
            # (other order), which moves a query only if it is that close to a boundary.
            np.testing.assert_array_equal(found, expected)
            assert (ref_sum[found] > 0).all()


@settings(max_examples=30, deadline=None)
@given(capacities, arities, st.data())
def test_set_range_matches_brute_force(cap, arity, data):
    sum_tree, min_tree = SumTree(capacity=cap, arity=arity), MinTree(capacity=cap, arity=arity)
    ref, ref_min = np.zeros(cap), np.full(cap, np.inf)
    for _ in range(data.draw(st.integers(1, 5))):
        start = data.draw(st.integers(0, cap - 1))
        count = data.draw(st.integers(0, cap - start))
        vals = np.array(data.draw(st.lists(st.floats(0, 10), min_size=count, max_size=count)))
        sum_tree.set_range(start, vals, count)
        min_tree.set_range(start, vals, count)
        ref[start : start + count] = vals
        ref_min[start : start + count] = vals
    assert sum_tree.total == pytest.approx(ref.sum(), rel=1e-12, abs=1e-12)
    assert min_tree.min == ref_min.min()
    np.testing.assert_array_equal(min_tree.leaves, ref_min)


def test_prefix_search_edges():
    tree = SumTree(capacity=5, arity=2)
    tree.update(np.arange(5), np.array([1.0, 0.0, 2.0, 0.0, 3.0]))
    # Boundaries go to the right-hand leaf; zero-valued leaves are never returned.
    found = tree.find_prefix(np.array([0.0, 0.999, 1.0, 2.999, 3.0, 5.999]))
    np.testing.assert_array_equal(found, [0, 0, 2, 2, 4, 4])
    # A query at (rounded) total still lands on the last positive leaf.
    assert tree.find_prefix(np.array([np.nextafter(6.0, 0)]))[0] == 4


def test_float64_precision_on_a_million_leaves():
    tree = SumTree(capacity=1_000_000)
    tree.set_range(0, 1e-3, 1_000_000)
    tree.update(np.array([123_456]), np.array([1e6]))
    assert tree.total == pytest.approx(1e6 + 999.999, rel=1e-12)
    found = tree.find_prefix(np.array([123_456 * 1e-3 + 5e5]))
    assert found[0] == 123_456


@pytest.mark.parametrize("kwargs", [{"capacity": 0}, {"capacity": -3}, {"capacity": 2.5}])
def test_bad_capacity(kwargs):
    with pytest.raises(ValueError, match="capacity"):
        SumTree(**kwargs)


def test_bad_updates():
    tree = SumTree(capacity=4)
    with pytest.raises(ValueError, match="indices"):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError, match="differ"):
        tree.update(np.array([0, 1]), np.array([1.0]))
    with pytest.raises(ValueError, match="arity"):
        MinTree(capacity=4, arity=1)
    with pytest.raises(ValueError, match="power of two"):
        SumTree(capacity=4, arity=3)
