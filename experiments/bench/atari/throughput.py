"""Env steps per second on an Atari game, per job, at three depths: the envs alone, with
acting, with learning. One JSON line each.

    python -m experiments.bench.atari.throughput                      # Pong, every job
    python -m experiments.bench.atari.throughput --seconds 10 --jobs rlpar-impala,rlpar-ppo
    python -m experiments.bench.atari.throughput --jobs rlpar-ppo --flags 'rlpar-ppo=--cnn small'

- ``envs``: one protocol env stepped with uniformly random actions in one process:
  the ALE's per-core ceiling on this machine (no job reaches it on one core);
- ``acting`` (per job): the job's frames-default number of envs (``--num-envs`` of
  its frames defaults) stepped in one process, each step's actions from the job's
  network on the batch of observations (inference only, one torch thread); the job's
  ``--flags`` apply (``--cnn``, ``--num-envs``), as they do to learning;
- ``learning`` (per job): the job itself, ``--serial`` (acting and learning in one
  process), twice: to :data:`WARMUP_STEPS` env steps and to ``WARMUP_STEPS`` plus the
  steps its acting rate covers in ``--seconds``; the rate is the difference of the
  two runs' env steps (and updates) over the difference of their wall-clock, so
  start-up (imports, the world, a synchronous job's first rollout) cancels out.
  Ape-X learns from its default 1,000th env step; PQN's frames default rollout is
  4,096 steps, so its window holds whole rollouts only when ``--seconds`` is long.

Every line has the load average before and after: on a shared machine the numbers
are depressed by whatever else runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from experiments.bench.atari import protocol
from experiments.bench.atari.budget import OURS, impl_flags
from experiments.bench.tools import wallclock as wc
from experiments.bench.tools.emit import emit

BENCH = "atari-throughput"
WARMUP_STEPS = 2_000  # past Ape-X's learning start (1,000) and a PPO rollout (8 x 128)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--env-id", default="ALE/Pong-v5", help="an ALE v5 id")
    parser.add_argument("--jobs", default=",".join(OURS), help=f"comma-separated, from {list(OURS)}")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per measurement (default 8)")
    parser.add_argument("--depths", default="envs,acting,learning", help="comma-separated: envs, acting, learning")
    parser.add_argument("--flags", action="append", default=[], metavar="IMPL=FLAGS", help=(
        "extra job flags for one of ours, e.g. 'rlpar-ppo=--cnn small'; repeatable"))
    parser.add_argument("--out", default=None, help="also append the lines to <out>/results.jsonl")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    jobs = wc.choose(parser, "--jobs", args.jobs, OURS, what="job")
    depths = wc.choose(parser, "--depths", args.depths, ("envs", "acting", "learning"), what="depth")
    if not 0 < args.seconds < 3600:
        parser.error(f"--seconds must be in (0, 3600), got {args.seconds}")
    try:
        flags = impl_flags(args.flags)
    except ValueError as exc:
        parser.error(str(exc))
    from experiments.bench.atari import ours

    for job, given in flags.items():
        ours.config(job, given)  # a flag the job does not take: exit 2 before any measurement
    problem = protocol.check_env_id(args.env_id)
    if problem:
        parser.error(problem)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    import torch

    torch.set_num_threads(1)
    common = {"bench": BENCH, "env_id": args.env_id, "cpu_count": os.cpu_count()}
    if "envs" in depths:
        emit({**common, "depth": "envs", **measured(lambda: envs_alone(args.env_id, args.seconds))},
             results_dir=args.out)
    for job in jobs:
        from experiments.bench.atari import ours

        missing = ours.missing(job)
        if missing:
            emit({**common, "job": job, "skipped": missing}, results_dir=args.out)
            continue
        rate, given = None, flags.get(job, "")
        if "acting" in depths:
            line = {**common, "depth": "acting", "job": job, "flags": given,
                    **measured(functools.partial(acting, job, args.env_id, args.seconds, flags=given))}
            rate = line["env_steps_per_s"]
            emit(line, results_dir=args.out)
        if "learning" in depths:
            run = functools.partial(learning, job, args.env_id, args.seconds, acting_rate=rate, flags=given)
            emit({**common, "depth": "learning", "job": job, "flags": given, **measured(run)}, results_dir=args.out)
    return 0


def measured(run: Any) -> dict[str, Any]:
    start = wc.loadavg()
    figures = run()
    return {**figures, "loadavg_start": start, "loadavg_end": wc.loadavg()}


def envs_alone(env_id: str, seconds: float) -> dict[str, Any]:
    env = protocol.make_env(env_id)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    n = int(env.action_space.n)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for action in rng.integers(n, size=100):
            _, _, terminated, truncated, _ = env.step(int(action))
            if terminated or truncated:
                env.reset()
        steps += 100
    elapsed = time.perf_counter() - t0
    env.close()
    return {"num_envs": 1, "env_steps": steps, "env_steps_per_s": round(steps / elapsed, 1)}


def acting_network(job: str, env_id: str, flags: str = ""):
    """``(num_envs, act(obs) -> actions)``: the job's frames defaults with ``flags``, and
    its acting path."""
    import torch

    from experiments.bench.atari import ours
    from experiments.runtime import Parts

    module = __import__(ours.JOBS[job], fromlist=["env_defaults"])
    cfg = ours.config(job, flags, env_id)
    module.env_defaults(cfg, Parts())
    obs_space, act_space = ours.spaces(env_id)
    num_envs = int(cfg.env.num_envs)
    if job == "rlpar-apex":
        load, scores = ours.policy(job, flags, env_id, run_dir="")
        return num_envs, lambda obs: np.asarray(scores(obs).argmax(-1))
    if job == "rlpar-impala":
        from algorithms.impala import IMPALA

        agent = IMPALA(observation_space=obs_space, action_space=act_space, config=cfg.learn, device="cpu")
    elif job == "rlpar-ppo":
        from algorithms.ppo import PPO

        agent = PPO(observation_space=obs_space, action_space=act_space, config=cfg.learn, device="cpu", seed=0)
    else:
        from algorithms.pqn import PQN

        agent = PQN(num_actions=int(act_space.n), observation_shape=obs_space.shape, config=cfg.learn, device="cpu")

    def act(obs):
        with torch.no_grad():
            return agent.act(obs)

    return num_envs, act


def acting(job: str, env_id: str, seconds: float, *, flags: str = "") -> dict[str, Any]:
    num_envs, act = acting_network(job, env_id, flags)
    envs = [protocol.make_env(env_id) for _ in range(num_envs)]
    obs = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        actions = act(obs)
        for i, env in enumerate(envs):
            o, _, terminated, truncated, _ = env.step(int(actions[i]))
            obs[i] = env.reset()[0] if terminated or truncated else o
        steps += num_envs
    elapsed = time.perf_counter() - t0
    for env in envs:
        env.close()
    return {"num_envs": num_envs, "env_steps": steps, "env_steps_per_s": round(steps / elapsed, 1)}


def serial_run(job: str, env_id: str, max_env_steps: int, flags: str = "") -> dict[str, Any]:
    from experiments.bench.atari import ours

    with tempfile.TemporaryDirectory() as log_dir:
        command = [sys.executable, "-m", ours.JOBS[job], "--env-id", env_id, "--serial", "--log-dir", log_dir,
                   "--max-env-steps", str(max_env_steps), "--max-seconds", "3600", "--eval-every", str(2**62),
                   "--status-every", "0", "--checkpoint-every", "0", *shlex.split(flags)]
        out = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        runs = [os.path.join(log_dir, d) for d in os.listdir(log_dir)]
        if out.returncode or not runs:
            tail = " | ".join(out.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"{job}: exit {out.returncode}: {tail}")
        with open(os.path.join(runs[0], "summary.json")) as f:
            return json.load(f)


def learning(job: str, env_id: str, seconds: float, *, acting_rate: float | None = None,
             flags: str = "") -> dict[str, Any]:
    window = int(max(1_000, (acting_rate or 500.0) * seconds))
    try:
        short = serial_run(job, env_id, WARMUP_STEPS, flags)
        long = serial_run(job, env_id, WARMUP_STEPS + window, flags)
    except RuntimeError as exc:
        return {"error": str(exc)}
    wall = long["wall_s"] - short["wall_s"]
    steps = long["env_steps"] - short["env_steps"]
    updates = long.get("updates", 0) - short.get("updates", 0)
    return {"serial": True, "window_env_steps": steps, "window_updates": updates, "window_s": round(wall, 2),
            "env_steps_per_s": round(steps / wall, 1) if wall > 0 else None,
            "updates_per_s": round(updates / wall, 2) if wall > 0 else None,
            "startup_s": wc.rounded(short.get("startup_s"), 2)}


if __name__ == "__main__":
    sys.exit(main())
