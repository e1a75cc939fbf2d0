"""Copying state dicts for storage and transfer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def snapshot(
    state: Mapping[str, Any], *, device: torch.device | str | None = None
) -> dict[str, Any]:
    """A detached copy of a flat state dict, optionally on ``device``.

    The learner keeps updating its parameters in place after a push; without a
    copy every stored version would silently become the newest one.
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping of name to tensor, got {type(state).__name__}")
    out: dict[str, Any] = {}
    for name, value in state.items():
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if device is not None and value.device != torch.device(device):
                out[name] = value.to(device, copy=True)
            else:
                out[name] = value.clone()
        else:
            out[name] = value
    return out


def for_transfer(state: Mapping[str, Any], *, keep_device: bool) -> dict[str, Any]:
    """Move CUDA tensors to CPU unless RPC device maps let TensorPipe send them
    GPU to GPU (``keep_device``). CPU tensors are passed through uncopied: RPC
    serialization copies them anyway."""
    out: dict[str, Any] = {}
    for name, value in state.items():
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if value.is_cuda and not keep_device:
                value = value.cpu()
        out[name] = value
    return out


def nbytes(state: Mapping[str, Any]) -> int:
    """Bytes of tensor payload in a flat state dict."""
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
