"""Stepping a contiguous slice of envs into shared batch arrays.

The same ``EnvRunner`` runs inside every subprocess worker, inside the parent (its
own share of envs) and inside ``InProcessVectorEnv``; sharing one implementation is
what makes trajectories identical between them for the same seeds.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from envs.layout import BlockSpec, assemble, flattener

# Per-env info records travel as (local_index, info, reset_info_or_None).
InfoRecord = tuple[int, dict[str, Any], "dict[str, Any] | None"]


class EnvFailure(Exception):
    """An env raised: carries the env's index within the runner and the formatted traceback."""

    def __init__(self, local_index: int, tb: str) -> None:
        super().__init__(f"env {local_index} raised")
        self.local_index = local_index
        self.tb = tb


class EnvRunner:
    """Steps envs ``lo..hi-1`` of a vector env, reading actions from and writing results to
    the batch arrays of ``spec`` on ``buffer``."""

    def __init__(
        self,
        envs: list[Any],
        *,
        lo: int,
        spec: BlockSpec,
        buffer: Any,
        num_obs: int,
        num_act: int,
        obs_space: spaces.Space,
        act_space: spaces.Space,
        autoreset_mode: AutoresetMode,
    ) -> None:
        for j, env in enumerate(envs):
            if env.observation_space != obs_space or env.action_space != act_space:
                raise ValueError(
                    f"env {lo + j} has observation/action spaces {env.observation_space} / "
                    f"{env.action_space}, different from env 0's {obs_space} / {act_space}"
                )
        self.envs = envs
        self.lo = lo
        hi = lo + len(envs)
        views = spec.views(buffer)
        self.obs = [views[f"obs{i}"][lo:hi] for i in range(num_obs)]
        self.act = [views[f"act{i}"][lo:hi] for i in range(num_act)]
        self.reward = views["reward"][lo:hi]
        self.terminated = views["terminated"][lo:hi]
        self.truncated = views["truncated"][lo:hi]
        self.same_step = autoreset_mode == AutoresetMode.SAME_STEP
        self.next_step = autoreset_mode == AutoresetMode.NEXT_STEP
        self.autoreset = [False] * len(envs)
        self._flatten_obs = flattener(obs_space)
        self._single_obs = len(self.obs) == 1 and not isinstance(
            obs_space, (spaces.Dict, spaces.Tuple)
        )
        self._act_space = act_space
        self._act_composite = isinstance(act_space, (spaces.Dict, spaces.Tuple))

    # -- actions ---------------------------------------------------------------------
    def _actions(self) -> list[Any]:
        if not self._act_composite:
            # One copy of the slice: the env may keep its action while the parent
            # overwrites shared memory for the next step. Discrete actions stay numpy
            # int64 scalars (as gymnasium hands them over): measured faster than
            # Python ints, because Discrete.contains builds an np.iinfo for an int.
            return list(self.act[0].copy())
        leaves = [a.copy() for a in self.act]
        return [
            assemble(self._act_space, [leaf[j] for leaf in leaves]) for j in range(len(self.envs))
        ]

    def _write_obs(self, j: int, obs: Any) -> None:
        if self._single_obs:
            self.obs[0][j] = obs
        else:
            for arr, value in zip(self.obs, self._flatten_obs(obs)):
                arr[j] = value

    def _write_all_obs(self, observations: list[Any]) -> None:
        if self._single_obs:
            try:
                # One numpy call for the whole slice beats K item assignments.
                self.obs[0][:] = observations
                return
            except (ValueError, TypeError):
                pass  # a malformed observation: find it below and name its env
        j = 0
        try:
            for j, obs in enumerate(observations):
                self._write_obs(j, obs)
        except Exception as exc:
            raise EnvFailure(j, traceback.format_exc()) from exc

    # -- stepping ----------------------------------------------------------------------
    def step(self) -> list[InfoRecord]:
        """Step every env once (autoresetting per mode); returns the non-empty infos."""
        actions = self._actions()
        envs = self.envs
        auto = self.autoreset
        rewards = [0.0] * len(envs)
        terms = [False] * len(envs)
        truncs = [False] * len(envs)
        observations: list[Any] = [None] * len(envs)
        infos: list[InfoRecord] = []
        j = 0
        try:
            for j, env in enumerate(envs):
                if auto[j]:
                    observations[j], info = env.reset()
                else:
                    observations[j], rewards[j], terms[j], truncs[j], info = env.step(actions[j])
                    if self.same_step and (terms[j] or truncs[j]):
                        final = {"final_obs": observations[j], "final_info": info}
                        observations[j], reset_info = env.reset()
                        infos.append((j, final, reset_info))
                        continue
                if info:
                    infos.append((j, info, None))
        except Exception as exc:  # reported to the parent with the env's index
            raise EnvFailure(j, traceback.format_exc()) from exc
        self._write_all_obs(observations)
        # Batched writes: one numpy assignment per array instead of one per env.
        self.reward[:] = rewards
        self.terminated[:] = terms
        self.truncated[:] = truncs
        if self.next_step:
            self.autoreset = [t or u for t, u in zip(terms, truncs)]
        return infos

    def reset(
        self,
        seeds: list[int | None],
        options: dict[str, Any] | None,
        mask: list[bool] | None = None,
    ) -> list[InfoRecord]:
        infos: list[InfoRecord] = []
        j = 0
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                obs, info = env.reset(seed=seeds[j], options=options)
                self._write_obs(j, obs)
                self.reward[j] = 0.0
                self.terminated[j] = False
                self.truncated[j] = False
                self.autoreset[j] = False
                if info:
                    infos.append((j, info, None))
        except Exception as exc:
            raise EnvFailure(j, traceback.format_exc()) from exc
        return infos

    def mark_restarted(self) -> None:
        """After a crash restart: report the cut episode as truncated (obs = fresh reset obs)."""
        self.reward[:] = 0.0
        self.terminated[:] = False
        self.truncated[:] = True
        if self.next_step:
            self.autoreset = [True] * len(self.envs)

    # -- attribute access ----------------------------------------------------------------
    def _each(self, fn: Any) -> list[Any]:
        out = []
        for j, env in enumerate(self.envs):
            try:
                out.append(fn(j, env))
            except Exception as exc:
                raise EnvFailure(j, traceback.format_exc()) from exc
        return out

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        def one(j: int, env: Any) -> Any:
            attr = getattr(env, name)
            return attr(*args, **kwargs) if callable(attr) else attr

        return self._each(one)

    def get_attr(self, name: str) -> list[Any]:
        def one(j: int, env: Any) -> Any:
            if hasattr(env, "get_wrapper_attr"):
                return env.get_wrapper_attr(name)
            return getattr(env, name)

        return self._each(one)

    def set_attr(self, name: str, values: list[Any]) -> None:
        def one(j: int, env: Any) -> None:
            if hasattr(env, "set_wrapper_attr"):
                env.set_wrapper_attr(name, values[j])
            else:
                setattr(env, name, values[j])

        self._each(one)

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing must not fail half way; the env is gone anyway
                pass


def local_block(spec: BlockSpec) -> np.ndarray:
    """An in-process buffer for ``spec`` (no sharing needed)."""
    return np.zeros(spec.nbytes, dtype=np.uint8)
