"""Default networks. Every algorithm also accepts any ``nn.Module`` in their place."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def mlp(
    in_dim: int,
    out_dim: int,
    *,
    hidden: Sequence[int] = (64, 64),
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Sequential:
    """A multilayer perceptron ``in_dim -> hidden... -> out_dim`` (no output activation)."""
    if in_dim <= 0 or out_dim <= 0 or any(h <= 0 for h in hidden):
        raise ValueError(f"mlp sizes must be positive, got in={in_dim} hidden={tuple(hidden)} out={out_dim}")
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden]
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), activation()]
    layers.append(nn.Linear(sizes[-1], out_dim))
    return nn.Sequential(*layers)
