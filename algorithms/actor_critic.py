"""Actor-critic networks and the action distributions on top of them.

:class:`ActorCritic` wraps either one shared module returning ``(policy_out,
value)`` or a separate actor and critic, plus the state-independent log-std of a
Gaussian policy, so every trainable tensor lives under one ``nn.Module`` (and one
set of parameter names, which is what a gradient server keys on).

A :class:`PolicyHead` turns ``policy_out`` into a distribution: categorical
logits for ``Discrete`` spaces, a diagonal Gaussian for ``Box`` spaces. Sampled
Gaussian actions are kept as sampled (the policy gradient needs their
log-probability); only the copy sent to the env is clipped, or squashed with tanh,
into the box. Since that map does not depend on the parameters, the gradient of
``log pi(a)`` of the unsquashed action is the right one either way.
"""

from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal

from algorithms.nets import MINATAR_FEATURES, default_torso, minatar_conv, mlp, observation_family

if TYPE_CHECKING:
    from algorithms.a2c.config import A2CConfig

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class ActorCritic(nn.Module):
    """``forward(obs) -> (policy_out, value)`` with ``value`` of shape ``(B,)``.

    ``byte_observations``: the network takes uint8 observations as they are and
    scales them itself (the Nature CNN's :class:`~algorithms.nets.ScaleBytes`), so
    acting and updates hand it uint8 frames unconverted (:func:`observation_tensor`,
    :func:`model_observations`); float input it takes as already scaled. Otherwise
    every observation reaches it as float32 values, as always.
    """

    def __init__(
        self,
        *,
        shared: nn.Module | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        log_std: nn.Parameter | None = None,
        byte_observations: bool = False,
    ) -> None:
        super().__init__()
        if (shared is None) == (actor is None or critic is None):
            raise ValueError("ActorCritic needs either shared=, or both actor= and critic=")
        self.shared, self.actor, self.critic = shared, actor, critic
        self.log_std = log_std
        self.byte_observations = bool(byte_observations)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.shared is not None:
            out = self.shared(obs)
            if not (isinstance(out, tuple | list) and len(out) == 2):
                raise TypeError("a shared actor-critic model must return (policy_out, value)")
            policy_out, value = out
        else:
            policy_out, value = self.actor(obs), self.critic(obs)
        return policy_out, _flat_value(value, obs)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs) if self.shared is None else self.forward(obs)[0]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return _flat_value(self.critic(obs), obs) if self.shared is None else self.forward(obs)[1]


