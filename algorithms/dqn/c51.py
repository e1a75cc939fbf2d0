"""Categorical DQN (C51).

Bellemare, Dabney, Munos 2017, "A Distributional Perspective on Reinforcement
Learning" (ICML, arXiv:1707.06887): the network gives, per action, logits of a
categorical distribution of the return on the fixed support ``z_i = v_min + i dz``
(``n_atoms`` atoms, 51 in the paper, on [-10, 10]); ``Q(s, a) = sum_i z_i p_i(s, a)``.
The target distribution is Algorithm 1: the next state's distribution for
``a* = argmax_a Q(next_obs, a)`` (the online network's choice with double Q, as
Rainbow does; Hessel et al. 2018, arXiv:1710.02298), its atoms moved to
``reward + discount * (1 - terminated) * z_i`` (n-step: the batch's ``discount``)
and projected back onto the support; the loss is the cross-entropy from it to the
predicted distribution of the action taken, weighted by the importance weights.
Priorities are the KL divergence of the two (Rainbow, sec. 3): the cross-entropy
less the target's own entropy.

It is :class:`~algorithms.dqn.DQN` with other hooks, not other control flow: the
template and ``target`` are DQN's; ``online``/``target_q`` return logits ``(B,
actions, n_atoms)``; ``bootstrap`` projects (returning a distribution ``(B,
n_atoms)`` as the target), ``compute_loss`` takes the cross-entropy (its "TD error"
slot carries the KL), ``q_values`` gives expected Q for acting, ``target_value`` the
target's mean for the metrics, ``initial_priorities`` the KL through the same hooks.
Noisy layers (``config.noisy``) combine with it as with DQN: they live in the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.base import GradHook
from algorithms.dqn.dqn import DQN, DQNConfig
from algorithms.fast import flush_denormals


def categorical_projection(atoms: torch.Tensor, probs: torch.Tensor, v_min: float, v_max: float,
                           n_atoms: int) -> torch.Tensor:
    """Project the distribution with mass ``probs`` (B, K) at positions ``atoms`` (B, K)
    onto the support of ``n_atoms`` atoms on [v_min, v_max] (Algorithm 1's inner loop):
    each mass is clipped into the range and split between its two neighbouring atoms
    in proportion to its closeness. A mass exactly on an atom goes wholly to it (the
    paper's ``floor``/``ceil`` form would drop it there, since both weights are 0)."""
    dz = (v_max - v_min) / (n_atoms - 1)
    b = (atoms.clamp(v_min, v_max) - v_min) / dz
    lower = b.floor().clamp(max=n_atoms - 1)
    upper_weight = b - lower  # 0 where b is on an atom, the top one included
    lower_index = lower.long()
    projected = torch.zeros(probs.shape[0], n_atoms, dtype=probs.dtype, device=probs.device)
    projected.scatter_add_(1, lower_index, probs * (1.0 - upper_weight))
    projected.scatter_add_(1, (lower_index + 1).clamp(max=n_atoms - 1), probs * upper_weight)
    return projected


class CategoricalDQN(DQN):
    """C51 on any ``network: obs -> logits (B, num_actions, n_atoms)`` (see
    :func:`algorithms.nets.q_network` with ``n_atoms``); ``config.distributional``
    must be on. Everything else (double Q, n-step, priorities, the grad hook, target
    syncs, noisy layers, state) is :class:`DQN`'s."""

    distributional = True

    def __init__(self, *, network: nn.Module, num_actions: int, config: DQNConfig | None = None,
                 device: torch.device | str = "cpu", seed: int | None = None,
                 grad_hook: GradHook | None = None) -> None:
        config = config if config is not None else DQNConfig(distributional=True)
        super().__init__(network=network, num_actions=num_actions, config=config, device=device, seed=seed,
                         grad_hook=grad_hook)
        self.support = torch.linspace(config.v_min, config.v_max, config.n_atoms, device=self.device)

    def check_logits(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.dim() < 2 or tuple(logits.shape[-2:]) != (self.num_actions, self.config.n_atoms):
            raise ValueError(f"{type(self).__name__} needs a network of logits (batch, {self.num_actions} actions, "
                             f"{self.config.n_atoms} atoms), got shape {tuple(logits.shape)}: build it with "
                             f"q_network(..., n_atoms={self.config.n_atoms})")
        return logits

    def expected_q(self, logits: torch.Tensor) -> torch.Tensor:
        """``Q(s, a) = sum_i z_i softmax(logits)_i``, shape (B, num_actions)."""
        return (F.softmax(self.check_logits(logits), dim=-1) * self.support).sum(-1)

    @torch.no_grad()
    def q_values(self, obs: Any) -> torch.Tensor:
        return self.expected_q(super().q_values(obs))

    def bootstrap(self, batch: Mapping[str, torch.Tensor], next_q_target: torch.Tensor,
                  next_q_online: torch.Tensor) -> torch.Tensor:
        """The projected target distribution (B, n_atoms), from the next observations'
        logits (Algorithm 1, with the double-Q choice of ``a*``)."""
        chooser = next_q_online if self.config.double_q else next_q_target
        next_action = self.expected_q(chooser).argmax(dim=-1)
        rows = torch.arange(len(next_action), device=next_action.device)
        next_probs = F.softmax(self.check_logits(next_q_target)[rows, next_action], dim=-1)
        discount = batch.get("discount")
        if discount is None:
            discount = torch.full_like(batch["reward"], self.config.gamma, dtype=torch.float32)
        scale = discount.float() * (1.0 - batch["terminated"].float())
        atoms = batch["reward"].float()[:, None] + scale[:, None] * self.support
        return categorical_projection(atoms, next_probs, self.config.v_min, self.config.v_max, self.config.n_atoms)

    def compute_loss(
        self, batch: Mapping[str, torch.Tensor], target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, kl, q_taken)``: the importance-weighted mean cross-entropy from the
        target distribution to the taken action's, the KL (the priorities' source) and
        the taken action's expected Q."""
        logits = self.check_logits(self.online(batch["obs"]))
        rows = torch.arange(len(logits), device=logits.device)
        taken = logits[rows, batch["action"].long().view(-1)]
        log_p = F.log_softmax(taken, dim=-1)
        cross_entropy = -(target * log_p).sum(-1)
        target_entropy = -(target * target.clamp(min=1e-30).log()).sum(-1)
        q_taken = (log_p.exp() * self.support).sum(-1)
        weights = batch.get("weights")
        weighted = cross_entropy if weights is None else cross_entropy * weights.float()
        return weighted.mean(), (cross_entropy - target_entropy).detach(), q_taken

    def target_value(self, target: torch.Tensor) -> torch.Tensor:
        return (target * self.support).sum(-1)

    @torch.no_grad()
    def initial_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """The KL of new transitions, through ``preprocess``, ``target`` and ``compute_loss``."""
        with flush_denormals(self.fast != "off"):
            tensors = self.preprocess(batch)
            _, kl, _ = self.compute_loss(tensors, self.target(tensors))
        return self.priorities(kl)
