"""Unrolls: the unit of experience of IMPALA (Espeholt et al. 2018, arXiv 1802.01561).

An actor steps a vector env of ``n`` sub-envs with its copy of the policy and sends
the learner fixed-length unrolls; the learner stacks several of them into one batch.
Both are plain dicts of numpy arrays, time-major, ``T`` steps by ``n`` (one unroll)
or ``B`` (a batch: the sum of its unrolls' ``n``) envs:

==================  =============  =====================================================
key                 shape          meaning
==================  =============  =====================================================
obs                 [T, n, *obs]   the observation step ``t`` acted on
action              [T, n, *act]   the action as sampled (before clipping into a Box)
reward              [T, n]         float32
terminated          [T, n]         bool: ``s'_t`` is terminal (no bootstrap)
truncated           [T, n]         bool: the episode was cut at ``t`` (bootstrap, then cut)
behaviour_log_prob  [T, n]         float32, ``log mu(a_t|x_t)`` of the actor's policy
next_obs_last       [n, *obs]      the observation after the last step: the bootstrap
final_obs           [K, *obs]      the true final observation of each truncated step
final_index         [K]            int64 flat positions ``t * n + env`` of those steps
==================  =============  =====================================================

Within an episode the successor of step ``t`` is ``obs[t + 1]``; where a step ends
an episode the vector env has already reset (gymnasium's ``AutoresetMode.SAME_STEP``),
so ``obs[t + 1]`` is the next episode's first observation. The successor a truncated
step bootstraps from is then kept in ``final_obs`` (truncations are rare, so this is
small, not a second copy of ``obs``); a terminated step needs none. Consecutive
unrolls of one actor share their boundary: ``next_obs_last`` of one is ``obs[0]`` of
the next, as in the paper. ``next_obs_last`` is the env's observation after the last
step, i.e. already the reset one if that step ended an episode.

:class:`UnrollAdder` cuts a vector env's steps into unrolls; :func:`collate_unrolls`
stacks unrolls into a learner batch. Both are numpy only: no torch, no transport.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from algorithms.adders import Batch

STEP_KEYS = ("obs", "action", "reward", "terminated", "truncated", "behaviour_log_prob")
UNROLL_KEYS = (*STEP_KEYS, "next_obs_last", "final_obs", "final_index")


class UnrollAdder:
    """Collects the steps of one vector env of ``num_envs`` sub-envs (in gymnasium's
    ``AutoresetMode.SAME_STEP``) and returns an unroll every ``unroll_length`` steps.

    Call :meth:`add` after every ``env.step``; call :meth:`reset` to drop a partial
    unroll when the env was reset by hand (e.g. restarted after a crash), since its
    steps no longer chain.
    """

    def __init__(self, *, unroll_length: int, num_envs: int) -> None:
        for name, value in (("unroll_length", unroll_length), ("num_envs", num_envs)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.unroll_length, self.num_envs = unroll_length, num_envs
        self.unrolls = 0  # emitted so far
        self.reset()

    def reset(self) -> None:
        """Forget the steps of the unroll in progress."""
        self._steps: dict[str, list[np.ndarray]] = {key: [] for key in STEP_KEYS}
        self._final_obs: list[np.ndarray] = []
        self._final_index: list[int] = []

    def __len__(self) -> int:
        """Steps in the unroll in progress."""
        return len(self._steps["reward"])

    def add(
        self,
        *,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        behaviour_log_prob: np.ndarray,
        next_obs: np.ndarray,
        infos: Mapping[str, Any] | None = None,
    ) -> dict[str, np.ndarray] | None:
        """Record one vector-env step; the finished unroll after every
        ``unroll_length``-th step, else None.

        ``next_obs`` is what ``env.step`` returned (reset where an episode ended);
        ``infos`` its info dict, whose ``final_obs`` (with mask ``_final_obs``) must
        hold the true final observation of every truncated sub-env."""
        n = self.num_envs
        step = {"obs": np.array(obs), "action": np.array(action),  # copies: envs reuse buffers
                "reward": np.asarray(reward, dtype=np.float32),
                "terminated": np.asarray(terminated, dtype=bool),
                "truncated": np.asarray(truncated, dtype=bool),
                "behaviour_log_prob": np.asarray(behaviour_log_prob, dtype=np.float32)}
        for key, value in step.items():
            if value.ndim == 0 or value.shape[0] != n:
                raise ValueError(f"{key} must have a leading axis of num_envs={n}, got shape {value.shape}")
        next_obs = np.array(next_obs)
        if next_obs.shape != step["obs"].shape:
            raise ValueError(f"next_obs has shape {next_obs.shape}, obs {step['obs'].shape}")
        t = len(self)
        for env in np.flatnonzero(step["truncated"] & ~step["terminated"]):
            self._final_obs.append(_final_obs(infos, int(env), like=step["obs"][env]))
            self._final_index.append(t * n + int(env))
        for key, value in step.items():
            self._steps[key].append(value)
        if len(self) < self.unroll_length:
            return None
        unroll = {key: np.stack(values) for key, values in self._steps.items()}
        unroll["next_obs_last"] = next_obs
        unroll["final_obs"] = (np.stack(self._final_obs) if self._final_obs
                               else np.empty((0, *next_obs.shape[1:]), dtype=next_obs.dtype))
        unroll["final_index"] = np.asarray(self._final_index, dtype=np.int64)
        self.unrolls += 1
        self.reset()
        return unroll


def _final_obs(infos: Mapping[str, Any] | None, env: int, *, like: np.ndarray) -> np.ndarray:
    final = None if infos is None else infos.get("final_obs")
    mask = None if infos is None else infos.get("_final_obs")
    if final is None or (mask is not None and not mask[env]) or final[env] is None:
        raise ValueError(
            f"sub-env {env} was truncated but infos has no final_obs for it: the vector env "
            "must run in gymnasium's AutoresetMode.SAME_STEP (its default NEXT_STEP mode "
            "returns the final observation in place of the reset one)")
    value = np.asarray(final[env], dtype=like.dtype)
    if value.shape != like.shape:
        raise ValueError(f"final_obs of sub-env {env} has shape {value.shape}, obs {like.shape}")
    return value


def collate_unrolls(items: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One learner batch ``[T, B]`` from unrolls of ``[T, n_i]`` (``B = sum n_i``),
    in the order given: unroll ``i``'s envs become columns ``offset_i ..
    offset_i + n_i - 1``, and its ``final_index`` is remapped to match."""
    if isinstance(items, Mapping) or not items:
        raise ValueError("collate_unrolls needs a non-empty sequence of unrolls")
    steps, widths = None, []
    for i, item in enumerate(items):
        missing = [key for key in (*STEP_KEYS, "next_obs_last") if key not in item]
        if missing:
            raise KeyError(f"unroll {i} is missing {missing}")
        if np.ndim(item["reward"]) != 2:
            raise ValueError(f"unroll {i}: reward must be [T, n], got shape {np.shape(item['reward'])}")
        t, n = np.shape(item["reward"])
        if steps is not None and t != steps:
            raise ValueError(f"unroll {i} has {t} steps, unroll 0 has {steps}")
        for key in STEP_KEYS:
            if np.shape(item[key])[:2] != (t, n):
                raise ValueError(f"unroll {i}: {key} has shape {np.shape(item[key])}, expected [{t}, {n}, ...]")
        steps = t
        widths.append(n)
    total = sum(widths)
    batch = {key: _concat(items, key, axis=1) for key in STEP_KEYS}
    batch["next_obs_last"] = _concat(items, "next_obs_last", axis=0)
    finals, indices = [], []
    for item, n, offset in zip(items, widths, np.cumsum([0, *widths[:-1]])):
        index = np.asarray(item.get("final_index", np.empty(0, np.int64)), dtype=np.int64)
        obs = item.get("final_obs")
        if len(index) != (0 if obs is None else len(obs)):
            raise ValueError(f"final_index has {len(index)} entries, final_obs "
                             f"{0 if obs is None else len(obs)}")
        if len(index) and (index.min() < 0 or index.max() >= steps * n):
            raise ValueError(f"final_index out of range [0, {steps * n})")
        indices.append(index // n * total + offset + index % n)  # (t, env) -> t * B + column
        if obs is not None:
            finals.append(np.asarray(obs))
    batch["final_index"] = np.concatenate(indices)
    obs0 = np.asarray(batch["next_obs_last"])
    batch["final_obs"] = (np.concatenate(finals) if finals
                          else np.empty((0, *obs0.shape[1:]), dtype=obs0.dtype))
    return batch


def _concat(items: Sequence[Mapping[str, np.ndarray]], key: str, *, axis: int) -> np.ndarray:
    try:
        return np.concatenate([np.asarray(item[key]) for item in items], axis=axis)
    except ValueError as exc:
        shapes = [np.shape(item[key]) for item in items]
        raise ValueError(f"unrolls disagree on the shape of {key}: {shapes}") from exc


class UnrollItems:
    """IMPALA's unrolls (:class:`UnrollAdder`, which does the work) as an adder: the behaviour policy's log-probs come in ``extras`` (with the action
    as sampled, ``extras["action"]``, where the env took a clipped one). A step lost by
    some envs (their worker was replaced: ``cut``) breaks every env's chain of
    observations, so the partial unroll is dropped (``dropped_steps`` counts them)."""

    def __init__(self, *, unroll_length: int, num_envs: int) -> None:
        self.adder = UnrollAdder(unroll_length=unroll_length, num_envs=num_envs)
        self.dropped_steps = 0

    def add(self, *, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
            reset_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            extras: Mapping[str, np.ndarray], cut: np.ndarray | None = None) -> list[Batch]:
        if cut is not None and np.any(cut):
            self.dropped_steps += len(self.adder) * self.adder.num_envs
            self.adder.reset()
            return []
        if "behaviour_log_prob" not in extras:
            raise KeyError(f"an unroll needs the behaviour policy's log-probs: the actor's behave(obs) must "
                           f"return (actions, extras) with extras['behaviour_log_prob'] (one per env), got "
                           f"extras with {sorted(extras)}")
        done = np.logical_or(terminated, truncated)
        unroll = self.adder.add(obs=obs, action=extras.get("action", action), reward=reward,
                                terminated=terminated, truncated=truncated,
                                behaviour_log_prob=extras["behaviour_log_prob"], next_obs=reset_obs,
                                infos={"final_obs": next_obs, "_final_obs": done})
        return [] if unroll is None else [unroll]