def model_observations(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """``obs`` as ``model`` takes them: uint8 left as bytes where the model scales them
    itself (``byte_observations``), else float32 values. Acting and every update pass
    observations through this one rule, so both feed the network the same pixels."""
    if obs.dtype == torch.uint8 and getattr(model, "byte_observations", False):
        return obs
    return obs.float()


def observation_tensor(model: nn.Module, obs: Any, device: torch.device) -> torch.Tensor:
    """An acting batch (arrays, lists) as a tensor on ``device`` by
    :func:`model_observations`' rule."""
    array = np.asarray(obs)
    if array.dtype == np.uint8 and getattr(model, "byte_observations", False):
        return torch.as_tensor(array, device=device)
    return torch.as_tensor(np.asarray(array, dtype=np.float32), device=device)


class ActingForward:
    """An :class:`ActorCritic`'s forwards for acting, run as a resolved fast mode says
    (:class:`algorithms.fast.FastForward`: an actor's few no-grad rows take the
    small-batch kernels): separate actor and critic networks, or the body of a
    :class:`SharedBody` (MinAtar's shared conv torso) with its two layers on top. Any
    other shared network, or a module with hooks, runs as it is. A network or model
    replaced since is picked up: ``owner.model`` (the algorithm's) is read at each call."""

    def __init__(self, owner: Any, mode: str) -> None:
        self.owner, self.mode = owner, mode
        self._forwards: dict[str, Any] = {}

    @property
    def model(self) -> ActorCritic:
        return self.owner.model

    def _fast(self, module: nn.Module, name: str) -> Any:
        from algorithms.fast import FastForward

        forward = self._forwards.get(name)
        if forward is None or forward.module is not module:
            forward = self._forwards[name] = FastForward(module, self.mode)
        return forward

    def _shared_body(self) -> SharedBody | None:
        shared = self.model.shared
        if (isinstance(shared, SharedBody) and type(shared).forward is SharedBody.forward
                and not (shared._forward_hooks or shared._forward_pre_hooks)):
            return shared
        return None

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        if self.model.shared is None:
            return self._fast(self.model.actor, "actor")(obs)
        body = self._shared_body()
        if body is None:
            return self.model.policy(obs)
        return body.policy_layer(self._fast(body.body, "body")(obs))

    def __call__(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(policy_out, value)`` as ``model(obs)`` gives them (through it, hooks and
        all, when the model has hooks of its own)."""
        if self.model._forward_hooks or self.model._forward_pre_hooks:
            return self.model(obs)
        if self.model.shared is None:
            return (self._fast(self.model.actor, "actor")(obs),
                    _flat_value(self._fast(self.model.critic, "critic")(obs), obs))
        body = self._shared_body()
        if body is None:
            return self.model(obs)
        features = self._fast(body.body, "body")(obs)
        return body.policy_layer(features), _flat_value(body.value_layer(features), obs)


class SharedBody(nn.Module):
    """One body (obs -> ``features`` units) with a policy layer and a value layer on top."""

    def __init__(self, *, body: nn.Module, features: int, policy_dim: int) -> None:
        super().__init__()
        self.body = body
        self.policy_layer = nn.Linear(features, policy_dim)
        self.value_layer = nn.Linear(features, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(obs)
        return self.policy_layer(features), self.value_layer(features)


class SharedMLP(SharedBody):
    """One MLP body with a policy layer and a value layer on top."""

    def __init__(self, *, in_dim: int, policy_dim: int, hidden: tuple[int, ...],
                 activation: type[nn.Module]) -> None:
        body = nn.Sequential(mlp(in_dim, hidden[-1], hidden=hidden[:-1], activation=activation),
                             activation())
        super().__init__(body=body, features=hidden[-1], policy_dim=policy_dim)


def default_actor_critic(observation_space: gym.Space, *, policy_dim: int, config: A2CConfig,
                         log_std: nn.Parameter | None) -> ActorCritic:
    """The default networks, with orthogonal initialisation: hidden layers with gain
    sqrt(2), the policy layer with 0.01 (a near-uniform initial policy), the value
    layer with 1, as in the A2C baselines.

    The torso goes by :func:`algorithms.nets.observation_family`:

    * ``(C, 84, 84)`` stacked frames: the CNN ``config.cnn`` names
      (:func:`algorithms.nets.default_torso`, Ape-X's and PQN's), shared by the policy
      and value layers: ``nature`` (Mnih et al. 2015; conv 32-8-4, 64-4-2, 64-3-1,
      dense 512, ReLU), CleanRL's ``ppo_atari`` network, or ``small`` (Mnih et al.
      2013; conv 16-8-4, 32-4-2, dense 256). uint8 frames reach it as bytes and are
      scaled by 1/255 inside (``byte_observations``);
    * small channels-last images (:func:`algorithms.nets.is_small_image`, e.g.
      MinAtar's 10x10xC booleans): the MinAtar conv torso (Young & Tian 2019), shared
      as the paper's actor-critic and the A3C paper's Atari nets share theirs;
    * every other Box: MLPs, the only networks ``hidden``, ``activation`` and
      ``shared_network`` apply to.
    """
    if not isinstance(observation_space, gym.spaces.Box):
        raise TypeError(
            f"the default networks need a Box observation space, got {observation_space}; "
            "pass model= or actor=/critic= for other spaces"
        )
    family = observation_family(observation_space.shape)
    if family == "frames":
        torso, features = default_torso(observation_space.shape, cnn=config.cnn)
        net = SharedBody(body=torso, features=features, policy_dim=policy_dim)
        _orthogonal(net.body), _orthogonal(net.policy_layer, 0.01), _orthogonal(net.value_layer, 1.0)
        return ActorCritic(shared=net, log_std=log_std, byte_observations=True)
    if family == "small_image":
        height, width, channels = observation_space.shape
        net = SharedBody(body=minatar_conv(channels, height=height, width=width), features=MINATAR_FEATURES,
                         policy_dim=policy_dim)
        _orthogonal(net.body), _orthogonal(net.policy_layer, 0.01), _orthogonal(net.value_layer, 1.0)
        return ActorCritic(shared=net, log_std=log_std)
    in_dim = int(np.prod(observation_space.shape))
    activation = nn.Tanh if config.activation == "tanh" else nn.ReLU
    hidden = tuple(config.hidden)
    flatten = nn.Flatten() if len(observation_space.shape) > 1 else nn.Identity()
    if config.shared_network:
        net = SharedMLP(in_dim=in_dim, policy_dim=policy_dim, hidden=hidden, activation=activation)
        _orthogonal(net.body), _orthogonal(net.policy_layer, 0.01), _orthogonal(net.value_layer, 1.0)
        return ActorCritic(shared=nn.Sequential(flatten, net), log_std=log_std)
    actor = mlp(in_dim, policy_dim, hidden=hidden, activation=activation)
    critic = mlp(in_dim, 1, hidden=hidden, activation=activation)
    _orthogonal(actor), _orthogonal(actor[-1], 0.01)
    _orthogonal(critic), _orthogonal(critic[-1], 1.0)
    return ActorCritic(actor=nn.Sequential(flatten, actor), critic=nn.Sequential(flatten, critic),
                       log_std=log_std)


def build_actor_critic(observation_space: gym.Space, *, head: PolicyHead, config: A2CConfig,
                       model: nn.Module | None = None, actor: nn.Module | None = None,
                       critic: nn.Module | None = None) -> ActorCritic:
    """The model of an actor-critic algorithm: the user's ``model`` (``forward(obs) ->
    (policy_out, value)``), the user's ``actor`` and ``critic``, or neither for
    :func:`default_actor_critic`; with ``head``'s log-std parameter where it has one.
    ``config`` is any config with A2CConfig's network fields (PPOConfig has them)."""
    log_std = head.make_log_std(config)
    if model is not None:
        if actor is not None or critic is not None:
            raise ValueError("pass either model or actor/critic, not both")
        return ActorCritic(shared=_module("model", model), log_std=log_std)
    if (actor is None) != (critic is None):
        raise ValueError("actor and critic must be given together (or pass model=)")
    if actor is not None:
        return ActorCritic(actor=_module("actor", actor), critic=_module("critic", critic),
                           log_std=log_std)
    return default_actor_critic(observation_space, policy_dim=head.policy_dim, config=config,
                                log_std=log_std)


def _module(name: str, value: object) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")
    return value


class PolicyHead(abc.ABC):
    """Maps a network's policy output to an action distribution and env actions."""

    policy_dim: int

    def make_log_std(self, config: A2CConfig) -> nn.Parameter | None:
        return None

    @abc.abstractmethod
    def distribution(self, policy_out: torch.Tensor, log_std: torch.Tensor | None) -> Distribution: ...

    def sample(self, policy_out: torch.Tensor, log_std: torch.Tensor | None, *,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Sampled actions (subclasses skip building a distribution object), drawn
        from ``generator`` when given (an algorithm's own stream), else torch's global one."""
        if generator is not None:
            raise NotImplementedError(f"{type(self).__name__} does not sample from a generator")
        return self.distribution(policy_out, log_std).sample()

    def log_prob(self, policy_out: torch.Tensor, log_std: torch.Tensor | None,
                 actions: torch.Tensor) -> torch.Tensor:
        """``distribution(policy_out, log_std).log_prob(actions)``: what an actor
        records as its behaviour log-probability (subclasses skip the object)."""
        return self.distribution(policy_out, log_std).log_prob(actions)

    @abc.abstractmethod
    def mode(self, policy_out: torch.Tensor) -> torch.Tensor:
        """The greedy action."""

    @abc.abstractmethod
    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        """Sampled actions as the env takes them."""


class CategoricalHead(PolicyHead):
    def __init__(self, *, n: int) -> None:
        self.policy_dim = n

    def distribution(self, policy_out: torch.Tensor, log_std: torch.Tensor | None) -> Distribution:
        return Categorical(logits=policy_out, validate_args=False)

    def sample(self, policy_out: torch.Tensor, log_std: torch.Tensor | None, *,
               generator: torch.Generator | None = None) -> torch.Tensor:
        # Gumbel-max: argmax(logits + Gumbel noise) is an exact categorical sample,
        # and a few elementwise ops are cheaper than softmax + multinomial.
        noise = torch.empty_like(policy_out).exponential_(generator=generator).log()
        return (policy_out - noise).argmax(dim=-1)

    def log_prob(self, policy_out: torch.Tensor, log_std: torch.Tensor | None,
                 actions: torch.Tensor) -> torch.Tensor:
        # Categorical's own rule (logits - logsumexp, gathered), without building the
        # object and its probabilities: a third of an actor's batch-8 act on MinAtar.
        return policy_out.log_softmax(-1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def mode(self, policy_out: torch.Tensor) -> torch.Tensor:
        return policy_out.argmax(dim=-1)

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        return actions.cpu().numpy()


class GaussianHead(PolicyHead):
    """Diagonal Gaussian over a 1-d ``Box``; the log-std is a free parameter
    (state-independent) or the second half of the policy output (state-dependent)."""

    def __init__(self, *, space: gym.spaces.Box, transform: str, state_dependent: bool) -> None:
        if len(space.shape) != 1:
            raise ValueError(f"Gaussian policies need a 1-d Box action space, got shape {space.shape}")
        if transform == "tanh" and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError("action_transform='tanh' needs a bounded action space")
        self.dim = int(space.shape[0])
        self.low = space.low.astype(np.float32)
        self.high = space.high.astype(np.float32)
        self.dtype = space.dtype
        self.transform = transform
        self.state_dependent = state_dependent
        self.policy_dim = 2 * self.dim if state_dependent else self.dim

    def make_log_std(self, config: A2CConfig) -> nn.Parameter | None:
        if self.state_dependent:
            return None
        return nn.Parameter(torch.full((self.dim,), float(config.log_std_init)))

    def distribution(self, policy_out: torch.Tensor, log_std: torch.Tensor | None) -> Distribution:
        mean, log_std = self._mean_log_std(policy_out, log_std)
        return Independent(Normal(mean, log_std.exp(), validate_args=False), 1, validate_args=False)

    def sample(self, policy_out: torch.Tensor, log_std: torch.Tensor | None, *,
               generator: torch.Generator | None = None) -> torch.Tensor:
        mean, log_std = self._mean_log_std(policy_out, log_std)
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        return mean + log_std.exp() * noise

    def _mean_log_std(self, policy_out: torch.Tensor,
                      log_std: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.state_dependent:
            mean, log_std = policy_out.chunk(2, dim=-1)
        else:
            if log_std is None:
                raise ValueError("a state-independent Gaussian head needs the model's log_std")
            mean, log_std = policy_out, log_std.expand_as(policy_out)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def mode(self, policy_out: torch.Tensor) -> torch.Tensor:
        return policy_out[..., : self.dim]

    def to_env(self, actions: torch.Tensor) -> np.ndarray:
        raw = actions.cpu().numpy()
        if self.transform == "tanh":
            env = self.low + (np.tanh(raw) + 1.0) * 0.5 * (self.high - self.low)
        else:
            env = np.clip(raw, self.low, self.high)
        return env.astype(self.dtype, copy=False)


def make_head(action_space: gym.Space, *, config: A2CConfig) -> PolicyHead:
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalHead(n=int(action_space.n))
    if isinstance(action_space, gym.spaces.Box):
        return GaussianHead(space=action_space, transform=config.action_transform,
                            state_dependent=config.state_dependent_std)
    raise TypeError(f"A2C supports Discrete and Box action spaces, got {action_space}")


@torch.no_grad()
def successor_values(model: ActorCritic, *, obs: torch.Tensor, next_obs: torch.Tensor,
                     values: torch.Tensor) -> torch.Tensor:
    """``V(next_obs)``, (T, N), given ``values = V(obs)``. Within a rollout
    ``next_obs[t]`` is ``obs[t + 1]`` except where an episode ended (a same-step
    reset's final observation): those values are taken from ``values``, and only the
    last step's and the differing rows are computed, which saves a forward over the
    rollout. Checked, not assumed, so any rollout layout gets the same targets."""
    steps, envs = values.shape
    fresh = torch.ones(steps, envs, dtype=torch.bool, device=values.device)
    if steps > 1:
        same = next_obs[:-1] == obs[1:]
        fresh[:-1] = ~(same.flatten(2).all(-1) if same.dim() > 2 else same)
    next_values = torch.zeros_like(values)
    next_values[:-1] = values[1:]
    rows = fresh.flatten().nonzero().squeeze(1)
    next_values.view(-1)[rows] = model.value(next_obs.flatten(0, 1)[rows]).reshape(-1).to(values.dtype)
    return next_values


def _flat_value(value: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    if value.dim() == 2 and value.shape[-1] == 1:
        value = value.squeeze(-1)
    if value.dim() != 1 or value.shape[0] != obs.shape[0]:
        raise ValueError(f"critic must return shape (B,) or (B, 1), got {tuple(value.shape)}")
    return value


def _orthogonal(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Linear | nn.Conv2d):
            nn.init.orthogonal_(layer.weight, gain=gain)
            nn.init.zeros_(layer.bias)

