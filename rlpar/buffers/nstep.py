"""n-step transition assembly for vectorized environments.

Turns per-step transitions of ``num_envs`` lock-stepped environments into
n-step transitions ``(s_t, a_t, R_t^{(k)}, s_{t+k}, terminated, gamma^k)`` with
``R_t^{(k)} = sum_{i<k} gamma^i r_{t+i}`` (Sutton & Barto 2018, sec. 7.1; used by
Ape-X, Horgan et al. 2018, arXiv:1803.00933). The learner's target is
``reward + discount * (1 - terminated) * Q(next_obs)``.

End of episode: on *termination* every pending window is flushed with
``terminated=True`` (no bootstrap); on *truncation* (time limit) the windows are
flushed with ``terminated=False`` and bootstrap from ``next_obs``, the true final
observation, with ``discount = gamma**k`` for the ``k`` steps actually summed.
Pass only real transitions: under gymnasium's NEXT_STEP autoreset the step that
follows a done is a reset, not a transition, and must not be given to ``step``
(SAME_STEP autoreset with ``infos["final_obs"]`` as ``next_obs`` needs no care).
A step that never happened for some envs (``cut``: their env process died and was
replaced, so there is no true next observation) ends their windows at the last
observation they did reach, flushed like a truncation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlpar.buffers.spec import as_array

KEYS = ("obs", "action", "reward", "next_obs", "terminated", "discount")


class NStepAssembler:
    """Keeps the last ``n`` steps of every env; emits completed windows.

    All envs step together, so one shared ring position serves them all and the
    common case (full windows) is a handful of vectorized numpy operations; only
    envs whose episode ended this step are flushed one by one (rare).
    """

    def __init__(self, *, num_envs: int, n: int, gamma: float) -> None:
        if (
            isinstance(num_envs, bool)
            or not isinstance(num_envs, (int, np.integer))
            or num_envs <= 0
        ):
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if not (0.0 <= float(gamma) <= 1.0):
            raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
        self.num_envs, self.n, self.gamma = int(num_envs), int(n), float(gamma)
        self.powers = self.gamma ** np.arange(self.n + 1, dtype=np.float64)
        self.count = np.zeros(self.num_envs, dtype=np.int64)  # steps held per env
        self.pos = 0  # ring slot the next step is written to
        self._obs: np.ndarray | None = None
        self._act: np.ndarray | None = None
        self._rew = np.zeros((self.n, self.num_envs), dtype=np.float64)

    def reset(self) -> None:
        """Forget all pending steps (e.g. after the caller reset the envs)."""
        self.count[:] = 0

    def _check(self, name: str, value: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
        arr = as_array(value)
        if arr.ndim == 0 or arr.shape[0] != self.num_envs:
            raise ValueError(
                f"{name} must have a leading num_envs={self.num_envs} axis, got shape {arr.shape}"
            )
        if shape is not None and arr.shape[1:] != shape:
            raise ValueError(f"{name} has per-env shape {arr.shape[1:]}, expected {shape}")
        return arr

    def step(
        self, *, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any, truncated: Any,
        cut: Any = None,
    ) -> dict[str, np.ndarray]:
        """Record one step of every env; return the transitions completed by it.
        ``cut`` (optional bool per env): envs whose step was lost; their pending
        windows are flushed as truncated at ``obs`` (bootstrapping from it) and this
        step of theirs is not recorded."""
        obs = self._check("obs", obs)
        next_obs = self._check("next_obs", next_obs, obs.shape[1:])
        action = self._check("action", action)
        reward = self._check("reward", reward, ())
        term = self._check("terminated", terminated, ()).astype(bool, copy=False)
        trunc = self._check("truncated", truncated, ()).astype(bool, copy=False)
        if self._obs is None:
            self._obs = np.zeros((self.n, *obs.shape), dtype=obs.dtype)
            self._act = np.zeros((self.n, *action.shape), dtype=action.dtype)
        elif obs.shape != self._obs.shape[1:] or action.shape != self._act.shape[1:]:
            raise ValueError(
                f"obs/action shapes changed: {obs.shape}/{action.shape}, "
                f"expected {self._obs.shape[1:]}/{self._act.shape[1:]}"
            )
        p, n = self.pos, self.n
        parts = []
        lost = np.empty(0, dtype=np.int64)
        if cut is not None:
            lost = np.flatnonzero(self._check("cut", cut, ()).astype(bool, copy=False))
            for e in lost:
                if self.count[e]:  # the newest step held is in the previous slot
                    parts.append(self._flush(e, obs[e], False, newest=(p - 1) % n))
        self._obs[p] = obs
        self._act[p] = action
        self._rew[p] = reward
        self.count += 1
        done = term | trunc
        if lost.size:
            self.count[lost] = 0
            done[lost] = False
        full = (self.count == n) & ~done
        if full.any():
            oldest = (p + 1) % n
            order = (oldest + np.arange(n)) % n  # ring slots from oldest to newest
            envs = np.flatnonzero(full)
            ret = self.powers[:n] @ self._rew[order][:, envs]
            parts.append(
                (
                    self._obs[oldest, envs],
                    self._act[oldest, envs],
                    ret,
                    next_obs[envs],
                    np.zeros(envs.size, dtype=bool),
                    np.full(envs.size, self.powers[n]),
                )
            )
            self.count[envs] = n - 1
        for e in np.flatnonzero(done):
            parts.append(self._flush(e, next_obs[e], bool(term[e]), newest=p))
        self.pos = (p + 1) % n
        return self._concat(parts, obs, action)

    def _flush(self, e: int, final_obs: np.ndarray, terminated: bool, *, newest: int) -> tuple:
        """Env ``e``'s window (its newest step in ring slot ``newest``) as transitions
        ending at ``final_obs``."""
        c, n = int(self.count[e]), self.n
        slots = (newest - c + 1 + np.arange(c)) % n  # this env's window, oldest first
        rew = self._rew[slots, e]
        # ret[j] = sum_{i >= j} gamma^(i-j) r_i, computed backwards over the window.
        ret = np.empty(c)
        acc = 0.0
        for j in range(c - 1, -1, -1):
            acc = rew[j] + self.gamma * acc
            ret[j] = acc
        self.count[e] = 0
        return (
            self._obs[slots, e],
            self._act[slots, e],
            ret,
            np.broadcast_to(final_obs, (c, *final_obs.shape)),
            np.full(c, terminated),
            self.powers[c - np.arange(c)],
        )

    def _concat(
        self, parts: list[tuple], obs: np.ndarray, action: np.ndarray
    ) -> dict[str, np.ndarray]:
        if not parts:
            return {
                "obs": np.empty((0, *obs.shape[1:]), obs.dtype),
                "action": np.empty((0, *action.shape[1:]), action.dtype),
                "reward": np.empty(0, np.float32),
                "next_obs": np.empty((0, *obs.shape[1:]), obs.dtype),
                "terminated": np.empty(0, bool),
                "discount": np.empty(0, np.float32),
            }
        cols = list(zip(*parts))
        out = {key: np.concatenate(col) for key, col in zip(KEYS, cols)}
        out["reward"] = out["reward"].astype(np.float32)
        out["discount"] = out["discount"].astype(np.float32)
        out["next_obs"] = out["next_obs"].astype(obs.dtype, copy=False)
        return out
