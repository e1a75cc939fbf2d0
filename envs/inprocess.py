"""InProcessVectorEnv: all envs stepped in the calling process.

A lean replacement for gymnasium's SyncVectorEnv: no per-env info merging when infos
are empty, batched reward/flag writes, Discrete actions handed over as Python ints.
It runs the exact stepping code of the subprocess workers, so for the same seeds it
produces the same trajectories as ``SubprocVectorEnv``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from envs.base import BatchVectorEnv
from envs.errors import EnvError
from envs.runner import EnvFailure, EnvRunner, local_block


class InProcessVectorEnv(BatchVectorEnv):
    """Vector env over ``env_fns`` stepped sequentially in this process.

    Errors raised by an env are re-raised as :class:`envs.errors.EnvError` (a
    :class:`rlpar.errors.ChildError`) naming the env index (same as the subprocess
    version), chained to the original exception; bad observations and rewards raise
    :class:`envs.errors.EnvValueError` (``check_values`` as in SubprocVectorEnv).

    There is no step timeout: a hung env here hangs the caller, and nothing short of
    a signal could interrupt it (code stuck in C never returns to the interpreter).
    Use a SubprocVectorEnv with ``step_timeout`` where envs may hang.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        check_values: bool = True,
    ) -> None:
        fns = list(env_fns)
        envs = [fn() for fn in fns]
        if not envs:
            raise ValueError("env_fns must hold at least one env factory")
        first = envs[0]
        for i, env in enumerate(envs):
            if (
                env.observation_space != first.observation_space
                or env.action_space != first.action_space
            ):
                raise ValueError(f"env {i} has different spaces from env 0")
        self._init_spaces(
            num_envs=len(envs),
            obs_space=first.observation_space,
            act_space=first.action_space,
            metadata=first.metadata,
            render_mode=first.render_mode,
            autoreset_mode=autoreset_mode,
            copy=copy,
        )
        self.envs = envs
        self._buffer = local_block(self.block_spec)
        self._bind_arrays(self._buffer)
        self._runner = EnvRunner(
            envs,
            lo=0,
            spec=self.block_spec,
            buffer=self._buffer,
            num_obs=self._num_obs,
            num_act=self._num_act,
            obs_space=self.single_observation_space,
            act_space=self.single_action_space,
            autoreset_mode=self.autoreset_mode,
            check_values=check_values,
        )
        self.check_values = bool(check_values)
        self._all = slice(0, self.num_envs)
        self._pending = False

    def _failed(self, failure: EnvFailure, what: str) -> EnvError:
        return failure.to_error(lo=0, call=what, where="in-process", worker=None)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        self._check_open()
        seeds = self._seeds(seed)
        options, mask = self._reset_mask(options)
        try:
            records = self._runner.reset(seeds, options, None if mask is None else mask.tolist())
        except EnvFailure as failure:
            raise self._failed(failure, "reset") from failure.__cause__
        obs, _, _, _ = self._gather(self._all)
        return obs, self._merge({}, records, 0, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self._check_open()
        if self._pending:
            raise RuntimeError("step called while a step_async is pending; call step_wait first")
        self._write_actions(actions, self._all)
        return self._step_written()

    def _step_written(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        try:
            records = self._runner.step()
        except EnvFailure as failure:
            raise self._failed(failure, "step") from failure.__cause__
        obs, rew, term, trunc = self._gather(self._all)
        infos = self._merge({}, records, 0, self.num_envs) if records else {}
        return obs, rew, term, trunc, infos

    # Same asynchronous interface as SubprocVectorEnv (one "worker" holding every env),
    # so actor code can be written once; the stepping happens in step_wait.
    num_workers = 1

    def envs_of_worker(self, worker: int) -> range:
        if worker != 0:
            raise ValueError(f"worker index {worker} out of range 0..0")
        return range(self.num_envs)

    def step_async(self, actions: Any, *, workers: Sequence[int] | None = None) -> None:
        self._check_open()
        if workers is not None and list(workers) != [0]:
            raise ValueError(f"InProcessVectorEnv has one worker (0), got workers={workers}")
        if self._pending:
            raise RuntimeError("a step_async is already pending; call step_wait first")
        self._write_actions(actions, self._all)
        self._pending = True

    def step_wait(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if not self._pending:
            raise RuntimeError("step_wait called without a pending step_async")
        self._pending = False
        return self._step_written()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        self._check_open()
        try:
            return tuple(self._runner.call(name, args, kwargs))
        except EnvFailure as failure:
            raise self._failed(failure, f"call({name!r})") from failure.__cause__

    def get_attr(self, name: str) -> tuple[Any, ...]:
        self._check_open()
        try:
            return tuple(self._runner.get_attr(name))
        except EnvFailure as failure:
            raise self._failed(failure, f"get_attr({name!r})") from failure.__cause__

    def set_attr(self, name: str, values: Any) -> None:
        self._check_open()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr got {len(values)} values for num_envs={self.num_envs}")
        try:
            self._runner.set_attr(name, list(values))
        except EnvFailure as failure:
            raise self._failed(failure, f"set_attr({name!r})") from failure.__cause__

    def render(self) -> tuple[Any, ...] | None:
        if self.render_mode is None:
            return None
        return self.call("render")

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the vector env is closed")

    def close_extras(self, **kwargs: Any) -> None:
        self._runner.close()
