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
  the loss is weighted by the batch's importance ``weights`` and ``learn`` returns
  new priorities ``|TD error|`` beside the metrics;
- recycling dormant units (ReDo, Sokar et al. 2023, "The Dormant Neuron Phenomenon
  in Deep Reinforcement Learning", ICML): every ``recycle_every`` updates, units whose
  relative activation on the batch is at most ``recycle_tau`` get fresh incoming and
  zero outgoing weights (:mod:`algorithms.recycling`);
- random shifts of image batches (DrQ, Kostrikov et al. 2021, "Image Augmentation Is
  All You Need", ICLR): the learner's ``obs`` and ``next_obs`` moved by a few pixels
  each (:mod:`algorithms.augment`).

A batch is a mapping of arrays with keys ``obs, action, reward, next_obs,
terminated`` and optionally ``discount`` (default ``gamma``) and ``weights``
(default 1). The regression target is

    y = reward + discount * (1 - terminated) * Q_target(next_obs, a*)

with ``a* = argmax_a Q_online(next_obs, a)`` (double) or ``argmax_a Q_target``.

``learn`` (``update``) is a template method; override one hook to try an idea:
``preprocess -> augment -> target (-> bootstrap) -> compute_loss -> optimize -> postprocess ->
recycle``. The hooks' forwards go through ``online`` and ``target_q``, which run as
``config.fast`` says (:mod:`algorithms.fast`: denormals flushed, leaner forwards).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from algorithms.augment import AUGMENTATIONS, Augment, check_pad, random_shift
from algorithms.base import Algorithm, GradHook, Learned, as_tensor, reduce_gradients
from algorithms.fast import FastForward, check_fast, flush_denormals, resolve_fast
from algorithms.noisy import noise_off, noisy_layers, reset_noise
from algorithms.optim import EagerAdam, clip_grad_norm
from algorithms.params import internal, param
from algorithms.recycling import DormantRecycler
from rlpar.state import StatePath, integer, mapping, number, torch_loader


@dataclasses.dataclass
class DQNConfig:
    """Hyperparameters of :class:`DQN` (defaults tuned for CartPole-v1), also the Ape-X
    job's ``dqn`` section: the fields with help (C51's and the noisy nets') are its
    flags there; the :func:`~algorithms.params.internal` ones the job derives from its
    ``learn`` section (:class:`algorithms.dqn.DQNBuilder`) or leaves at these values."""

    gamma: float = internal(0.99)
    lr: float = internal(1e-3)
    double_q: bool = internal(True)
    # Huber loss threshold (Mnih et al. clip the TD error at 1); None = squared error.
    huber_delta: float | None = internal(1.0)
    # Target network update every `target_update_interval` updates, with Polyak
    # coefficient `tau` (1.0 = hard copy).
    target_update_interval: int = internal(500)
    tau: float = internal(1.0)
    max_grad_norm: float | None = internal(10.0)
    adam_eps: float = internal(1e-8)
    # Added to |TD error| so no transition's priority is ever exactly zero.
    priority_eps: float = internal(1e-6)
    # ReDo: updates between recyclings of dormant ReLU units (0 = never), and the
    # dormancy threshold on a unit's activation relative to its layer's mean (the
    # paper's DQN setting: every 1,000 updates, tau 0.1).
    recycle_every: int = internal(0)
    recycle_tau: float = internal(0.1)
    # How forwards and updates run on this CPU (algorithms.fast): auto (= eager: denormals
    # flushed, leaner forwards), off (plain eager), eager, compile (torch.compile; falls
    # back to eager without a C++ compiler).
    fast: str = internal("auto")
    # Rainbow's two parts beside double Q, dueling, n-step and priorities; both off
    # leaves DQN as it was. The distributional one is a DQN subclass with its own hooks
    # (algorithms.dqn.c51.CategoricalDQN); the noisy one a property of the network.
    distributional: bool = param(False, help=(
        "DQN: C51 (Bellemare et al. 2017): learn a categorical return distribution over --n-atoms "
        "atoms on [--v-min, --v-max] (algorithms.dqn.CategoricalDQN; a user's network gives "
        "(B, actions, n_atoms) logits); priorities are the KL of target to prediction"))
    n_atoms: int = param(51, help="DQN: atoms of the C51 support")
    v_min: float = param(-10.0, help="DQN: the C51 support's lowest return")
    v_max: float = param(10.0, help="DQN: the C51 support's highest return")
    noisy: bool = param(False, help=(
        "DQN: noisy nets (Fortunato et al. 2018): the network's NoisyLinear layers explore, their "
        "noise redrawn every act (each actor its own stream) and every update; greedy acting uses "
        "the means; the Ape-X job's --eps then defaults to 0"))
    noisy_sigma0: float = param(0.5, help=(
        "DQN: initial noise scale of the noisy layers: sigma = sigma0 / sqrt(fan in)"))
    # DrQ (Kostrikov et al. 2021): the learner's batches only; acting and the actors'
    # initial priorities see the frames as they are.
    augment: Augment = param("none", help=(
        "DQN: augment the learner's image batches: shift (DrQ, Kostrikov et al. 2021: obs and next_obs "
        "each moved by up to --shift-pad pixels, the edges repeated), for (C, H, W) frames; none"))
    shift_pad: int = param(4, help="DQN: the largest shift of --augment shift, in pixels")

    def validate(self) -> None:
        check_fast(self.fast)
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be one of {', '.join(AUGMENTATIONS)}, got {self.augment!r}")
        check_pad(self.shift_pad)
        if self.distributional:
            if isinstance(self.n_atoms, bool) or not isinstance(self.n_atoms, int) or self.n_atoms < 2:
                raise ValueError(f"n_atoms must be an int >= 2, got {self.n_atoms!r}")
            if not (math.isfinite(self.v_min) and math.isfinite(self.v_max) and self.v_min < self.v_max):
                raise ValueError(f"v_min < v_max (both finite) needed, got v_min={self.v_min} v_max={self.v_max}")
        if not (math.isfinite(self.noisy_sigma0) and self.noisy_sigma0 > 0):
            raise ValueError(f"noisy_sigma0 must be > 0, got {self.noisy_sigma0}")
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
        if not self.adam_eps > 0:
            raise ValueError(f"adam_eps must be positive, got {self.adam_eps}")
        if self.priority_eps < 0:
            raise ValueError(f"priority_eps must be >= 0, got {self.priority_eps}")
        if self.recycle_every < 0:
            raise ValueError(f"recycle_every must be >= 0 (0 = off), got {self.recycle_every}")
        if not 0.0 <= self.recycle_tau < 1.0:
            raise ValueError(f"recycle_tau must be in [0, 1), got {self.recycle_tau}")


_METRICS = ("loss", "q_mean", "target_mean", "td_abs_mean", "grad_norm")


class DQN(Algorithm):
    """DQN on any ``network: obs -> Q values of shape (batch, num_actions)``.

    ``learn(batch)`` returns scalar metrics and, beside them, a float64 array of new
    replay priorities (one per transition); ``update(batch)`` the metrics alone. With
    recycling on, the metrics add ``dormant_share`` (at the last recycling) and
    ``recycled_units`` (so far). ``grad_hook(parameters)``, if given (or set later),
    averages the gradients of a data-parallel learner group between backward and
    clipping (``algorithms.base.GradHook``); with it, every member's parameters stay
    identical if they start alike and learn in step. ReDo recycling draws fresh
    weights by each member's own batch, so it does not combine with a hook.
    """

    # Whether this class's hooks learn a return distribution (config.distributional).
    distributional: bool = False

    def __init__(
        self,
        *,
        network: nn.Module,
        num_actions: int,
        config: DQNConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        grad_hook: GradHook | None = None,
    ) -> None:
        if not isinstance(network, nn.Module):
            raise TypeError(f"network must be an nn.Module, got {type(network).__name__}")
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.config = config if config is not None else DQNConfig()
        self.config.validate()
        if self.config.distributional != self.distributional:
            raise ValueError(f"DQNConfig(distributional={self.config.distributional}) with {type(self).__name__}, "
                             f"whose hooks learn {'a return distribution' if self.distributional else 'Q values'}: "
                             f"use {'DQN' if self.distributional else 'algorithms.dqn.CategoricalDQN'}")
        self.device = torch.device(device)
        self.num_actions = int(num_actions)
        self.network = network.to(self.device)
        self.noisy_layers = noisy_layers(self.network)
        if self.config.noisy != bool(self.noisy_layers):
            raise ValueError(f"DQNConfig(noisy={self.config.noisy}) with a network that has "
                             f"{len(self.noisy_layers)} NoisyLinear layers: build it with "
                             f"q_network(..., noisy={self.config.noisy}) or give a network that "
                             f"{'has' if self.config.noisy else 'has no'} algorithms.noisy.NoisyLinear layers")
        self._params = [p for p in self.network.parameters() if p.requires_grad]
        self.target_network = copy.deepcopy(self.network).requires_grad_(False)
        self._target_noisy = noisy_layers(self.target_network)
        if self.hard_copy_every_update:
            # A hard copy after every update is the online network at every target: one
            # network, no copying, and double Q's two next-state forwards become one.
            self.tie_target()
        # Built here so a network ReDo cannot trace fails at construction, not mid-run.
        self.recycler = (DormantRecycler(self.network, tau=self.config.recycle_tau)
                         if self.config.recycle_every else None)
        self._optimizer: Any = None
        self.fast = resolve_fast(self.config.fast)
        self._forwards: dict[int, FastForward] = {}
        # Exploration rate of act(explore=True): a float, or one rate per row of obs.
        self.epsilon: float | np.ndarray = 0.0
        self.updates = 0
        self.grad_hook = grad_hook
        self._rng = np.random.default_rng(seed)
        self._noise = torch.Generator(device=self.device)  # the noisy layers' draws
        self._shifts = torch.Generator()  # augment's (offsets drawn on the CPU), apart: noisy runs repeat
        if seed is None:
            self._noise.seed()
            self._shifts.seed()
        else:
            self._noise.manual_seed(seed)
            self._shifts.manual_seed(seed + 1)
        self.reset_noise()

    @property
    def hard_copy_every_update(self) -> bool:
        """Whether the target is always the online network (target updates every update,
        tau 1; without noisy layers, whose target draws its own noise)."""
        cfg = self.config
        return cfg.target_update_interval == 1 and cfg.tau == 1.0 and not self.noisy_layers

    @property
    def optimizer(self) -> Any:
        """:class:`algorithms.optim.EagerAdam` by default, built on first use (actors never need one);
        assign any ``torch.optim`` optimizer to replace it."""
        if self._optimizer is None:
            self._optimizer = EagerAdam(self.network.parameters(), lr=self.config.lr,
                                        eps=self.config.adam_eps)
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    # ---- acting -------------------------------------------------------------

    @torch.no_grad()
    def q_values(self, obs: Any) -> torch.Tensor:
        """The acting forward: with noisy layers, each call draws fresh noise."""
        self.reset_noise(target=False)
        with flush_denormals(self.fast != "off"):
            return self.online(as_tensor(obs, self.device))

    def reset_noise(self, *, target: bool = True) -> None:
        """Hook: fresh noise in the online network's noisy layers (and the target's,
        drawn independently, unless ``target`` is False); nothing without them."""
        if self.noisy_layers:
            reset_noise(self.noisy_layers, self._noise)
            if target and self.target_network is not self.network:
                reset_noise(self._target_noisy, self._noise)

    def online(self, obs: torch.Tensor) -> torch.Tensor:
        """The online network's Q values, run as ``config.fast`` says (the hooks' forward)."""
        return self._forward(self.network)(obs)

    def target_q(self, obs: torch.Tensor) -> torch.Tensor:
        """The target network's Q values, run as ``config.fast`` says."""
        return self._forward(self.target_network)(obs)

    def _forward(self, module: nn.Module) -> FastForward:
        forward = self._forwards.get(id(module))
        if forward is None or forward.module is not module:  # a module replaced since
            forward = self._forwards[id(module)] = FastForward(module, self.fast)
        return forward

    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Epsilon-greedy actions (``explore=True``, rate ``self.epsilon``, a float or
        one rate per observation) or greedy. Noisy layers explore too, with fresh
        noise each call; greedy acting uses their mean weights."""
        if not explore:
            return self.choose(self.greedy_q_values(obs), explore=False)
        return self.choose(self.q_values(obs), explore=explore)

    def greedy_q_values(self, obs: Any) -> torch.Tensor:
        """The Q values greedy acting takes the argmax of (:meth:`q_values`: C51's
        expected Q), noisy layers at their mean weights; an evaluator outside the job
        scores with these."""
        if self.noisy_layers:
            with noise_off(self.noisy_layers):
                return self.q_values(obs)
        return self.q_values(obs)

    def choose(self, q: torch.Tensor | np.ndarray, *, explore: bool = True) -> np.ndarray:
        """The actions :meth:`act` takes given the Q values ``q`` of its observations
        (a tensor, or an array: on a few rows numpy's argmax is the cheaper call)."""
        greedy = q.argmax(-1) if isinstance(q, np.ndarray) else q.argmax(dim=-1).cpu().numpy()
        if not explore or np.all(np.asarray(self.epsilon) <= 0.0):
            return greedy
        random = self._rng.integers(self.num_actions, size=greedy.shape)
        return np.where(self._rng.random(greedy.shape) < self.epsilon, random, greedy)

    # ---- learning: the template method and its hooks --------------------------

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        return self.learn(batch).metrics

    def learn(self, batch: Mapping[str, Any]) -> Learned:
        with flush_denormals(self.fast != "off"):
            return self._learn(batch)

    def _learn(self, batch: Mapping[str, Any]) -> Learned:
        self.reset_noise()  # Rainbow: one noise sample per network per update
        tensors = self.augment(self.preprocess(batch))
        with torch.no_grad():
            target = self.target(tensors)
        loss, td_error, q_taken = self.compute_loss(tensors, target)
        grad_norm = self.optimize(loss)
        self.updates += 1
        self.postprocess()
        self.recycle(tensors)
        td_abs = td_error.abs()
        # One stack and one conversion instead of a sync per metric: on a small net
        # the update is a few hundred tiny ops, and each one costs microseconds.
        values = torch.stack([loss.detach(), q_taken.detach().mean(), self.target_value(target).mean(),
                              td_abs.mean(), grad_norm]).tolist()
        metrics: dict[str, float] = dict(zip(_METRICS, values))
        if self.recycler is not None:
            metrics["dormant_share"] = self.recycler.dormant_share
            metrics["recycled_units"] = float(self.recycler.recycled)
        return Learned(metrics, self.priorities(td_abs))

    def augment(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: the learner's batch as trained on; ``config.augment`` shift moves
        ``obs`` and ``next_obs`` independently (DrQ's K = M = 1)."""
        if self.config.augment == "shift":
            for key in ("obs", "next_obs"):
                batch[key] = random_shift(batch[key], pad=self.config.shift_pad, generator=self._shifts)
        return batch

    def target_value(self, target: torch.Tensor) -> torch.Tensor:
        """Hook: the target's value per transition, for the metrics (a distributional
        target's mean)."""
        return target

    def target(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Hook: the regression target ``y`` (no gradient flows through it)."""
        next_q_target = self.target_q(batch["next_obs"])
        # A tied copy's target network is its online one: the same forward, once.
        next_q_online = next_q_target
        if self.config.double_q and self.target_network is not self.network:
            next_q_online = self.online(batch["next_obs"])
        return self.bootstrap(batch, next_q_target, next_q_online)

    def bootstrap(self, batch: Mapping[str, torch.Tensor], next_q_target: torch.Tensor,
                  next_q_online: torch.Tensor) -> torch.Tensor:
        """``y`` from the next observations' Q values (the target network's, and the
        online network's for double Q's action choice)."""
        chooser = next_q_online if self.config.double_q else next_q_target
        next_action = chooser.argmax(dim=-1, keepdim=True)
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
        q = self.online(batch["obs"])
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
        """Hook: backward, ``grad_hook`` (a learner group's average), clip, one
        optimizer step; returns the gradient norm before clipping (a 0-dim tensor:
        converting it is the caller's choice)."""
        optimizer = self.optimizer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        reduce_gradients(self.grad_hook, self._params)
        grads = [p.grad for p in self._params if p.grad is not None]
        grad_norm = clip_grad_norm(grads, self.config.max_grad_norm)
        optimizer.step()
        return grad_norm

    def postprocess(self) -> None:
        """Hook: after each step; syncs the target network on schedule."""
        if self.updates % self.config.target_update_interval == 0:
            self.update_target()

    def recycle(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Hook: after ``postprocess``; on schedule, recycles the online network's
        dormant units as scored on this batch's observations (ReDo). The target network
        is left alone: its next sync brings the recycled weights, whose zero outgoing
        weights leave the online Q values unchanged in the meantime."""
        if self.recycler is not None and self.updates % self.config.recycle_every == 0:
            if self.grad_hook is not None:  # each member would recycle other units
                raise RuntimeError("ReDo recycling with a grad_hook: members of a learner group "
                                   "would recycle different units and their parameters diverge")
            self.recycler.recycle(batch["obs"], optimizer=self.optimizer)

    @torch.no_grad()
    def initial_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Hook: priorities of new transitions before any update (Ape-X sec. 3: the
        actor's ``|y - Q(obs, action)|``). It goes through ``preprocess``, ``target``
        (or, for a tied copy with the stock ``target`` and ``fast`` on, ``bootstrap``
        on one forward over obs and next_obs) and ``priorities``, so a subclass that
        changes the target changes these too."""
        with flush_denormals(self.fast != "off"):
            tensors = self.preprocess(batch)
            if self._one_forward_priorities():
                # A tied acting copy with the stock target: obs and next_obs in one
                # batch, one forward (3 forwards before, at half the batch each).
                n = len(tensors["obs"])
                both = self.online(torch.cat([tensors["obs"], tensors["next_obs"]]))
                q, next_q = both[:n], both[n:]
                target = self.bootstrap(tensors, next_q, next_q)
            else:
                target = self.target(tensors)
                q = self.online(tensors["obs"])
            q_taken = q.gather(-1, tensors["action"].long().view(-1, 1)).squeeze(-1)
            return self.priorities(target - q_taken)

    def _one_forward_priorities(self) -> bool:
        return (self.fast != "off" and self.target_network is self.network
                and type(self).target is DQN.target)

    def tie_target(self) -> None:
        """Make this an acting copy: its target network is its online network. An
        Ape-X actor only ever has the learner's newest online parameters, and its
        initial priorities are computed with them; it also saves the copy's memory."""
        self.target_network = self.network
        self._target_noisy = self.noisy_layers

    def priorities(self, td_error: torch.Tensor) -> np.ndarray:
        """Hook: new replay priorities from the TD errors (Schaul et al.: ``|delta| + eps``)."""
        # numpy for the rest: on a few hundred values one numpy call is cheaper than a torch op.
        magnitude = np.abs(td_error.detach().cpu().numpy())
        return magnitude.astype(np.float64) + self.config.priority_eps

    @torch.no_grad()
    def update_target(self) -> None:
        """``target <- tau * online + (1 - tau) * target`` (a hard copy when tau = 1);
        nothing where they are one network."""
        if self.target_network is self.network:
            return
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
            "recycled_units": self.recycler.recycled if self.recycler is not None else 0,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        # Checkpoints from before ReDo have no recycled_units.
        state = mapping(state, where, required=("network", "target_network", "optimizer", "updates",
                                                "epsilon"), optional=("recycled_units",))
        modules = {"network": self.network, "target_network": self.target_network}
        if self.target_network is self.network:  # one network: its own weights, not a target's
            del modules["target_network"]
        load = torch_loader(state, where, modules=modules,
                            optimizers={"optimizer": self.optimizer})
        updates = integer(state["updates"], where["updates"])
        recycled = integer(state.get("recycled_units", 0), where["recycled_units"])
        eps = state["epsilon"]  # a rate, or one per env copy (state_dict saves a list)
        if isinstance(eps, (list, tuple)):
            epsilon = np.array([number(e, where["epsilon"][i], low=0.0, high=1.0)
                                for i, e in enumerate(eps)], dtype=np.float64)
        else:
            epsilon = number(eps, where["epsilon"], low=0.0, high=1.0)
        load()
        self.updates, self.epsilon = updates, epsilon
        if self.recycler is not None:
            self.recycler.recycled = recycled
