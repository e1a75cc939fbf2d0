"""Ring storage and uniform replay: wraparound, validation, state round trip."""

from collections import deque

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlpar.buffers import FieldSpec, ReplayBuffer, RingStorage
from rlpar.protocols import Buffer, Sample


def rows(start: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + n)
    return {
        "obs": np.stack([ids, -ids], axis=1).astype(np.float32),
        "action": ids.astype(np.int64),
        "terminated": ids % 3 == 0,
    }


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 20), st.lists(st.integers(0, 45), min_size=1, max_size=12))
def test_ring_wraparound_matches_deque(capacity, sizes):
    storage = RingStorage(capacity=capacity)
    model: deque[int] = deque(maxlen=capacity)
    start = 0
    for n in sizes:
        arrays, m = storage.validate(rows(start, n))
        storage.write(arrays, m)
        model.extend(range(start, start + n))
        start += n
        assert len(storage) == len(model)
        # Slot of serial s is s % capacity; the live serials are exactly the model's.
        live = sorted(storage.serials[: len(storage)].tolist())
        assert live == sorted(model)
        for serial in model:
            slot = serial % capacity
            assert storage.serials[slot] == serial
            assert storage.columns["action"][slot] == serial
            np.testing.assert_array_equal(storage.columns["obs"][slot], [serial, -serial])
            assert storage.columns["terminated"][slot] == (serial % 3 == 0)


def test_spec_declared_and_inferred_agree():
    declared = ReplayBuffer(
        capacity=8,
        spec={
            "obs": FieldSpec((2,), np.float32),
            "action": FieldSpec((), np.int64),
            "terminated": FieldSpec((), bool),
        },
    )
    inferred = ReplayBuffer(capacity=8)
    for buf in (declared, inferred):
        buf.add(rows(0, 5))
    assert declared.spec == inferred.spec
    assert isinstance(declared, Buffer)


def test_uniform_sample_shape_and_ownership():
    buf = ReplayBuffer(capacity=10, seed=0)
    buf.add(rows(0, 25))  # wraps twice; only serials 15..24 remain
    sample = buf.sample(10)
    assert isinstance(sample, Sample)
    assert sample.batch["obs"].shape == (10, 2) and sample.batch["obs"].dtype == np.float32
    assert set(sample.indices.tolist()) <= set(range(15, 25))
    np.testing.assert_array_equal(sample.batch["action"], sample.indices)
    np.testing.assert_array_equal(sample.weights, np.ones(10, np.float32))
    sample.batch["obs"][:] = 0  # the caller owns the arrays: the buffer is unchanged
    assert buf.storage.columns["obs"][:, 0].min() == 15
    buf.update_priorities(sample.indices, np.ones(10))  # accepted no-op


def test_uniform_frequencies_are_uniform():
    from scipy.stats import chisquare

    buf = ReplayBuffer(capacity=50, seed=3)
    buf.add(rows(0, 50))
    counts = np.bincount(np.concatenate([buf.sample(50).indices for _ in range(400)]), minlength=50)
    assert chisquare(counts).pvalue > 1e-3


def test_torch_tensor_input():
    buf = ReplayBuffer(capacity=4)
    buf.add({"obs": torch.ones(3, 2), "action": torch.arange(3)})
    assert buf.sample(2).batch["obs"].dtype == np.float32


@pytest.mark.parametrize(
    "batch, message",
    [
        ({"obs": np.zeros((3, 2), np.float32), "action": np.zeros(3, np.int64)}, "missing"),
        ({**rows(0, 3), "extra": np.zeros(3)}, "unknown"),
        ({**rows(0, 3), "obs": np.zeros((3, 3), np.float32)}, "shape"),
        ({**rows(0, 3), "action": np.zeros(3, np.float32)}, "dtype"),
        ({**rows(0, 3), "action": np.zeros(2, np.int64)}, "batch size"),
        ({**rows(0, 3), "terminated": np.ones(3, np.int64)}, "dtype"),
        ([1, 2, 3], "mapping"),
    ],
)
def test_bad_batches(batch, message):
    buf = ReplayBuffer(capacity=8)
    buf.add(rows(0, 2))
    with pytest.raises((ValueError, TypeError), match=message):
        buf.add(batch)
    assert len(buf) == 2  # a rejected batch writes nothing


def test_bad_first_batch():
    with pytest.raises(ValueError, match="leading batch axis"):
        ReplayBuffer(capacity=4).add({"obs": np.float32(1.0)})
    with pytest.raises(ValueError, match="non-empty"):
        ReplayBuffer(capacity=4).add({})


@pytest.mark.parametrize("size, message", [(0, "positive"), (-1, "positive"), (11, "exceeds")])
def test_bad_batch_size(size, message):
    buf = ReplayBuffer(capacity=20)
    buf.add(rows(0, 10))
    with pytest.raises(ValueError, match=message):
        buf.sample(size)


def test_sample_empty_and_bad_constructor():
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(capacity=4).sample(1)
    with pytest.raises(TypeError, match="batch_size"):
        buf = ReplayBuffer(capacity=4)
        buf.add(rows(0, 2))
        buf.sample(1.5)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(capacity=0)
    with pytest.raises(ValueError, match="priorities"):
        ReplayBuffer(capacity=4).add(rows(0, 2), priorities=np.array([1.0, np.nan]))


def test_state_dict_round_trip_through_disk(tmp_path):
    buf = ReplayBuffer(capacity=7, seed=5)
    buf.add(rows(0, 12))
    buf.sample(3)
    path = tmp_path / "buf.pt"
    torch.save(buf.state_dict(), path)
    clone = ReplayBuffer(capacity=7, seed=99)
    clone.load_state_dict(torch.load(path, weights_only=True))
    assert len(clone) == len(buf) and clone.storage.next_serial == buf.storage.next_serial
    for name, col in buf.storage.columns.items():
        np.testing.assert_array_equal(clone.storage.columns[name], col)
    a, b = buf.sample(5), clone.sample(5)  # the RNG state travels too
    np.testing.assert_array_equal(a.indices, b.indices)
    buf.add(rows(12, 3))
    clone.add(rows(12, 3))
    np.testing.assert_array_equal(clone.storage.serials, buf.storage.serials)


def test_large_outputs_are_recycled_only_when_released():
    frames = {"obs": np.zeros((16, 4, 84, 84), np.uint8)}
    buf = ReplayBuffer(capacity=16, seed=0)
    buf.add(frames)
    buf.storage.columns["obs"][:] = np.arange(16, dtype=np.uint8)[:, None, None, None]
    first = buf.sample(16).batch["obs"]  # 450 KB: large enough to be pooled
    kept = first.copy()
    view = first[:2]
    tensor = torch.from_numpy(first)
    del first
    second = buf.sample(16).batch["obs"]
    assert not np.shares_memory(second, view)  # still referenced: not reused
    np.testing.assert_array_equal(view, kept[:2])
    np.testing.assert_array_equal(tensor.numpy(), kept)
    address = second.ctypes.data
    del second
    third = buf.sample(16).batch["obs"]
    assert third.ctypes.data == address  # released: recycled
    assert any(a is third for a in buf.storage._pool._arrays[((16, 4, 84, 84), "|u1")])
