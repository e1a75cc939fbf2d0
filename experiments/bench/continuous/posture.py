"""Which way up a planar MuJoCo runner ran, over a run of ours: for each snapshot an
``experiments.bench.continuous.budget`` run wrote (``<out>/<Env>/rlpar-td3-seed<k>``,
``rlpar-sac-seed<k>`` or ``rlpar-ddpg-seed<k>``), one greedy episode from ``reset(seed=--seed)``, its return, and
the share of its steps with the torso pitched past 90 degrees, upside down.

Why: HalfCheetah has a known local optimum on its back (returns near 1,000-2,500, where
upright runs go past 7,000). A best-return curve cannot tell a run that is still learning
from one that is stuck like that. The pitch is the root's hinge about the y axis (the
``rooty`` joint of HalfCheetah, Hopper and Walker2d), read from the simulator's state.

    python -m experiments.bench.continuous.posture RUN_DIR [RUN_DIR ...] [--env ENV] \\
        [--impl rlpar-td3|rlpar-sac|rlpar-ddpg] [--ours-flags="..."] [--seed 0] [--every K]

One JSON line per snapshot: ``return``, ``upside_down`` (share of steps, 0 = upright),
``mean_abs_pitch`` (radians). ``--env`` and ``--impl`` default to what the bench's layout
says (the parent directory's name, the run directory's prefix); ``--ours-flags`` must
carry the network flags the run used, so that the snapshot loads into the same network.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.bench.tools.emit import emit
from experiments.bench.tools.wallclock import bench_run

IMPLS = ("rlpar-td3", "rlpar-sac", "rlpar-ddpg")
ROOT_PITCH_JOINT = "rooty"


def pitch_reader(env: Any, env_id: str) -> Callable[[], float]:
    """``() -> the torso's pitch`` (radians) of ``env``'s MuJoCo state."""
    unwrapped = getattr(env, "unwrapped", env)
    model, data = getattr(unwrapped, "model", None), getattr(unwrapped, "data", None)
    try:
        address = int(model.joint(ROOT_PITCH_JOINT).qposadr[0])
    except (AttributeError, KeyError, TypeError) as error:
        raise ValueError(f"{env_id} has no MuJoCo root joint {ROOT_PITCH_JOINT!r} to read a pitch from "
                         f"(planar runners have it: HalfCheetah, Hopper, Walker2d)") from error
    return lambda: float(data.qpos[address])


def posture(act: Callable[[np.ndarray], np.ndarray], env: Any, *, env_id: str, seed: int) -> dict[str, float]:
    """One greedy episode of ``act`` (batched: ``(1, obs) -> (1, action)``) from
    ``env.reset(seed=seed)``: its return, and how much of it was upside down."""
    pitch = pitch_reader(env, env_id)
    obs, _ = env.reset(seed=seed)
    total, pitches = 0.0, []
    while True:
        action = np.asarray(act(np.asarray(obs, dtype=np.float32)[None]), dtype=np.float32)[0]
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        pitches.append(abs(pitch()))
        if terminated or truncated:
            break
    angles = np.asarray(pitches)
    return {"return": round(total, 1), "upside_down": round(float((angles > math.pi / 2).mean()), 3),
            "mean_abs_pitch": round(float(angles.mean()), 3), "steps": len(pitches)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories holding snapshots/")
    parser.add_argument("--env", default=None, help="the env id (default: the run directory's parent's name)")
    parser.add_argument("--impl", choices=IMPLS, default=None, help="default: from the run directory's name")
    parser.add_argument("--ours-flags", default="", help="the run's experiments.apex flags (network ones matter)")
    parser.add_argument("--seed", type=int, default=0, help="the episode's reset seed")
    parser.add_argument("--every", type=int, default=1, help="play every K-th snapshot (and always the last)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be >= 1, got {args.every}")
    jobs = []
    for run in args.runs:
        where, impl, paths = bench_run(parser, run, IMPLS, impl=args.impl)
        paths = [p for k, p in enumerate(paths) if k % args.every == 0 or k == len(paths) - 1]
        jobs.append((run, args.env or where, impl, paths))

    import torch

    from envs.registry import EnvFactory
    from experiments.bench.continuous import ours
    from experiments.bench.continuous.budget import algorithm_of

    torch.set_num_threads(1)
    for run, env_id, impl, paths in jobs:
        try:
            env = EnvFactory.from_id(env_id)()
        except Exception as error:  # an unknown id: say which run named it
            parser.error(f"{run}: cannot make env {env_id!r} ({error}); pass --env")
        try:
            pitch_reader(env, env_id)
        except ValueError as error:
            env.close()
            parser.error(f"{run}: {error}")
        load, act = ours.policy(env_id, algorithm=algorithm_of(impl), flags=args.ours_flags, quick=False)
        try:
            for path in paths:
                snap = torch.load(path, weights_only=True)
                load(snap["state"])
                with torch.no_grad():
                    row = posture(act, env, env_id=env_id, seed=args.seed)
                emit({"bench": "posture", "env": env_id, "impl": impl, "run": run,
                      "env_steps": snap["env_steps"], "wall_s": snap["wall_s"], **row})
        finally:
            env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
