"""R2D2's targets: n-step double-Q returns under an invertible value rescaling.

Kapturowski et al. 2019 (sec. 2.3) regress ``Q(s_t, a_t)`` onto

    y_t = h( sum_{k<m} gamma^k r_{t+k} + gamma^m h^-1( Q_target(s_{t+m}, a*) ) ),
    a* = argmax_a Q_online(s_{t+m}, a),

with ``m = n`` unless the episode's last observation comes first, the rescaling
``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x`` and its inverse from Pohlen et al. 2018
("Observe and Look Further: Achieving Consistent Performance on Atari", arXiv
1805.11593, Proposition A.2). A terminal step zeroes everything after it.
"""

from __future__ import annotations

import torch


def value_rescale(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)``."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root.square() - 1.0)


def n_step_targets(
    *,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    mask: torch.Tensor,
    bootstrap: torch.Tensor,
    n: int,
    gamma: float,
    steps: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets ``y`` of the first ``steps`` steps of sequences of ``steps + n`` (after
    burn-in), and which of them are trained on, both ``(sequences, steps)``.

    ``reward``, ``terminated`` and ``mask`` (valid steps, a prefix) are
    ``(sequences, steps + n)``; ``bootstrap`` is ``Q_target(s_j, a*_j)`` at every step,
    in rescaled units. The last valid step is an observation to bootstrap from: the
    n-step sum of step ``t`` stops there, and step ``t`` is trained on only if it
    comes before it (so it has an action, a reward and a successor)."""
    length = reward.shape[1]
    if length != steps + n or bootstrap.shape[:2] != reward.shape:
        raise ValueError(f"expected sequences of steps + n = {steps + n} steps, got rewards "
                         f"{tuple(reward.shape)} and bootstraps {tuple(bootstrap.shape)}")
    last = mask.sum(dim=1, keepdim=True) - 1  # index of the last valid step (-1: none)
    t = torch.arange(steps, device=reward.device)
    total = torch.zeros(reward.shape[0], steps, dtype=bootstrap.dtype, device=reward.device)
    discount = torch.ones_like(total)
    going = (1.0 - terminated.to(bootstrap.dtype)) * gamma
    for k in range(n):
        active = (t + k) < last  # step t+k is a transition of t's window
        total = total + torch.where(active, discount * reward[:, k : k + steps], 0.0)
        discount = torch.where(active, discount * going[:, k : k + steps], discount)
    end = torch.minimum(t + n, last.clamp(min=0))  # where each window bootstraps
    value = inverse_value_rescale(bootstrap.gather(1, end), eps)
    return value_rescale(total + discount * value, eps), t < last
