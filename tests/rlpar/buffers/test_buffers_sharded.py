"""Sharded sampling in one process: 3 shards behind an in-process transport behave
like one buffer holding the same items."""

import logging
import threading

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from rlpar.buffers import (
    LocalShardClient,
    PrefetchingSampler,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplayShard,
    ShardedSampler,
)
from rlpar.buffers.distributed import SHARD_SHIFT
from rlpar.buffers.shard import from_wire, to_wire
from rlpar.errors import ChildError, PeerUnavailable


class WireClient(LocalShardClient):
    """Fake transport: replies cross a tensor 'wire' and complete later, on another
    thread, like RPC futures do."""

    def __init__(self, shard, name, dead=False):
        super().__init__(shard, name)
        self.dead = dead
        self.update_calls = 0

    def sample_at(self, fractions):
        fut = torch.futures.Future()

        def reply():
            if self.dead:
                fut.set_exception(PeerUnavailable(f"peer {self.name!r} did not answer"))
                return
            try:
                fut.set_result(from_wire(to_wire(self.shard.sample_at(fractions))))
            except Exception as exc:
                fut.set_exception(exc)

        threading.Thread(target=reply).start()
        return fut

    def update(self, serials, priorities):
        self.update_calls += 1
        if self.dead:
            fut = torch.futures.Future()
            fut.set_exception(PeerUnavailable(f"peer {self.name!r} is gone"))
            return fut
        return super().update(serials, priorities)


def items(start, n):
    ids = np.arange(start, start + n)
    return {"obs": ids[:, None].astype(np.float32), "action": ids.astype(np.int64)}


SIZES = (5, 9, 6)
PRIOS = [np.linspace(0.5, 3.0, n) * (k + 1) for k, n in enumerate(SIZES)]


def make_sharded(prioritized=True, failure="raise", dead=(), **kw):
    shards, clients, start = [], [], 0
    for k, n in enumerate(SIZES):
        buf = (
            PrioritizedReplayBuffer(capacity=16, alpha=0.6, eps=0.0, seed=k)
            if prioritized
            else ReplayBuffer(capacity=16, seed=k)
        )
        buf.add(items(start, n), priorities=PRIOS[k])
        start += n
        shards.append(ReplayShard(buf))
        clients.append(WireClient(shards[-1], f"shard{k}", dead=k in dead))
    sampler = ShardedSampler(
        clients=clients, prioritized=prioritized, on_shard_failure=failure, seed=0, **kw
    )
    return sampler, shards, clients


def single_buffer():
    buf = PrioritizedReplayBuffer(capacity=64, alpha=0.6, eps=0.0, seed=0)
    buf.add(items(0, sum(SIZES)), priorities=np.concatenate(PRIOS))
    return buf


@pytest.mark.timeout(60)
def test_sharded_frequencies_equal_single_buffer_distribution():
    sampler, _, _ = make_sharded()
    draws = np.concatenate([sampler.sample(8).batch["action"] for _ in range(1500)])
    counts = np.bincount(draws, minlength=20)
    leaf = np.concatenate(PRIOS) ** 0.6
    assert chisquare(counts, leaf / leaf.sum() * counts.sum()).pvalue > 1e-3
    single = single_buffer()
    ref = np.concatenate([single.sample(8).batch["action"] for _ in range(1500)])
    # Same stratified scheme: the two empirical distributions agree too.
    table = np.stack([counts, np.bincount(ref, minlength=20)])
    from scipy.stats import chi2_contingency

    assert chi2_contingency(table).pvalue > 1e-3


def test_sharded_weights_equal_single_buffer_formula():
    sampler, _, _ = make_sharded(beta=0.5)
    sample = sampler.sample(12)
    leaf = np.concatenate(PRIOS) ** 0.6
    n = sum(SIZES)
    probs = leaf / leaf.sum()
    w = (n * probs) ** -0.5
    expected = w[sample.batch["action"]] / w.max()
    np.testing.assert_allclose(sample.weights, expected, rtol=1e-6)
    single = single_buffer()
    single.beta0 = 0.5
    s2 = single.sample(12)
    np.testing.assert_allclose(s2.weights, (w / w.max())[s2.batch["action"]], rtol=1e-6)
    # The shard is encoded in the index; the serial is the shard-local one.
    shard_of = sample.indices >> SHARD_SHIFT
    starts = np.cumsum((0,) + SIZES)[:-1]
    np.testing.assert_array_equal(
        sample.batch["action"], starts[shard_of] + (sample.indices & ((1 << SHARD_SHIFT) - 1))
    )


def test_uniform_sharded_is_uniform():
    sampler, _, _ = make_sharded(prioritized=False)
    sample = sampler.sample(20)
    np.testing.assert_array_equal(sample.weights, np.ones(20, np.float32))
    draws = np.concatenate([sampler.sample(20).batch["action"] for _ in range(400)])
    assert chisquare(np.bincount(draws, minlength=20)).pvalue > 1e-3
    assert len(sampler) == 20


