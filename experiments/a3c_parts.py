"""Pieces of the A3C job: env and agent construction, and rank 0's coordinator.

The :class:`Coordinator` collects workers' progress reports (env steps, finished
episodes, loss sums), schedules greedy evaluations every ``--eval-every`` env
steps, decides when to stop (solved, time or step budget), writes TensorBoard
scalars and console status, and builds the final summary. Its ``report`` is an
RPC service, called from RPC threads: every field is guarded by one lock.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rlpar.logging import MetricLogger, Progress, RateMeter


def make_env_fn(env_id: str):
    """A picklable zero-argument env factory."""
    return functools.partial(_make_env, env_id)


def _make_env(env_id: str):
    import gymnasium as gym

    return gym.make(env_id)


@functools.lru_cache(maxsize=8)
def env_spaces(env_id: str) -> tuple[Any, Any]:
    """``(observation_space, action_space)``; ValueError for spaces A2C cannot handle."""
    from gymnasium import spaces

    env = _make_env(env_id)
    try:
        obs, act = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(act, spaces.Discrete | spaces.Box):
        raise ValueError(f"--env-id {env_id!r} has action space {act}; A3C needs Discrete or Box")
    if not isinstance(obs, spaces.Box):
        raise ValueError(f"--env-id {env_id!r} has observation space {obs}; the MLP needs a Box")
    return obs, act


def env_spec(env_id: str):
    """``gym.spec``, also for gymnasium's ``"module:EnvId"`` form (the module, imported
    first, registers the env; ``gym.make`` accepts the same form in every rank)."""
    import importlib

    import gymnasium as gym

    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"--env-id: cannot import module {module!r} ({exc})") from None
    return gym.spec(env_id)


def check_env_id(env_id: str) -> None:
    """ValueError naming ``--env-id`` unless it is a registered env A3C can run."""
    import gymnasium as gym

    try:
        env_spec(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"--env-id {env_id!r} is not a registered gymnasium id ({exc})") from None
    env_spaces(env_id)


def target_return(config) -> float | None:
    if config.target_return is not None:
        return float(config.target_return)
    threshold = env_spec(config.env_id).reward_threshold
    return None if threshold is None else float(threshold)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_agent(config, observation_space, action_space, *, device: str):
    from algorithms.a2c import A2C

    return A2C(observation_space=observation_space, action_space=action_space,
               config=config.a2c_config(), device=device)


class Coordinator:
    """Rank 0's bookkeeping; see the module docstring."""

    def __init__(self, config, *, num_workers: int, started: float, quiet: bool = False) -> None:
        self.config = config
        self.num_workers = num_workers
        self.started = started
        self.target = target_return(config)
        self._lock = threading.Lock()
        self.env_steps = 0
        self.episodes = 0
        self._recent: deque[float] = deque(maxlen=100)
        self._window_returns: list[float] = []
        self._sums: dict[str, float] = {}
        self._count = 0
        self._finished: set[int] = set()
        self._all_finished = threading.Event()
        self.stop_reason: str | None = None
        self._next_eval = config.eval_every
        self.evals: list[tuple[float, int, float]] = []  # (seconds from launch, env steps, mean)
        self.solved_at: tuple[float, int, float] | None = None
        self._steps_rate, self._updates_rate = RateMeter(window=10.0), RateMeter(window=10.0)
        self._last_tick = time.monotonic()
        self._last_server: dict[str, float] = {}
        self.logger = MetricLogger(log_dir=config.log_dir)
        if config.log_dir is not None:
            import dataclasses

            self.logger.config(dataclasses.asdict(config))
        self.progress = None if quiet or config.status_every == 0 else Progress(
            every=config.status_every, prefix="[a3c] ")
        self._last_status: dict[str, Any] = {}

    # -------------------------------------------------------------- reports (RPC)
    def report(self, worker: int, env_steps: int, returns: list[float], sums: dict[str, float],
               count: int, final: bool) -> dict[str, Any]:
        with self._lock:
            self.env_steps += int(env_steps)
            self._steps_rate.add(int(env_steps))
            self.episodes += len(returns)
            self._recent.extend(returns)
            self._window_returns.extend(returns)
            for key, value in sums.items():
                self._sums[key] = self._sums.get(key, 0.0) + value
            self._count += count
            if final:
                self._finished.add(worker)
                if len(self._finished) >= self.num_workers:
                    self._all_finished.set()
            self._check_budget()
            return {"stop": self.stop_reason is not None, "env_steps": self.env_steps}

    def _check_budget(self) -> None:
        if self.stop_reason is not None:
            return
        if self.env_steps >= self.config.max_env_steps:
            self.stop_reason = "env step budget"
        elif time.time() - self.started >= self.config.max_seconds:
            self.stop_reason = "time budget"

    # -------------------------------------------------------------- rank 0 loop
    def should_stop(self) -> bool:
        with self._lock:
            self._check_budget()
            return self.stop_reason is not None

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason

    def eval_due(self) -> bool:
        with self._lock:
            return self.stop_reason is None and self.env_steps >= self._next_eval

    def record_eval(self, mean: float, version: int) -> None:
        with self._lock:
            elapsed = time.time() - self.started
            self.evals.append((elapsed, self.env_steps, mean))
            self._next_eval = self.env_steps + self.config.eval_every
            steps = self.env_steps
            if self.target is not None and mean >= self.target and self.solved_at is None:
                self.solved_at = (elapsed, steps, mean)
                self.stop_reason = "solved"
        self.logger.scalar("eval/return_mean", mean, steps)
        self.logger.scalar("eval/version", version, steps)
        if self.progress is not None:
            self.progress.update({"eval_return": round(mean, 1), "env_steps": steps,
                                  "t": round(elapsed, 1), "version": version}, force=True)

    def tick(self, server_metrics: Callable[[], dict[str, float]]) -> None:
        """Once a second: TensorBoard scalars and the console status line."""
        now = time.monotonic()
        if now - self._last_tick < 1.0:
            return
        self._last_tick = now
        server = server_metrics()
        with self._lock:
            sums, count, self._sums, self._count = self._sums, self._count, {}, 0
            window, self._window_returns = self._window_returns, []
            steps, recent = self.env_steps, list(self._recent)
            steps_rate = self._steps_rate.rate()
        last = self._last_server
        applied = server["applied"] - last.get("applied", 0)
        stale_sum = server["mean_staleness"] * server["applied"]
        window_staleness = ((stale_sum - last.get("stale_sum", 0.0)) / applied) if applied else 0.0
        self._updates_rate.add(int(server["steps"] - last.get("steps", 0)))
        self._last_server = {**server, "stale_sum": stale_sum}
        log = self.logger
        if window:
            log.scalar("train/episode_return", sum(window) / len(window), steps)
        if recent:
            log.scalar("train/episode_return_100", sum(recent) / len(recent), steps)
        if count:
            names = {"policy_loss": "loss/policy", "value_loss": "loss/value", "entropy": "loss/entropy",
                     "loss": "loss/total", "grad_norm": "grad/norm", "version_lag": "worker/version_lag",
                     "explained_variance": "loss/explained_variance"}
            for key, tag in names.items():
                if key in sums:
                    log.scalar(tag, sums[key] / count, steps)
        log.scalar("server/staleness_mean", window_staleness, steps)
        log.scalar("server/applied", server["applied"], steps)
        log.scalar("server/dropped", server["dropped"], steps)
        log.scalar("server/updates_per_s", self._updates_rate.rate(), steps)
        log.scalar("env/steps_per_s", steps_rate, steps)
        self._last_status = {
            "t": round(time.time() - self.started, 1), "env_steps": steps,
            "steps/s": round(steps_rate), "updates/s": round(self._updates_rate.rate(), 1),
            "return100": round(sum(recent) / len(recent), 1) if recent else None,
            "staleness": round(window_staleness, 2), "dropped": int(server["dropped"]),
            "entropy": round(sums["entropy"] / count, 3) if count and "entropy" in sums else None,
        }
        if self.progress is not None:
            self.progress.update(self._last_status)

    def wait_for_workers(self, *, timeout: float) -> bool:
        """Wait until every worker sent its final report (True) or ``timeout`` passed."""
        return self._all_finished.wait(timeout)

    def summary(self, server: dict[str, float], *, param_change: float) -> dict[str, Any]:
        with self._lock:
            wall = time.time() - self.started
            recent = list(self._recent)
            best = max((e[2] for e in self.evals), default=None)
            solved = self.solved_at is not None
            return {
                "env_id": self.config.env_id, "solved": solved, "stop_reason": self.stop_reason,
                "target_return": self.target,
                "eval_return": self.solved_at[2] if solved else None,
                "time_to_solve_s": self.solved_at[0] if solved else None,
                "env_steps_at_solve": self.solved_at[1] if solved else None,
                "best_eval_return": best,
                "last_eval_return": round(self.evals[-1][2], 1) if self.evals else None,
                "evaluations": len(self.evals), "evals": list(self.evals),
                "wall_s": wall, "env_steps": self.env_steps,
                "env_steps_per_s": self.env_steps / wall if wall > 0 else 0.0,
                "num_workers": self.num_workers, "envs_per_worker": self.config.envs_per_worker,
                "workers_finished": len(self._finished),
                "updates": int(server["applied"]), "dropped": int(server["dropped"]),
                "received": int(server["received"]), "version": int(server["version"]),
                "updates_per_s": server["steps"] / wall if wall > 0 else 0.0,
                "mean_staleness": float(server["mean_staleness"]),
                "param_change": param_change,
                "train_return": sum(recent) / len(recent) if recent else float("nan"),
                "episodes": self.episodes, "log_dir": self.config.log_dir,
            }

    def close(self) -> None:
        self.logger.close()
