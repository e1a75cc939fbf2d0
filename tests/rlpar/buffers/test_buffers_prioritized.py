"""Proportional prioritized replay (Schaul et al. 2016): frequencies, weights,
stale updates, annealing, bad input, state round trip."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from rlpar.buffers import PrioritizedReplayBuffer


def transitions(start: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + n)
    return {"obs": ids[:, None].astype(np.float32), "action": ids.astype(np.int64)}


def test_sampling_frequencies_match_priorities():
    buf = PrioritizedReplayBuffer(capacity=20, alpha=0.7, eps=0.0, seed=0)
    priorities = np.arange(1, 21, dtype=np.float64)
    buf.add(transitions(0, 20), priorities=priorities)
    counts = np.bincount(
        np.concatenate([buf.sample(16).indices for _ in range(1500)]), minlength=20
    )
    expected = priorities**0.7 / (priorities**0.7).sum() * counts.sum()
    # Stratified sampling is less variable than multinomial, so the chi-square
    # statistic is, if anything, small; a wrong distribution makes it huge.
    assert chisquare(counts, expected).pvalue > 1e-3
    wrong = np.full(20, counts.sum() / 20)
    assert chisquare(counts, wrong).pvalue < 1e-6


def test_importance_weights_equal_hand_formula():
    alpha, beta, eps = 0.6, 0.4, 1e-2
    buf = PrioritizedReplayBuffer(capacity=8, alpha=alpha, beta=beta, eps=eps, seed=1)
    p = np.array([0.5, 1.0, 2.0, 4.0, 0.1, 3.0])
    buf.add(transitions(0, 6), priorities=p)
    sample = buf.sample(6)
    leaf = (p + eps) ** alpha
    probs = leaf / leaf.sum()
    n = 6
    w = (n * probs) ** -beta
    expected = w[sample.indices] / w.max()  # max over ALL stored items, not the batch
    np.testing.assert_allclose(sample.weights, expected, rtol=1e-6)
    assert sample.weights.dtype == np.float32


def test_new_items_get_max_priority():
    buf = PrioritizedReplayBuffer(capacity=8, alpha=1.0, eps=0.0, seed=0)
    buf.add(transitions(0, 2), priorities=np.array([5.0, 1.0]))
    buf.add(transitions(2, 1))
    assert buf.sum_tree.leaves[2] == 5.0
    buf.update_priorities(np.array([1]), np.array([9.0]))
    buf.add(transitions(3, 1))
    assert buf.sum_tree.leaves[3] == 9.0


def test_stale_priority_updates_are_dropped():
    buf = PrioritizedReplayBuffer(capacity=4, alpha=1.0, eps=0.0, seed=0)
    buf.add(transitions(0, 4), priorities=np.ones(4))
    sample = buf.sample(4)
    buf.add(transitions(4, 2), priorities=np.full(2, 7.0))  # overwrites slots 0 and 1
    buf.update_priorities(sample.indices, np.full(4, 3.0))
    # Slots 0, 1 hold new items (serials 4, 5): their priority must stay 7.
    np.testing.assert_array_equal(buf.sum_tree.leaves, [7.0, 7.0, 3.0, 3.0])
    assert buf.min_tree.min == 3.0


def test_duplicate_indices_last_priority_wins():
    buf = PrioritizedReplayBuffer(capacity=4, alpha=1.0, eps=0.0, seed=0)
    buf.add(transitions(0, 4), priorities=np.ones(4))
    buf.update_priorities(np.array([2, 2, 2]), np.array([5.0, 6.0, 0.5]))
    assert buf.sum_tree.leaves[2] == 0.5


def test_beta_anneals_linearly():
    buf = PrioritizedReplayBuffer(capacity=4, beta=0.4, beta_final=1.0, beta_anneal_steps=10)
    buf.add(transitions(0, 4))
    assert buf.beta == pytest.approx(0.4)
    for _ in range(5):
        buf.sample(2)
    assert buf.beta == pytest.approx(0.7)
    for _ in range(20):
        buf.sample(2)
    assert buf.beta == pytest.approx(1.0)


@pytest.mark.parametrize(
    "priorities, message",
    [
        (np.array([1.0, np.nan]), "finite"),
        (np.array([1.0, np.inf]), "finite"),
        (np.array([1.0, -0.5]), "non-negative"),
        (np.array([1.0, 2.0, 3.0]), "shape"),
        (np.array([[1.0, 2.0]]), "shape"),
    ],
)
def test_bad_priorities(priorities, message):
    buf = PrioritizedReplayBuffer(capacity=4, seed=0)
    with pytest.raises(ValueError, match=message):
        buf.add(transitions(0, 2), priorities=priorities)
    buf.add(transitions(0, 2))
    sample = buf.sample(2)
    with pytest.raises(ValueError, match=message):
        buf.update_priorities(sample.indices, priorities)


def test_bad_indices_and_sizes():
    buf = PrioritizedReplayBuffer(capacity=4, seed=0)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    buf.add(transitions(0, 3))
    with pytest.raises(ValueError, match="exceeds"):
        buf.sample(4)
    with pytest.raises(ValueError, match="positive"):
        buf.sample(0)
    with pytest.raises(ValueError, match="serials"):
        buf.update_priorities(np.array([10]), np.array([1.0]))
    # A negative serial is an error even while the buffer is not yet full.
    with pytest.raises(ValueError, match="serials"):
        buf.update_priorities(np.array([0, -1]), np.array([1.0, 1.0]))
    full = PrioritizedReplayBuffer(capacity=4, seed=0)
    full.add(transitions(0, 6))
    with pytest.raises(ValueError, match="serials"):
        full.update_priorities(np.array([5, 6]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="serials"):
        full.update_priorities(np.array([-3]), np.array([1.0]))
    with pytest.raises(ValueError, match="integers"):
        buf.update_priorities(np.array([0.5]), np.array([1.0]))
    for kwargs, name in [
        ({"alpha": -1}, "alpha"),
        ({"beta": np.nan}, "beta"),
        ({"eps": -1}, "eps"),
    ]:
        with pytest.raises(ValueError, match=name):
            PrioritizedReplayBuffer(capacity=4, **kwargs)


def test_state_dict_round_trip_through_disk(tmp_path):
    buf = PrioritizedReplayBuffer(capacity=6, beta_anneal_steps=100, seed=2)
    buf.add(transitions(0, 9), priorities=np.linspace(0.1, 3, 9))
    buf.update_priorities(buf.sample(4).indices, np.array([0.2, 5.0, 1.0, 2.0]))
    torch.save(buf.state_dict(), tmp_path / "per.pt")
    clone = PrioritizedReplayBuffer(capacity=6, seed=0)
    clone.load_state_dict(torch.load(tmp_path / "per.pt", weights_only=True))
    np.testing.assert_array_equal(clone.sum_tree.leaves, buf.sum_tree.leaves)
    assert clone.min_tree.min == buf.min_tree.min and clone.beta == buf.beta
    assert clone.max_priority == buf.max_priority
    a, b = buf.sample(5), clone.sample(5)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.batch["obs"], b.batch["obs"])
