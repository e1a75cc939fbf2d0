"""MultiAgentVectorEnv: several copies of a parallel multi-agent env, stepped by the same
worker machinery as SubprocVectorEnv (or in-process with ``num_workers=0``).

Each copy runs as a ``PackedEnv``: a gymnasium Env whose observation carries the
agents' observations *and* their per-agent rewards and done flags, so the shared
memory block transports everything and a step pickles nothing. The vector env
unpacks them into ``(num_envs, n_agents)`` arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from envs.inprocess import InProcessVectorEnv
from envs.multiagent.adapter import ParallelEnvAdapter
from envs.subproc import SubprocVectorEnv


class PackedEnv(gym.Env):
    """A ParallelEnvAdapter as one gymnasium Env (see module docstring).

    The env-level episode ends when every agent is done: terminated if all agents
    terminated, otherwise truncated. The env-level reward is the adapter's scalar
    (mean or sum over agents); per-agent values are in the observation.
    """

    def __init__(self, adapter: ParallelEnvAdapter) -> None:
        self.adapter = adapter
        n = adapter.n_agents
        self.observation_space = spaces.Dict(
            {
                "obs": adapter.observation_space,
                "rewards": spaces.Box(-np.inf, np.inf, (n,), dtype=np.float64),
                "terminated": spaces.MultiBinary(n),
                "truncated": spaces.MultiBinary(n),
            }
        )
        self.action_space = adapter.action_space
        self.metadata = adapter.metadata
        self.render_mode = adapter.render_mode
        self._zeros = np.zeros(n, dtype=np.float64)
        self._false = np.zeros(n, dtype=np.int8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = self.adapter.reset(seed=seed, options=options)
        packed = {
            "obs": obs,
            "rewards": self._zeros,
            "terminated": self._false,
            "truncated": self._false,
        }
        return packed, info

    def step(self, action: Any) -> Any:
        obs, rew, term, trunc, info = self.adapter.step(action)
        packed = {"obs": obs, "rewards": rew, "terminated": term, "truncated": trunc}
        done = bool((term | trunc).all())
        terminated = bool(term.all())
        return packed, self.adapter.scalar_reward(rew), terminated, done and not terminated, info

    def render(self) -> Any:
        return self.adapter.render()

    def close(self) -> None:
        self.adapter.close()

    def get_wrapper_attr(self, name: str) -> Any:
        for owner in (self, self.adapter, self.adapter.env):
            if hasattr(owner, name):
                return getattr(owner, name)
        raise AttributeError(f"neither the adapter nor the env has attribute {name!r}")


def _packed(fn: Callable[[], Any], stack: bool | None, reward: str) -> PackedEnv:
    return PackedEnv(ParallelEnvAdapter(fn(), stack=stack, reward=reward))


def _unpack(packed: dict[str, Any]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    return (
        packed["obs"],
        packed["rewards"],
        packed["terminated"].astype(np.bool_),
        packed["truncated"].astype(np.bool_),
    )


class MultiAgentVectorEnv:
    """``num_envs`` copies of a PettingZoo-style parallel env as batched per-agent arrays.

    Observations: ``(num_envs, n_agents, *obs_shape)`` when stacked (homogeneous agents),
    otherwise a tuple with one ``(num_envs, *obs_shape_i)`` array per agent. Actions take
    the same layout. Rewards, terminated and truncated: ``(num_envs, n_agents)``.
    Autoreset works per env as in gymnasium (NEXT_STEP default; with SAME_STEP the final
    observations are in ``infos['final_obs']`` already unpacked to the agents' part, and
    the returned rewards/flags are those of the final step).

    Worker restarts: with ``restart_on_crash=True`` a worker process that dies (killed,
    or exited) is replaced by a new one built from the same env factories, its envs
    reset. The step that noticed it flags those rows in ``infos['env_restarted']``
    (with ``infos['_env_restarted']``) and reports them truncated for every agent
    with zero rewards; the observation is the fresh reset one (under NEXT_STEP the
    row's next step is its reset step, as after any truncation). The episodes that
    were running there are dropped: :attr:`dropped_episodes` counts them,
    :attr:`restarts` and :attr:`worker_restarts` count the restarts. A worker that
    dies again after ``max_restarts`` restarts raises :class:`rlpar.errors.ChildDied`
    naming it and how it died. Without ``restart_on_crash`` (the default) a dead
    worker raises ChildDied at once. Envs stepped in this process
    (``step_in_parent``) are not isolated: a hard crash there ends the process.

    Args:
        env_fns: factories of parallel envs (cloudpickled to the workers).
        num_workers: 0 for in-process, else as in SubprocVectorEnv (None: CPU count).
        restart_on_crash: replace a dead worker instead of raising (needs workers).
        max_restarts: with ``restart_on_crash``, restarts allowed per worker (None:
            no limit).
        step_timeout: seconds a worker may take for a step or reset before it is
            killed and :class:`envs.errors.EnvTimeout` names the env (None: no limit;
            needs workers).
        restart_on_timeout / step_in_parent: as in SubprocVectorEnv (restart a hung
            worker, default: as ``restart_on_crash``; step group 0 in this process,
            default: unless ``step_timeout``).
        stack / reward: see ParallelEnvAdapter.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        num_workers: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        restart_on_crash: bool = False,
        max_restarts: int | None = None,
        step_timeout: float | None = None,
        restart_on_timeout: bool | None = None,
        step_in_parent: bool | None = None,
        stack: bool | None = None,
        reward: str = "mean",
    ) -> None:
        if not isinstance(restart_on_crash, bool):
            raise TypeError(f"restart_on_crash must be a bool, got {restart_on_crash!r}")
        fns = [_bind(fn, stack, reward) for fn in env_fns]
        if num_workers == 0:
            if restart_on_crash:
                raise ValueError(
                    "restart_on_crash needs env worker processes (num_workers >= 1): "
                    "an env stepped in this process cannot be restarted"
                )
            self.venv: Any = InProcessVectorEnv(fns, autoreset_mode=autoreset_mode)
        else:
            self.venv = SubprocVectorEnv(
                fns,
                num_workers=num_workers,
                autoreset_mode=autoreset_mode,
                restart_on_crash=restart_on_crash,
                max_restarts=max_restarts,
                step_timeout=step_timeout,
                restart_on_timeout=restart_on_timeout,
                step_in_parent=step_in_parent,
            )
        self.dropped_episodes = 0
        # Rows whose episode ended at the previous step (NEXT_STEP: waiting for their
        # reset step, so a restart there cuts no episode); rows of pending step_asyncs.
        self._ended = np.zeros(self.venv.num_envs, dtype=np.bool_)
        self._inflight: list[np.ndarray | None] = []
        probe = ParallelEnvAdapter(_Spaces(self.venv), stack=stack, reward=reward)
        self.agents = probe.agents
        self.n_agents = probe.n_agents
        self.stacked = probe.stacked
        self.homogeneous = probe.homogeneous
        self.agent_observation_spaces = probe.agent_observation_spaces
        self.agent_action_spaces = probe.agent_action_spaces
        self.num_envs = self.venv.num_envs
        self.single_observation_space = self.venv.single_observation_space["obs"]
        self.observation_space = self.venv.observation_space["obs"]
        self.single_action_space = self.venv.single_action_space
        self.action_space = self.venv.action_space
        self.autoreset_mode = self.venv.autoreset_mode

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        packed, infos = self.venv.reset(seed=seed, options=options)
        self._ended[:] = False
        return packed["obs"], infos

    def _finish(
        self, result: tuple, rows: np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Unpack one step's result; ``rows``: the env indices it covers (None: all)."""
        packed, _, _, _, infos = result
        obs, rew, term, trunc = _unpack(packed)
        if "final_obs" in infos:
            finals = infos["final_obs"]
            for i in np.flatnonzero(infos["_final_obs"]):
                final_obs, rew[i], term[i], trunc[i] = _unpack(finals[i])
                finals[i] = final_obs
        cut = infos.get("env_restarted")
        if cut is not None:
            rew[cut], term[cut], trunc[cut] = 0.0, False, True
        ended = self._ended if rows is None else self._ended[rows]
        if cut is not None:
            self.dropped_episodes += int((cut & ~ended).sum())
        done = (term | trunc).all(axis=1)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            ended = done
        else:  # SAME_STEP: a done row is already reset, and a restarted one too
            ended = np.zeros_like(done)
        if rows is None:
            self._ended[:] = ended
        else:
            self._ended[rows] = ended
        return obs, rew, term, trunc, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        return self._finish(self.venv.step(actions))

    def step_async(self, actions: Any, *, workers: Sequence[int] | None = None) -> None:
        if workers is not None and not isinstance(self.venv, SubprocVectorEnv):
            raise ValueError("subset stepping needs num_workers >= 1")
        if isinstance(self.venv, SubprocVectorEnv):
            self.venv.step_async(actions, workers=workers)
            rows = None if workers is None else np.concatenate(
                [np.arange(*self.venv.groups[int(w)]) for w in workers])
            self._inflight.append(rows)
        else:
            self._sync_result = self.venv.step(actions)

    def step_wait(self, timeout: float | None = None) -> tuple:
        if isinstance(self.venv, SubprocVectorEnv):
            result = self.venv.step_wait(timeout=timeout)
            return self._finish(result, self._inflight.pop(0))
        result, self._sync_result = self._sync_result, None
        if result is None:
            raise RuntimeError("step_wait called without a pending step_async")
        return self._finish(result)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return self.venv.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.venv.get_attr(name)

    def set_attr(self, name: str, values: Any) -> None:
        self.venv.set_attr(name, values)

    def render(self) -> tuple[Any, ...] | None:
        return self.venv.render()

    @property
    def num_workers(self) -> int:
        return self.venv.num_workers

    def envs_of_worker(self, worker: int) -> range:
        return self.venv.envs_of_worker(worker)

    @property
    def crash_count(self) -> int:
        return getattr(self.venv, "crash_count", 0)

    @property
    def restarts(self) -> int:
        """Worker processes restarted so far (all workers together)."""
        return self.crash_count

    @property
    def worker_restarts(self) -> tuple[int, ...]:
        """Restarts per worker (by worker index; empty in-process)."""
        return tuple(getattr(self.venv, "worker_crashes", ()))

    @property
    def last_crash(self) -> str | None:
        """How the most recently restarted worker died (None: none has)."""
        return getattr(self.venv, "last_crash", None)

    @property
    def closed(self) -> bool:
        return self.venv.closed

    def close(self) -> None:
        self.venv.close()


class _Spaces:
    """Per-agent spaces of the remote envs, read back through get_attr (no env built here)."""

    def __init__(self, venv: Any) -> None:
        self.possible_agents = venv.get_attr("agents")[0]
        self._obs = dict(zip(self.possible_agents, venv.get_attr("agent_observation_spaces")[0]))
        self._act = dict(zip(self.possible_agents, venv.get_attr("agent_action_spaces")[0]))

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act[agent]


def _bind(fn: Callable[[], Any], stack: bool | None, reward: str) -> Callable[[], PackedEnv]:
    from functools import partial

    return partial(_packed, fn, stack, reward)
