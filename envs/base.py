"""Parent-side pieces shared by InProcessVectorEnv and SubprocVectorEnv.

Both keep their batch in the flat arrays of ``envs.layout`` and step envs with
``envs.runner.EnvRunner``; this base class owns the spaces, argument checking,
action writes, info merging and result assembly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs.layout import assemble, flattener, leaves_of, vector_block
from envs.runner import InfoRecord


def as_autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(
            f"autoreset_mode={mode!r} is not one of {[m.value for m in AutoresetMode]}"
        ) from None


def add_info(infos: dict[str, Any], info: dict[str, Any], index: int, n: int) -> dict[str, Any]:
    """Merge one env's info into batched ``infos`` with gymnasium 1.x's layout: each key
    becomes an array over the batch plus a boolean mask ``_key``; nested dicts recurse and
    ``final_obs`` is an object array of per-env observations."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get(key)
            if array is None:
                array = np.full(n, None, dtype=object)
            array[index] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, index, n)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(n, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, None, dtype=object)
            array[index] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[index] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


class BatchVectorEnv(VectorEnv):
    """Common parent side; subclasses provide where and how envs are stepped."""

    def _init_spaces(
        self,
        *,
        num_envs: int,
        obs_space: spaces.Space,
        act_space: spaces.Space,
        metadata: dict[str, Any],
        render_mode: str | None,
        autoreset_mode: AutoresetMode | str,
        copy: bool,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"env_fns must hold at least one env factory, got {num_envs}")
        self.num_envs = num_envs
        self.autoreset_mode = as_autoreset_mode(autoreset_mode)
        if self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError("autoreset_mode=DISABLED is not supported; use NEXT_STEP or SAME_STEP")
        self.copy = copy
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(act_space, num_envs)
        self.metadata = dict(metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = render_mode
        self.block_spec, self._num_obs, self._num_act = vector_block(obs_space, act_space, num_envs)
        self._act_leaves = leaves_of(act_space, "action space")
        self._flatten_act = flattener(act_space)
        # Fast paths for the common case of one plain (non-Dict/Tuple) array per side.
        composite = (spaces.Dict, spaces.Tuple)
        self._plain_act = not isinstance(act_space, composite)
        self._plain_obs = not isinstance(obs_space, composite)
        self._act_shape = self._act_leaves[0].shape if self._plain_act else ()
        self._castable: dict[np.dtype, bool] = {}

    def _bind_arrays(self, buffer: Any) -> None:
        views = self.block_spec.views(buffer)
        self._obs_arrays = [views[f"obs{i}"] for i in range(self._num_obs)]
        self._act_arrays = [views[f"act{i}"] for i in range(self._num_act)]
        self._reward = views["reward"]
        self._terminated = views["terminated"]
        self._truncated = views["truncated"]
        self._progress = views["progress"]

    # -- argument checks -------------------------------------------------------------------
    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"seed list has length {len(seeds)}, expected num_envs={self.num_envs}"
            )
        return seeds

    def _reset_mask(self, options: dict[str, Any] | None) -> tuple[dict | None, np.ndarray | None]:
        if options is None or "reset_mask" not in options:
            return options, None
        options = dict(options)
        mask = options.pop("reset_mask")
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
            raise TypeError(f"options['reset_mask'] must be a numpy bool array, got {mask!r}")
        if mask.shape != (self.num_envs,):
            raise ValueError(
                f"options['reset_mask'] has shape {mask.shape}, expected ({self.num_envs},)"
            )
        if not mask.any():
            raise ValueError("options['reset_mask'] must select at least one env")
        return options, mask

    def _write_actions(self, actions: Any, rows: slice | np.ndarray | list[slice]) -> None:
        """Check ``actions`` (shape and dtype per leaf) and write them into the action
        arrays at ``rows``; raises ValueError before anything is written on a mismatch."""
        if self._plain_act and type(actions) is np.ndarray and type(rows) is slice:
            # Per-step fast path (a plain array for a contiguous range): same checks.
            castable = self._castable.get(actions.dtype)
            if castable is None:
                castable = np.can_cast(actions.dtype, self._act_leaves[0].dtype, "same_kind")
                self._castable[actions.dtype] = castable
            if castable and actions.shape == (rows.stop - rows.start, *self._act_shape):
                self._act_arrays[0][rows] = actions
                return
        n = (
            sum(s.stop - s.start for s in rows)
            if isinstance(rows, list)
            else (rows.stop - rows.start if isinstance(rows, slice) else len(rows))
        )
        try:
            values = self._flatten_act(actions)
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(
                f"actions do not match the batched action space {self.action_space}: {exc!r}"
            ) from None
        checked = []
        for leaf, value in zip(self._act_leaves, values):
            arr = np.asarray(value)
            expected = (n, *leaf.shape)
            if arr.shape != expected:
                raise ValueError(
                    f"actions{''.join(f'[{p!r}]' for p in leaf.path)} have shape {arr.shape}, "
                    f"expected {expected} for {n} envs"
                )
            if not np.can_cast(arr.dtype, leaf.dtype, casting="same_kind"):
                raise ValueError(
                    f"actions{''.join(f'[{p!r}]' for p in leaf.path)} have dtype {arr.dtype}, "
                    f"which does not convert to the action space dtype {leaf.dtype}"
                )
            checked.append(arr)
        for dst, arr in zip(self._act_arrays, checked):
            if isinstance(rows, list):
                start = 0
                for s in rows:
                    size = s.stop - s.start
                    dst[s] = arr[start : start + size]
                    start += size
            else:
                dst[rows] = arr

    # -- results ---------------------------------------------------------------------------
    def _gather(self, rows: slice | list[slice]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        if type(rows) is slice and self._plain_obs and len(self._obs_arrays) == 1:
            obs = self._obs_arrays[0][rows]
            return (
                obs.copy() if self.copy or obs.ndim == 1 else obs,
                self._reward[rows].copy(),
                self._terminated[rows].copy(),
                self._truncated[rows].copy(),
            )
        def take(arr: np.ndarray) -> np.ndarray:
            if isinstance(rows, list):
                if len(rows) == 1:
                    return arr[rows[0]].copy()
                return np.concatenate([arr[s] for s in rows])
            return arr[rows].copy() if self.copy or arr.ndim == 1 else arr[rows]

        obs_leaves = [take(a) for a in self._obs_arrays]
        obs = (
            obs_leaves[0]
            if len(obs_leaves) == 1
            and not isinstance(self.single_observation_space, (spaces.Dict, spaces.Tuple))
            else assemble(self.single_observation_space, obs_leaves)
        )
        return obs, take(self._reward), take(self._terminated), take(self._truncated)

    @staticmethod
    def _merge(infos: dict, records: list[InfoRecord], base: int, n: int) -> dict:
        for j, info, reset_info in records:
            add_info(infos, info, base + j, n)
            if reset_info:
                add_info(infos, reset_info, base + j, n)
        return infos
