"""Deep Q-Networks.

Mnih et al. 2015, "Human-level control through deep reinforcement learning"
(Nature 518), with the usual improvements, each a config switch:

- double Q-learning (van Hasselt et al. 2016, "Deep Reinforcement Learning with
  Double Q-learning", AAAI): the online network picks the next action, the target
  network values it;
- dueling heads (Wang et al. 2016): a property of the network, see
  :class:`algorithms.nets.DuelingHead`;
- n-step returns (Sutton 1988; used by Ape-X): the batch carries the discounted
  n-step reward sum and its ``discount = gamma ** k``, so the same update serves
  any n;
- prioritized replay (Schaul et al. 2016, "Prioritized Experience Replay", ICLR):
  the loss is weighted by the batch's importance ``weights`` and ``update`` returns
  new priorities ``|TD error|``.

A batch is a mapping of arrays with keys ``obs, action, reward, next_obs,
terminated`` and optionally ``discount`` (default ``gamma``) and ``weights``
(default 1). The regression target is

    y = reward + discount * (1 - terminated) * Q_target(next_obs, a*)

with ``a* = argmax_a Q_online(next_obs, a)`` (double) or ``argmax_a Q_target``.

``update`` is a template method; override one hook to try an idea:
``preprocess -> target -> compute_loss -> optimize -> postprocess``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.base import Algorithm, as_tensor


@dataclasses.dataclass
class DQNConfig:
    """Hyperparameters of :class:`DQN` (defaults tuned for CartPole-v1)."""

    gamma: float = 0.99
    lr: float = 1e-3
    double_q: bool = True
    # Huber loss threshold (Mnih et al. clip the TD error at 1); None = squared error.
    huber_delta: float | None = 1.0
    # Target network update every `target_update_interval` updates, with Polyak
    # coefficient `tau` (1.0 = hard copy).
    target_update_interval: int = 500
    tau: float = 1.0
    max_grad_norm: float | None = 10.0
    adam_eps: float = 1e-8
    # Added to |TD error| so no transition's priority is ever exactly zero.
    priority_eps: float = 1e-6

    def validate(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.huber_delta is not None and self.huber_delta <= 0:
            raise ValueError(f"huber_delta must be positive or None, got {self.huber_delta}")
        if self.target_update_interval < 1:
            raise ValueError(f"target_update_interval must be >= 1, got {self.target_update_interval}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm}")
        if self.priority_eps < 0:
            raise ValueError(f"priority_eps must be >= 0, got {self.priority_eps}")


_METRICS = ("loss", "q_mean", "target_mean", "td_abs_mean", "grad_norm")


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm`` (None:
    no clipping); returns the norm before clipping. The same rule as
    ``torch.nn.utils.clip_grad_norm_``, minus its per-call grouping of tensors by
    device and dtype (a net's grads share both), which costs more than the
    arithmetic on small nets."""
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


class FusedAdam:
    """Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization", ICLR) as
    one fused kernel call per step: the kernel ``torch.optim.Adam(fused=True)`` runs,
    without ``torch.optim``'s per-step Python machinery (hooks, grouping by device,
    dynamo guards), which costs several times the kernel on a small net, and without
    constructing a ``torch.optim.Optimizer``, which imports ``torch._dynamo`` (seconds
    of process start-up). The same update rule (no weight decay, no amsgrad); any
    ``torch.optim`` optimizer can replace it (``dqn.optimizer = ...``)."""

    def __init__(self, params: Any, *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("FusedAdam got no parameters that require grad")
        devices = {p.device for p in self.params}
        dtypes = {p.dtype for p in self.params}
        if len(devices) > 1 or len(dtypes) > 1:
            raise ValueError(f"FusedAdam needs one device and dtype, got {devices} and {dtypes}")
        if lr <= 0 or eps <= 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"FusedAdam: bad lr={lr}, eps={eps} or betas={betas}")
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        if any(p.grad is None for p in self.params):
            # Parameters the loss did not reach keep their value, as in torch.optim.
            idx = [i for i, p in enumerate(self.params) if p.grad is not None]
            lists = [[group[i] for i in idx] for group in
                     (self.params, self.exp_avg, self.exp_avg_sq, self.steps)]
        else:
            lists = [self.params, self.exp_avg, self.exp_avg_sq, self.steps]
        params, exp_avg, exp_avg_sq, steps = lists
        if not params:
            return
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(params, [p.grad for p in params], exp_avg, exp_avg_sq, [], steps,
                           lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0,
                           eps=self.eps, amsgrad=False, maximize=False)

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps,
                "exp_avg": [t.clone() for t in self.exp_avg],
                "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
                "steps": [t.clone() for t in self.steps]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if len(state["exp_avg"]) != len(self.params):
            raise ValueError(f"optimizer state has {len(state['exp_avg'])} tensors, "
                             f"this optimizer {len(self.params)}")
        self.lr, self.eps = float(state["lr"]), float(state["eps"])
        self.betas = (float(state["betas"][0]), float(state["betas"][1]))
        with torch.no_grad():
            for mine, theirs in zip(self.exp_avg + self.exp_avg_sq + self.steps,
                                    [*state["exp_avg"], *state["exp_avg_sq"], *state["steps"]]):
                mine.copy_(theirs)


