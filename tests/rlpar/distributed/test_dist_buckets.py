"""Flat buckets (what average_gradients and broadcast_parameters send): one buffer per
dtype up to a size, the same buckets on every member, and an exact copy back."""

from __future__ import annotations

import pytest
import torch

from rlpar.distributed import _buckets


def _tensors():
    torch.manual_seed(0)
    return [torch.randn(3, 4), torch.randn(5, dtype=torch.float64), torch.randn(2),
            torch.arange(6).reshape(2, 3), torch.randn(7)]


def test_buckets_keep_dtypes_apart_and_stay_under_their_size():
    tensors = _tensors()
    buckets = [bucket for bucket, _ in _buckets.flatten(tensors, torch.device("cpu"), 64 / 2**20)]
    assert all(len({t.dtype for t in b}) == 1 for b in buckets)
    # 64 bytes: a float32 bucket takes at most 16 numbers, unless one tensor is larger.
    assert all(sum(t.numel() * t.element_size() for t in b) <= 64 or len(b) == 1 for b in buckets)
    assert sorted(id(t) for b in buckets for t in b) == sorted(id(t) for t in tensors)
    # The order depends only on the tensors, so every member builds the same buckets.
    again = [bucket for bucket, _ in _buckets.flatten(tensors, torch.device("cpu"), 64 / 2**20)]
    assert [[id(t) for t in b] for b in buckets] == [[id(t) for t in b] for b in again]


@pytest.mark.parametrize("bucket_mb", [1e-6, 25.0])
def test_a_flat_buffer_copies_back_exactly(bucket_mb):
    tensors = _tensors()
    originals = [t.clone() for t in tensors]
    for bucket, flat in _buckets.flatten(tensors, torch.device("cpu"), bucket_mb):
        assert flat.dim() == 1 and flat.numel() == sum(t.numel() for t in bucket)
        _buckets.unflatten(bucket, flat * 2)
    for t, o in zip(tensors, originals):
        assert torch.equal(t, o * 2)


def test_bucket_size_must_be_positive():
    with pytest.raises(ValueError, match="bucket_mb"):
        list(_buckets.flatten(_tensors(), torch.device("cpu"), 0))
