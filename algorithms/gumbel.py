"""Gumbel-softmax for discrete actions in MADDPG (Lowe et al. 2017, arXiv 1706.02275,
which uses it so the critic's gradient reaches a discrete policy; Jang et al. 2017,
arXiv 1611.01144, for the straight-through estimator)."""

from __future__ import annotations

import torch


def sample_gumbel(shape: torch.Size, *, device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
    """Standard Gumbel noise ``-log(E)``, ``E ~ Exp(1)`` (the same law as ``-log(-log U)``
    in 4 kernels instead of 6: acting runs this on every step), E kept above 0."""
    e = torch.empty(shape, device=device).exponential_(generator=generator)
    return e.clamp_(min=torch.finfo(e.dtype).tiny).log_().neg_()


def gumbel_softmax(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    hard: bool = True,
    noise: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A relaxed one-hot sample over the last axis.

    ``hard=True`` is the straight-through variant: the forward value is exactly
    one-hot (what the environment and the critic see) while the gradient is that
    of the soft sample. ``noise=False`` gives the deterministic (argmax) version.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scores = logits
    if noise:
        scores = logits + sample_gumbel(logits.shape, device=logits.device, generator=generator).to(logits.dtype)
    soft = torch.softmax(scores / temperature, dim=-1)
    if not hard:
        return soft
    index = soft.argmax(dim=-1, keepdim=True)
    one_hot = torch.zeros_like(soft).scatter_(-1, index, 1.0)
    return one_hot - soft.detach() + soft
