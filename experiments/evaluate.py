"""Play a run's trained policy: ``python -m experiments.evaluate RUN_DIR``.

Loads ``RUN_DIR/config.json`` and ``policy.pt`` (or ``policy-best.pt`` with
``--policy best``), rebuilds the env and the network the run used, and runs
``--episodes`` greedy episodes (each on its own env copy, so short episodes do not
count more), printing their mean and standard deviation and one JSON line.
``--video DIR`` also records ``--video-episodes`` episodes with gymnasium's
``RecordVideo`` (the ``video`` extra: ``pip install 'rlpar[video]'``).

Works for every job's run directory (Ape-X, A3C, MADDPG). A run whose env or
network came from Python objects (``Parts``) is evaluated from Python:
``evaluate_run(run_dir, parts=Parts(env=..., network=...))``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments.runtime import Parts
from experiments.runtime.checkpoints import BEST_POLICY, POLICY


def job_of(run_dir: str) -> tuple[Any, Any, dict[str, Any]]:
    """``(job, config, policy payload)`` of a run directory; ValueError naming what is missing."""
    import torch

    from experiments.runtime.cli import load_config

    path = os.path.join(run_dir, POLICY)
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir!r} has no {POLICY} (is it a run directory of a finished or "
                         "stopped run?)")
    payload = torch.load(path, weights_only=True)
    name = payload.get("job")
    try:
        entry = importlib.import_module(f"experiments.{name}")
        roles = importlib.import_module(f"experiments.roles.{name}")
    except ImportError:
        raise ValueError(f"{path}: unknown job {name!r}") from None
    config_cls = next(v for v in vars(entry).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
                      and v.__module__ == entry.__name__
                      and "run" in {f.name for f in dataclasses.fields(v)})
    return roles.JOB, load_config(config_cls, os.path.join(run_dir, "config.json")), payload


def load_run_policy(run_dir: str, *, which: str = "final", parts: Parts | None = None):
    """``(policy, ctx, job)``: the run's greedy policy (``act(obs batch)`` for
    gymnasium envs, the job's own object for others), its job context and job."""
    import torch

    from experiments.runtime.job import JobContext

    job, config, payload = job_of(run_dir)
    if which == "best":
        best = os.path.join(run_dir, BEST_POLICY)
        if not os.path.isfile(best):
            raise ValueError(f"{run_dir!r} has no {BEST_POLICY} (no evaluation ran)")
        payload = torch.load(best, weights_only=True)
    if job.load_policy is None:
        raise ValueError(f"job {job.name!r} cannot load its policy")
    parts = parts or Parts()
    ctx = JobContext(job=job.name, config=config, parts=parts, run_dir=None, started=0.0,
                     env_fn=job.env_fn(config, parts) if job.env_fn is not None else None)
    try:
        act = job.load_policy(ctx, payload["state"])
    except RuntimeError as exc:  # load_state_dict: another network than the default one
        raise ValueError(f"{run_dir}: the saved policy does not fit the job's default network "
                         f"({str(exc).splitlines()[0]}); a run trained with a network factory is "
                         "evaluated with evaluate_run(run_dir, parts=Parts(network=...))") from None
    return act, ctx, job


def evaluate_run(run_dir: str, *, episodes: int = 10, which: str = "final", seed: int = 0,
                 parts: Parts | None = None, video: str | None = None, video_episodes: int = 1) -> dict:
    """Mean and std of ``episodes`` greedy episodes of a run's policy."""
    from algorithms.rollout import evaluate
    from envs import make_vector_env

    act, ctx, job = load_run_policy(run_dir, which=which, parts=parts)
    if job.play is not None:
        if video:
            raise ValueError(f"--video: not available for {job.name} runs")
        returns = np.asarray(job.play(ctx, act, episodes=episodes, seed=seed))
    else:
        env = make_vector_env(ctx.env_fn, num_envs=episodes, num_workers=0, seed=seed)
        try:
            returns = evaluate(act, env, episodes=episodes, seed=seed)
        finally:
            env.close()
    result = {"run_dir": run_dir, "job": job.name, "policy": which, "episodes": episodes,
              "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
              "min_return": float(np.min(returns)), "max_return": float(np.max(returns))}
    if video:
        result["videos"] = record_video(act, ctx.env_fn, video, episodes=video_episodes, seed=seed)
    return result


def record_video(act, env_fn, folder: str, *, episodes: int, seed: int) -> list[str]:
    """Record ``episodes`` greedy episodes as MP4 files in ``folder``."""
    from gymnasium.wrappers import RecordVideo

    try:
        import moviepy  # noqa: F401 - RecordVideo writes with it
    except ImportError:
        raise ValueError("--video needs moviepy: pip install 'rlpar[video]'") from None
    env = _rgb_env(env_fn)
    env = RecordVideo(env, video_folder=folder, episode_trigger=lambda _: True, name_prefix="eval",
                      disable_logger=True)
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                action = act(np.asarray(obs)[None])[0]
                obs, _, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
    finally:
        env.close()
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".mp4"))


def _rgb_env(env_fn):
    """One env of the run that renders frames."""
    from envs.registry import EnvFactory

    inner = getattr(env_fn, "factory", env_fn)
    if isinstance(inner, EnvFactory):
        rgb = dataclasses.replace(inner, env_kwargs={**inner.env_kwargs, "render_mode": "rgb_array"})
        return type(env_fn)(rgb)() if inner is not env_fn else rgb()
    env = env_fn()
    if getattr(env, "render_mode", None) != "rgb_array":
        env.close()
        raise ValueError("--video: this run's env does not render rgb_array frames")
    return env


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("run_dir", help="a run directory (runs/<job>-<date>-<time>-<id>)")
    parser.add_argument("--episodes", type=int, default=10, help="greedy episodes to average")
    parser.add_argument("--policy", choices=["final", "best"], default="final",
                        help="policy.pt (end of the run) or policy-best.pt (best evaluation)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes")
    parser.add_argument("--video", metavar="DIR", default=None, help="also record episodes as MP4 here")
    parser.add_argument("--video-episodes", type=int, default=1, help="episodes to record with --video")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.video_episodes < 1:
        parser.error("--episodes and --video-episodes must be >= 1")
    try:
        result = evaluate_run(args.run_dir, episodes=args.episodes, which=args.policy, seed=args.seed,
                              video=args.video, video_episodes=args.video_episodes)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{result['job']} policy ({args.policy}) of {args.run_dir}: mean return "
          f"{result['mean_return']:.2f} +/- {result['std_return']:.2f} over {args.episodes} episodes")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
