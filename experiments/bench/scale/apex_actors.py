"""Actor scaling: the real Ape-X job (``experiments.apex.run``) with 1 to N actors on
a :class:`~experiments.bench.tools.sleeping_env.SleepingEnv`, against one learner.

Each actor is :class:`RecordingActor` (passed as the job's actor class, the way a
user's variant is): an :class:`~algorithms.apex.ApexActor` that also records what the
runtime costs it (its parameter pulls, their time and size, its adds, its CPU) and a
wall-clock trace of its env steps, written to ``<out_dir>/actor-<index>.json`` after
every add. Throughput is taken from those traces over the window in which every
actor was running (the job's own ``env_steps_per_s`` also counts the ramp while the
later actors still start). Used by ``experiments.bench.scale.apex`` and the job's
8-actor test.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

from algorithms.dqn import ApexActor


class RecordingActor(ApexActor):
    """An ApexActor that records its pulls, adds, CPU and env-step trace; see the
    module docstring. ``out_dir`` is set on the subclass :func:`recording_actor` makes."""

    out_dir = ""

    def __init__(self, **kwargs: Any) -> None:
        self.pulls = self.pulls_loaded = 0
        self.pull_seconds = self.loaded_seconds = 0.0
        self.versions: list[int] = []
        self.trace: list[tuple[float, int, float]] = []  # (time, env steps, CPU seconds)
        self._cpu0 = time.process_time()
        super().__init__(**kwargs)

    def sync(self) -> bool:
        t0 = time.perf_counter()
        loaded = super().sync()
        elapsed = time.perf_counter() - t0
        self.pulls += 1
        self.pull_seconds += elapsed
        if loaded:
            self.pulls_loaded += 1
            self.loaded_seconds += elapsed
            self.versions.append(self.version)
        return loaded

    def step(self) -> int:
        if not self.trace:  # the trace starts at the first step, not at the first add
            self.trace.append((time.time(), self.env_steps, time.process_time() - self._cpu0))
        return super().step()

    def flush(self) -> None:
        super().flush()
        self.trace.append((time.time(), self.env_steps, time.process_time() - self._cpu0))
        self._write()

    @functools.cache  # noqa: B019 - one actor per process
    def _state_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.dqn.policy_state().values())

    def _write(self) -> None:
        if not self.out_dir:
            return
        record = {"index": self.index, "env_steps": self.env_steps,
                  "transitions": self.transitions_added, "pulls": self.pulls,
                  "pulls_loaded": self.pulls_loaded, "pull_seconds": self.pull_seconds,
                  "loaded_seconds": self.loaded_seconds, "versions": self.versions,
                  "state_bytes": self._state_bytes(),
                  "cpu_s": time.process_time() - self._cpu0, "trace": self.trace}
        path = os.path.join(self.out_dir, f"actor-{self.index}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)


def recording_actor(out_dir: str) -> type:
    """A RecordingActor subclass that writes to ``out_dir`` (shipped to every rank
    with the job's parts: cloudpickle sends a class made here by value)."""
    return type("RecordingActorIn", (RecordingActor,), {"out_dir": out_dir})


def read_records(out_dir: str) -> list[dict[str, Any]]:
    records = []
    for path in sorted(glob.glob(os.path.join(out_dir, "actor-*.json"))):
        with open(path) as f:
            records.append(json.load(f))
    return sorted(records, key=lambda r: r["index"])


def steady(records: list[dict[str, Any]], *, skip: float = 0.2) -> dict[str, float]:
    """Over the window in which every actor ran (its first ``skip`` dropped as
    warm-up): env steps/s of all actors together, the actors' CPU per env step, and
    the window's length in seconds."""
    traces = [np.asarray(r["trace"], dtype=np.float64) for r in records if len(r["trace"]) >= 2]
    nan = {"env_steps_per_s": float("nan"), "cpu_ms_per_env_step": float("nan"), "window_s": 0.0}
    if len(traces) < len(records) or not traces:
        return nan
    start = max(t[0, 0] for t in traces)
    end = min(t[-1, 0] for t in traces)
    start += skip * max(0.0, end - start)
    if end - start <= 0:
        return nan

    def delta(column: int) -> float:
        return sum(np.interp(end, t[:, 0], t[:, column]) - np.interp(start, t[:, 0], t[:, column])
                   for t in traces)

    steps = delta(1)
    return {"env_steps_per_s": float(steps / (end - start)),
            "cpu_ms_per_env_step": float(1e3 * delta(2) / steps) if steps else float("nan"),
            "window_s": float(end - start)}


@dataclasses.dataclass(frozen=True)
class ScalingPoint:
    actors: int
    seconds: float  # the job's wall-clock budget (world start included)
    # The job's env step budget (all actors together); a smoke run stops on it, the
    # time budget then only bounds it.
    max_env_steps: int = 10**12
    step_s: float = 0.04  # each env step sleeps this long
    num_envs: int = 4  # env copies per actor (stepped in the actor's process)
    frames: bool = True  # 4x84x84 frames and the Nature CNN, else (4,) vectors and an MLP
    hidden: str = "64,64"  # MLP sizes for vector observations
    batch_size: int = 32
    updates_per_step: float = 0.025
    learning_starts: int = 200
    replay_capacity: int = 10_000
    push_every: int = 8
    pull_every: int = 64
    seed: int = 0


def job_config(point: ScalingPoint):
    from experiments.apex import ApexJobConfig
    from experiments.runtime.cli import apply_overrides

    config = ApexJobConfig()
    apply_overrides(config, {
        "num_actors": point.actors, "num_envs": point.num_envs, "env_workers": 0,
        "max_seconds": point.seconds, "max_env_steps": point.max_env_steps, "eval_every": 10**12,
        "eval_episodes": 1, "target_return": 1e12, "log_dir": "none", "status_every": 0.0,
        "rpc_timeout": 60.0, "checkpoint_every": 0.0, "replay_capacity": point.replay_capacity,
        "batch_size": point.batch_size, "learning_starts": point.learning_starts,
        "updates_per_step": point.updates_per_step, "push_every": point.push_every,
        "pull_every": point.pull_every, "hidden": point.hidden, "seed": point.seed,
        "n_step": 3})  # the job's default for these observations, set here for pacing(config)
    return config


def run_point(point: ScalingPoint, out_dir: str | None = None) -> tuple[dict[str, Any], list[dict]]:
    """Run the job once; its summary and every actor's record."""
    from experiments.apex import run
    from experiments.bench.tools.sleeping_env import SleepingEnv
    from experiments.runtime import Parts

    env = functools.partial(SleepingEnv, step_s=point.step_s, frames=point.frames)
    with tempfile.TemporaryDirectory(prefix="apex-scale-") as tmp:
        out = out_dir or tmp
        summary = run(job_config(point), parts=Parts(env=env, actor=recording_actor(out)), quiet=True)
        return summary, read_records(out)


def scaling_line(point: ScalingPoint, summary: dict[str, Any], records: list[dict],
                 single_rate: float | None) -> dict[str, Any]:
    """One JSON-ready line of a scaling point (``single_rate``: the 1-actor rate)."""
    window = steady(records)
    rate = window["env_steps_per_s"]
    loaded = sum(r["pulls_loaded"] for r in records)
    wall = summary["wall_s"] - summary["startup_s"]
    state_mb = records[0]["state_bytes"] / 1e6 if records else float("nan")
    nominal = point.actors / point.step_s  # an actor's vector step sleeps num_envs * step_s
    return {
        "bench": "apex_scale", "case": "actor_scaling", "actors": point.actors,
        "network": "nature_cnn" if point.frames else f"mlp{point.hidden}",
        "env_steps_per_s": round(rate, 1), "window_s": round(window["window_s"], 1),
        "sleep_bound_env_steps_per_s": round(nominal, 1),
        "linear_fraction": round(rate / (point.actors * single_rate), 3) if single_rate else 1.0,
        "job_env_steps_per_s": round(summary["env_steps_per_s"], 1),
        "updates_per_s": round(summary["updates_per_s"], 2), "batch_size": point.batch_size,
        "learner_wait_fraction": round(summary["wait_fraction"], 3),
        "replay_ratio": round(summary["updates"] * point.batch_size / max(1, summary["env_steps"]), 3),
        "state_mb": round(state_mb, 2),
        "pulls_loaded_per_actor_per_s": round(loaded / max(1e-9, wall) / point.actors, 3),
        "pull_ms": round(1e3 * sum(r["loaded_seconds"] for r in records) / max(1, loaded), 2),
        "empty_pull_ms": round(1e3 * sum(r["pull_seconds"] - r["loaded_seconds"] for r in records)
                               / max(1, sum(r["pulls"] - r["pulls_loaded"] for r in records)), 3),
        "actor_cpu_ms_per_env_step": round(window["cpu_ms_per_env_step"], 3),
        "reports_per_s": round(summary["actor_reports"] / max(1e-9, wall), 1),
        "startup_s": round(summary["startup_s"], 1),
    }