def test_priority_updates_reach_owner_and_stale_ones_are_dropped():
    sampler, shards, _ = make_sharded()
    sample = sampler.sample(10)
    shard_of = sample.indices >> SHARD_SHIFT
    # Overwrite every slot of shard 0 before its updates arrive.
    shards[0].add(items(100, 16), priorities=np.full(16, 2.0))
    before0 = shards[0].buffer.sum_tree.leaves.copy()
    sampler.update_priorities(sample.indices, np.full(10, 7.0))
    np.testing.assert_array_equal(shards[0].buffer.sum_tree.leaves, before0)
    for k in (1, 2):
        serials = sample.indices[shard_of == k] & ((1 << SHARD_SHIFT) - 1)
        leaves = shards[k].buffer.sum_tree.leaves[serials % 16]
        np.testing.assert_allclose(leaves, 7.0**0.6)
    assert sampler.update_errors == 0


def test_dead_shard_raise_names_the_shard():
    sampler, _, _ = make_sharded(failure="raise")
    sampler.sample(4)  # learn the stats
    sampler.clients[1].dead = True
    with pytest.raises(PeerUnavailable, match="shard1"):
        sampler.sample(4)


def test_dead_shard_dropped_and_rest_still_sampled(caplog):
    sampler, _, _ = make_sharded(failure="drop")
    sampler.sample(4)
    sampler.clients[2].dead = True
    with caplog.at_level(logging.WARNING):
        sample = sampler.sample(10)
    assert "shard2" in caplog.text
    assert (sample.indices >> SHARD_SHIFT < 2).all() and sample.indices.size == 10
    assert len(sampler) == SIZES[0] + SIZES[1]
    # Weights now describe a buffer of the two live shards.
    leaf = np.concatenate(PRIOS[:2]) ** 0.6
    w = (leaf.size * leaf / leaf.sum()) ** -0.4
    np.testing.assert_allclose(sample.weights, (w / w.max())[sample.batch["action"]], rtol=1e-6)


def test_all_shards_dead_is_an_error():
    sampler, _, _ = make_sharded(failure="drop", dead=(0, 1, 2))
    with pytest.raises(PeerUnavailable, match="every replay shard"):
        sampler.sample(4)


def test_failed_priority_update_is_counted_not_raised():
    sampler, _, clients = make_sharded()
    sample = sampler.sample(20)
    clients[0].dead = True
    sampler.update_priorities(sample.indices, np.ones(20))
    assert sampler.update_errors == 1 and "shard0" in str(sampler.last_update_error)


def test_sharded_bad_input():
    sampler, _, _ = make_sharded()
    with pytest.raises(ValueError, match="exceeds"):
        sampler.sample(21)
    with pytest.raises(ValueError, match="positive"):
        sampler.sample(0)
    sample = sampler.sample(3)
    with pytest.raises(ValueError, match="finite"):
        sampler.update_priorities(sample.indices, np.array([1.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match="non-negative"):
        sampler.update_priorities(sample.indices, np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="shard 5"):
        sampler.update_priorities(np.array([5 << SHARD_SHIFT]), np.array([1.0]))
    with pytest.raises(ValueError, match="on_shard_failure"):
        ShardedSampler(clients=sampler.clients, prioritized=True, on_shard_failure="ignore")


def test_prefetching_sampler_async_and_threaded():
    sampler, _, _ = make_sharded()
    with PrefetchingSampler(buffer=sampler, batch_size=8, depth=3) as pre:
        for _ in range(5):
            s = pre.sample()
            assert s.indices.size == 8
            sampler.update_priorities(s.indices, np.ones(8))
        assert 0.0 <= pre.wait_fraction <= 1.0 and pre.batches == 5
    local = PrioritizedReplayBuffer(capacity=32, seed=0)
    local.add(items(0, 20))
    with PrefetchingSampler(buffer=local, batch_size=4, depth=2) as pre:
        assert pre.sample().indices.size == 4
        assert "prefetch/wait_fraction" in pre.stats()


def test_prefetching_sampler_reports_errors():
    empty = ReplayBuffer(capacity=4)
    with PrefetchingSampler(buffer=empty, batch_size=2) as pre:
        with pytest.raises(ChildError, match="empty"):
            pre.sample()
    with pytest.raises(ValueError, match="depth"):
        PrefetchingSampler(buffer=empty, batch_size=2, depth=0)


def test_shard_errors_that_are_not_dead_peers_are_raised_even_under_drop():
    sampler, shards, _ = make_sharded(failure="drop")
    sampler.sample(4)
    shards[1].buffer = PrioritizedReplayBuffer(capacity=4)  # now empty: answers an error
    sampler.known[1] = (3, 1.0, 1.0)  # stale stats still route draws to it
    with pytest.raises(ValueError, match="empty replay shard"):
        for _ in range(20):  # until a draw lands in shard 1
            sampler.sample(8)
    assert all(sampler.alive)
