"""Soft Actor-Critic with a learned temperature, ready for Ape-X batches.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"
(arXiv:1812.05905): a squashed-Gaussian actor (:mod:`algorithms.sac.squashed`), two
critics with Polyak-averaged targets, and the entropy temperature ``alpha`` learned
so that the policy's entropy tracks a target (sec. 5, eq. 18; ``-dim(A)``). With the
batch's n-step ``discount`` (``gamma ** k``, as DQN's and TD3's batches carry it):

    a' ~ pi(.|next_obs)     (the current actor: SAC has no target actor)
    y  = reward + discount * (1 - terminated) * (min_j Q'_j(next_obs, a') - alpha log pi(a'|next_obs))
    critics: importance-weighted mean of (y - Q_1(s, a))^2 + (y - Q_2(s, a))^2
    actor:   mean of alpha log pi(a~|s) - min_j Q_j(s, a~),  a~ ~ pi(.|s) reparameterized
    alpha:   mean of -alpha (log pi(a~|s) + target_entropy)   (eq. 18, on log alpha)

One update: critics, actor, temperature (with the actor step's ``log pi``), then the
target critics, CleanRL's order; each step calls ``grad_hook`` between backward and
its optimizer step, so a learner group averages every gradient, the temperature's
too. Priorities are the mean of the critics' ``|TD error|`` plus eps (TD3's reasoning,
:mod:`algorithms.td3.td3`); the importance weights scale the critic loss only, as for
DDPG. ``act`` samples with the standard deviation times ``noise_scale`` (a float, or
one per row: an Ape-X actor's per-env-copy exploration); ``explore=False`` and scale
0 give ``tanh(mean)``. Actions live in [-1, 1] inside and are scaled to the Box by
:class:`algorithms.td3.continuous.BoxActions`.

``learn`` is a template method: ``preprocess -> critic_target -> critic_loss ->
optimize -> actor_loss -> optimize -> temperature_loss -> optimize -> soft_update``,
then ``priorities``. Any ``nn.Module`` can stand in for the default MLPs: the actor
maps ``obs (B, obs_dim) -> (B, 2 * action_dim)`` (mean, then raw log-std), each
critic ``cat([obs, action]) -> (B, 1)``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.base import (
    Algorithm,
    GradHook,
    Learned,
    as_tensor,
    flat_state,
    load_flat_state,
    no_grad_for,
    optimizer_step,
)
from algorithms.fast import flush_denormals, resolve_fast
from algorithms.nets import mlp
from algorithms.sac.config import SACConfig
from algorithms.sac.squashed import bounded_log_std, squashed_sample
from algorithms.td3.continuous import (
    BoxActions,
    adam,
    polyak_update,
    q_value,
    seeded,
    weighted_mean,
)
from algorithms.td3.td3 import reinitialized
from rlpar.state import StatePath, integer, mapping, number, sequence, torch_loader


class Temperature(nn.Module):
    """``alpha = exp(log_alpha)``: learned in log space, so it stays positive."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(np.log(alpha))))

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()


_METRICS = ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean", "target_mean", "td_abs")


