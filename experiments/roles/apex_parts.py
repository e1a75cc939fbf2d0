"""Parts the Ape-X role shells share: env and network construction, the replay
hosted in the learner with its add-only remote handle, and the coordinator that
keeps progress, evaluation schedule, stop flag and TensorBoard in one place."""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import deque
from typing import Any

import numpy as np

# ----------------------------------------------------------------- envs, nets


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def _register_ale() -> None:
    import gymnasium as gym

    try:
        import ale_py
    except ImportError as exc:
        raise ValueError("--env-id names an Atari game but ale-py is not installed "
                         "(pip install 'rlpar[atari]')") from exc
    gym.register_envs(ale_py)


def _make_env(env_id: str):
    import gymnasium as gym

    if not is_atari(env_id):
        return gym.make(env_id)
    _register_ale()
    if env_id.startswith("ALE/"):
        from envs.atari import make_atari

        # The same observations, rewards and flags as the wrapper chain below (tested in
        # tests/envs/test_atari.py) at ~170 us less CPU per env step.
        return make_atari(env_id)
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    # Mnih et al. 2015 preprocessing: 4-frame skip with max-pooling, 84x84 gray,
    # up to 30 no-op starts, 4 stacked frames (uint8, so replay stays small).
    env = gym.make(env_id, frameskip=1)
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    return FrameStackObservation(env, 4)


def make_env_fn(env_id: str):
    """A picklable zero-argument env factory."""
    return functools.partial(_make_env, env_id)


@functools.lru_cache(maxsize=8)
def env_spaces(env_id: str) -> tuple[Any, int]:
    """``(observation_space, number of actions)``; ValueError for non-discrete actions."""
    from gymnasium import spaces

    env = _make_env(env_id)
    try:
        if not isinstance(env.action_space, spaces.Discrete):
            raise ValueError(f"--env-id {env_id!r} has action space {env.action_space}; "
                             "DQN needs a Discrete one")
        return env.observation_space, int(env.action_space.n)
    finally:
        env.close()


def check_env_id(env_id: str) -> None:
    """ValueError naming ``--env-id`` unless it is a registered discrete-action env."""
    import gymnasium as gym

    if is_atari(env_id):
        _register_ale()
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"--env-id {env_id!r} is not a registered gymnasium id ({exc})") from None
    env_spaces(env_id)


def target_return(config) -> float:
    import gymnasium as gym

    if config.target_return is not None:
        return float(config.target_return)
    threshold = gym.spec(config.env_id).reward_threshold
    return math.inf if threshold is None else float(threshold)


def resolve_device(device: str):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def build_dqn(config, obs_space, num_actions: int, *, device, seed: int, dqn_class=None):
    import torch

    from algorithms.dqn import DQN
    from algorithms.nets import q_network

    torch.manual_seed(seed)
    net = q_network(obs_space.shape, num_actions, hidden=config.hidden_sizes(), dueling=config.dueling)
    cls = DQN if dqn_class is None else dqn_class
    if not (isinstance(cls, type) and issubclass(cls, DQN)):
        raise TypeError(f"dqn_class must be a subclass of DQN, got {cls!r}")
    return cls(network=net, num_actions=num_actions, config=config.dqn_config(), device=device,
               seed=seed)


# ----------------------------------------------------------------- replay parts


def replay_layout(config) -> dict[str, Any]:
    """Replay keyword arguments for the env's observations: ``SharedFrames`` when
    they are uint8 frame stacks (stack axis first, as both Atari paths make them)
    that an n-step transition's obs and next_obs overlap in."""
    from rlpar.buffers import SharedFrames

    if not (config.share_frames and is_atari(config.env_id)):
        return {}  # without building an env to look at its space
    obs_space, _ = env_spaces(config.env_id)
    shape = obs_space.shape or ()
    if obs_space.dtype == np.uint8 and len(shape) == 3 and shape[0] > config.n_step:
        return {"shared_frames": SharedFrames(shift=config.n_step)}
    return {}


class LockedBuffer:
    """A Buffer shared by the learner loop and the RPC threads serving actors' adds."""

    def __init__(self, buffer) -> None:
        self.buffer = buffer
        self.added = 0
        self._lock = threading.Lock()

    def add(self, batch, priorities=None) -> None:
        with self._lock:
            self.buffer.add(batch, priorities)
            self.added += len(next(iter(batch.values())))

    def sample(self, batch_size: int):
        with self._lock:
            return self.buffer.sample(batch_size)

    def update_priorities(self, indices, priorities) -> None:
        with self._lock:
            self.buffer.update_priorities(indices, priorities)

    def __len__(self) -> int:
        return len(self.buffer)


