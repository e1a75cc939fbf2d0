"""Twin Delayed DDPG (TD3).

Fujimoto, van Hoof, Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods" (ICML, arXiv:1802.09477). Three changes to
:class:`~algorithms.td3.ddpg.DDPG` against the critic's overestimation:

1. *Clipped double Q-learning* (sec. 4.2): two critics, both regressed onto the
   smaller of their two target values;
2. *target policy smoothing* (sec. 5.2): the target action gets clipped Gaussian
   noise, so the target averages Q over a small neighbourhood of actions;
3. *delayed policy updates* (sec. 5.1): the actor and all target networks move
   once every ``policy_delay`` critic updates, so the actor climbs a critic whose
   error had time to shrink.

With the batch's n-step ``discount`` (``gamma ** k``, Ape-X) the target is

    a' = clip(mu'(next_obs) + clip(N(0, target_noise^2), -c, c), -1, 1)
    y  = reward + discount * (1 - terminated) * min(Q1'(next_obs, a'), Q2'(next_obs, a'))

and the critic loss is the importance-weighted ``(y - Q1)^2 + (y - Q2)^2``; the
actor ascends ``Q1(s, mu(s))`` as in the paper. All noise is in the normalized
action space [-1, 1] (the paper's 0.2 and 0.5 are for actions in [-1, 1]).

Priorities: the mean of the two critics' ``|TD error|`` (plus eps). Both critics
learn from every sampled transition and the loss is the sum of their squared errors,
so the mean measures what there is to learn from it; the max would also rank a
transition up merely because the twins disagree there (noise the min already
discounts), and one critic's error alone would ignore half the loss.

Hyperparameters: ``tau`` 0.005, ``policy_delay`` 2, ``target_noise`` 0.2 clipped at
0.5 and Gaussian exploration of 0.1 are the paper's; learning rates 3e-4 and hidden
sizes (256, 256) are those of the authors' reference code (github.com/sfujim/TD3,
the paper's Table 3 has 1e-3 and (400, 300)), which CleanRL and most libraries follow.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn

from algorithms.base import GradHook
from algorithms.td3.continuous import polyak_update, q_value, seeded, weighted_mean
from algorithms.td3.ddpg import DDPG, DDPGConfig


@dataclasses.dataclass
class TD3Config(DDPGConfig):
    """TD3 hyperparameters; see the module docstring for where the defaults come from."""

    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    noise: Literal["gaussian", "ou"] = "gaussian"
    noise_scale: float = 0.1
    # Critic updates per actor (and target network) update.
    policy_delay: int = 2
    # Target policy smoothing: standard deviation and clip of the target action's noise.
    target_noise: float = 0.2
    target_noise_clip: float = 0.5

    def validate(self) -> None:
        super().validate()
        if isinstance(self.policy_delay, bool) or not isinstance(self.policy_delay, int) or self.policy_delay < 1:
            raise ValueError(f"policy_delay must be an int >= 1, got {self.policy_delay!r}")
        if not self.target_noise >= 0:
            raise ValueError(f"target_noise must be >= 0, got {self.target_noise}")
        if not self.target_noise_clip >= 0:
            raise ValueError(f"target_noise_clip must be >= 0, got {self.target_noise_clip}")


class TD3(DDPG):
    """TD3 on a :class:`DDPG` skeleton: it adds the second critic and overrides the
    target, the critic loss, the actor's schedule and the priorities.

    ``critic2`` defaults to a re-initialized copy of ``critic``: twins that start
    equal and see the same data would stay equal, and their minimum would be no
    correction at all.
    """

    state_modules = (*DDPG.state_modules, "critic2", "target_critic2")

    def __init__(
        self,
        *,
        obs_dim: int,
        action_low: Sequence[float] | np.ndarray,
        action_high: Sequence[float] | np.ndarray,
        config: TD3Config | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        critic2: nn.Module | None = None,
        device: str | torch.device = "cpu",
        grad_hook: GradHook | None = None,
    ) -> None:
        config = config if config is not None else TD3Config()
        if not isinstance(config, TD3Config):
            raise TypeError(f"TD3 needs a TD3Config, got {type(config).__name__}")
        super().__init__(obs_dim=obs_dim, action_low=action_low, action_high=action_high,
                         config=config, actor=actor, critic=critic, device=device, grad_hook=grad_hook)
        self.config: TD3Config = config
        with seeded(None if config.seed is None else config.seed + 1):
            self.critic2 = (critic2 if critic2 is not None else reinitialized(self.critic)).to(self.device)
        self.target_critic2 = copy.deepcopy(self.critic2).requires_grad_(False)
        # Target smoothing noise: a generator of its own, on the networks' device.
        self.generator = torch.Generator(device=self.device)
        if config.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(config.seed + 2)

    def critic_parameters(self) -> list[nn.Parameter]:
        # One optimizer for both critics, as in the authors' code.
        return [*self.critic.parameters(), *self.critic2.parameters()]

    # ----- the target: smoothed target action, minimum of the twin target critics ----
    def smoothed_target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``clip(mu'(next_obs) + clip(noise, -c, c), -1, 1)`` (target policy smoothing)."""
        action = self.policy(next_obs, target=True)
        if self.config.target_noise == 0:
            return action
        noise = torch.randn(action.shape, generator=self.generator, device=action.device)
        noise = (noise * self.config.target_noise).clamp(-self.config.target_noise_clip,
                                                         self.config.target_noise_clip)
        return (action + noise).clamp(-1.0, 1.0)

    def critic_target(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        next_obs = data["next_obs"]
        next_action = self.smoothed_target_action(next_obs)
        next_value = torch.minimum(q_value(self.target_critic, next_obs, next_action),
                                   q_value(self.target_critic2, next_obs, next_action))
        return self.bootstrap(data, next_value)

    # ----- the critics' loss and the priorities ----------------------------------------
    def critic_loss(self, data: Mapping[str, torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, td)`` with ``td`` of shape (2, B): one row of TD errors per critic."""
        obs, action = data["obs"], data["action"]
        td = torch.stack([y - q_value(self.critic, obs, action), y - q_value(self.critic2, obs, action)])
        return weighted_mean(td.pow(2).sum(0), data.get("weights")), td.detach()

    def priorities(self, td: torch.Tensor) -> np.ndarray:
        """The mean of the two critics' ``|TD error|`` plus eps (why: module docstring)."""
        return super().priorities(td.abs().mean(0))

    # ----- delayed actor and target updates ---------------------------------------------
    def actor_due(self) -> bool:
        # Learning steps 1, 1 + d, 1 + 2d, ...: the phase is immaterial (the authors'
        # code starts at step d), and this one has an actor loss to report from step 1.
        return self.updates % self.config.policy_delay == 0

    def soft_update(self) -> None:
        super().soft_update()
        polyak_update(self.target_critic2.parameters(), self.critic2.parameters(), self.config.tau)

    # ----- acting copies and state ------------------------------------------------------
    def tie_target(self) -> None:
        super().tie_target()
        self.target_critic2 = self.critic2

    def acting_modules(self) -> dict[str, nn.Module]:
        # Both critics: an actor's initial priorities use the same twin target.
        return super().acting_modules() | {"critic2": self.critic2}


def reinitialized(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with fresh parameters (every submodule's ``reset_parameters``)."""
    fresh = copy.deepcopy(module)
    for submodule in fresh.modules():
        if callable(getattr(submodule, "reset_parameters", None)):
            submodule.reset_parameters()
    if all(torch.equal(a, b) for a, b in zip(fresh.parameters(), module.parameters())):
        raise ValueError(f"cannot re-initialize a {type(module).__name__} (no reset_parameters): "
                         "pass critic2, a second critic with its own initialization")
    return fresh