class SAC(Algorithm):
    """Single-agent SAC (module docstring). ``grad_hook`` (``algorithms.base.GradHook``)
    averages each step's gradients over a data-parallel learner group."""

    state_modules: tuple[str, ...] = ("actor", "critic", "critic2", "target_critic", "target_critic2",
                                      "temperature", "actor_opt", "critic_opt", "alpha_opt")

    def __init__(
        self,
        *,
        obs_dim: int,
        action_low: Sequence[float] | np.ndarray,
        action_high: Sequence[float] | np.ndarray,
        config: SACConfig | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        critic2: nn.Module | None = None,
        device: str | torch.device = "cpu",
        grad_hook: GradHook | None = None,
    ) -> None:
        self.config = config = config if config is not None else SACConfig()
        if not isinstance(config, SACConfig):
            raise TypeError(f"SAC needs a SACConfig, got {type(config).__name__}")
        config.validate()
        if obs_dim <= 0:
            raise ValueError(f"obs_dim must be positive, got {obs_dim}")
        self.box = BoxActions(action_low, action_high)
        self.obs_dim, self.action_dim = int(obs_dim), self.box.dim
        self.device = torch.device(device)
        self.fast = resolve_fast(config.fast)
        with seeded(config.seed):
            self.actor = (actor or mlp(obs_dim, 2 * self.action_dim, hidden=config.hidden)).to(self.device)
            self.critic = (critic or mlp(obs_dim + self.action_dim, 1, hidden=config.hidden)).to(self.device)
        with seeded(None if config.seed is None else config.seed + 1):
            # Twins that start equal and see the same data stay equal: no minimum to take.
            self.critic2 = (critic2 if critic2 is not None else reinitialized(self.critic)).to(self.device)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_critic2 = copy.deepcopy(self.critic2).requires_grad_(False)
        self.temperature = Temperature(config.alpha).to(self.device)
        self.target_entropy = float(-self.action_dim if config.target_entropy is None else config.target_entropy)
        self._opts: dict[str, torch.optim.Optimizer] = {}
        self.generator = torch.Generator(device=self.device)  # the policy's sampling noise
        if config.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(config.seed + 2)
        self.noise_scale: float | np.ndarray = config.noise_scale
        self.updates = 0
        self.grad_hook = grad_hook

    # ----- the Box (the names an Ape-X DPG actor uses) -----------------------------------
    def to_env(self, action: np.ndarray) -> np.ndarray:
        """Normalized flat actions in [-1, 1] -> the env's Box, shaped (B, *action_shape)."""
        return self.box.to_env(action)

    # ----- optimizers: built on first use; acting copies never need them ----------------
    def _opt(self, name: str, params: Iterable[torch.Tensor], lr: float) -> torch.optim.Optimizer:
        if name not in self._opts:
            self._opts[name] = adam(params, lr=lr)
        return self._opts[name]

    @property
    def actor_opt(self) -> torch.optim.Optimizer:
        return self._opt("actor", self.actor.parameters(), self.config.actor_lr)

    @property
    def critic_opt(self) -> torch.optim.Optimizer:
        return self._opt("critic", self.critic_parameters(), self.config.critic_lr)

    @property
    def alpha_opt(self) -> torch.optim.Optimizer:
        return self._opt("alpha", self.temperature.parameters(), self.config.alpha_lr)

    def critic_parameters(self) -> list[nn.Parameter]:
        return [*self.critic.parameters(), *self.critic2.parameters()]

    @property
    def alpha(self) -> torch.Tensor:
        """The temperature now (detached: the losses other than its own treat it as a constant)."""
        return self.temperature().detach()

    # ----- the policy ---------------------------------------------------------------------
    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of the pre-tanh Gaussian at ``obs``."""
        mean, raw = self.actor(obs).chunk(2, dim=-1)
        return mean, bounded_log_std(raw, self.config.log_std_min, self.config.log_std_max)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized ``(action in [-1, 1], log pi(action))`` at ``obs``."""
        mean, log_std = self.distribution(obs)
        noise = torch.randn(mean.shape, generator=self.generator, device=mean.device)
        return squashed_sample(mean, log_std, noise)

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Actions in the env's Box: sampled with the standard deviation times
        ``noise_scale`` (per row if an array), or ``tanh(mean)`` without ``explore``."""
        obs_t = as_tensor(obs, self.device).reshape(-1, self.obs_dim).float()
        with flush_denormals(self.fast != "off"):
            mean, log_std = self.distribution(obs_t)
            u = mean
            scale = np.asarray(self.noise_scale, dtype=np.float32)
            if explore and np.any(scale > 0):
                if scale.ndim:
                    if scale.shape != (len(obs_t),):
                        raise ValueError(f"noise_scale of shape {scale.shape}: expected a float or one "
                                         f"scale per row of obs, ({len(obs_t)},)")
                    scale = scale[:, None]
                noise = torch.randn(mean.shape, generator=self.generator, device=mean.device)
                u = mean + torch.as_tensor(scale, device=mean.device) * log_std.exp() * noise
            action = torch.tanh(u).cpu().numpy()
        return self.to_env(action)

    def reset_noise(self, mask: np.ndarray | None = None) -> None:
        """Nothing to restart (the noise is independent per step); an Ape-X DPG actor calls it."""

    # ----- learning (template method and hooks) -------------------------------------------
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        return self.learn(batch).metrics

    def learn(self, batch: Mapping[str, Any]) -> Learned:
        with flush_denormals(self.fast != "off"):
            return self._learn(batch)

    def _learn(self, batch: Mapping[str, Any]) -> Learned:
        data = self.preprocess(batch)
        with torch.no_grad():
            y = self.critic_target(data)
        critic_loss, td = self.critic_loss(data, y)
        self.optimize(self.critic_opt, critic_loss, self.critic_parameters())
        with no_grad_for([self.critic_parameters()]):  # the actor step leaves Q alone
            actor_loss, log_prob = self.actor_loss(data)
        self.optimize(self.actor_opt, actor_loss, self.actor.parameters())
        alpha_loss = self.temperature_loss(log_prob.detach())
        if self.config.autotune:
            self.optimize(self.alpha_opt, alpha_loss, self.temperature.parameters())
        self.soft_update()
        self.updates += 1
        # One stack and one conversion: a sync per metric costs more than the math.
        values = torch.stack([critic_loss.detach(), actor_loss.detach(), alpha_loss.detach(), self.alpha,
                              -log_prob.detach().mean(), (y - td).mean(), y.mean(), td.abs().mean()]).tolist()
        return Learned(dict(zip(_METRICS, values)), self.priorities(td))

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        missing = {"obs", "action", "reward", "next_obs", "terminated"} - set(batch)
        if missing:
            raise KeyError(f"{type(self).__name__} batch lacks {sorted(missing)}")
        data = super().preprocess(batch)
        for key in ("obs", "next_obs"):  # the MLPs take floats, whatever the Box's dtype
            data[key] = data[key].float().reshape(-1, self.obs_dim)
        data["action"] = self.box.normalize(data["action"])
        for key in ("reward", "terminated", "discount", "weights"):
            if key in data:
                data[key] = data[key].float().reshape(-1)
        return data

    def critic_target(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Hook: the soft target ``y`` (called without gradients)."""
        next_obs = data["next_obs"]
        next_action, next_log_prob = self.sample(next_obs)
        next_q = torch.minimum(q_value(self.target_critic, next_obs, next_action),
                               q_value(self.target_critic2, next_obs, next_action))
        discount = data["discount"] if "discount" in data else self.config.gamma
        return data["reward"] + discount * (1.0 - data["terminated"]) * (next_q - self.alpha * next_log_prob)

    def critic_loss(self, data: Mapping[str, torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: ``(loss, td)``, ``td`` of shape (2, B): one row of TD errors per critic."""
        obs, action = data["obs"], data["action"]
        td = torch.stack([y - q_value(self.critic, obs, action), y - q_value(self.critic2, obs, action)])
        return weighted_mean(td.pow(2).sum(0), data.get("weights")), td.detach()

    def actor_loss(self, data: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: ``(mean of alpha log pi - min_j Q_j, log pi)`` on fresh reparameterized actions."""
        obs = data["obs"]
        action, log_prob = self.sample(obs)
        q = torch.minimum(q_value(self.critic, obs, action), q_value(self.critic2, obs, action))
        return (self.alpha * log_prob - q).mean(), log_prob

    def temperature_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """Hook: eq. 18, ``-alpha (log pi + target_entropy)`` averaged: alpha rises while the
        entropy ``-log pi`` is below the target and falls while it is above."""
        return -(self.temperature() * (log_prob + self.target_entropy)).mean()

    def optimize(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                 params: Iterable[torch.Tensor]) -> None:
        """Hook: backward, ``grad_hook`` (a learner group's average), clip, one step."""
        optimizer_step(optimizer, loss, params, grad_hook=self.grad_hook, max_norm=self.config.grad_clip)

    def soft_update(self) -> None:
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), self.config.tau)
        polyak_update(self.target_critic2.parameters(), self.critic2.parameters(), self.config.tau)

    def priorities(self, td: torch.Tensor) -> np.ndarray:
        """Hook: the mean of the two critics' ``|TD error|`` plus eps (float64, one per transition)."""
        return np.abs(td.cpu().numpy()).mean(0).astype(np.float64) + self.config.priority_eps

    @torch.no_grad()
    def initial_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Priorities of new transitions (Ape-X: scored by the actor that made them),
        through the hooks ``learn`` runs: ``preprocess``, ``critic_target``, ``critic_loss``,
        ``priorities``."""
        with flush_denormals(self.fast != "off"):
            data = self.preprocess(batch)
            _, td = self.critic_loss(data, self.critic_target(data))
        return self.priorities(td)

    def tie_target(self) -> None:
        """Make this an acting copy: its target critics are its online ones (an Ape-X
        actor only has the learner's online parameters; this also saves memory)."""
        self.target_critic, self.target_critic2 = self.critic, self.critic2

    # ----- state --------------------------------------------------------------------------
    def acting_modules(self) -> dict[str, nn.Module]:
        """What an acting copy needs: the actor, and for initial priorities the critics
        and the temperature (the soft target has ``alpha log pi`` in it)."""
        return {"actor": self.actor, "critic": self.critic, "critic2": self.critic2,
                "temperature": self.temperature}

    def policy_state(self) -> dict[str, torch.Tensor]:
        """A flat state dict of :meth:`acting_modules` (``actor.<name>``, ...)."""
        return flat_state(self.acting_modules())

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        load_flat_state(self.acting_modules(), state)

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).state_dict() for name in self.state_modules} | {
            "updates": self.updates,
            "noise_scale": np.array(self.noise_scale, dtype=np.float64).tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        opts = tuple(n for n in self.state_modules if n.endswith("_opt"))
        nets = tuple(n for n in self.state_modules if n not in opts)
        state = mapping(state, where, required=(*self.state_modules, "updates", "noise_scale"))
        load = torch_loader(state, where, modules={n: getattr(self, n) for n in nets},
                            optimizers={n: getattr(self, n) for n in opts})
        updates = integer(state["updates"], where["updates"])
        scale = state["noise_scale"]
        if np.ndim(scale) == 0:
            scale = number(scale, where["noise_scale"], low=0.0)
        else:
            scale = np.asarray([number(v, where["noise_scale"][i], low=0.0)
                                for i, v in enumerate(sequence(list(scale), where["noise_scale"]))])
        load()
        self.updates = updates
        self.noise_scale = scale
