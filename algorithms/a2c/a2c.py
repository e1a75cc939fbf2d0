"""Synchronous advantage actor-critic (A2C).

The synchronous variant of A3C (Mnih et al. 2016, "Asynchronous Methods for Deep
Reinforcement Learning", arXiv 1602.01783): one learner steps a vector env for
``n_steps``, then takes one gradient step on the policy-gradient loss with a
learned baseline, an entropy bonus and a value-regression term. Advantages are
GAE(lambda) (Schulman et al. 2016, arXiv 1506.02438) or n-step returns
(:mod:`algorithms.returns`).

``update(rollout)`` is a template method over named hooks: ``preprocess`` ->
``compute_advantages`` -> ``compute_loss`` -> ``optimize`` -> ``postprocess``.
``compute_gradients(rollout)`` runs the same loss but returns the gradients
instead of applying them, which is all an A3C worker needs.

A rollout (see :class:`algorithms.rollout.RolloutCollector`) maps to time-major
``(T, N, ...)`` arrays: ``obs``, ``actions`` (as sampled, before clipping or
squashing into the action box), ``rewards``, ``next_obs`` (the true successor:
the final observation when an episode ended), ``terminated``, ``truncated`` and
``valid`` (False for the reset steps of a next-step-autoreset vector env).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from algorithms.a2c.config import BY_FAMILY, A2CConfig
from algorithms.actor_critic import (
    ActorCritic,
    PolicyHead,
    build_actor_critic,
    make_head,
    model_observations,
    observation_tensor,
    successor_values,
)
from algorithms.base import Algorithm, GradHook, reduce_gradients
from algorithms.optim import EagerAdam, EagerRMSprop
from algorithms.params import require
from algorithms.returns import gae, n_step_returns
from rlpar.state import StatePath, integer, mapping, module_state, torch_loader

__all__ = ["A2C", "A2CConfig", "make_optimizer"]


def make_optimizer(params: Any, config: A2CConfig) -> torch.optim.Optimizer:
    """The optimizer ``config`` names; A3C's gradient server builds the same one
    (there its statistics are shared by all workers: the paper's shared RMSProp)."""
    require(config, ("lr",))
    params = list(params)
    if config.optimizer == "rmsprop":
        return EagerRMSprop(params, lr=config.lr, alpha=config.rmsprop_alpha,
                            eps=config.optimizer_eps)
    return EagerAdam(params, lr=config.lr, eps=config.optimizer_eps)


class A2C(Algorithm):
    """Advantage actor-critic over a Discrete (categorical) or Box (Gaussian) action space.

    Pass ``model`` (any ``nn.Module`` whose ``forward(obs)`` returns
    ``(policy_out, value)``), or ``actor`` and ``critic`` modules (obs -> policy
    output, obs -> value), or neither for the default networks
    (:func:`algorithms.actor_critic.default_actor_critic`: MLPs built from ``config``,
    the MinAtar conv torso, or the Nature CNN for frames). The policy
    output is logits (Discrete), the mean (Box, state-independent log-std) or
    mean and log-std concatenated (Box with ``config.state_dependent_std``).
    """

    def __init__(
        self,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: A2CConfig | None = None,
        model: nn.Module | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: torch.device | str | None = None,
        grad_hook: GradHook | None = None,
    ) -> None:
        self.config = A2CConfig() if config is None else config
        if not isinstance(self.config, A2CConfig):
            raise TypeError(f"config must be an A2CConfig, got {type(self.config).__name__}")
        require(self.config, BY_FAMILY)  # the A3C job fills them by the env's observations
        self.device = torch.device(device if device is not None else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        self.observation_space, self.action_space = observation_space, action_space
        self.head: PolicyHead = make_head(action_space, config=self.config)
        self.model: ActorCritic = build_actor_critic(
            self.observation_space, head=self.head, config=self.config, model=model, actor=actor,
            critic=critic).to(self.device)
        self._optimizer: torch.optim.Optimizer | None = None
        # A learner group's gradient average (synchronous A2C, algorithms.a2c.builder):
        # called between backward and clipping, as PPO's.
        self.grad_hook = grad_hook
        self.updates = 0
        self._state_tensors: dict[str, torch.Tensor] | None = None

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """Built on first use: an A3C worker only computes gradients and never needs one."""
        if self._optimizer is None:
            self._optimizer = make_optimizer(self.model.parameters(), self.config)
        return self._optimizer

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def sample_actions(self, obs: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, env_actions)``: sampled actions as stored in a rollout, and
        the same actions mapped into the env's action space (clipped or squashed)."""
        out = self.model.policy(self._obs_tensor(obs))
        raw = self.head.sample(out, self.model.log_std)
        return raw.cpu().numpy(), self.head.to_env(raw)

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Env actions for a batch: sampled with ``explore``, else the mode (greedy)."""
        if explore:
            return self.sample_actions(obs)[1]
        out = self.model.policy(self._obs_tensor(obs))
        return self.head.to_env(self.head.mode(out))

    def _obs_tensor(self, obs: Any) -> torch.Tensor:
        return observation_tensor(self.model, obs, self.device)

    # ----------------------------------------------------------------- learning
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One gradient step on a rollout; returns loss and diagnostic metrics."""
        data = self.preprocess(batch)
        data = self.compute_advantages(data)
        loss, metrics = self.compute_loss(data)
        metrics.update(self.optimize(loss))
        return self.postprocess(data, metrics)

    def compute_gradients(self, batch: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """The (clipped) gradient of the rollout loss w.r.t. the current parameters,
        as CPU tensors keyed by ``model.named_parameters()`` names, and the metrics.
        Nothing is applied: the local parameters stay as they are."""
        data = self.preprocess(batch)
        data = self.compute_advantages(data)
        loss, metrics = self.compute_loss(data)
        metrics.update(self.backward(loss))
        grads = {name: p.grad.detach().to("cpu", copy=True)
                 for name, p in self.model.named_parameters() if p.grad is not None}
        return grads, self.postprocess(data, metrics)

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Hook: arrays -> tensors on the device, with the rollout's shape checked."""
        missing = {"obs", "actions", "rewards", "next_obs", "terminated", "truncated"} - set(batch)
        if missing:
            raise KeyError(f"rollout is missing {sorted(missing)}")
        data = super().preprocess(batch)
        for key in ("terminated", "truncated", "valid"):
            if key in data:
                data[key] = data[key].bool()
        if "valid" not in data:
            data["valid"] = torch.ones_like(data["terminated"])
        for key in ("obs", "next_obs"):  # acting's rule: the network sees the same values
            data[key] = model_observations(self.model, data[key])
        if data["rewards"].dim() != 2:
            raise ValueError(f"rollout rewards must be (T, N), got {tuple(data['rewards'].shape)}")
        data["rewards"] = data["rewards"].float() * self.config.reward_scale
        return data

    def compute_advantages(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: forward pass over the rollout, then ``advantages`` and ``returns``
        (value targets). Bootstraps from ``V(next_obs)`` computed without gradient."""
        steps, envs = data["rewards"].shape
        obs = data["obs"].flatten(0, 1)
        policy_out, values = self.model(obs)
        data["policy_out"], data["values"] = policy_out, values.reshape(steps, envs)
        values = data["values"].detach()
        next_values = self._next_values(data["obs"], data["next_obs"], values)
        flags = {"terminated": data["terminated"], "truncated": data["truncated"]}
        cfg = self.config
        if cfg.advantage == "nstep":
            returns = n_step_returns(rewards=data["rewards"], next_values=next_values,
                                     gamma=cfg.gamma, **flags)
            advantages = returns - values
        else:
            advantages = gae(rewards=data["rewards"], values=values, next_values=next_values,
                             gamma=cfg.gamma, lam=cfg.gae_lambda, **flags)
            returns = advantages + values
        data["advantages"], data["returns"] = advantages, returns
        return data

    def _next_values(self, obs: torch.Tensor, next_obs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``V(next_obs)``, (T, N), reusing the rollout's forward where ``next_obs[t]``
        is ``obs[t + 1]`` (:func:`algorithms.actor_critic.successor_values`)."""
        return successor_values(self.model, obs=obs, next_obs=next_obs, values=values)

    def compute_loss(self, data: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Hook: ``-E[log pi(a|s) A] + value_coef * E[(R - V)^2] - entropy_coef * E[H]``,
        averaged over valid steps."""
        cfg = self.config
        valid = data["valid"].flatten().float()
        count = valid.sum().clamp(min=1.0)
        advantages = data["advantages"].flatten()
        if cfg.normalize_advantages:
            mean = (advantages * valid).sum() / count
            std = (((advantages - mean) ** 2 * valid).sum() / count).sqrt()
            advantages = (advantages - mean) / (std + 1e-8)
        actions = data["actions"].flatten(0, 1)
        dist = self.head.distribution(data["policy_out"], self.model.log_std)
        log_prob = dist.log_prob(actions)
        entropy = (dist.entropy() * valid).sum() / count
        policy_loss = -(log_prob * advantages.detach() * valid).sum() / count
        value_err = data["returns"].flatten() - data["values"].flatten()
        value_loss = (value_err.pow(2) * valid).sum() / count
        loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
        metrics = {"loss": loss.item(), "policy_loss": policy_loss.item(),
                   "value_loss": value_loss.item(), "entropy": entropy.item()}
        return loss, metrics

    def backward(self, loss: torch.Tensor) -> dict[str, float]:
        """Hook: fresh gradients of ``loss`` in ``.grad`` (averaged over a learner group
        by ``grad_hook``, if any), clipped to ``max_grad_norm``."""
        self.model.zero_grad(set_to_none=True)  # the optimizer's params are the model's
        loss.backward()
        reduce_gradients(self.grad_hook, list(self.model.parameters()))
        if self.config.max_grad_norm is None:
            return {}
        norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm,
                                        foreach=True)
        return {"grad_norm": float(norm)}

    def optimize(self, loss: torch.Tensor) -> dict[str, float]:
        """Hook: backward, clip and one optimizer step."""
        metrics = self.backward(loss)
        self.optimizer.step()
        return metrics

    def postprocess(self, data: dict[str, torch.Tensor], metrics: dict[str, float]) -> dict[str, float]:
        """Hook: count the update and add value-fit diagnostics."""
        self.updates += 1
        valid = data["valid"]
        returns, values = data["returns"][valid], data["values"].detach()[valid]
        var = returns.var(unbiased=False) if returns.numel() > 1 else returns.new_zeros(())
        explained = 1.0 - (returns - values).var(unbiased=False) / var if var > 0 else torch.tensor(0.0)
        metrics["explained_variance"] = float(explained)
        metrics["advantage_mean"] = float(data["advantages"][valid].mean()) if valid.any() else 0.0
        return metrics

    # ----------------------------------------------------------------- state
    def policy_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict (what a parameter server holds)."""
        return self.model.state_dict()

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        """Copy ``state`` (a ``model.state_dict()``, e.g. pulled from a server) in place.
        A worker does this after every push, so the common case (same keys) skips
        ``load_state_dict``'s per-module bookkeeping."""
        targets = self._state_tensors
        if targets is None:
            targets = self._state_tensors = dict(self.model.state_dict(keep_vars=True))
        if state.keys() != targets.keys():  # StateError names the keys, then torch loads
            self.model.load_state_dict(dict(module_state(state, StatePath.of(self, "load_policy_state"),
                                                         self.model)))
            return
        # Every shape first: a mismatch found mid-copy would leave half the model new.
        for name, target in targets.items():
            value = state[name]
            if not isinstance(value, torch.Tensor) or value.shape != target.shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"parameter {name!r} has shape {tuple(target.shape)}, got {got}")
        with torch.no_grad():
            for name, target in targets.items():
                target.copy_(state[name])

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        state = mapping(state, where, required=("model", "optimizer", "updates"))
        load = torch_loader(state, where, modules={"model": self.model},
                            optimizers={"optimizer": self.optimizer})
        updates = integer(state["updates"], where["updates"])
        load()
        self.updates = updates