class LearnerReplay:
    """The learner's view of the replay: batches come through a
    :class:`~rlpar.buffers.PrefetchingSampler` (``depth`` batches in flight; 0 =
    sample synchronously), started on first use because sampling an empty buffer
    is an error."""

    def __init__(self, buffer, *, batch_size: int, depth: int) -> None:
        self.buffer, self.batch_size, self.depth = buffer, batch_size, depth
        self.prefetcher = None

    def sample(self, batch_size: int):
        if self.depth == 0:
            return self.buffer.sample(batch_size)
        if batch_size != self.batch_size:
            raise ValueError(f"prefetching replay draws batches of {self.batch_size}, asked {batch_size}")
        if self.prefetcher is None:
            from rlpar.buffers import PrefetchingSampler

            self.prefetcher = PrefetchingSampler(buffer=self.buffer, batch_size=batch_size,
                                                 depth=self.depth)
        return self.prefetcher.sample()

    def update_priorities(self, indices, priorities) -> None:
        self.buffer.update_priorities(indices, priorities)

    def add(self, batch, priorities=None) -> None:
        self.buffer.add(batch, priorities)

    def __len__(self) -> int:
        return len(self.buffer)

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()


class ReplayAdder:
    """Add-only Buffer handle of a remote replay: adds are asynchronous, with at most
    ``max_in_flight`` outstanding (back-pressure instead of unbounded memory)."""

    def __init__(self, group, *, max_in_flight: int = 4, service: str = "replay/add") -> None:
        self.group, self.service, self.max_in_flight = group, service, max_in_flight
        self._futures: deque = deque()

    def add(self, batch, priorities=None) -> None:
        while len(self._futures) >= self.max_in_flight:
            self._futures.popleft().wait()
        self._futures.append(self.group.call_async(self.service, dict(batch), priorities))

    def wait(self) -> None:
        while self._futures:
            self._futures.popleft().wait()

    def sample(self, batch_size: int):
        raise NotImplementedError("actors only add; the learner samples")

    def update_priorities(self, indices, priorities) -> None:
        raise NotImplementedError("actors only add; the learner updates priorities")

    def __len__(self) -> int:
        return int(self.group.call("replay/size"))


# ----------------------------------------------------------------- coordinator


def learner_metrics_logger(config, *, quiet: bool):
    from rlpar.logging import MetricLogger, Progress

    logger = MetricLogger(log_dir=config.log_dir)
    from experiments.cli import config_dict

    logger.config(config_dict(config))
    every = config.status_every if config.status_every > 0 and not quiet else math.inf
    return logger, Progress(every=every, prefix="[apex] ")


