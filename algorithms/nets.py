"""Default networks. Every algorithm also accepts any ``nn.Module`` in their place.

- :func:`mlp` for vector observations,
- :func:`nature_cnn` the convolutional torso of Mnih et al. 2015 ("Human-level
  control through deep reinforcement learning", Nature 518) for stacked frames,
- :class:`DuelingHead` the value/advantage head of Wang et al. 2016 ("Dueling
  network architectures for deep reinforcement learning", ICML),
- :func:`q_network` which picks a torso by observation shape and adds a head.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
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


class ScaleBytes(nn.Module):
    """uint8 pixels -> floats in [0, 1]; replay stores bytes (4x smaller than floats)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


def nature_cnn(in_channels: int = 4, *, out_features: int = 512) -> nn.Sequential:
    """The Nature DQN torso for 84x84 frames: 3 conv layers and one dense layer.

    Accepts uint8 or float input of shape ``(batch, in_channels, 84, 84)``.
    """
    if in_channels <= 0 or out_features <= 0:
        raise ValueError(f"nature_cnn sizes must be positive, got in_channels={in_channels} "
                         f"out_features={out_features}")
    return nn.Sequential(
        ScaleBytes(),
        nn.Conv2d(in_channels, 32, kernel_size=8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, out_features), nn.ReLU(),
    )


class DuelingHead(nn.Module):
    """``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')`` (Wang et al. 2016, eq. 9).

    Subtracting the mean advantage makes V and A identifiable; each stream has an
    optional hidden layer of ``hidden`` units, as in the paper.
    """

    def __init__(self, in_features: int, num_actions: int, *, hidden: int = 0) -> None:
        super().__init__()
        if in_features <= 0 or num_actions <= 0 or hidden < 0:
            raise ValueError(f"DuelingHead sizes must be positive, got in_features={in_features} "
                             f"num_actions={num_actions} hidden={hidden}")
        self.value = _stream(in_features, 1, hidden)
        self.advantage = _stream(in_features, num_actions, hidden)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=-1, keepdim=True)


def _stream(in_features: int, out_features: int, hidden: int) -> nn.Module:
    if hidden == 0:
        return nn.Linear(in_features, out_features)
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_features))


def q_network(
    obs_shape: Sequence[int],
    num_actions: int,
    *,
    hidden: Sequence[int] = (64, 64),
    dueling: bool = True,
) -> nn.Sequential:
    """A Q network for ``obs_shape``: the Nature CNN for ``(C, H, W)`` frames, an MLP
    for flat vectors; a dueling head or a plain linear head on top."""
    obs_shape = tuple(int(d) for d in obs_shape)
    if len(obs_shape) == 3:
        torso: nn.Module = nature_cnn(obs_shape[0])
        features = 512
    elif len(obs_shape) == 1:
        if not hidden:
            raise ValueError("q_network needs at least one hidden layer for vector observations")
        torso = nn.Sequential(nn.Flatten(), mlp(obs_shape[0], hidden[-1], hidden=hidden[:-1]), nn.ReLU())
        features = hidden[-1]
    else:
        raise ValueError(f"q_network supports (C, H, W) or (D,) observations, got shape {obs_shape}")
    head = DuelingHead(features, num_actions) if dueling else nn.Linear(features, num_actions)
    return nn.Sequential(torso, head)
