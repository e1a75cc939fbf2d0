"""Flat buckets of tensors: one collective call for many small tensors.

A collective pays a round of latency per call, and a network's gradients are dozens
of tensors, most of them small; so they travel concatenated in a few flat buffers
(DDP does the same with its 25 MB buckets). Tensors of one bucket share a dtype (a
buffer has one) and a device (so the copy back is one kind of copy).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch


def _groups(tensors: Sequence[torch.Tensor], bucket_bytes: int) -> list[list[torch.Tensor]]:
    open_: dict[tuple, list[torch.Tensor]] = {}
    sizes: dict[tuple, int] = {}
    done: list[list[torch.Tensor]] = []
    for t in tensors:
        key = (t.dtype, t.device)
        nbytes = t.numel() * t.element_size()
        bucket = open_.get(key)
        if bucket is not None and sizes[key] + nbytes > bucket_bytes:
            done.append(bucket)
            bucket = None
        if bucket is None:
            bucket = open_[key] = []
            sizes[key] = 0
        bucket.append(t)
        sizes[key] += nbytes
    return done + list(open_.values())


def flatten(tensors: Sequence[torch.Tensor], device: torch.device,
            bucket_mb: float) -> Iterator[tuple[list[torch.Tensor], torch.Tensor]]:
    """(bucket, its tensors concatenated in one new 1-d buffer on ``device``), in an
    order that depends only on the tensors' order, dtypes and sizes: every member
    gets the same buckets from the same network."""
    if not bucket_mb > 0:
        raise ValueError(f"bucket_mb must be > 0, got {bucket_mb!r}")
    for bucket in _groups(list(tensors), int(bucket_mb * 2**20)):
        flat = torch.cat([t.detach().reshape(-1) for t in bucket])
        yield bucket, flat.to(device)


def unflatten(bucket: list[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy ``flat`` back into the tensors of ``bucket``, in place."""
    offset = 0
    for t in bucket:
        n = t.numel()
        t.detach().copy_(flat[offset:offset + n].view_as(t))
        offset += n
