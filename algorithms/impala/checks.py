"""Checks the IMPALA learner runs on what it is given, kept out of
:mod:`algorithms.impala` so the algorithm reads top to bottom: a batch of unrolls
(:mod:`algorithms.impala.unroll`'s format) and a state dict to load. Each names the key and
what is wrong with it, since a batch usually comes from another process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from algorithms.impala.unroll import STEP_KEYS, UNROLL_KEYS


def check_batch(batch: Mapping[str, Any], *, observation_space: gym.Space,
                action_space: gym.Space) -> tuple[int, int]:
    """``(T, B)`` of a valid batch, else a KeyError, TypeError or ValueError."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"an IMPALA batch must be a mapping of arrays, got {type(batch).__name__}")
    missing = [key for key in (*STEP_KEYS, "next_obs_last") if key not in batch]
    if missing:
        raise KeyError(f"batch is missing {missing} (see algorithms.impala.unroll for the format)")
    unknown = sorted(set(batch) - set(UNROLL_KEYS))
    if unknown:
        raise KeyError(f"batch has unknown keys {unknown}; expected {list(UNROLL_KEYS)}")
    if ("final_obs" in batch) != ("final_index" in batch):
        raise KeyError("batch must hold final_obs and final_index together, or neither")
    shape = tuple(np.shape(batch["reward"]))
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"reward must be time-major [T, B] with T, B >= 1, got shape {shape}")
    steps, envs = shape
    obs_shape = tuple(observation_space.shape or ())
    act_shape = () if isinstance(action_space, gym.spaces.Discrete) else tuple(action_space.shape or ())
    expected = {"obs": (steps, envs, *obs_shape), "action": (steps, envs, *act_shape),
                "terminated": shape, "truncated": shape, "behaviour_log_prob": shape,
                "next_obs_last": (envs, *obs_shape)}
    finals = 0
    if "final_index" in batch:
        finals = len(batch["final_index"])
        expected.update(final_obs=(finals, *obs_shape), final_index=(finals,))
    for key, want in expected.items():
        got = tuple(np.shape(batch[key]))
        if got != want:
            raise ValueError(f"{key} has shape {got}, expected {want} (T={steps}, B={envs})")
    for key in ("reward", "behaviour_log_prob"):
        if not np.isfinite(_host(batch[key])).all():
            raise ValueError(f"{key} holds NaN or infinite values")
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(f"Discrete action spaces must start at 0, got {action_space}")
        action, n = _host(batch["action"]), int(action_space.n)
        if np.issubdtype(action.dtype, np.floating) or not ((action >= 0) & (action < n)).all():
            raise ValueError(f"action must hold integers in [0, {n}) for {action_space}")
    _check_finals(batch, steps, envs, finals)
    return steps, envs


def _check_finals(batch: Mapping[str, Any], steps: int, envs: int, finals: int) -> None:
    """Every truncated (not terminated) step has exactly one final observation, and
    final observations sit only at steps that ended an episode."""
    terminated = _host(batch["terminated"]).astype(bool).reshape(-1)
    truncated = _host(batch["truncated"]).astype(bool).reshape(-1)
    index = _host(batch["final_index"]) if finals else np.empty(0, np.int64)
    if finals and not np.issubdtype(index.dtype, np.integer):
        raise ValueError(f"final_index must hold integers, got dtype {index.dtype}")
    if finals and (index.min() < 0 or index.max() >= steps * envs):
        raise ValueError(f"final_index must be flat positions t * B + env in [0, {steps * envs})")
    if len(np.unique(index)) != finals:
        raise ValueError("final_index holds a position twice")
    ended = np.zeros(steps * envs, dtype=bool)
    ended[index] = True
    if (ended & ~(terminated | truncated)).any():
        at = int(np.flatnonzero(ended & ~(terminated | truncated))[0])
        raise ValueError(f"final_index points at step (t={at // envs}, env={at % envs}), "
                         "which did not end an episode")
    lacking = truncated & ~terminated & ~ended
    if lacking.any():
        at = int(np.flatnonzero(lacking)[0])
        raise ValueError(f"step (t={at // envs}, env={at % envs}) was truncated but has no "
                         "final_obs/final_index entry to bootstrap from")


def check_state(what: str, state: Any, expected: Mapping[str, torch.Tensor]) -> None:
    """``state`` maps exactly ``expected``'s names to tensors of the same shapes."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{what} must be a mapping of tensors, got {type(state).__name__}")
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise KeyError(f"{what} does not fit the model: missing {missing}, unexpected {unexpected}")
    for name, target in expected.items():
        value = state[name]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{what}: {name!r} must be a tensor, got {type(value).__name__}")
        if value.shape != target.shape:
            raise ValueError(f"{what}: {name!r} has shape {tuple(value.shape)}, "
                             f"the model's is {tuple(target.shape)}")


def explained_variance(targets: torch.Tensor, values: torch.Tensor) -> float:
    """``1 - Var(targets - values) / Var(targets)``: 1 is a perfect fit, 0 no better
    than a constant; 0 when the targets do not vary."""
    var = targets.var(unbiased=False) if targets.numel() > 1 else targets.new_zeros(())
    if not var > 0:
        return 0.0
    return float(1.0 - (targets - values).var(unbiased=False) / var)


def _host(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)
