"""Small deterministic envs for tests and benchmarks.

``CountingEnv``: the observation is the step count, so a test can tell exactly which
step (and which reset) produced each observation. It can burn a fixed amount of CPU
time per step (to model a heavy simulator), end by termination or truncation, emit
infos, render, and fail on purpose (raise, exit, SIGKILL, segfault) for failure tests.
``CompositeEnv``: the same counter behind a Dict/Tuple observation space.
``DictCountingEnv``: the counter as a Dict observation with Discrete actions (what
DQN/A2C take once ``envs.registry.flatten_observations`` makes it a vector).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

FAIL_MODES = ("raise", "exit", "kill", "segfault")


def burn_cpu(microseconds: float) -> None:
    """Busy-loop until this thread has used ``microseconds`` of CPU time.

    Thread CPU time (not wall time) keeps the cost honest on a loaded machine: a
    preempted step still has to do all of its work.
    """
    end = time.thread_time() + microseconds * 1e-6
    while time.thread_time() < end:
        pass


class CountingEnv(gym.Env):
    """Observation = number of steps since reset (plus ``options['start']`` if given).

    Reward is 1.0 when the action equals ``count % 2`` (an easy learnable task), else 0.
    After ``episode_length`` steps the episode ends by termination, or by truncation
    when ``truncate=True``. A seeded reset draws a start offset in [0, 3) when
    ``random_start=True`` so seeding is observable.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        *,
        episode_length: int = 10,
        cpu_us: float = 0.0,
        truncate: bool = False,
        random_start: bool = False,
        with_info: bool = False,
        render_mode: str | None = None,
        fail_at: int | None = None,
        fail_in: str = "step",
        fail_mode: str = "raise",
    ) -> None:
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        if fail_in not in ("step", "reset"):
            raise ValueError(f"fail_in must be 'step' or 'reset', got {fail_in!r}")
        if fail_mode not in FAIL_MODES:
            raise ValueError(f"fail_mode must be one of {FAIL_MODES}, got {fail_mode!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.episode_length = episode_length
        self.cpu_us = cpu_us
        self.truncate = truncate
        self.random_start = random_start
        self.with_info = with_info
        self.render_mode = render_mode
        self.fail_at = fail_at
        self.fail_in = fail_in
        self.fail_mode = fail_mode
        self.observation_space = spaces.Box(0, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.count = 0
        self.steps_total = 0
        self.resets_total = 0

    def _fail(self) -> None:
        if self.fail_mode == "raise":
            raise RuntimeError(f"CountingEnv failing on purpose in {self.fail_in}")
        if self.fail_mode == "exit":
            os._exit(3)
        if self.fail_mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        ctypes.string_at(0)  # segfault

    def _obs(self) -> np.ndarray:
        return np.array([self.count], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.resets_total += 1
        if (
            self.fail_in == "reset"
            and self.fail_at is not None
            and self.resets_total > self.fail_at
        ):
            self._fail()
        self.count = int(self.np_random.integers(0, 3)) if self.random_start else 0
        if options and "start" in options:
            self.count += int(options["start"])
        self._start = self.count
        return self._obs(), ({"reset_count": self.resets_total} if self.with_info else {})

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.cpu_us:
            burn_cpu(self.cpu_us)
        self.steps_total += 1
        if self.fail_in == "step" and self.fail_at is not None and self.steps_total >= self.fail_at:
            self._fail()
        reward = 1.0 if int(action) == self.count % 2 else 0.0
        self.count += 1
        done = self.count - self._start >= self.episode_length
        info = {"count": self.count} if self.with_info else {}
        return self._obs(), reward, done and not self.truncate, done and self.truncate, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((4, 4, 3), dtype=np.uint8)
        frame[..., 0] = self.count % 256
        return frame


class CompositeEnv(CountingEnv):
    """CountingEnv with a Dict observation (Box, Discrete, nested Tuple) and a Box action."""

    def __init__(self, *, episode_length: int = 10, truncate: bool = False) -> None:
        super().__init__(episode_length=episode_length, truncate=truncate)
        self.observation_space = spaces.Dict(
            {
                "count": spaces.Box(0, np.inf, shape=(2,), dtype=np.float64),
                "parity": spaces.Discrete(2),
                "pair": spaces.Tuple(
                    (spaces.Box(-1, 1, shape=(2, 2), dtype=np.float32), spaces.MultiBinary(3))
                ),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def _obs(self) -> dict[str, Any]:
        c = self.count
        return {
            "count": np.array([c, 2 * c], dtype=np.float64),
            "parity": c % 2,
            "pair": (
                np.full((2, 2), (c % 3) / 3.0, dtype=np.float32),
                np.array([c & 1, (c >> 1) & 1, (c >> 2) & 1], dtype=np.int8),
            ),
        }

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        action = np.asarray(action)
        if action.shape != (2,):
            raise ValueError(f"CompositeEnv action must have shape (2,), got {action.shape}")
        obs, _, term, trunc, info = super().step(int(action[0] > 0))
        return obs, float(action.sum()), term, trunc, info


class DictCountingEnv(CountingEnv):
    """CountingEnv with a Dict observation (a Box count and a Discrete parity) and the
    same Discrete(2) actions and rewards: the parity part alone tells the best action."""

    def __init__(self, *, episode_length: int = 10, truncate: bool = False) -> None:
        super().__init__(episode_length=episode_length, truncate=truncate)
        self.observation_space = spaces.Dict(
            {"count": spaces.Box(0, np.inf, shape=(1,), dtype=np.float32), "parity": spaces.Discrete(2)}
        )

    def _obs(self) -> dict[str, Any]:
        return {"count": np.array([self.count], dtype=np.float32), "parity": self.count % 2}


FAULTS = (
    "hang",
    "nan_reward",
    "inf_reward",
    "nan_obs",
    "inf_obs",
    "short_obs",  # shape (1,) for the (4,) space
    "scalar_obs",  # a Python float for the (4,) space
    "int_obs_as_float",  # only with int_obs=True: float values for an int64 space
)


class FaultyEnv(gym.Env):
    """Observation = the step count since reset, four times (Box(4,), float32; int64 with
    ``int_obs``); reward 1.0. From step ``fault_at`` of an episode on (``fault_in="step"``)
    or on reset number ``fault_at`` (``fault_in="reset"``, counting from 1) it shows
    ``fault``: hangs ``hang_s`` seconds, or returns the named bad value."""

    def __init__(
        self,
        *,
        fault: str | None = None,
        fault_at: int = 1,
        fault_in: str = "step",
        hang_s: float = 3600.0,
        int_obs: bool = False,
        episode_length: int = 100,
    ) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be None or one of {FAULTS}, got {fault!r}")
        if fault_in not in ("step", "reset"):
            raise ValueError(f"fault_in must be 'step' or 'reset', got {fault_in!r}")
        if fault in ("nan_reward", "inf_reward") and fault_in == "reset":
            raise ValueError("a reset returns no reward: use fault_in='step'")
        self.fault = fault
        self.fault_at = fault_at
        self.fault_in = fault_in
        self.hang_s = hang_s
        self.episode_length = episode_length
        self.dtype = np.int64 if int_obs else np.float32
        high = 2**62 if int_obs else np.inf
        self.observation_space = spaces.Box(-high, high, shape=(4,), dtype=self.dtype)
        self.action_space = spaces.Discrete(2)
        self.count = 0
        self.resets = 0

    def _obs(self, faulty: bool) -> Any:
        fault = self.fault if faulty else None
        if fault == "hang":
            time.sleep(self.hang_s)
        if fault == "short_obs":
            return np.array([self.count], dtype=self.dtype)
        if fault == "scalar_obs":
            return float(self.count)
        if fault == "int_obs_as_float":
            return np.full(4, self.count + 0.5)
        obs = np.full(4, self.count, dtype=self.dtype)
        if fault in ("nan_obs", "inf_obs"):
            obs[2] = np.nan if fault == "nan_obs" else np.inf
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.resets += 1
        self.count = 0
        return self._obs(self.fault_in == "reset" and self.resets >= self.fault_at), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.count += 1
        faulty = self.fault_in == "step" and self.count >= self.fault_at
        obs = self._obs(faulty)
        reward = 1.0
        if faulty and self.fault == "nan_reward":
            reward = float("nan")
        elif faulty and self.fault == "inf_reward":
            reward = float("-inf")
        return obs, reward, self.count >= self.episode_length, False, {}
