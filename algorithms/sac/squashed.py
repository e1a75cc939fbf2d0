"""The squashed Gaussian policy of SAC (Haarnoja et al. 2018, arXiv:1801.01290,
appendix C): ``a = tanh(u)``, ``u ~ N(mean, std^2)``, with the change of variables

    log pi(a | s) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2).

``log(1 - tanh(u)^2)`` is computed as ``2 (log 2 - u - softplus(-2u))``, exact and
finite where ``1 - tanh(u)^2`` rounds to 0 in float32 (|u| > 9), which the
``+ 1e-6`` of other codes only bounds.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def bounded_log_std(raw: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """The network's raw log-std squashed smoothly into [low, high] (CleanRL's): a hard
    clamp would stop its gradient at the bounds."""
    return low + 0.5 * (high - low) * (torch.tanh(raw) + 1.0)


def tanh_log_det(u: torch.Tensor) -> torch.Tensor:
    """``sum_i log(1 - tanh(u_i)^2)`` over the last axis: log |det d tanh(u)/du|."""
    return (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor,
                    noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tanh(u), log pi(tanh(u)))`` for ``u = mean + std * noise`` (reparameterized:
    gradients flow into mean and log_std), ``noise`` standard normal."""
    u = mean + log_std.exp() * noise
    gaussian = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
    return torch.tanh(u), gaussian - tanh_log_det(u)


def squashed_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``log pi(action)`` of a given action in (-1, 1) (by ``atanh``; for checks and
    off-policy scoring, not the training path, which keeps ``u`` from the sample)."""
    u = torch.atanh(action)
    noise = (u - mean) * torch.exp(-log_std)
    gaussian = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
    return gaussian - tanh_log_det(u)