class DQN(Algorithm):
    """DQN on any ``network: obs -> Q values of shape (batch, num_actions)``.

    ``update(batch)`` returns scalar metrics and, under the key ``"priorities"``,
    a float64 array of new replay priorities (one per transition).
    """

    def __init__(
        self,
        *,
        network: nn.Module,
        num_actions: int,
        config: DQNConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int | None = None,
    ) -> None:
        if not isinstance(network, nn.Module):
            raise TypeError(f"network must be an nn.Module, got {type(network).__name__}")
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.config = config if config is not None else DQNConfig()
        self.config.validate()
        self.device = torch.device(device)
        self.num_actions = int(num_actions)
        self.network = network.to(self.device)
        self._params = [p for p in self.network.parameters() if p.requires_grad]
        self.target_network = copy.deepcopy(self.network).requires_grad_(False)
        self._optimizer: Any = None
        # Exploration rate of act(explore=True): a float, or one rate per row of obs.
        self.epsilon: float | np.ndarray = 0.0
        self.updates = 0
        self._rng = np.random.default_rng(seed)

    @property
    def optimizer(self) -> Any:
        """:class:`FusedAdam` by default, built on first use (actors never need one);
        assign any ``torch.optim`` optimizer to replace it."""
        if self._optimizer is None:
            self._optimizer = FusedAdam(self.network.parameters(), lr=self.config.lr,
                                        eps=self.config.adam_eps)
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    # ---- acting -------------------------------------------------------------

    @torch.no_grad()
    def q_values(self, obs: Any) -> torch.Tensor:
        return self.network(as_tensor(obs, self.device))

    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Epsilon-greedy actions (``explore=True``, rate ``self.epsilon``, a float or
        one rate per observation) or greedy."""
        greedy = self.q_values(obs).argmax(dim=-1).cpu().numpy()
        if not explore or np.all(np.asarray(self.epsilon) <= 0.0):
            return greedy
        random = self._rng.integers(self.num_actions, size=greedy.shape)
        return np.where(self._rng.random(greedy.shape) < self.epsilon, random, greedy)

    # ---- learning: the template method and its hooks --------------------------

    def update(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        tensors = self.preprocess(batch)
        with torch.no_grad():
            target = self.target(tensors)
        loss, td_error, q_taken = self.compute_loss(tensors, target)
        grad_norm = self.optimize(loss)
        self.updates += 1
        self.postprocess()
        td_abs = td_error.abs()
        # One stack and one conversion instead of a sync per metric: on a small net
        # the update is a few hundred tiny ops, and each one costs microseconds.
        values = torch.stack([loss.detach(), q_taken.detach().mean(), target.mean(),
                              td_abs.mean(), grad_norm]).tolist()
        metrics: dict[str, Any] = dict(zip(_METRICS, values))
        metrics["priorities"] = self.priorities(td_abs)
        return metrics

    def target(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Hook: the regression target ``y`` (no gradient flows through it)."""
        next_q_target = self.target_network(batch["next_obs"])
        if self.config.double_q:
            next_action = self.network(batch["next_obs"]).argmax(dim=-1, keepdim=True)
        else:
            next_action = next_q_target.argmax(dim=-1, keepdim=True)
        next_value = next_q_target.gather(-1, next_action).squeeze(-1)
        discount = batch.get("discount")
        if discount is None:
            discount = torch.full_like(next_value, self.config.gamma)
        not_done = 1.0 - batch["terminated"].float()
        return batch["reward"].float() + discount.float() * not_done * next_value

    def compute_loss(
        self, batch: Mapping[str, torch.Tensor], target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hook: ``(loss, td_error, q_taken)``; the loss is the importance-weighted
        mean of the per-transition Huber (or squared) error."""
        q = self.network(batch["obs"])
        q_taken = q.gather(-1, batch["action"].long().view(-1, 1)).squeeze(-1)
        td_error = target - q_taken
        if self.config.huber_delta is None:
            elementwise = 0.5 * td_error.pow(2)
        else:
            elementwise = F.huber_loss(q_taken, target, reduction="none", delta=self.config.huber_delta)
        weights = batch.get("weights")
        if weights is not None:
            elementwise = elementwise * weights.float()
        return elementwise.mean(), td_error.detach(), q_taken

    def optimize(self, loss: torch.Tensor) -> torch.Tensor:
        """Hook: one gradient step; returns the gradient norm before clipping (a
        0-dim tensor: converting it is the caller's choice)."""
        optimizer = self.optimizer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in self._params if p.grad is not None]
        grad_norm = clip_grad_norm(grads, self.config.max_grad_norm)
        optimizer.step()
        return grad_norm

    def postprocess(self) -> None:
        """Hook: after each step; syncs the target network on schedule."""
        if self.updates % self.config.target_update_interval == 0:
            self.update_target()

    def priorities(self, td_error: torch.Tensor) -> np.ndarray:
        """Hook: new replay priorities from the TD errors (Schaul et al.: ``|delta| + eps``)."""
        # numpy for the rest: on a few hundred values one numpy call is cheaper than a torch op.
        magnitude = np.abs(td_error.detach().cpu().numpy())
        return magnitude.astype(np.float64) + self.config.priority_eps

    @torch.no_grad()
    def update_target(self) -> None:
        """``target <- tau * online + (1 - tau) * target`` (a hard copy when tau = 1)."""
        tau = self.config.tau
        online = self.network.state_dict()
        for name, value in self.target_network.state_dict().items():
            if not value.is_floating_point() or tau == 1.0:
                value.copy_(online[name])
            else:
                value.lerp_(online[name], tau)

    # ---- state --------------------------------------------------------------

    def policy_state(self) -> dict[str, torch.Tensor]:
        """What an actor needs to act: the online network's parameters."""
        return self.network.state_dict()

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        self.network.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "network": self.network.state_dict(),
            "target_network": self.target_network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            "epsilon": np.array(self.epsilon, dtype=np.float64).tolist(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.target_network.load_state_dict(state["target_network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        eps = state["epsilon"]
        self.epsilon = float(eps) if np.ndim(eps) == 0 else np.asarray(eps, dtype=np.float64)
