"""Deep Deterministic Policy Gradient, ready for Ape-X.

Lillicrap et al. 2016, "Continuous control with deep reinforcement learning" (ICLR,
arXiv:1509.02971): a deterministic actor ``mu(s)`` and a critic ``Q(s, a)``, each
with a slowly tracking target copy (Polyak averaging). The critic regresses onto

    y = reward + discount * (1 - terminated) * Q'(next_obs, mu'(next_obs))

and the actor ascends ``Q(s, mu(s))``. Exploration adds Gaussian or
Ornstein-Uhlenbeck noise to the actor's output.

Ape-X DPG (Horgan et al. 2018, "Distributed Prioritized Experience Replay", ICLR,
arXiv:1803.00933) feeds it n-step, prioritized batches, as :mod:`algorithms.dqn` does
for DQN: ``discount`` is the batch's ``gamma ** k`` (``config.gamma`` when absent);
the importance ``weights`` scale the critic loss (the actor's stays unweighted, as in
RLlib's Ape-X DDPG: transitions are picked by the critic's TD error, so the bias the
weights undo is the critic's; the actor just sees more states the critic is still
learning); ``learn`` returns priorities ``|y - Q(obs, action)| + eps`` beside the
metrics; ``initial_priorities`` scores new transitions on an actor through the same
code; ``tie_target`` makes an acting copy.
``policy_state`` is what an acting copy needs: the actor *and* the critic, since an
Ape-X actor computes its transitions' initial priorities with the critic.

Actions: the actor's raw output is squashed with ``tanh`` into [-1, 1], the
*normalized* space that the critic, the noise and the targets work in; ``act``
scales it to the environment's Box and ``preprocess`` scales replayed actions back.
Any ``nn.Module`` can stand in for the default MLPs: the actor maps ``obs (B,
obs_dim) -> (B, action_dim)``, the critic ``cat([obs, action]) -> (B, 1)``.

``learn`` (``update``) is a template method; a subclass (:class:`algorithms.td3.TD3`)
overrides hooks: ``preprocess -> critic_target -> critic_loss -> optimize ->
[actor_due] actor_loss -> optimize -> soft_update``, then ``priorities``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

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
from algorithms.fast import check_fast, flush_denormals, resolve_fast
from algorithms.nets import mlp
from algorithms.noise import ActionNoise, make_noise
from algorithms.td3.continuous import (
    action_scale,
    adam,
    polyak_update,
    q_value,
    seeded,
    weighted_mean,
)
from rlpar.state import StatePath, integer, mapping, number, sequence, torch_loader

__all__ = ["DDPG", "DDPGConfig", "action_scale", "polyak_update"]


@dataclasses.dataclass
class DDPGConfig:
    """Hyperparameters (defaults follow the DDPG paper where it gives them)."""

    gamma: float = 0.99
    tau: float = 0.001
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    critic_weight_decay: float = 0.0
    hidden: tuple[int, ...] = (400, 300)
    # A LayerNorm before each hidden activation of the default critic(s) (Ball et al.
    # 2023, RLPD): it bounds the critic's values off the data, where an unnormalized
    # critic extrapolates linearly and the actor climbs that error.
    critic_layer_norm: bool = False
    noise: Literal["gaussian", "ou"] = "ou"
    # Exploration noise scale in the normalized action space: the initial value of
    # ``DDPG.noise_scale``, which an Ape-X actor replaces by one scale per env copy.
    noise_scale: float = 0.2
    grad_clip: float | None = None
    # Added to |TD error| so that no transition's priority is ever exactly zero.
    priority_eps: float = 1e-6
    # Seeds the networks' initialization and the noise. Give every Ape-X actor its
    # own (dataclasses.replace(config, seed=...)), or they all explore alike.
    seed: int | None = None
    # How updates and acting run on CPU (algorithms.fast): auto, off, eager, compile.
    fast: str = "auto"

    def validate(self) -> None:
        check_fast(self.fast)
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
        if not self.noise_scale >= 0:
            raise ValueError(f"noise_scale must be >= 0, got {self.noise_scale}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        if not self.priority_eps >= 0:
            raise ValueError(f"priority_eps must be >= 0, got {self.priority_eps}")


_METRICS = ("critic_loss", "actor_loss", "q_mean", "target_mean", "td_abs")


class DDPG(Algorithm):
    """Single-agent DDPG with target networks, exploration noise and priorities.

    ``noise_scale`` (a float, or one scale per row of ``obs``, like
    :attr:`algorithms.dqn.DQN.epsilon`) sets ``act``'s exploration. ``grad_hook``
    (``algorithms.base.GradHook``), if given or set later, averages each step's
    gradients (critic, then actor) over a data-parallel learner group before clipping.
    """

    # Everything ``state_dict`` saves besides counters; subclasses extend it.
    state_modules: tuple[str, ...] = ("actor", "critic", "target_actor", "target_critic",
                                      "actor_opt", "critic_opt")

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
        grad_hook: GradHook | None = None,
    ) -> None:
        self.config = config = config if config is not None else DDPGConfig()
        config.validate()
        if obs_dim <= 0:
            raise ValueError(f"obs_dim must be positive, got {obs_dim}")
        self.center, self.half_range = action_scale(action_low, action_high)
        # Actions go out in the Box's own float dtype (float32 for plain sequences),
        # clipped to its bounds in that dtype: center + half_range * 1 rounds to one
        # step past a bound such as 0.1 in float32, which Box.contains refuses.
        floating = isinstance(action_low, np.ndarray) and np.issubdtype(action_low.dtype, np.floating)
        self.action_dtype = action_low.dtype if floating else np.dtype(np.float32)
        self.action_low = np.asarray(action_low, dtype=self.action_dtype).reshape(-1)
        self.action_high = np.asarray(action_high, dtype=self.action_dtype).reshape(-1)
        self.obs_dim, self.action_dim = int(obs_dim), int(self.center.size)
        # The networks see flat actions; the env gets them in its Box's shape, e.g. (2, 2).
        self.action_shape: tuple[int, ...] = tuple(np.shape(action_low))
        self.device = torch.device(device)
        self.fast = resolve_fast(config.fast)
        with seeded(config.seed):
            self.actor = (actor or mlp(obs_dim, self.action_dim, hidden=config.hidden)).to(self.device)
            self.critic = (critic or mlp(obs_dim + self.action_dim, 1, hidden=config.hidden,
                                         layer_norm=config.critic_layer_norm)).to(self.device)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self._actor_opt: torch.optim.Optimizer | None = None
        self._critic_opt: torch.optim.Optimizer | None = None
        self.noise_scale: float | np.ndarray = config.noise_scale
        self.noise: ActionNoise | None = None
        self._rng = np.random.default_rng(config.seed)  # seeds each noise process it makes
        self._actor_loss = torch.zeros((), device=self.device)  # the last one, reported on steps without one
        self.updates = 0
        self.grad_hook = grad_hook

    # ----- optimizers: built on first use; acting copies never need them ----------------
    @property
    def actor_opt(self) -> torch.optim.Optimizer:
        if self._actor_opt is None:
            self._actor_opt = adam(self.actor.parameters(), lr=self.config.actor_lr)
        return self._actor_opt

    @property
    def critic_opt(self) -> torch.optim.Optimizer:
        if self._critic_opt is None:
            self._critic_opt = adam(self.critic_parameters(), lr=self.config.critic_lr,
                                    weight_decay=self.config.critic_weight_decay)
        return self._critic_opt

    def critic_parameters(self) -> list[nn.Parameter]:
        """Hook: the parameters the critic loss trains (TD3: both critics)."""
        return list(self.critic.parameters())

    # ----- acting -----------------------------------------------------------------
    def policy(self, obs: torch.Tensor, *, target: bool = False) -> torch.Tensor:
        """Normalized action in [-1, 1] from the online (or target) actor."""
        return torch.tanh((self.target_actor if target else self.actor)(obs))

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Actions in the environment's Box; with ``explore``, noisy (``noise_scale``)."""
        obs_t = as_tensor(obs, self.device).reshape(-1, self.obs_dim).float()  # e.g. a uint8 Box
        with flush_denormals(self.fast != "off"):
            action = self.policy(obs_t).cpu().numpy()
        if explore:
            action = self.explore(action)
        return self.to_env(action)

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """Normalized flat actions (B, action_dim) in [-1, 1] -> the env's Box, shaped
        (B, *action_shape)."""
        scaled = self.center + self.half_range * np.asarray(action, dtype=np.float64)
        # Clipped in float64 against bounds exact in the Box's dtype, the cast cannot
        # round past them.
        return (np.clip(scaled, self.action_low, self.action_high).astype(self.action_dtype)
                .reshape(-1, *self.action_shape))

    def explore(self, action: np.ndarray) -> np.ndarray:
        """Hook: add noise of scale ``noise_scale`` (per row if an array) to normalized
        actions and clip them to [-1, 1]. The process runs at unit scale and is scaled
        after: both kinds are linear in their scale, and a row's scale may change."""
        scale = np.asarray(self.noise_scale, dtype=np.float32)
        if not np.any(scale > 0):
            return action
        if scale.ndim:
            if scale.shape != (len(action),):
                raise ValueError(f"noise_scale of shape {scale.shape}: expected a float or one scale "
                                 f"per row of obs, ({len(action)},)")
            scale = scale[:, None]
        if self.noise is None or self.noise.shape != action.shape:
            self.noise = make_noise(self.config.noise, shape=action.shape, scale=1.0,
                                    seed=int(self._rng.integers(2**63)))
        return np.clip(action + scale * self.noise.sample(), -1.0, 1.0)

    def reset_noise(self, mask: np.ndarray | None = None) -> None:
        """Restart correlated noise for the env copies whose episode ended."""
        if self.noise is not None:
            self.noise.reset(mask)

    # ----- learning (template method and hooks) -------------------------------------
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        return self.learn(batch).metrics

    def learn(self, batch: Mapping[str, Any]) -> Learned:
        with flush_denormals(self.fast != "off"):  # algorithms.fast: Adam's moments
            return self._learn(batch)

    def _learn(self, batch: Mapping[str, Any]) -> Learned:
        data = self.preprocess(batch)
        with torch.no_grad():
            y = self.critic_target(data)
        critic_loss, td = self.critic_loss(data, y)
        self.optimize(self.critic_opt, critic_loss, self.critic_parameters())
        if self.actor_due():
            with no_grad_for([self.critic_parameters()]):  # the actor step leaves Q alone
                actor_loss = self.actor_loss(data)
            self.optimize(self.actor_opt, actor_loss, self.actor.parameters())
            self.soft_update()
            self._actor_loss = actor_loss.detach()
        self.updates += 1
        # One stack and one conversion: a sync per metric costs more than the math.
        values = torch.stack([critic_loss.detach(), self._actor_loss, (y - td).mean(), y.mean(),
                              td.abs().mean()]).tolist()
        return Learned(dict(zip(_METRICS, values)), self.priorities(td))

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        missing = {"obs", "action", "reward", "next_obs", "terminated"} - set(batch)
        if missing:
            raise KeyError(f"{type(self).__name__} batch lacks {sorted(missing)}")
        data = super().preprocess(batch)
        for key in ("obs", "next_obs"):  # the MLPs take floats, whatever the Box's dtype
            data[key] = data[key].float()
        center = torch.as_tensor(self.center, device=self.device)
        half = torch.as_tensor(self.half_range, device=self.device)
        data["action"] = (data["action"].float().reshape(-1, self.action_dim) - center) / half
        for key in ("reward", "terminated", "discount", "weights"):
            if key in data:
                data[key] = data[key].float().reshape(-1)
        return data

    def critic_target(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Hook: the regression target ``y`` (called without gradients)."""
        next_action = self.policy(data["next_obs"], target=True)
        return self.bootstrap(data, q_value(self.target_critic, data["next_obs"], next_action))

    def bootstrap(self, data: Mapping[str, torch.Tensor], next_value: torch.Tensor) -> torch.Tensor:
        """``reward + discount * (1 - terminated) * next_value``, with the batch's n-step
        ``discount`` (``gamma ** k``) or ``config.gamma`` for one-step batches."""
        discount = data["discount"] if "discount" in data else self.config.gamma
        return data["reward"] + discount * (1.0 - data["terminated"]) * next_value

    def critic_loss(self, data: Mapping[str, torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: ``(loss, td)``: the importance-weighted mean squared TD error and the
        (detached) TD errors ``y - Q(obs, action)``."""
        td = y - q_value(self.critic, data["obs"], data["action"])
        return weighted_mean(td.pow(2), data.get("weights")), td.detach()

    def actor_due(self) -> bool:
        """Hook: whether this learning step also trains the actor (TD3 delays it)."""
        return True

    def actor_loss(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return -q_value(self.critic, data["obs"], self.policy(data["obs"])).mean()

    def optimize(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                 params: Iterable[torch.Tensor]) -> None:
        """Hook: backward, ``grad_hook`` (a learner group's average), clip, one step."""
        optimizer_step(optimizer, loss, params, grad_hook=self.grad_hook, max_norm=self.config.grad_clip)

    def soft_update(self) -> None:
        polyak_update(self.target_actor.parameters(), self.actor.parameters(), self.config.tau)
        polyak_update(self.target_critic.parameters(), self.critic.parameters(), self.config.tau)

    def priorities(self, td: torch.Tensor) -> np.ndarray:
        """Hook: replay priorities ``|td| + eps`` (float64, one per transition)."""
        return np.abs(td.cpu().numpy()).astype(np.float64) + self.config.priority_eps

    @torch.no_grad()
    def initial_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Priorities of new transitions (Ape-X: computed by the actor that made them),
        through ``preprocess``, ``critic_target``, ``critic_loss`` and ``priorities``,
        the code ``learn`` runs, so a subclass that changes one changes both."""
        data = self.preprocess(batch)
        _, td = self.critic_loss(data, self.critic_target(data))
        return self.priorities(td)

    def tie_target(self) -> None:
        """Make this an acting copy: its targets are its online networks. An Ape-X actor
        only has the learner's online parameters; this also saves the copies' memory."""
        self.target_actor, self.target_critic = self.actor, self.critic

    # ----- state --------------------------------------------------------------------
    def acting_modules(self) -> dict[str, nn.Module]:
        """Hook: the networks an acting copy needs: the actor to act, the critic for
        initial priorities (a copy that only evaluates could do without it)."""
        return {"actor": self.actor, "critic": self.critic}

    def policy_state(self) -> dict[str, torch.Tensor]:
        """A flat state dict of :meth:`acting_modules` (``actor.<name>``, ``critic.<name>``)."""
        return flat_state(self.acting_modules())

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        load_flat_state(self.acting_modules(), state)

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).state_dict() for name in self.state_modules} | {
            "updates": self.updates, "actor_loss": float(self._actor_loss),
            "noise_scale": np.array(self.noise_scale, dtype=np.float64).tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit.
        ``actor_loss`` and ``noise_scale`` are optional (older checkpoints)."""
        where = StatePath.of(self)
        opts = tuple(n for n in self.state_modules if n.endswith("_opt"))
        nets = tuple(n for n in self.state_modules if n not in opts)
        state = mapping(state, where, required=(*self.state_modules, "updates"),
                        optional=("actor_loss", "noise_scale"))
        load = torch_loader(state, where, modules={n: getattr(self, n) for n in nets},
                            optimizers={n: getattr(self, n) for n in opts})
        updates = integer(state["updates"], where["updates"])
        actor_loss = number(state.get("actor_loss", 0.0), where["actor_loss"])
        scale = state.get("noise_scale", self.config.noise_scale)
        if np.ndim(scale) == 0:
            scale = number(scale, where["noise_scale"], low=0.0)
        else:
            scale = np.asarray([number(v, where["noise_scale"][i], low=0.0)
                                for i, v in enumerate(sequence(list(scale), where["noise_scale"]))])
        load()
        self.updates = updates
        self._actor_loss = torch.tensor(actor_loss, device=self.device)
        self.noise_scale = scale
