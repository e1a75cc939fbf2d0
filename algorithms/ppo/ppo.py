"""Proximal Policy Optimization with the clipped surrogate objective.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv 1707.06347.
Collect a ``(T, N)`` rollout with the current policy, keeping the behaviour
policy's log-probabilities and values (:meth:`PPO.sample_actions` with
:class:`algorithms.rollout.RolloutCollector`); estimate advantages once with
GAE(lambda) (Schulman et al. 2016, arXiv 1506.02438); then take ``epochs`` passes
over the rollout in ``minibatches`` shuffled minibatches, one optimizer step each, on

    L = -E[min(r A, clip(r, 1 - eps, 1 + eps) A)] + c_v L_V - c_e E[H(pi)],
    r = pi(a|s) / pi_old(a|s).

``update(rollout)`` reads top to bottom like CleanRL's ``ppo.py``, over hooks a
subclass overrides: ``preprocess`` -> ``compute_advantages`` -> ``minibatch_indices``
-> (``compute_loss`` -> ``optimize``) per minibatch -> ``postprocess``.

Synchronous data parallelism (DD-PPO: Wijmans et al. 2020, "DD-PPO: Learning
Near-Perfect PointGoal Navigators from 2.5 Billion Frames", ICLR): every member of
a learner group runs its own PPO on its own envs, and ``grad_hook(parameters)``,
called on every minibatch between backward and clipping, replaces each ``.grad``
by the group's average (the job passes its group's all-reduce; this module never
imports transport). Parameters then stay identical if every member

* starts from the same parameters (the same ``seed``, or a broadcast) and config,
  and samples from its own stream (its own ``sample_seed``);
* runs the same number of updates, each of ``epochs x minibatches`` hook calls.
  ``minibatches`` is a count: a preempted, shorter rollout gives smaller minibatches,
  never fewer (each member's loss is a mean over its own minibatch, so members
  weigh equally whatever their sizes, as in DD-PPO);
* takes the ``target_kl`` early stop alike: with a ``grad_hook`` it needs
  ``mean_hook(tensor) -> group mean``, else the constructor refuses.

Clipping follows the hook, on the averaged gradient, so it is the same everywhere.
A job that restores every member from one checkpoint reseeds each member's stream
(``ppo.generator.manual_seed(...)``), or their samples would coincide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from algorithms.actor_critic import (
    ActingForward,
    ActorCritic,
    build_actor_critic,
    make_head,
    model_observations,
    observation_tensor,
    successor_values,
)
from algorithms.base import Algorithm
from algorithms.fast import flush_denormals, resolve_fast
from algorithms.optim import EagerAdam, clip_grad_norm, linear_lr
from algorithms.params import require
from algorithms.ppo.config import PPOConfig
from algorithms.returns import gae
from rlpar.state import StatePath, integer, mapping, module_state, torch_loader

__all__ = ["PPO", "PPOConfig", "GradHook", "MeanHook", "clipped_surrogate_loss",
           "value_loss", "normalize"]

GradHook = Callable[[Sequence[torch.Tensor]], None]   # average every p.grad in place
MeanHook = Callable[[torch.Tensor], torch.Tensor]     # the group mean of a tensor
ROLLOUT = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "log_probs", "values")
SAMPLE_KEYS = ("obs", "actions", "log_probs", "values", "advantages", "returns")


def normalize(advantages: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit std; the population std, so a single sample gives 0, not NaN."""
    return (advantages - advantages.mean()) / (advantages.std(unbiased=False) + 1e-8)


def clipped_surrogate_loss(ratio: torch.Tensor, advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """``-E[min(r A, clip(r, 1 - clip, 1 + clip) A)]``: the pessimistic bound, so the
    ratio gains nothing by leaving ``[1 - clip, 1 + clip]`` in the advantage's direction."""
    return -torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages).mean()


