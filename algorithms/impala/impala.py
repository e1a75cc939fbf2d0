"""IMPALA's learner and policy (Espeholt et al. 2018, "IMPALA: Scalable Distributed
Deep-RL with Importance Weighted Actor-Learner Architectures", ICML, arXiv 1802.01561).

Actors act with a copy of the policy that lags the learner's, and send unrolls with
the log-probabilities of their actions (``behaviour_log_prob``, the policy ``mu``).
The learner corrects for the lag with V-trace (:func:`algorithms.returns.vtrace`)
and takes one gradient step per batch of unrolls on

    loss = -sum log pi(a_t|x_t) * min(pg_rho_bar, rho_t) (r_t + gamma v_{t+1} - V(x_t))
           + value_coef * 0.5 * sum (v_t - V(x_t))^2 - entropy_coef * sum H(pi(.|x_t))

with ``v_t`` the V-trace targets and ``rho_t = pi(a_t|x_t) / mu(a_t|x_t)``. The batch
format (time-major ``[T, B]``, the bootstrap observation, the compact final
observations of truncated steps) is :mod:`algorithms.impala.unroll`'s.

``update(batch)`` is a template method over named hooks: ``preprocess`` ->
``compute_targets`` (``forward`` + ``vtrace``) -> ``compute_loss`` -> ``optimize``
-> ``postprocess``. The networks and policy heads are A2C's
(:mod:`algorithms.actor_critic`): categorical for ``Discrete`` actions, Gaussian for
``Box``; MLPs for vectors, the MinAtar conv torso for small images, the Nature CNN
for ``(C, 84, 84)`` frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from algorithms.actor_critic import (
    ActingForward,
    ActorCritic,
    PolicyHead,
    default_actor_critic,
    make_head,
    model_observations,
    observation_tensor,
)
from algorithms.base import Algorithm, GradHook, reduce_gradients
from algorithms.fast import flush_denormals, resolve_fast
from algorithms.impala.checks import check_batch, check_state, explained_variance
from algorithms.impala.config import IMPALAConfig
from algorithms.optim import EagerAdam, EagerRMSprop, clip_grad_norm, linear_lr
from algorithms.params import require
from algorithms.returns import vtrace

__all__ = ["IMPALA", "IMPALAConfig"]


class IMPALA(Algorithm):
    """IMPALA over a Discrete (categorical) or Box (Gaussian) action space.

    Pass ``model`` (any ``nn.Module`` whose ``forward(obs)`` returns ``(policy_out,
    value)``), or ``actor`` and ``critic`` (obs -> policy output, obs -> value), or
    neither for A2C's default networks built from ``config``. ``grad_hook``
    (``algorithms.base.GradHook``), if given or set later, averages the gradients over
    a data-parallel learner group between backward and clipping.
    """

    def __init__(
        self,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: IMPALAConfig | None = None,
        model: nn.Module | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: torch.device | str | None = None,
        grad_hook: GradHook | None = None,
    ) -> None:
        self.config = IMPALAConfig() if config is None else config
        if not isinstance(self.config, IMPALAConfig):
            raise TypeError(f"config must be an IMPALAConfig, got {type(self.config).__name__}")
        require(self.config, ("lr", "entropy_coef"))
        self.device = torch.device(device if device is not None else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        self.observation_space, self.action_space = observation_space, action_space
        net_config = self.config.network_config()
        self.head: PolicyHead = make_head(action_space, config=net_config)
        log_std = self.head.make_log_std(net_config)
        if model is not None:
            if actor is not None or critic is not None:
                raise ValueError("pass either model or actor/critic, not both")
            self.model = ActorCritic(shared=_module("model", model), log_std=log_std)
        elif actor is not None or critic is not None:
            if actor is None or critic is None:
                raise ValueError("actor and critic must be given together (or pass model=)")
            self.model = ActorCritic(actor=_module("actor", actor), critic=_module("critic", critic),
                                     log_std=log_std)
        else:
            self.model = default_actor_critic(observation_space, policy_dim=self.head.policy_dim,
                                              config=net_config, log_std=log_std)
        self.model.to(self.device)
        cfg = self.config
        if cfg.optimizer == "rmsprop":
            self.optimizer: torch.optim.Optimizer = EagerRMSprop(
                self.model.parameters(), lr=cfg.lr, alpha=cfg.rmsprop_alpha, eps=cfg.eps)
        else:
            self.optimizer = EagerAdam(self.model.parameters(), lr=cfg.lr, eps=cfg.eps)
        self.updates = 0
        self.grad_hook = grad_hook
        self._state_tensors: dict[str, torch.Tensor] | None = None
        self.fast = resolve_fast(cfg.fast)
        self._acting = ActingForward(self, self.fast)

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def sample_actions(self, obs: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, log_probs)`` for a batch of observations: sampled actions as an
        unroll stores them (Box actions unclipped; :meth:`to_env` maps them into the
        env's space) and their log-probabilities, the behaviour policy's ``log mu``."""
        with flush_denormals(self.fast != "off"):
            out = self.policy_out(self._obs_tensor(obs))
            actions = self.head.sample(out, self.model.log_std)
            log_probs = self.head.log_prob(out, self.model.log_std, actions)
        return actions.cpu().numpy(), log_probs.float().cpu().numpy()

    def policy_out(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy network's output for acting, run as ``config.fast`` says (an
        actor's few rows take algorithms.fast's small-batch kernels)."""
        return self._acting.policy(obs)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """Sampled actions as the env takes them (clipped or squashed into a Box)."""
        return self.head.to_env(torch.as_tensor(actions))

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Env actions for a batch: sampled with ``explore``, else the mode (greedy/mean)."""
        if explore:
            return self.to_env(self.sample_actions(obs)[0])
        with flush_denormals(self.fast != "off"):
            return self.head.to_env(self.head.mode(self.policy_out(self._obs_tensor(obs))))

    def _obs_tensor(self, obs: Any) -> torch.Tensor:
        # One rule here and in preprocess: both paths feed the network the same values.
        return observation_tensor(self.model, obs, self.device)

    # ----------------------------------------------------------------- learning
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One gradient step on a batch of unrolls; returns loss and diagnostic metrics."""
        with flush_denormals(self.fast != "off"):  # algorithms.fast: Adam/RMSProp moments
            data = self.preprocess(batch)
            data = self.compute_targets(data)
            loss, metrics = self.compute_loss(data)
            lr = self.set_learning_rate()
            metrics.update(self.optimize(loss))
            if lr is not None:
                metrics["lr"] = lr
            return self.postprocess(data, metrics)

    def set_learning_rate(self) -> float | None:
        """The learning rate of this update, annealed linearly to 0 over
        ``lr_anneal_updates`` as the paper anneals it over its frames (None: not
        annealed, the optimizer's own rate, which a user may have changed)."""
        cfg = self.config
        if cfg.lr_anneal_updates is None:
            return None
        return linear_lr(self.optimizer, lr=cfg.lr, step=self.updates, anneal_steps=cfg.lr_anneal_updates)

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Hook: check the batch (names what is missing or misshapen), then tensors on
        the device: observations as the model takes them (float32, or uint8 frames for
        a network that scales its own bytes), bool flags, rewards clipped if configured."""
        check_batch(batch, observation_space=self.observation_space, action_space=self.action_space)
        data = super().preprocess(batch)
        for key in ("obs", "next_obs_last", "final_obs"):
            if key in data:
                data[key] = model_observations(self.model, data[key])
        for key in ("terminated", "truncated"):
            data[key] = data[key].bool()
        data["reward"] = data["reward"].float()
        if self.config.reward_clip is not None:
            data["reward"] = data["reward"].clamp(-self.config.reward_clip, self.config.reward_clip)
        return data

    def compute_targets(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: the forward pass, then the V-trace targets."""
        return self.vtrace(self.forward(data))

    def forward(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: one forward over the unroll's observations, the bootstrap observations
        and the final observations of truncated steps; sets ``log_prob`` and
        ``entropy`` (with gradient), ``values`` (with gradient) and ``next_values``
        (the learner's current ``V(s'_t)``, no gradient), all ``[T, B]``."""
        steps, envs = data["reward"].shape
        finals = data.get("final_obs", data["obs"].new_zeros((0, *data["obs"].shape[2:])))
        obs = torch.cat([data["obs"].flatten(0, 1), data["next_obs_last"], finals])
        policy_out, values = self.model(obs)
        n = steps * envs
        dist = self.head.distribution(policy_out[:n], self.model.log_std)
        data["log_prob"] = dist.log_prob(data["action"].flatten(0, 1)).reshape(steps, envs)
        data["entropy"] = dist.entropy().reshape(steps, envs)
        data["values"] = values[:n].reshape(steps, envs)
        # V(s'_t): the next step's observation within the unroll, the bootstrap after
        # its last step, and the true final observation where a step was truncated.
        after = values.detach()
        next_values = torch.cat([after[envs:n], after[n:n + envs]])
        if finals.shape[0]:
            next_values[data["final_index"].long()] = after[n + envs:]
        data["next_values"] = next_values.reshape(steps, envs)
        return data

    def vtrace(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: ``vs`` (value targets), ``pg_advantages`` and ``rhos`` from V-trace."""
        cfg = self.config
        log_rhos = data["log_prob"].detach() - data["behaviour_log_prob"].float()
        out = vtrace(log_rhos=log_rhos, rewards=data["reward"], values=data["values"].detach(),
                     next_values=data["next_values"], terminated=data["terminated"],
                     truncated=data["truncated"], gamma=cfg.gamma, rho_bar=cfg.rho_bar,
                     c_bar=cfg.c_bar, pg_rho_bar=cfg.pg_rho_bar, lam=cfg.vtrace_lambda)
        data["vs"], data["pg_advantages"], data["rhos"] = out
        return data

    def compute_loss(self, data: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Hook: the V-trace policy gradient, the baseline's half squared error to
        ``vs`` and the entropy bonus, summed (or averaged) over the batch's steps."""
        cfg = self.config
        policy_loss = -(data["log_prob"] * data["pg_advantages"]).sum()
        value_loss = 0.5 * (data["vs"] - data["values"]).pow(2).sum()
        entropy = data["entropy"].sum()
        total = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
        count = data["reward"].numel()
        loss = total if cfg.loss_reduction == "sum" else total / count
        # Metrics are per-step means whatever the reduction, so runs compare.
        metrics = {"loss": total.item() / count, "policy_loss": policy_loss.item() / count,
                   "value_loss": value_loss.item() / count, "entropy": entropy.item() / count}
        return loss, metrics

    def optimize(self, loss: torch.Tensor) -> dict[str, float]:
        """Hook: backward, ``grad_hook`` (a learner group's average), global
        gradient-norm clipping, one optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.model.parameters() if p.requires_grad]
        reduce_gradients(self.grad_hook, params)
        grads = [p.grad for p in params if p.grad is not None]
        norm = clip_grad_norm(grads, self.config.max_grad_norm)
        self.optimizer.step()
        return {"grad_norm": float(norm)}

    def postprocess(self, data: dict[str, torch.Tensor], metrics: dict[str, float]) -> dict[str, float]:
        """Hook: count the update; importance-weight and value-fit diagnostics."""
        self.updates += 1
        rhos = data["rhos"]
        metrics["rho_mean"] = float(rhos.mean())
        metrics["rho_clipped_fraction"] = float((rhos > self.config.rho_bar).float().mean())
        metrics["explained_variance"] = explained_variance(data["vs"], data["values"].detach())
        metrics["pg_advantage_mean"] = float(data["pg_advantages"].mean())
        return metrics

    # ----------------------------------------------------------------- state
    def policy_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict: what actors pull and ``policy.pt`` keeps."""
        return self.model.state_dict()

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        """Copy ``state`` (a :meth:`policy_state`) into the model in place; an actor
        does this on every pull, so the tensors are copied, not re-registered."""
        targets = self._state_tensors
        if targets is None:
            targets = self._state_tensors = dict(self.model.state_dict(keep_vars=True))
        check_state("policy state", state, targets)
        with torch.no_grad():
            for name, target in targets.items():
                target.copy_(state[name])

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; checked first, so a bad state names
        what is wrong and leaves this learner as it was."""
        if not isinstance(state, Mapping):
            raise TypeError(f"IMPALA state must be a mapping, got {type(state).__name__}")
        keys = {"model", "optimizer", "updates"}
        if set(state) != keys:
            raise KeyError(f"IMPALA state has keys {sorted(state)}, expected {sorted(keys)}")
        check_state("model", state["model"], self.model.state_dict())
        updates = state["updates"]
        if isinstance(updates, bool) or not isinstance(updates, int | np.integer) or updates < 0:
            raise ValueError(f"updates must be an int >= 0, got {updates!r}")
        optimizer = state["optimizer"]
        groups = optimizer.get("param_groups") if isinstance(optimizer, Mapping) else None
        own = self.optimizer.state_dict()["param_groups"]
        if not isinstance(groups, list) or [len(g.get("params", ())) for g in groups] != \
                [len(g["params"]) for g in own]:
            raise ValueError("optimizer state does not match this model's parameters "
                             f"(a {type(self.optimizer).__name__} over {sum(len(g['params']) for g in own)} tensors)")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(dict(optimizer))
        self.updates = int(updates)


def _module(name: str, value: Any) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")
    return value
