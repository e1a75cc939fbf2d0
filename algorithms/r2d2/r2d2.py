"""The R2D2 learner: recurrent Q-learning from replayed sequences.

Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement
Learning" (ICLR). Each replayed sequence (:mod:`algorithms.r2d2.adder`'s layout) carries
the recurrent state its actor had at its first step ("stored state"); the learner
runs the online and the target network over the sequence from it, the online one
without gradient over the first ``burn_in`` steps ("burn-in", sec. 3: they only warm
a stale stored state up), and regresses the next ``unroll`` steps' Q values onto
n-step double-Q targets under the value rescaling (:mod:`algorithms.r2d2.targets`). A
sequence that starts an episode has no stale state (the zero one): with
``config.train_episode_starts`` its burn-in steps are trained too (:meth:`R2D2.episode_starts`).
A sequence's new priority mixes its largest and mean absolute TD error (``eta =
0.9``, :func:`rlpar.buffers.mix_priorities`).

A batch maps ``obs, action, reward, terminated, mask`` ``[B, L, ...]`` (``L`` =
``config.sequence_length``), the network's state fields ``[B, ...]`` and optionally
importance ``weights`` ``[B]``. ``learn`` returns the metrics and, beside them, one
priority per sequence (the protocol of :class:`algorithms.base.Learned`, as DQN's).
Actors keep their recurrent state: ``act(obs, state) -> (actions, state)``. A network
whose state has ``last_action`` and ``last_reward`` (the paper's inputs:
:class:`algorithms.r2d2.network.RecurrentQNetwork` with ``last_action_reward``) is run
over a sequence with its steps' actions and rewards, and an actor records each step's
into its state with :meth:`R2D2.last_step`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.base import Algorithm, GradHook, Learned, as_tensor, reduce_gradients
from algorithms.optim import EagerAdam, clip_grad_norm, linear_lr
from algorithms.r2d2.config import R2D2Config
from algorithms.r2d2.targets import n_step_targets
from rlpar.buffers.sequence import mix_priorities
from rlpar.state import StatePath, integer, mapping, number, torch_loader

_METRICS = ("loss", "q_mean", "target_mean", "td_abs_mean", "grad_norm", "trained_steps")
STEP_KEYS = ("obs", "action", "reward", "terminated", "mask")
LAST_KEYS = ("last_action", "last_reward")


class R2D2(Algorithm):
    """R2D2 on a recurrent ``network``: ``forward(obs [B, T, *obs], state) -> (Q [B, T,
    actions], state)`` with ``initial_state(batch_size, device)`` (a dict of named
    ``[B, ...]`` tensors), e.g. :class:`algorithms.r2d2.network.RecurrentQNetwork`.

    ``grad_hook`` averages a data-parallel learner group's gradients between backward
    and clipping (``algorithms.base.GradHook``).
    """

    def __init__(
        self,
        *,
        network: nn.Module,
        num_actions: int,
        config: R2D2Config | None = None,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        grad_hook: GradHook | None = None,
    ) -> None:
        if not isinstance(network, nn.Module) or not callable(getattr(network, "initial_state", None)):
            raise TypeError(f"network must be an nn.Module with initial_state(batch_size, device), "
                            f"got {type(network).__name__}")
        if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 1:
            raise ValueError(f"num_actions must be an int >= 1, got {num_actions!r}")
        if hasattr(type(self), "burn_in"):
            # An override of the old hook would never be called: say so, not learn without it.
            raise TypeError(f"{type(self).__name__}.burn_in overrides a hook R2D2 no longer has: the burn-in "
                            "is part of values(batch, starts), which returns both networks' Q values")
        self.config = config if config is not None else R2D2Config()
        if not isinstance(self.config, R2D2Config):
            raise TypeError(f"config must be an R2D2Config, got {type(self.config).__name__}")
        self.device = torch.device(device)
        self.num_actions = num_actions
        self.network = network.to(self.device)
        self.target_network = copy.deepcopy(self.network).requires_grad_(False)
        self.state_keys = tuple(self.network.initial_state(1, self.device))
        # The network takes the previous step's action and reward (as state fields).
        self.takes_last = set(LAST_KEYS) <= set(self.state_keys)
        self._params = [p for p in self.network.parameters() if p.requires_grad]
        self._optimizer: Any = None
        self.epsilon: float | np.ndarray = 0.0  # act's exploration rate, or one per row
        self.updates = 0
        self.grad_hook = grad_hook
        self._rng = np.random.default_rng(seed)

    @property
    def optimizer(self) -> Any:
        """Adam (:class:`algorithms.optim.EagerAdam`), built on first use (actors never need one)."""
        if self._optimizer is None:
            self._optimizer = EagerAdam(self.network.parameters(), lr=self.config.lr, eps=self.config.adam_eps)
        return self._optimizer

    # ---- acting -------------------------------------------------------------

    def initial_state(self, batch_size: int) -> dict[str, np.ndarray]:
        """The zero state of ``batch_size`` episodes starting, as arrays."""
        return {k: v.cpu().numpy() for k, v in self.network.initial_state(batch_size, self.device).items()}

    def last_step(self, state: dict[str, np.ndarray], *, action: np.ndarray | None = None,
                  reward: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """``state`` holding the action just taken (one-hot) or the reward just received,
        for the network's next step, where it takes them (:attr:`takes_last`); else
        ``state`` itself (an actor calls this every step: no copy)."""
        if not self.takes_last:
            return state
        state = dict(state)
        if action is not None:
            state["last_action"] = np.eye(self.num_actions, dtype=np.float32)[np.asarray(action, dtype=np.int64)]
        if reward is not None:
            state["last_reward"] = np.asarray(reward, dtype=np.float32).reshape(-1)
        return state

    @staticmethod
    def reset_state(state: Mapping[str, np.ndarray], done: np.ndarray) -> dict[str, np.ndarray]:
        """``state`` with the rows of envs whose episode ended (``done``) zeroed: their
        next step is a new episode's first, which starts from the zero state."""
        done = np.asarray(done, dtype=bool)
        return {k: np.where(done.reshape(-1, *([1] * (np.ndim(v) - 1))), 0, v).astype(np.asarray(v).dtype)
                for k, v in state.items()}

    @torch.no_grad()
    def q_values(self, obs: Any, state: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
        """Q values ``[B, actions]`` of one step of ``B`` envs from ``state``, and the state after."""
        self._check_state_keys(state, "state")
        obs = as_tensor(obs, self.device).unsqueeze(1)
        q, after = self.network(obs, {k: as_tensor(state[k], self.device) for k in self.state_keys})
        return q.squeeze(1), {k: v.cpu().numpy() for k, v in after.items()}

    def act(self, obs: Any, state: Mapping[str, Any], *, explore: bool = True
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:  # type: ignore[override]
        """Epsilon-greedy actions (rate ``self.epsilon``) or greedy ones, and the new
        recurrent state (the actor keeps it, zeroing finished episodes' rows with
        :meth:`reset_state`)."""
        q, after = self.q_values(obs, state)
        greedy = q.argmax(dim=-1).cpu().numpy()
        if not explore or np.all(np.asarray(self.epsilon) <= 0.0):
            return greedy, after
        random = self._rng.integers(self.num_actions, size=greedy.shape)
        return np.where(self._rng.random(greedy.shape) < self.epsilon, random, greedy), after

    # ---- learning: the template method and its hooks --------------------------

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        return self.learn(batch).metrics

    def learn(self, batch: Mapping[str, Any]) -> Learned:
        tensors = self.preprocess(batch)
        starts = self.episode_starts(tensors)
        q, target_q = self.values(tensors, starts)
        with torch.no_grad():
            target, trained = self.target(tensors, q.detach(), target_q, starts)
        loss, td_error, q_taken = self.compute_loss(tensors, q, target, trained)
        self.set_learning_rate()
        grad_norm = self.optimize(loss)
        self.updates += 1
        if self.updates % self.config.target_update_interval == 0:
            self.update_target()
        count = trained.sum()
        denom = count.clamp(min=1)
        values = torch.stack([loss.detach(), (q_taken.detach() * trained).sum() / denom,
                              (target * trained).sum() / denom, (td_error.abs() * trained).sum() / denom,
                              grad_norm, count.float()]).tolist()
        return Learned(dict(zip(_METRICS, values)), self.priorities(td_error, trained))

    @torch.no_grad()
    def initial_priorities(self, batch: Mapping[str, Any]) -> np.ndarray:
        """Priorities of new sequences from this copy's parameters, as :meth:`learn`
        would mix them (an actor's: new data is not sampled blindly, Ape-X sec. 3; R2D2
        sec. 2.3). An acting copy has no target of its own (:meth:`tie_target`)."""
        tensors = self.preprocess(batch)
        starts = self.episode_starts(tensors)
        q, target_q = self.values(tensors, starts)
        target, trained = self.target(tensors, q, target_q, starts)
        _, td_error, _ = self.compute_loss(tensors, q, target, trained)
        return self.priorities(td_error, trained)

    def tie_target(self) -> None:
        """Make the target network the online one: an actor's copy loads only the
        online parameters it pulls, and bootstraps its initial priorities from them."""
        self.target_network = self.network

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Hook: the batch as tensors on ``self.device``, checked: sequences of
        ``config.sequence_length`` steps whose valid steps are a prefix."""
        missing = [k for k in (*STEP_KEYS, *self.state_keys) if k not in batch]
        if missing:
            raise ValueError(f"batch is missing {missing}; an R2D2 batch has {[*STEP_KEYS, *self.state_keys]}"
                             " (and optionally weights)")
        tensors = super().preprocess(batch)
        length = self.config.sequence_length
        mask = tensors["mask"]
        if mask.dim() != 2 or mask.shape[1] != length:
            raise ValueError(f"mask must be [batch, sequence_length={length}] (burn_in + unroll + n_step), "
                             f"got {tuple(mask.shape)}")
        mask = mask.bool()
        prefix = torch.arange(length, device=mask.device) < mask.sum(dim=1, keepdim=True)
        if not torch.equal(prefix, mask):
            raise ValueError("each sequence's valid steps (mask) must be a prefix: sequences are "
                             "padded at their end only")
        tensors["mask"] = mask
        return tensors

    def episode_starts(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Hook: which sequences start an episode (``[B]`` bool), trained from their first
        step: with ``config.train_episode_starts`` (and a burn-in), those whose stored
        state is all zeros; the adder stores the zero state at an episode's first step,
        and a state reached by playing is practically never exactly zero (an LSTM's
        cell, the previous step's one-hot action)."""
        size = batch["mask"].shape[0]
        starts = torch.zeros(size, dtype=torch.bool, device=batch["mask"].device)
        if not self.config.train_episode_starts or self.config.burn_in == 0:
            return starts
        starts = ~starts
        for key in self.state_keys:
            starts &= (batch[key].reshape(size, -1) == 0).all(dim=1)
        return starts

    def values(self, batch: Mapping[str, torch.Tensor], starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: the online and target networks' Q values ``[B, L, actions]`` over every
        step of the sequences, each run from the stored state. The target's carry no
        gradient; the online ones' burn-in steps carry none either (sec. 3: the burn-in
        only warms the state up) but in the sequences that start an episode
        (``starts``), whose state needs no warming and whose first steps are trained."""
        stored = {k: batch[k].float() for k in self.state_keys}
        burn_in = self.config.burn_in
        if burn_in == 0:
            q, _ = self.unroll(self.network, batch, stored, slice(0, None))
        else:
            burn = slice(0, burn_in)
            with torch.no_grad():
                q_burn, state = self.unroll(self.network, batch, stored, burn)
            if torch.is_grad_enabled() and bool(starts.any()):
                # Again with gradient for those sequences alone: a batch-wide pass with
                # the others' gradient cut at the burn-in's end would still run every
                # sequence's backward through it, and most batches hold a start or two.
                rows = starts.nonzero().squeeze(1)
                steps = {k: batch[k][rows] for k in ("obs", "action", "reward")}
                q_rows, state_rows = self.unroll(self.network, steps, {k: v[rows] for k, v in stored.items()}, burn)
                q_burn = q_burn.index_copy(0, rows, q_rows)
                state = {k: v.index_copy(0, rows, state_rows[k]) for k, v in state.items()}
            q_after, _ = self.unroll(self.network, batch, state, slice(burn_in, None))
            q = torch.cat([q_burn, q_after], dim=1)
        if self.target_network is self.network:  # tied (an actor's copy): one pass
            return q, q.detach()
        with torch.no_grad():
            target_q, _ = self.unroll(self.target_network, batch, stored, slice(0, None))
        return q, target_q

    def unroll(self, network: nn.Module, batch: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor],
               steps: slice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``network`` over the sequences' ``steps`` from ``state``, given the steps'
        actions and rewards where it takes them (:attr:`takes_last`)."""
        if self.takes_last:
            return network(batch["obs"][:, steps], state, batch["action"][:, steps], batch["reward"][:, steps])
        return network(batch["obs"][:, steps], state)

    def target(self, batch: Mapping[str, torch.Tensor], q_online: torch.Tensor, target_q: torch.Tensor,
               starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: the targets of the ``burn_in + unroll`` steps before the n-step tail
        (double Q: the online network picks the bootstrap action) and which of them are
        trained on: the steps after the burn-in that have a successor, and the burn-in's
        too in the sequences that start an episode (``starts``)."""
        cfg = self.config
        steps = cfg.burn_in + cfg.unroll
        bootstrap = target_q.gather(-1, q_online.argmax(dim=-1, keepdim=True)).squeeze(-1)
        target, valid = n_step_targets(reward=batch["reward"].float(), terminated=batch["terminated"],
                                       mask=batch["mask"], bootstrap=bootstrap, n=cfg.n_step, gamma=cfg.gamma,
                                       steps=steps, eps=cfg.rescale_eps)
        after = torch.arange(steps, device=valid.device) >= cfg.burn_in
        return target, valid & (after | starts.unsqueeze(1))

    def compute_loss(self, batch: Mapping[str, torch.Tensor], q: torch.Tensor, target: torch.Tensor,
                     trained: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hook: ``(loss, td_error, q_taken)``: half the squared TD error, averaged over
        each sequence's trained steps, weighted by importance and averaged over the batch."""
        steps = self.config.burn_in + self.config.unroll
        action = batch["action"][:, :steps].long()
        q_taken = q[:, :steps].gather(-1, action.unsqueeze(-1)).squeeze(-1)
        td_error = target - q_taken
        per_sequence = (0.5 * td_error.square() * trained).sum(dim=1) / trained.sum(dim=1).clamp(min=1)
        weights = batch.get("weights")
        if weights is not None:
            per_sequence = per_sequence * weights.float()
        return per_sequence.mean(), td_error.detach(), q_taken

    def set_learning_rate(self) -> float | None:
        """Hook: this update's learning rate, annealed linearly to 0 over
        ``config.lr_anneal_updates`` (None: not annealed, the optimizer's own rate)."""
        cfg = self.config
        if cfg.lr_anneal_updates is None:
            return None
        return linear_lr(self.optimizer, lr=cfg.lr, step=self.updates, anneal_steps=cfg.lr_anneal_updates)

    def optimize(self, loss: torch.Tensor) -> torch.Tensor:
        """Hook: backward, ``grad_hook``, clip, one Adam step; the gradient norm before clipping."""
        optimizer = self.optimizer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        reduce_gradients(self.grad_hook, self._params)
        grad_norm = clip_grad_norm([p.grad for p in self._params if p.grad is not None], self.config.max_grad_norm)
        optimizer.step()
        return grad_norm

    def priorities(self, td_error: torch.Tensor, trained: torch.Tensor) -> np.ndarray:
        """Hook: one replay priority per sequence, mixed from its trained steps' |TD error|."""
        per_step = td_error.abs().cpu().numpy()
        return mix_priorities(per_step, trained.cpu().numpy(), eta=self.config.priority_eta) + self.config.priority_eps

    @torch.no_grad()
    def update_target(self) -> None:
        self.target_network.load_state_dict(self.network.state_dict())

    def _check_state_keys(self, state: Mapping[str, Any], name: str) -> None:
        if not isinstance(state, Mapping) or set(state) != set(self.state_keys):
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"{name} must hold the network's state fields {list(self.state_keys)}, got {got}")

    # ---- state --------------------------------------------------------------

    def policy_state(self) -> dict[str, torch.Tensor]:
        """What an actor needs to act: the online network's parameters."""
        return self.network.state_dict()

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        self.network.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        return {"network": self.network.state_dict(), "target_network": self.target_network.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates,
                "epsilon": np.array(self.epsilon, dtype=np.float64).tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; StateError (nothing changed) if it does not fit."""
        where = StatePath.of(self)
        state = mapping(state, where, required=("network", "target_network", "optimizer", "updates", "epsilon"))
        load = torch_loader(state, where, modules={"network": self.network, "target_network": self.target_network},
                            optimizers={"optimizer": self.optimizer})
        updates = integer(state["updates"], where["updates"])
        eps = state["epsilon"]
        if isinstance(eps, (list, tuple)):
            epsilon: float | np.ndarray = np.array(
                [number(e, where["epsilon"][i], low=0.0, high=1.0) for i, e in enumerate(eps)])
        else:
            epsilon = number(eps, where["epsilon"], low=0.0, high=1.0)
        load()
        self.updates, self.epsilon = updates, epsilon
