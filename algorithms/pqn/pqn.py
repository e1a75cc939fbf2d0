"""Parallelised Q-Network (PQN).

Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR, arXiv
2407.04811; the authors' code is purejaxql): online Q-learning from many parallel
envs with no replay buffer and no target network. What keeps it stable is
normalisation in the network (a LayerNorm before each hidden activation, see
:mod:`algorithms.nets`) and the many decorrelated envs. One update takes one
time-major ``(T, N)`` rollout collected epsilon-greedily (see
:class:`algorithms.pqn.runner.PQNRunner`) and

1. computes its Q(lambda) targets once, with the current network and without
   gradient (:func:`algorithms.returns.q_lambda`: lambda-returns over
   ``max_a Q(s'_t, a)``, cut at episode ends, truncations bootstrapped from the
   true final observation);
2. runs ``epochs`` passes over the ``T * N`` transitions, each in ``minibatches``
   shuffled minibatches, regressing ``Q(s, a)`` on the targets (the authors'
   ``0.5 * squared error``, Huber optional) with gradient clipping and RAdam.

A rollout maps to ``(T, N, ...)`` arrays as :class:`algorithms.rollout.RolloutCollector`
makes them: ``obs, actions, rewards, next_obs`` (the true successor), ``terminated,
truncated``, optionally ``valid`` (False for the reset steps of a next-step
autoreset env: no loss there) and ``max_q`` (see :meth:`PQN.act_and_max_q`).

Synchronous data-parallel training (every member of a learner group updates on
its own rollout, gradients averaged, parameters identical everywhere) reaches the
gradient step through :meth:`PQN.reduce_gradients`, which calls ``grad_hook`` (an
all-reduce that averages in place, supplied by the group's role) between backward
and clipping. It is called exactly ``epochs * minibatches`` times per update,
whatever the rollout holds, so members never disagree on the number of collectives.

``update`` is a template method over hooks: ``preprocess -> targets -> (per
minibatch) compute_loss -> optimize (backward, reduce_gradients, clip, step)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.base import Algorithm, as_tensor
from algorithms.fast import FastForward, flush_denormals, resolve_fast
from algorithms.nets import q_network
from algorithms.optim import EagerAdam, EagerRAdam, clip_grad_norm, linear_schedule, set_lr
from algorithms.params import require
from algorithms.pqn.config import BY_FAMILY, PQNConfig
from algorithms.returns import q_lambda
from rlpar.state import StatePath, array, generator_state, integer, mapping, number, torch_loader

__all__ = ["PQN", "PQNConfig", "linear_schedule", "pqn_network"]

GradHook = Callable[[list[torch.Tensor]], None]
ROLLOUT_KEYS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")
_TARGET_CHUNK = 2048  # rows per no-grad forward for the targets: bounded memory on images


def pqn_network(obs_shape: Sequence[int], num_actions: int, *, config: PQNConfig) -> nn.Module:
    """The default Q network: :func:`algorithms.nets.q_network`'s torso for the
    observation family (MinAtar conv, Nature CNN or an MLP of ``config.hidden``) with
    ``config.layer_norm``, and a linear head (the authors' networks, no dueling)."""
    return q_network(obs_shape, num_actions, hidden=config.hidden, dueling=False,
                     layer_norm=config.layer_norm, cnn=config.cnn)


class PQN(Algorithm):
    """PQN on ``network: obs -> Q values (batch, num_actions)``; pass ``network`` or
    ``observation_shape`` (then :func:`pqn_network` builds it). ``grad_hook(grads)``,
    if given, gets the gradients in place before each clip and step (see the module
    docstring); ``update(rollout)`` returns scalar metrics."""

    def __init__(
        self,
        *,
        num_actions: int,
        network: nn.Module | None = None,
        observation_shape: Sequence[int] | None = None,
        config: PQNConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        grad_hook: GradHook | None = None,
    ) -> None:
        if not isinstance(num_actions, int) or num_actions < 1:
            raise ValueError(f"num_actions must be an int >= 1, got {num_actions!r}")
        self.config = config if config is not None else PQNConfig()
        require(self.config, tuple(n for n in BY_FAMILY if n != "n_steps"))
        self.config.validate()
        if (network is None) == (observation_shape is None):
            raise ValueError("pass either network= or observation_shape= (for the default network)")
        if network is None:
            network = pqn_network(tuple(observation_shape or ()), num_actions, config=self.config)
        if not isinstance(network, nn.Module):
            raise TypeError(f"network must be an nn.Module, got {type(network).__name__}")
        if grad_hook is not None and not callable(grad_hook):
            raise TypeError("grad_hook must be callable (a list of gradient tensors -> None)")
        self.device = torch.device(device)
        self.num_actions = num_actions
        self.network = network.to(self.device)
        self.params = [p for p in self.network.parameters() if p.requires_grad]
        self.fast = resolve_fast(self.config.fast)
        self.forward = FastForward(self.network, self.fast)  # the hooks' forward (algorithms.fast)
        optimizer = EagerRAdam if self.config.optimizer == "radam" else EagerAdam
        self.optimizer = optimizer(self.params, lr=self.config.lr, eps=self.config.adam_eps)
        self.grad_hook = grad_hook
        # Exploration rate of act(explore=True): a float, or one rate per row of obs.
        self.epsilon: float | np.ndarray = self.config.epsilon_start
        self.updates = 0
        self.env_steps = 0
        self._shuffle = torch.Generator()  # minibatches (CPU: randperm's indices are small)
        self.reseed(seed)

    def reseed(self, seed: int | None) -> None:
        """Seed the exploration and minibatch streams (what the constructor's ``seed``
        does): data-parallel members restored from one checkpoint each take their own
        again, or they would explore alike."""
        self._rng = np.random.default_rng(seed)  # exploration
        self._shuffle.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))

    # ---- schedules --------------------------------------------------------------

    def epsilon_at(self, env_steps: int) -> float:
        cfg = self.config
        return linear_schedule(env_steps, start=cfg.epsilon_start, end=cfg.epsilon_end,
                               steps=cfg.epsilon_decay_steps)

    def lr_at(self, env_steps: int) -> float:
        cfg = self.config
        return linear_schedule(env_steps, start=cfg.lr, end=0.0, steps=cfg.lr_decay_steps) \
            if cfg.lr_decay_steps else cfg.lr

    # ---- acting -----------------------------------------------------------------

    @torch.no_grad()
    def q_values(self, obs: Any) -> torch.Tensor:
        with flush_denormals(self.fast != "off"):
            return self.forward(as_tensor(obs, self.device))

    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Epsilon-greedy actions (``explore=True``, rate ``self.epsilon``) or greedy."""
        return self.act_and_max_q(obs, explore=explore)[0]

    def act_and_max_q(self, obs: Any, *, explore: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`act`'s actions and ``max_a Q(obs, a)``: a rollout that carries the
        latter as ``max_q`` spares the update most of the targets' forward pass."""
        best, greedy = self.q_values(obs).max(dim=-1)
        greedy, best = greedy.cpu().numpy(), best.float().cpu().numpy()
        if not explore or np.all(np.asarray(self.epsilon) <= 0.0):
            return greedy, best
        random = self._rng.integers(self.num_actions, size=greedy.shape)
        return np.where(self._rng.random(greedy.shape) < self.epsilon, random, greedy), best

    # ---- learning: the template method and its hooks ---------------------------

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One PQN update on a ``(T, N)`` rollout: targets, then ``epochs`` x
        ``minibatches`` gradient steps. Metrics: mean ``loss``, ``q_mean`` (Q of the
        taken actions) and ``grad_norm`` (before clipping) over the steps,
        ``target_mean``, and the ``lr`` used."""
        with flush_denormals(self.fast != "off"):
            return self._update(batch)

    def _update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        data = self.preprocess(batch)
        with torch.no_grad():
            targets = self.targets(data)
        set_lr(self.optimizer, self.lr_at(self.env_steps))
        flat = {"obs": data["obs"].flatten(0, 1), "actions": data["actions"].flatten(),
                "targets": targets.flatten(), "valid": data["valid"].flatten()}
        losses, q_means, norms = [], [], []
        for _ in range(self.config.epochs):
            for index in self.minibatch_indices(flat["targets"].shape[0]):
                loss, q_taken = self.compute_loss({k: v[index] for k, v in flat.items()})
                norms.append(self.optimize(loss))
                losses.append(loss.detach())
                q_means.append(q_taken.detach().mean())
        self.updates += 1
        valid = flat["valid"]
        self.env_steps += int(valid.sum())
        # One stack and one conversion instead of a sync per minibatch.
        loss, q_mean, grad_norm = torch.stack([torch.stack(x).mean() for x in (losses, q_means, norms)]).tolist()
        return {"loss": loss, "q_mean": q_mean, "grad_norm": grad_norm,
                "target_mean": float(flat["targets"][valid].mean()) if valid.any() else 0.0,
                "lr": float(self.optimizer.param_groups[0]["lr"])}

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Hook: arrays -> tensors on the device, with the rollout's layout checked."""
        missing = [k for k in ROLLOUT_KEYS if k not in batch]
        if missing:
            raise KeyError(f"rollout is missing {missing} (has {sorted(batch)})")
        data = super().preprocess({k: batch[k] for k in (*ROLLOUT_KEYS, "valid", "max_q") if k in batch})
        rewards = data["rewards"]
        if rewards.dim() != 2:
            raise ValueError(f"rollout rewards must be time-major (T, N), got shape {tuple(rewards.shape)}")
        steps, envs = rewards.shape
        for key in ("obs", "next_obs", "actions", "terminated", "truncated", "valid", "max_q"):
            if key not in data:
                continue
            per_step = key in ("obs", "next_obs")  # (T, N, *obs_shape); the rest (T, N)
            shape = tuple(data[key].shape)
            if (shape[:2] if per_step else shape) != (steps, envs):
                raise ValueError(f"rollout {key} must {'start with' if per_step else 'be'} (T, N) = "
                                 f"{(steps, envs)}, got shape {shape}")
        if data["obs"].shape != data["next_obs"].shape:
            raise ValueError(f"obs {tuple(data['obs'].shape)} and next_obs "
                             f"{tuple(data['next_obs'].shape)} must have one shape")
        actions = data["actions"]
        if actions.dim() != 2 or actions.is_floating_point() or actions.dtype == torch.bool:
            raise ValueError(f"actions must be (T, N) integers, got {actions.dtype} of shape "
                             f"{tuple(actions.shape)}")
        if int(actions.min()) < 0 or int(actions.max()) >= self.num_actions:
            raise ValueError(f"actions must be in [0, {self.num_actions}), got "
                             f"{int(actions.min())}..{int(actions.max())}")
        if steps * envs < self.config.minibatches:
            raise ValueError(f"a rollout of {steps} x {envs} steps cannot make "
                             f"{self.config.minibatches} minibatches")
        data["actions"] = actions.long()
        for key in ("terminated", "truncated"):
            data[key] = data[key].bool()
        data["valid"] = data["valid"].bool() if "valid" in data else torch.ones_like(data["terminated"])
        data["rewards"] = rewards.float() * self.config.reward_scale
        return data

    def targets(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Hook: the (T, N) Q(lambda) targets, from the current network (no target
        network; called under ``torch.no_grad``)."""
        return q_lambda(rewards=data["rewards"], next_values=self.next_max_q(data),
                        terminated=data["terminated"], truncated=data["truncated"],
                        gamma=self.config.gamma, lam=self.config.lam)

    def next_max_q(self, data: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``max_a Q(next_obs[t], a)``, (T, N), by the current network. Where the rollout
        carries ``max_q`` (``max_a Q(obs[t], a)``, recorded while acting with these same
        parameters) and ``next_obs[t]`` is ``obs[t + 1]`` (all steps but episode ends and
        the last), the value is taken from there: checked row by row, not assumed."""
        steps, envs = data["rewards"].shape
        fresh = torch.ones(steps, envs, dtype=torch.bool, device=self.device)
        best = torch.empty(steps, envs, device=self.device)
        if "max_q" in data and steps > 1:
            same = (data["next_obs"][:-1] == data["obs"][1:]).reshape(steps - 1, envs, -1).all(-1)
            best[:-1] = data["max_q"][1:].float()
            fresh[:-1] = ~same
        rows = fresh.flatten().nonzero().squeeze(1)
        next_obs = data["next_obs"].flatten(0, 1)
        for chunk in rows.split(_TARGET_CHUNK):
            best.view(-1)[chunk] = self.forward(next_obs[chunk]).max(dim=-1).values.float()
        return best

    def minibatch_indices(self, size: int) -> list[torch.Tensor]:
        """Hook: one epoch's minibatches, a shuffled partition of ``range(size)`` into
        ``config.minibatches`` parts of equal size (or one apart)."""
        order = torch.randperm(size, generator=self._shuffle).to(self.device)
        return list(order.tensor_split(self.config.minibatches))

    def compute_loss(self, minibatch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: ``(loss, Q(s, a))``; the loss is the mean over valid steps of
        ``0.5 * (Q(s, a) - G)^2`` (or the Huber loss with ``huber_delta``)."""
        q = self.forward(minibatch["obs"])
        q_taken = q.gather(-1, minibatch["actions"].view(-1, 1)).squeeze(-1)
        if self.config.huber_delta is None:
            elementwise = 0.5 * (q_taken - minibatch["targets"]).pow(2)
        else:
            elementwise = F.huber_loss(q_taken, minibatch["targets"], reduction="none",
                                       delta=self.config.huber_delta)
        valid = minibatch["valid"].to(elementwise.dtype)
        return (elementwise * valid).sum() / valid.sum().clamp(min=1.0), q_taken

    def optimize(self, loss: torch.Tensor) -> torch.Tensor:
        """Hook: backward, :meth:`reduce_gradients`, clip, one optimizer step; returns
        the gradient norm before clipping (0-dim tensor)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for p in self.params:  # one fixed layout for the hook: zeros where unreached
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in self.params]
        self.reduce_gradients(grads)
        grad_norm = clip_grad_norm(grads, self.config.max_grad_norm)
        self.optimizer.step()
        return grad_norm

    def reduce_gradients(self, grads: list[torch.Tensor]) -> None:
        """Hook: where data-parallel members agree on one gradient (in place, in
        ``self.params`` order). Calls ``grad_hook`` if set; nothing otherwise."""
        if self.grad_hook is not None:
            self.grad_hook(grads)

    # ---- state --------------------------------------------------------------------

    def policy_state(self) -> dict[str, torch.Tensor]:
        """What an actor needs to act: the network's parameters."""
        return self.network.state_dict()

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        where = StatePath.of(self, "load_policy_state")
        torch_loader({"network": state}, where, modules={"network": self.network})()

    def state_dict(self) -> dict[str, Any]:
        return {"network": self.network.state_dict(), "optimizer": self.optimizer.state_dict(),
                "updates": self.updates, "env_steps": self.env_steps,
                "epsilon": np.array(self.epsilon, dtype=np.float64).tolist(),
                "rng": self._rng.bit_generator.state, "shuffle_rng": self._shuffle.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        state = mapping(state, where, required=("network", "optimizer", "updates", "env_steps",
                                                "epsilon", "rng", "shuffle_rng"))
        load = torch_loader(state, where, modules={"network": self.network},
                            optimizers={"optimizer": self.optimizer})
        updates = integer(state["updates"], where["updates"])
        env_steps = integer(state["env_steps"], where["env_steps"])
        eps = state["epsilon"]  # a rate, or one per row (state_dict saves a list)
        if isinstance(eps, (list, tuple)):
            epsilon: float | np.ndarray = np.array(
                [number(e, where["epsilon"][i], low=0.0, high=1.0) for i, e in enumerate(eps)])
        else:
            epsilon = number(eps, where["epsilon"], low=0.0, high=1.0)
        rng = generator_state(state["rng"], where["rng"], self._rng)
        shuffle = array(state["shuffle_rng"], where["shuffle_rng"], ndim=1, dtype=np.dtype(np.uint8))
        try:
            torch.Generator().set_state(torch.from_numpy(shuffle.copy()))
        except RuntimeError as exc:
            raise where["shuffle_rng"].error(f"is not a torch generator state ({exc})") from None
        load()
        self.updates, self.env_steps, self.epsilon = updates, env_steps, epsilon
        self._rng.bit_generator.state = rng
        self._shuffle.set_state(torch.from_numpy(shuffle.copy()))
