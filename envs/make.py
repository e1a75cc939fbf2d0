"""make_vector_env: one entry point for in-process and subprocess vector envs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from envs.base import BatchVectorEnv
from envs.inprocess import InProcessVectorEnv
from envs.subproc import SubprocVectorEnv


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
    return gym.make(env_id, **env_kwargs)


def make_vector_env(
    env_id_or_fn: str | Callable[[], gym.Env],
    *,
    num_envs: int,
    num_workers: int | None = None,
    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    seed: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    restart_on_crash: bool = False,
    max_restarts: int | None = None,
    step_timeout: float | None = None,
    restart_on_timeout: bool | None = None,
    step_in_parent: bool | None = None,
    check_values: bool = True,
) -> BatchVectorEnv:
    """Build ``num_envs`` copies of an env.

    ``env_id_or_fn`` is a registered gymnasium id (built with ``gym.make(id, **env_kwargs)``)
    or a zero-argument factory (then ``env_kwargs`` must be None). ``num_workers=0`` gives an
    :class:`InProcessVectorEnv`; otherwise a :class:`SubprocVectorEnv` with that many groups
    (None: one per CPU). ``seed`` seeds the action spaces (``seed + i``); the caller still
    seeds episodes with ``reset(seed=...)``.

    ``step_timeout`` (seconds; None: no limit) turns a hung env into
    :class:`envs.errors.EnvTimeout`; it needs worker processes (an env stepped in this
    process cannot be interrupted), so it is refused with ``num_workers=0``.
    ``check_values`` turns NaN/inf observations and rewards into
    :class:`envs.errors.EnvValueError`. ``restart_on_crash``, ``max_restarts`` and
    ``restart_on_timeout`` replace dead or hung workers (ignored in-process: an env in
    this process dies with it). See :class:`SubprocVectorEnv` for all of them.
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if isinstance(env_id_or_fn, str):
        fn: Callable[[], gym.Env] = partial(_make_env, env_id_or_fn, dict(env_kwargs or {}))
    elif callable(env_id_or_fn):
        if env_kwargs:
            raise ValueError("env_kwargs only applies to a registered env id, not to a factory")
        fn = env_id_or_fn
    else:
        raise TypeError(f"env_id_or_fn must be an env id or a factory, got {env_id_or_fn!r}")
    if num_workers == 0:
        if step_timeout is not None:
            raise ValueError(
                f"step_timeout={step_timeout!r} needs env worker processes: an env stepped "
                "in this process (num_workers=0) cannot be interrupted; use num_workers >= 1"
            )
        venv: BatchVectorEnv = InProcessVectorEnv(
            [fn] * num_envs, autoreset_mode=autoreset_mode, check_values=check_values
        )
    else:
        venv = SubprocVectorEnv(
            [fn] * num_envs,
            num_workers=num_workers,
            autoreset_mode=autoreset_mode,
            restart_on_crash=restart_on_crash,
            max_restarts=max_restarts,
            step_timeout=step_timeout,
            restart_on_timeout=restart_on_timeout,
            step_in_parent=step_in_parent,
            check_values=check_values,
        )
    if seed is not None:
        venv.action_space.seed(seed)
        venv.single_action_space.seed(seed)
    return venv