class Coordinator:
    """Hosted by the learner: actors report progress and episodes, the evaluating
    actor reports evaluation returns; it decides when to evaluate and when to stop."""

    def __init__(self, config, *, num_actors: int, started: float) -> None:
        from rlpar.logging import RateMeter

        self.config, self.num_actors, self.started = config, num_actors, started
        self.target = target_return(config)
        self.env_steps = 0  # read by the learner loop without the lock (an int)
        self.updates = 0
        self.transitions = 0  # added to replay, as reported by actors
        self.reports = 0  # RPCs from actors: each one takes the learner's GIL for a while
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._actor_steps = [0] * num_actors
        self._versions = [-1] * num_actors
        self._meters = [RateMeter(window=5.0) for _ in range(num_actors)]
        self._total = RateMeter(window=5.0)
        self._update_meter = RateMeter(window=5.0)
        self._episodes: list[tuple[float, int]] = []
        self._recent_returns: deque[float] = deque(maxlen=100)
        self._evals: list[tuple[float, int, float, int]] = []
        self._logged_evals = 0
        self._next_eval = config.eval_every
        self._eval_pending = False
        self._finished: set[int] = set()
        self._first_step_time: float | None = None
        self.solved: tuple[float, int, float] | None = None  # (time, env steps, eval mean)

    # -- services (RPC threads)

    def report(self, index: int, steps: int, transitions: int, episodes: list, version: int,
               final: bool) -> dict:
        with self._lock:
            self.reports += 1
            self.transitions += transitions
            if self._first_step_time is None and steps:
                self._first_step_time = time.time()
            self._actor_steps[index] += steps
            self.env_steps += steps
            self._meters[index].add(steps)
            self._total.add(steps)
            self._versions[index] = version
            self._episodes.extend(episodes)
            self._recent_returns.extend(r for r, _ in episodes)
            if final:
                self._finished.add(index)
            self._check_budgets()
            evaluate = False
            if (index == self.num_actors - 1 and not self._eval_pending and self._stop_reason is None
                    and self.env_steps >= self._next_eval):
                evaluate = self._eval_pending = True
                while self._next_eval <= self.env_steps:
                    self._next_eval += self.config.eval_every
            return {"stop": self._stop_reason is not None, "updates": self.updates,
                    "env_steps": self.env_steps, "eval": evaluate}

    def eval_result(self, mean_return: float, env_steps: int, version: int) -> None:
        with self._lock:
            now = time.time()
            self._eval_pending = False
            self._evals.append((now, env_steps, mean_return, version))
            if mean_return >= self.target and self.solved is None:
                self.solved = (now, env_steps, mean_return)
                self._stop_reason = self._stop_reason or "solved"

    # -- learner thread

    def _check_budgets(self) -> None:
        if self._stop_reason is None:
            if time.time() - self.started >= self.config.max_seconds:
                self._stop_reason = "time budget"
            elif self.env_steps >= self.config.max_env_steps:
                self._stop_reason = "env step budget"

    def should_stop(self) -> bool:
        if self._stop_reason is None and time.time() - self.started >= self.config.max_seconds:
            with self._lock:
                self._check_budgets()
        return self._stop_reason is not None

    def stop(self, reason: str) -> None:
        with self._lock:
            self._stop_reason = self._stop_reason or reason

    def wait_for_actors(self, *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self._finished) < self.num_actors and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self._finished) == self.num_actors

    def log_learner(self, logger, status, window: dict, learner, replay, *, wait_fraction: float) -> None:
        step = self.env_steps
        n = max(window.pop("n", 1.0), 1.0)
        self._update_meter.add(int(n))
        logger.scalars({k: v / n for k, v in window.items()}, step, prefix="learner/")
        logger.scalar("learner/updates_per_s", self._update_meter.rate(), step)
        logger.scalar("learner/updates", learner.updates, step)
        logger.scalar("learner/wait_fraction", wait_fraction, step)
        logger.scalar("learner/sample_ms", 1e3 * learner.sample_seconds / max(learner.updates, 1), step)
        logger.scalar("replay/size", len(replay), step)
        with self._lock:
            episodes, self._episodes = self._episodes, []
            evals = self._evals[self._logged_evals:]
            self._logged_evals = len(self._evals)
            versions = list(self._versions)
            rates = [m.rate() for m in self._meters]
            total_rate = self._total.rate()
        if episodes:
            logger.scalar("episode/return", float(np.mean([r for r, _ in episodes])), step)
            logger.scalar("episode/length", float(np.mean([length for _, length in episodes])), step)
        for _, eval_steps, mean, _ in evals:
            logger.scalar("eval/return", mean, eval_steps)
        for i, (rate, version) in enumerate(zip(rates, versions)):
            logger.scalar(f"actors/env_steps_per_s/{i}", rate, step)
            logger.scalar(f"actors/version_lag/{i}", learner.updates - version, step)
        logger.scalar("actors/env_steps_per_s/total", total_rate, step)
        last_eval = self._evals[-1][2] if self._evals else float("nan")
        status.update({
            "t": round(time.time() - self.started, 1), "env_steps": step, "sps": round(total_rate),
            "updates": learner.updates, "ups": round(self._update_meter.rate()),
            "wait%": round(100 * wait_fraction, 1),
            "return100": float(np.mean(self._recent_returns)) if self._recent_returns else float("nan"),
            "eval": last_eval, "lag": learner.updates - min(versions),
        })

    def summary(self, learner, *, algorithm: type, metrics: dict, wait_fraction: float, busy_seconds: float, log_dir,
                replay_size: int) -> dict:
        now = time.time()
        run_s = now - (self._first_step_time or now)
        best = max((e[2] for e in self._evals), default=float("nan"))
        solved = self.solved is not None
        return {
            "env_id": self.config.env_id, "solved": solved, "stop_reason": self._stop_reason,
            "target_return": self.target,
            "eval_return": self.solved[2] if solved else float("nan"),
            "best_eval_return": best,
            "time_to_solve_s": self.solved[0] - self.started if solved else float("nan"),
            "env_steps_at_solve": self.solved[1] if solved else None,
            "wall_s": now - self.started, "env_steps": self.env_steps,
            # Launch to the first reported env step: process start, imports, world setup.
            "startup_s": (self._first_step_time or now) - self.started,
            "actor_reports_per_s": self.reports / run_s if run_s > 0 else 0.0,
            "env_steps_per_s": self.env_steps / run_s if run_s > 0 else 0.0,
            "updates": learner.updates,
            "updates_per_s": learner.updates / busy_seconds if busy_seconds > 0 else 0.0,
            "wait_fraction": wait_fraction, "num_actors": self.num_actors,
            "batch_size": self.config.batch_size, "evaluations": len(self._evals),
            "log_dir": log_dir, "replay_size": replay_size, "actor_versions": list(self._versions),
            "priority_updates": learner.updates,
            "algorithm": f"{algorithm.__module__}.{algorithm.__qualname__}",
            "metrics": {k: v / max(metrics.get("n", 1.0), 1.0) for k, v in metrics.items() if k != "n"},
        }
