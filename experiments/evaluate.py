"""Play a run's trained policy: ``python -m experiments.evaluate RUN_DIR``.

Loads ``RUN_DIR/config.json`` and ``policy-best.pt`` (the very network the run's best
evaluation played) or, where the run has none (no evaluation ran) or with ``--policy
final``, ``policy.pt`` (the final parameters: on a run that peaked earlier, a worse
network), says which it plays, rebuilds the env and the network the run used, and runs
greedy episodes
(each on its own env copy, episode ``j`` seeded ``seed + j``, so short episodes do not
count more), printing their mean and standard deviation and one JSON line.

By default it replays the evaluation the file records of its own network: the same
seed and number of episodes, so the same episodes, and it prints the recorded return
beside the replayed one (they are equal where the env and the network's arithmetic
are deterministic, e.g. CPU). ``policy-best.pt`` always records one; ``policy.pt``
only when the run's last evaluation was of its final parameters (else it names that
evaluation's version, an earlier network's). ``--seed`` / ``--episodes`` play other
episodes instead (a file that records no evaluation: 10 episodes from seed 0).
``--video DIR`` also records ``--video-episodes`` episodes with gymnasium's
``RecordVideo`` (the ``video`` extra: ``pip install 'rlpar[video]'``).

Works for every job's run directory (Ape-X, IMPALA, A3C, PPO, PQN, MADDPG). A run whose env or
network came from Python objects (``Parts``) is evaluated from Python:
``evaluate_run(run_dir, parts=Parts(env=..., network=...))``. (MADDPG with
``--ensemble-size`` above 1 draws each episode's sub-policies at random, so its
replay plays other draws than the run's.)
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

    if not os.path.isdir(run_dir):
        raise ValueError(f"{run_dir!r}: no such directory")
    path = os.path.join(run_dir, POLICY)
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir!r} has no {POLICY} (is it a run directory of a finished or "
                         "stopped run?)")
    payload = torch.load(path, weights_only=True)
    name = payload.get("job")
    try:
        entry = importlib.import_module(f"experiments.{name}")
    except ImportError:
        raise ValueError(f"{path}: unknown job {name!r}") from None
    job = getattr(entry, "JOB", None) or entry.job()
    config_cls = next(v for v in vars(entry).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
                      and v.__module__ == entry.__name__
                      and "run" in {f.name for f in dataclasses.fields(v)})
    return job, load_config(config_cls, os.path.join(run_dir, "config.json")), payload


DEFAULT_EPISODES, DEFAULT_SEED = 10, 0  # for a file that records no evaluation of its network


POLICIES = ("best", "final")


def which_policy(run_dir: str, which: str | None) -> str:
    """``which`` ("best" or "final"); None: "best" where the run has ``policy-best.pt``
    (the network its best evaluation played), else "final"."""
    if which is None:
        return "best" if os.path.isfile(os.path.join(run_dir, BEST_POLICY)) else "final"
    if which not in POLICIES:
        raise ValueError(f"which must be one of {list(POLICIES)} or None, got {which!r}")
    return which


def load_run_policy(run_dir: str, *, which: str | None = None, parts: Parts | None = None):
    """``(policy, ctx, job)``: the run's greedy policy (``act(obs batch)`` for
    gymnasium envs, the job's own object for others; ``which``: see
    :func:`which_policy`), its job context and job."""
    act, ctx, job, _ = _load(run_dir, which=which_policy(run_dir, which), parts=parts)
    return act, ctx, job


def _load(run_dir: str, *, which: str, parts: Parts | None):
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
    parts.check_given(run_dir, doing="evaluate", how="experiments.evaluate.evaluate_run(run_dir, parts=Parts(...))")
    ctx = JobContext(job=job.name, config=config, parts=parts, run_dir=None, started=0.0,
                     env_fn=job.env_fn(config, parts) if job.env_fn is not None else None)
    try:
        act = job.load_policy(ctx, payload["state"])
    except RuntimeError as exc:  # load_state_dict: another network than the default one
        raise ValueError(f"{run_dir}: the saved policy does not fit the job's default network "
                         f"({str(exc).splitlines()[0]}); a run trained with a network factory is "
                         "evaluated with evaluate_run(run_dir, parts=Parts(network=...))") from None
    return act, ctx, job, payload


def evaluate_run(run_dir: str, *, episodes: int | None = None, which: str | None = None, seed: int | None = None,
                 parts: Parts | None = None, video: str | None = None, video_episodes: int = 1) -> dict:
    """Returns of ``episodes`` greedy episodes of a run's policy (``which``: "best",
    "final", or None: the best where the run has one, see :func:`which_policy`; the
    result's ``policy`` says which played) on envs seeded ``seed + j``, and what the
    file records. ``episodes`` and
    ``seed`` left None replay the file's recorded evaluation of its network (see the
    module docstring); ``recorded``: that evaluation (None if the file has none),
    ``replays_recorded``: whether these are its episodes, ``matches_recorded``: then,
    whether the returns are the same (else None)."""
    from algorithms.rollout import evaluate
    from envs import make_vector_env
    from experiments.runtime.envs import learning_rewards, reward_bound

    which = which_policy(run_dir, which)
    act, ctx, job, payload = _load(run_dir, which=which, parts=parts)
    recorded = payload.get("evaluation")  # files from before it was recorded have none
    replayable = recorded is not None and recorded.get("seed") is not None
    episodes = episodes if episodes is not None else recorded["episodes"] if replayable else DEFAULT_EPISODES
    seed = seed if seed is not None else recorded["seed"] if replayable else DEFAULT_SEED
    if job.play is not None:
        if video:
            raise ValueError(f"--video: not available for {job.name} runs")
        returns = np.asarray(job.play(ctx, act, episodes=episodes, seed=seed))
    else:
        # The rewards the policy learned from (one that takes the last reward sees them);
        # the returns count the game's.
        env = learning_rewards(make_vector_env(ctx.env_fn, num_envs=episodes, num_workers=0, seed=seed),
                               ctx.config.env)
        try:
            returns = evaluate(act, env, episodes=episodes, seed=seed)
        finally:
            env.close()
    replays = replayable and (seed, episodes) == (recorded["seed"], recorded["episodes"])
    result = {"run_dir": run_dir, "job": job.name, "policy": which, "episodes": episodes, "seed": seed,
              "version": payload.get("version"), "env_steps": payload.get("env_steps"),
              "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
              "min_return": float(np.min(returns)), "max_return": float(np.max(returns)),
              "returns": [float(r) for r in returns], "recorded": recorded,
              "last_evaluation": payload.get("last_evaluation"), "replays_recorded": replays,
              "matches_recorded": [float(r) for r in returns] == recorded["returns"] if replays else None}
    if video:
        result["videos"] = record_video(act, ctx.env_fn, video, episodes=video_episodes, seed=seed,
                                        reward_clip=reward_bound(ctx.config.env))
    return result


def describe(result: dict[str, Any]) -> list[str]:
    """The lines ``main`` prints: the returns played, then what the file records."""
    version = f", version {result['version']}" if result["version"] is not None else ""
    played = {"best": f"the best evaluation's network, {BEST_POLICY}",
              "final": f"the final network, {POLICY}"}[result["policy"]]
    lines = [f"{result['job']} policy ({played}{version}) of {result['run_dir']}: mean return "
             f"{result['mean_return']:.2f} +/- {result['std_return']:.2f} over {result['episodes']} "
             f"episodes from seed {result['seed']}"]
    recorded, last = result["recorded"], result["last_evaluation"]
    if recorded is not None:
        head = (f"recorded in the run (at {recorded['env_steps']:,} env steps): mean return "
                f"{recorded['mean']:.2f} +/- {recorded['std']:.2f}")
        if result["matches_recorded"]:
            lines.append(f"{head} over the same episodes: replayed exactly")
        elif result["replays_recorded"]:
            lines.append(f"{head} over the same episodes: NOT reproduced (the env or the network's "
                         "arithmetic is not deterministic here, e.g. on a GPU)")
        elif recorded.get("seed") is not None:
            lines.append(f"{head} over {recorded['episodes']} episodes from seed {recorded['seed']} "
                         "(not the same set of episodes; leave out --seed and --episodes to replay them)")
        else:
            lines.append(head)
    elif last is not None:
        lines.append(f"not evaluated in the run; its last evaluation (mean return {last['mean']:.2f}) "
                     f"played version {last['version']}, an earlier network")
    return lines


def record_video(act, env_fn, folder: str, *, episodes: int, seed: int,
                 reward_clip: float = np.inf) -> list[str]:
    """Record ``episodes`` greedy episodes as MP4 files in ``folder`` (a policy that
    takes the last reward gets it clipped to ``+-reward_clip``, as it learned)."""
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
            if hasattr(act, "episodes_started"):  # a policy with memory starts each episode afresh
                act.episodes_started(np.ones(1, dtype=bool))
            done = False
            while not done:
                action = act(np.asarray(obs)[None])[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                if hasattr(act, "rewarded"):  # a policy that takes the previous reward
                    act.rewarded(np.clip(np.asarray([reward], dtype=np.float32), -reward_clip, reward_clip))
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run directory (runs/<job>-<date>-<time>-<id>)")
    parser.add_argument("--episodes", type=int, default=None,
                        help="greedy episodes to average (default: the recorded evaluation's, else "
                             f"{DEFAULT_EPISODES})")
    parser.add_argument("--policy", choices=POLICIES, default=None,
                        help=f"best: {BEST_POLICY}, the network the run's best evaluation played (the default, "
                             f"where the run has one); final: {POLICY}, the parameters at the end of the run")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"seed of the episodes (default: the recorded evaluation's, else {DEFAULT_SEED})")
    parser.add_argument("--video", metavar="DIR", default=None, help="also record episodes as MP4 here")
    parser.add_argument("--video-episodes", type=int, default=1, help="episodes to record with --video (default: 1)")
    args = parser.parse_args(argv)
    if (args.episodes is not None and args.episodes < 1) or args.video_episodes < 1:
        parser.error("--episodes and --video-episodes must be >= 1")
    try:
        result = evaluate_run(args.run_dir, episodes=args.episodes, which=args.policy, seed=args.seed,
                              video=args.video, video_episodes=args.video_episodes)
    except ValueError as exc:
        parser.error(str(exc))
    print("\n".join(describe(result)))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
