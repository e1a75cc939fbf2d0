"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, arXiv 1509.02971).

A deterministic actor ``mu(s)`` and a critic ``Q(s, a)``, each with a slowly
tracking target copy (Polyak averaging). The critic regresses onto
``r + gamma (1 - terminated) Q'(s', mu'(s'))``; the actor ascends ``Q(s, mu(s))``.
Exploration adds Gaussian or Ornstein-Uhlenbeck noise to the actor's output.

Actions: the actor's raw output is squashed with ``tanh`` into [-1, 1] (the
*normalized* space that the critic and the replay buffer's preprocessing use) and
scaled to the environment's Box only when acting. Any ``nn.Module`` can stand in
for the default MLPs: the actor maps ``obs (B, obs_dim) -> (B, action_dim)``, the
critic maps ``cat([obs, action]) (B, obs_dim + action_dim) -> (B, 1)``.

``update`` is a template method; subclasses override one hook at a time:
``preprocess -> critic_target -> critic_loss -> optimize -> actor_loss ->
optimize -> soft_update``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.base import Algorithm, as_tensor
from algorithms.nets import mlp
from algorithms.noise import ActionNoise, make_noise
from rlpar.state import StatePath, integer, mapping, torch_loader


@dataclasses.dataclass
class DDPGConfig:
    """Hyperparameters (defaults follow the paper where it gives them)."""

    gamma: float = 0.99
    tau: float = 0.001
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    critic_weight_decay: float = 0.0
    hidden: tuple[int, ...] = (400, 300)
    noise: Literal["gaussian", "ou"] = "ou"
    noise_scale: float = 0.2
    grad_clip: float | None = None
    seed: int | None = None

    def validate(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        for name in ("actor_lr", "critic_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.critic_weight_decay < 0:
            raise ValueError(f"critic_weight_decay must be >= 0, got {self.critic_weight_decay}")
        if self.noise not in ("gaussian", "ou"):
            raise ValueError(f"noise must be 'gaussian' or 'ou', got {self.noise!r}")
        if self.noise_scale < 0:
            raise ValueError(f"noise_scale must be >= 0, got {self.noise_scale}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float) -> None:
    """``target <- (1 - tau) target + tau source``, in place, for every pair."""
    target, source = list(target), list(source)
    if len(target) != len(source):
        raise ValueError(f"polyak_update: {len(target)} target tensors vs {len(source)} source tensors")
    if target:
        torch._foreach_lerp_(target, source, tau)


def action_scale(low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
    """Center and half-range of a Box, validated (finite, low < high)."""
    low = np.asarray(low, dtype=np.float32).reshape(-1)
    high = np.asarray(high, dtype=np.float32).reshape(-1)
    if low.shape != high.shape:
        raise ValueError(f"action low {low.shape} and high {high.shape} differ in shape")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ValueError(f"action bounds must be finite with low < high, got low={low} high={high}")
    return (high + low) / 2, (high - low) / 2


class DDPG(Algorithm):
    """Single-agent DDPG with target networks and exploration noise."""

    def __init__(
        self,
        *,
        obs_dim: int,
        action_low: Sequence[float] | np.ndarray,
        action_high: Sequence[float] | np.ndarray,
        config: DDPGConfig | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config = config if config is not None else DDPGConfig()
        config.validate()
        if obs_dim <= 0:
            raise ValueError(f"obs_dim must be positive, got {obs_dim}")
        self.center, self.half_range = action_scale(action_low, action_high)
        self.obs_dim, self.action_dim = int(obs_dim), int(self.center.size)
        self.device = torch.device(device)
        if config.seed is not None:
            torch.manual_seed(config.seed)
        self.actor = (actor or mlp(obs_dim, self.action_dim, hidden=config.hidden)).to(self.device)
        self.critic = (critic or mlp(obs_dim + self.action_dim, 1, hidden=config.hidden)).to(self.device)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr)
        self.critic_opt = torch.optim.Adam(
            self.critic.parameters(), lr=config.critic_lr, weight_decay=config.critic_weight_decay
        )
        self.noise: ActionNoise | None = None
        self.updates = 0

    # ----- acting -----------------------------------------------------------------
    def policy(self, obs: torch.Tensor, *, target: bool = False) -> torch.Tensor:
        """Normalized action in [-1, 1] from the online (or target) actor."""
        return torch.tanh((self.target_actor if target else self.actor)(obs))

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        obs_t = as_tensor(obs, self.device).reshape(-1, self.obs_dim)
        action = self.policy(obs_t).cpu().numpy()
        if explore and self.config.noise_scale > 0:
            if self.noise is None or self.noise.shape != action.shape:
                self.noise = make_noise(self.config.noise, shape=action.shape,
                                        scale=self.config.noise_scale, seed=self.config.seed)
            action = np.clip(action + self.noise.sample(), -1.0, 1.0)
        return (self.center + self.half_range * action).astype(np.float32)

    def reset_noise(self, mask: np.ndarray | None = None) -> None:
        """Restart correlated noise for the env copies whose episode ended."""
        if self.noise is not None:
            self.noise.reset(mask)

    # ----- learning (template method and hooks) -------------------------------------
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        data = self.preprocess(batch)
        with torch.no_grad():
            y = self.critic_target(data)
        critic_loss, td = self.critic_loss(data, y)
        self.optimize(self.critic_opt, critic_loss, self.critic.parameters())
        actor_loss = self.actor_loss(data)
        self.optimize(self.actor_opt, actor_loss, self.actor.parameters())
        self.soft_update()
        self.updates += 1
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss.item(),
                "q_mean": y.mean().item(), "td_abs": td.abs().mean().item()}

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        missing = {"obs", "action", "reward", "next_obs", "terminated"} - set(batch)
        if missing:
            raise KeyError(f"DDPG batch lacks {sorted(missing)}")
        data = super().preprocess(batch)
        center = torch.as_tensor(self.center, device=self.device)
        half = torch.as_tensor(self.half_range, device=self.device)
        data["action"] = (data["action"].float().reshape(-1, self.action_dim) - center) / half
        data["reward"] = data["reward"].float().reshape(-1)
        data["terminated"] = data["terminated"].float().reshape(-1)
        if "weights" in data:
            data["weights"] = data["weights"].float().reshape(-1)
        return data

    def critic_target(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        next_action = self.policy(data["next_obs"], target=True)
        next_q = self.target_critic(torch.cat([data["next_obs"], next_action], -1)).squeeze(-1)
        return data["reward"] + self.config.gamma * (1.0 - data["terminated"]) * next_q

    def critic_loss(self, data: Mapping[str, torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.critic(torch.cat([data["obs"], data["action"]], -1)).squeeze(-1)
        td = y - q
        if "weights" in data:  # importance weights from prioritized replay
            return (data["weights"] * td.pow(2)).mean(), td.detach()
        return F.mse_loss(q, y), td.detach()

    def actor_loss(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        action = self.policy(data["obs"])
        return -self.critic(torch.cat([data["obs"], action], -1)).mean()

    def optimize(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                 params: Iterable[torch.Tensor]) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip is not None:
            nn.utils.clip_grad_norm_(list(params), self.config.grad_clip)
        optimizer.step()

    def soft_update(self) -> None:
        polyak_update(self.target_actor.parameters(), self.actor.parameters(), self.config.tau)
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), self.config.tau)

    # ----- state --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).state_dict() for name in
                ("actor", "critic", "target_actor", "target_critic", "actor_opt", "critic_opt")} | {
                    "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        nets, opts = ("actor", "critic", "target_actor", "target_critic"), ("actor_opt", "critic_opt")
        state = mapping(state, where, required=(*nets, *opts, "updates"))
        load = torch_loader(state, where, modules={n: getattr(self, n) for n in nets},
                            optimizers={n: getattr(self, n) for n in opts})
        updates = integer(state["updates"], where["updates"])
        load()
        self.updates = updates
