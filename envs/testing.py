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
