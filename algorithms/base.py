"""The algorithm interface: a plain in-process object.

An algorithm acts (``act``), learns from a batch (``update``, a template method
whose steps are named hooks a subclass overrides), and saves/restores its state.
It never knows whether its batches come from a local buffer or from shards on
other machines: transport lives in the roles under ``experiments/``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from algorithms.optim import clip_grad_norm


class Learned(NamedTuple):
    """What one learning step gives back: scalar ``metrics`` for logging and, for an
    algorithm learning from prioritized replay, the batch's new ``priorities`` (one
    per transition, float64), kept beside the metrics so neither side pops the other."""

    metrics: dict[str, float]
    priorities: np.ndarray | None = None


# A data-parallel member's gradient averaging (a learner group's all-reduce, passed by
# the role that owns the transport): it gets the parameters an optimizer step is about
# to move and replaces each ``.grad`` in place by its mean over the group. The
# contract of PPO's ``grad_hook``; ``LearnerGroup.average_gradients`` is one.
GradHook = Callable[[Sequence[torch.Tensor]], None]


def reduce_gradients(hook: GradHook | None, params: Sequence[torch.Tensor]) -> None:
    """Call ``hook(params)`` between backward and the optimizer step (nothing without
    a hook). A parameter this loss did not reach gets a zero gradient first: it may be
    reached on another member, and every member must reduce the same layout."""
    if hook is None:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    hook(params)


def optimizer_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Sequence[torch.Tensor], *,
                   grad_hook: GradHook | None, max_norm: float | None) -> None:
    """One step of ``optimizer`` on ``loss``: backward, ``grad_hook`` (a learner group's
    average, :func:`reduce_gradients`), the gradient clipped to ``max_norm`` (None: not
    clipped), the step. The off-policy actor-critics' (DDPG, TD3, SAC) every step."""
    params = list(params)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    reduce_gradients(grad_hook, params)
    if max_norm is not None:
        clip_grad_norm([p.grad for p in params if p.grad is not None], max_norm)
    optimizer.step()


def flat_state(modules: Mapping[str, torch.nn.Module]) -> dict[str, torch.Tensor]:
    """One flat state dict of several modules (``<name>.<key>``): an acting copy's
    policy state."""
    return {f"{prefix}.{key}": value for prefix, module in modules.items()
            for key, value in module.state_dict().items()}


def load_flat_state(modules: Mapping[str, torch.nn.Module], state: Mapping[str, Any]) -> None:
    """Load a :func:`flat_state` into ``modules``; KeyError naming entries of no module."""
    unknown = {key.split(".", 1)[0] for key in state} - set(modules)
    if unknown:
        raise KeyError(f"policy state has entries for {sorted(unknown)}, not among {sorted(modules)}")
    for prefix, module in modules.items():
        module.load_state_dict({key[len(prefix) + 1:]: value for key, value in state.items()
                                if key.startswith(prefix + ".")})


class Algorithm(abc.ABC):
    """Base class. Subclasses set ``self.device`` and implement the abstract methods.

    ``update`` is the template method; concrete algorithms split it into hooks
    (``preprocess``, ``compute_loss``, ``target``, ``optimize``, ``postprocess``,
    ...) so a user subclass can replace one step without copying the rest.
    """

    device: torch.device = torch.device("cpu")

    @abc.abstractmethod
    def act(self, obs: Any, *, explore: bool = True) -> np.ndarray:
        """Actions for a batch of observations (leading axis = batch)."""

    @abc.abstractmethod
    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One learning step on ``batch``; returns scalar metrics for logging."""

    def learn(self, batch: Mapping[str, Any]) -> Learned:
        """One learning step as a learner role drives it: the metrics and, where the
        algorithm has them, new priorities (an algorithm with priorities overrides
        this and makes ``update`` return ``learn(batch).metrics``)."""
        return Learned(self.update(batch))

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume learning (networks, optimizers, counters)."""

    @abc.abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    def preprocess(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Hook: turn a batch of arrays into tensors on ``self.device``."""
        return {key: as_tensor(value, self.device) for key, value in batch.items()}


def as_tensor(value: Any, device: torch.device) -> torch.Tensor:
    """A tensor on ``device``; float64 arrays become float32 (the nets' dtype)."""
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tensor.dtype == torch.float64:
        tensor = tensor.float()
    return tensor.to(device, non_blocking=True)


class no_grad_for:
    """Temporarily stop gradients into ``params`` (e.g. critics during an actor loss)."""

    def __init__(self, param_groups: Any) -> None:
        self.params = [p for ps in param_groups for p in ps]

    def __enter__(self) -> None:
        for p in self.params:
            p.requires_grad_(False)

    def __exit__(self, *exc: object) -> None:
        for p in self.params:
            p.requires_grad_(True)
