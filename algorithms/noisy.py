"""Noisy linear layers with factorized Gaussian noise.

Fortunato et al. 2018, "Noisy Networks for Exploration" (ICLR, arXiv:1706.10295),
sec. 3.2: ``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with
``eps_w = f(eps_out) f(eps_in)^T``, ``eps_b = f(eps_out)``, ``f(x) = sign(x) sqrt|x|``
and ``eps_in, eps_out`` standard normal: p + q draws per layer instead of p q.
Initialization: ``mu ~ U(-1/sqrt(p), 1/sqrt(p))``, ``sigma = sigma0 / sqrt(p)``
(``sigma0 = 0.5``). In eval mode (``module.eval()``) or inside :func:`noise_off` a
layer is deterministic, its weights the means. The noise is a buffer kept out of
state dicts: a checkpoint or a published policy holds the learned ``mu`` and
``sigma``, and every copy draws its own noise.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def scaled_noise(size: int, *, generator: torch.Generator | None = None,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """``f(eps) = sign(eps) sqrt|eps|`` of ``size`` standard normal draws."""
    eps = torch.randn(size, generator=generator, device=device)
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with learned factorized Gaussian noise (module docstring)."""

    def __init__(self, in_features: int, out_features: int, *, sigma0: float = 0.5) -> None:
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"NoisyLinear sizes must be positive, got {in_features} -> {out_features}")
        if not sigma0 >= 0:
            raise ValueError(f"sigma0 must be >= 0, got {sigma0}")
        self.in_features, self.out_features, self.sigma0 = int(in_features), int(out_features), float(sigma0)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.noisy = True  # False: the mean weights, whatever the training mode
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.bias_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.sigma0 * bound)
            self.bias_sigma.fill_(self.sigma0 * bound)

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw fresh ``eps_in`` and ``eps_out`` (the layer's whole noise)."""
        device = self.weight_mu.device
        self.eps_in.copy_(scaled_noise(self.in_features, generator=generator, device=device))
        self.eps_out.copy_(scaled_noise(self.out_features, generator=generator, device=device))

    def weight_noise(self) -> torch.Tensor:
        """``eps_w = f(eps_out) f(eps_in)^T``, the outer product of the factors."""
        return torch.outer(self.eps_out, self.eps_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.noisy):
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * self.weight_noise()
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.eps_out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, sigma0={self.sigma0}"


def noisy_layers(module: nn.Module) -> list[NoisyLinear]:
    """The :class:`NoisyLinear` layers inside ``module``."""
    return [m for m in module.modules() if isinstance(m, NoisyLinear)]


def reset_noise(layers: Sequence[NoisyLinear], generator: torch.Generator | None = None) -> None:
    """Fresh noise in every layer of ``layers``."""
    for layer in layers:
        layer.reset_noise(generator)


@contextlib.contextmanager
def noise_off(layers: Sequence[NoisyLinear]) -> Iterator[None]:
    """The mean weights in ``layers`` inside the block (greedy evaluation), whatever
    the modules' training mode, which other layers may depend on."""
    before = [layer.noisy for layer in layers]
    for layer in layers:
        layer.noisy = False
    try:
        yield
    finally:
        for layer, was in zip(layers, before):
            layer.noisy = was