def value_loss(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor,
               clip: float | None) -> torch.Tensor:
    """``0.5 E[(V - R)^2]``; with ``clip``, the larger of that and the error of
    ``V_old + clip(V - V_old, -clip, clip)`` (the baselines' value clipping)."""
    loss = (values - returns).pow(2)
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.max(loss, (clipped - returns).pow(2))
    return 0.5 * loss.mean()


class PPO(Algorithm):
    """PPO over a Discrete (categorical) or Box (Gaussian) action space.

    The model is A2C's (:func:`algorithms.actor_critic.build_actor_critic`): a user
    ``model`` (``forward(obs) -> (policy_out, value)``), ``actor`` and ``critic``, or
    the default networks for the observations (MLPs, MinAtar's conv torso, or the
    Nature CNN for frames).
    ``seed`` seeds the default networks' initialisation (members of a learner group
    pass the same one); ``sample_seed`` seeds :attr:`generator`, the stream of action
    samples and minibatch shuffles (members pass different ones). None: drawn from
    torch's global generator.
    """

    def __init__(
        self,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: PPOConfig | None = None,
        model: nn.Module | None = None,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: torch.device | str | None = None,
        seed: int | None = None,
        sample_seed: int | None = None,
        grad_hook: GradHook | None = None,
        mean_hook: MeanHook | None = None,
    ) -> None:
        self.config = PPOConfig() if config is None else config
        if not isinstance(self.config, PPOConfig):
            raise TypeError(f"config must be a PPOConfig, got {type(self.config).__name__}")
        require(self.config, ("lr", "entropy_coef", "clip_coef"))
        if self.config.target_kl is not None and grad_hook is not None and mean_hook is None:
            raise ValueError("target_kl with a grad_hook needs mean_hook: every member of the "
                             "group must stop its epochs at the same point")
        self.device = torch.device(device if device is not None else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        self.observation_space, self.action_space = observation_space, action_space
        self.head = make_head(action_space, config=self.config)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            model = build_actor_critic(observation_space, head=self.head, config=self.config,
                                       model=model, actor=actor, critic=critic)
        self.model: ActorCritic = model.to(self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(torch.randint(2**62, ())) if sample_seed is None else sample_seed)
        self.optimizer = EagerAdam(self.model.parameters(), lr=self.config.lr,
                                   eps=self.config.optimizer_eps)
        self.grad_hook, self.mean_hook = grad_hook, mean_hook
        self.updates = 0
        self.fast = resolve_fast(self.config.fast)
        self._acting = ActingForward(self, self.fast)

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def sample_actions(self, obs: Any) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(actions, env_actions, {"log_probs", "values"})`` for a batch: sampled
        actions as stored in a rollout, the same mapped into the env's action space,
        and the behaviour policy's log-probabilities and values the update needs."""
        with flush_denormals(self.fast != "off"):
            policy_out, values = self._acting(self._obs_tensor(obs))
            actions = self.head.sample(policy_out, self.model.log_std, generator=self.generator)
            log_probs = self.head.log_prob(policy_out, self.model.log_std, actions)
        return (actions.cpu().numpy(), self.head.to_env(actions),
                {"log_probs": log_probs.float().cpu().numpy(), "values": values.float().cpu().numpy()})

    @torch.no_grad()
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Env actions for a batch: sampled with ``explore``, else the mode (greedy/mean)."""
        if explore:
            return self.sample_actions(obs)[1]
        with flush_denormals(self.fast != "off"):
            return self.head.to_env(self.head.mode(self._acting.policy(self._obs_tensor(obs))))

    def _obs_tensor(self, obs: Any) -> torch.Tensor:
        return observation_tensor(self.model, obs, self.device)

    # ----------------------------------------------------------------- learning
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One PPO update on a ``(T, N)`` rollout; returns metrics averaged over its
        minibatch steps (``policy_loss``, ``value_loss``, ``entropy``, ``approx_kl``,
        ``clip_fraction``, ``grad_norm``, ...) and ``explained_variance``."""
        with flush_denormals(self.fast != "off"):  # algorithms.fast: Adam's moments
            return self._update(batch)

    def _update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        cfg = self.config
        data = self.compute_advantages(self.preprocess(batch))
        valid = data["valid"].flatten()
        samples = {key: data[key].flatten(0, 1) for key in SAMPLE_KEYS}
        if not valid.all():  # next-step autoreset's reset steps carry no transition
            samples = {key: value[valid] for key, value in samples.items()}
        lr = self.set_learning_rate()
        totals: dict[str, float] = {}
        steps = epochs = 0
        for _ in range(cfg.epochs):
            epoch_kl = []
            for index in self.minibatch_indices(int(valid.sum())):
                loss, metrics = self.compute_loss({key: value[index] for key, value in samples.items()})
                metrics.update(self.optimize(loss))
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value
                epoch_kl.append(metrics["approx_kl"])
                steps += 1
            epochs += 1
            if cfg.target_kl is not None and self._group_mean(epoch_kl) > cfg.target_kl:
                break
        metrics = {key: value / steps for key, value in totals.items()}
        metrics.update(lr=lr, epochs=float(epochs), minibatch_steps=float(steps))
        return self.postprocess(data, metrics)

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Hook: arrays -> tensors on the device, with the rollout's keys and shapes checked."""
        missing = [key for key in ROLLOUT if key not in batch]
        if missing:
            raise KeyError(f"rollout is missing {missing} (collect it with PPO.sample_actions, "
                           "which stores the behaviour log_probs and values)")
        data = super().preprocess(batch)
        if data["rewards"].dim() != 2 or data["rewards"].shape[0] == 0:
            raise ValueError(f"rollout rewards must be (T, N) with T >= 1, got {tuple(data['rewards'].shape)}")
        shape = tuple(data["rewards"].shape)
        for key in (*ROLLOUT, "valid"):
            got = tuple(data[key].shape) if key in data else shape
            if got[:2] != shape or (key not in ("obs", "next_obs", "actions") and len(got) != 2):
                raise ValueError(f"rollout {key} must be (T, N{', ...' if key in ('obs', 'next_obs', 'actions') else ''})"
                                 f" with (T, N) = {shape}, got {got}")
        for key in ("terminated", "truncated", "valid"):
            if key in data:
                data[key] = data[key].bool()
        data.setdefault("valid", torch.ones_like(data["terminated"]))
        data["rewards"] = data["rewards"].float() * self.config.reward_scale
        for key in ("values", "log_probs"):
            data[key] = data[key].float()
        for key in ("obs", "next_obs"):  # e.g. MinAtar's bool images; acting's rule
            data[key] = model_observations(self.model, data[key])
        return data

    @torch.no_grad()
    def compute_advantages(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: GAE advantages and value targets (``returns``) from the behaviour
        values, bootstrapping from ``V(next_obs)``: the stored value of ``obs[t+1]``
        where that is the successor, the model's elsewhere (the same model: PPO
        updates right after collecting)."""
        values = data["values"]
        next_values = successor_values(self.model, obs=data["obs"], next_obs=data["next_obs"], values=values)
        data["advantages"] = gae(rewards=data["rewards"], values=values, next_values=next_values,
                                 terminated=data["terminated"], truncated=data["truncated"],
                                 gamma=self.config.gamma, lam=self.config.gae_lambda)
        data["returns"] = data["advantages"] + values
        return data

    def minibatch_indices(self, count: int) -> tuple[torch.Tensor, ...]:
        """Hook: a shuffle of ``count`` samples cut into ``minibatches`` parts whose
        sizes differ by at most one (a count, not a size: see the module docstring)."""
        if count < self.config.minibatches:
            raise ValueError(f"a rollout of {count} valid steps cannot make "
                             f"minibatches={self.config.minibatches}")
        order = torch.randperm(count, generator=self.generator, device=self.device)
        return order.tensor_split(self.config.minibatches)

    def compute_loss(self, minibatch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Hook: clipped surrogate + ``value_coef`` (clipped) value loss - ``entropy_coef`` entropy."""
        cfg = self.config
        policy_out, values = self.model(minibatch["obs"])
        dist = self.head.distribution(policy_out, self.model.log_std)
        log_ratio = dist.log_prob(minibatch["actions"]) - minibatch["log_probs"]
        ratio = log_ratio.exp()
        advantages = minibatch["advantages"]
        if cfg.normalize_advantages:
            advantages = normalize(advantages)
        policy_loss = clipped_surrogate_loss(ratio, advantages, cfg.clip_coef)
        v_loss = value_loss(values, minibatch["returns"], minibatch["values"],
                            cfg.clip_coef if cfg.clip_vloss else None)
        entropy = dist.entropy().mean()
        loss = policy_loss - cfg.entropy_coef * entropy + cfg.value_coef * v_loss
        with torch.no_grad():  # Schulman's low-variance KL estimator, E[(r - 1) - log r]
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
        return loss, {"loss": loss.item(), "policy_loss": policy_loss.item(), "value_loss": v_loss.item(),
                      "entropy": entropy.item(), "approx_kl": approx_kl.item(),
                      "clip_fraction": clip_fraction.item()}

    def optimize(self, loss: torch.Tensor) -> dict[str, float]:
        """Hook: backward, ``grad_hook`` (the group's average), clip, one Adam step."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if self.grad_hook is not None:
            for p in params:  # a parameter this loss missed may be reached on another member
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self.grad_hook(params)
        norm = clip_grad_norm([p.grad for p in params if p.grad is not None], self.config.max_grad_norm)
        self.optimizer.step()
        return {"grad_norm": float(norm)}

    def postprocess(self, data: dict[str, torch.Tensor], metrics: dict[str, float]) -> dict[str, float]:
        """Hook: count the update; how much of the returns' variance the behaviour values explain."""
        self.updates += 1
        valid = data["valid"]
        returns, values = data["returns"][valid], data["values"][valid]
        var = returns.var(unbiased=False) if returns.numel() > 1 else returns.new_zeros(())
        metrics["explained_variance"] = float(1.0 - (returns - values).var(unbiased=False) / var) if var > 0 else 0.0
        return metrics

    def set_learning_rate(self) -> float:
        """The learning rate of this update: linearly annealed to 0 over ``lr_anneal_updates``."""
        cfg = self.config
        if cfg.lr_anneal_updates is None:
            return cfg.lr
        return linear_lr(self.optimizer, lr=cfg.lr, step=self.updates, anneal_steps=cfg.lr_anneal_updates)

    def _group_mean(self, values: list[float]) -> float:
        mean = torch.tensor(sum(values) / len(values), dtype=torch.float64)
        return float(mean if self.mean_hook is None else self.mean_hook(mean))

    # ----------------------------------------------------------------- state
    def policy_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict (what acting needs, e.g. for evaluation)."""
        return self.model.state_dict()

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        """Copy a :meth:`policy_state` into the model; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self, "load_policy_state")
        self.model.load_state_dict(dict(module_state(state, where, self.model)))

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "updates": self.updates, "generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        state = mapping(state, where, required=("model", "optimizer", "updates", "generator"))
        load = torch_loader(state, where, modules={"model": self.model},
                            optimizers={"optimizer": self.optimizer})
        updates = integer(state["updates"], where["updates"])
        generator = state["generator"]
        try:  # tried on a scratch generator: torch checks the state's size there
            torch.Generator(device=self.device).set_state(generator)
        except (TypeError, RuntimeError) as exc:
            raise where["generator"].error(f"is not a generator state ({exc})") from None
        load()
        self.updates = updates
        self.generator.set_state(generator)
