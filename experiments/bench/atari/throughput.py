"""Env steps per second on an Atari game, per job, at three depths: the envs alone, with
acting, with learning. One JSON line each.

    python -m experiments.bench.atari.throughput                      # Pong, every job, ~90 s
    python -m experiments.bench.atari.throughput --seconds 10 --jobs rlpar-impala,rlpar-ppo

- ``envs``: one protocol env stepped with uniformly random actions in one process:
  the ALE's per-core ceiling on this machine (no job reaches it on one core);
- ``acting`` (per job): the job's frames-default number of envs (``--num-envs`` of
  its frames defaults) stepped in one process, each step's actions from the job's
  network on the batch of observations (inference only, one torch thread);
- ``learning`` (per job): the job itself, ``--serial`` (acting and learning in one
  process), with ``--max-seconds`` of ``--seconds`` plus :data:`STARTUP_S` (the job's
  budget counts its start-up); the rates are its env steps and updates over the time
  after its start-up (``after_startup_s``). The job's own ``startup_s`` differs by
  program (the synchronous ones count their first rollout in it), so the line keeps
  every figure. Ape-X starts learning after its
  default 1,000 env steps, PQN and PPO after their first rollout (PQN's frames
  default is 128 envs x 32 steps: a 4,096-step rollout, so a short window may hold
  few updates; the line says how many).

Every line has the load average before and after: on a shared machine the numbers
are depressed by whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from experiments.bench.atari import protocol
from experiments.bench.atari.budget import OURS
from experiments.bench.tools import wallclock as wc
from experiments.bench.tools.emit import emit

BENCH = "atari-throughput"
STARTUP_S = 10.0  # allowance for a serial job's start-up within its --max-seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--env-id", default="ALE/Pong-v5", help="an ALE v5 id")
    parser.add_argument("--jobs", default=",".join(OURS), help=f"comma-separated, from {list(OURS)}")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per measurement (default 8)")
    parser.add_argument("--depths", default="envs,acting,learning", help="comma-separated: envs, acting, learning")
    parser.add_argument("--out", default=None, help="also append the lines to <out>/results.jsonl")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    jobs = wc.choose(parser, "--jobs", args.jobs, OURS, what="job")
    depths = wc.choose(parser, "--depths", args.depths, ("envs", "acting", "learning"), what="depth")
    if not 0 < args.seconds < 3600:
        parser.error(f"--seconds must be in (0, 3600), got {args.seconds}")
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
        if "acting" in depths:
            emit({**common, "depth": "acting", "job": job, **measured(lambda job=job: acting(job, args.env_id, args.seconds))},
                 results_dir=args.out)
        if "learning" in depths:
            emit({**common, "depth": "learning", "job": job,
                  **measured(lambda job=job: learning(job, args.env_id, args.seconds))}, results_dir=args.out)
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


def acting_network(job: str, env_id: str):
    """``(num_envs, act(obs) -> actions)``: the job's frames defaults and its acting path."""
    import torch

    from experiments.bench.atari import ours
    from experiments.runtime import Parts

    module = __import__(ours.JOBS[job], fromlist=["env_defaults"])
    cfg = ours.config(job, "", env_id)
    module.env_defaults(cfg, Parts())
    obs_space, act_space = ours.spaces(env_id)
    num_envs = int(cfg.env.num_envs)
    if job == "rlpar-apex":
        load, scores = ours.policy(job, "", env_id, run_dir="")
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


def acting(job: str, env_id: str, seconds: float) -> dict[str, Any]:
    num_envs, act = acting_network(job, env_id)
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


def learning(job: str, env_id: str, seconds: float) -> dict[str, Any]:
    from experiments.bench.atari import ours

    with tempfile.TemporaryDirectory() as log_dir:
        command = [sys.executable, "-m", ours.JOBS[job], "--env-id", env_id, "--serial", "--log-dir", log_dir,
                   "--max-seconds", str(seconds + STARTUP_S), "--eval-every", str(2**62), "--status-every", "0",
                   "--checkpoint-every", "0"]
        # Learning time only: the job's budget counts from its own start, after imports.
        out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 300)
        runs = [os.path.join(log_dir, d) for d in os.listdir(log_dir)]
        if out.returncode or not runs:
            tail = " | ".join(out.stderr.strip().splitlines()[-3:])
            return {"error": f"exit {out.returncode}: {tail}"}
        with open(os.path.join(runs[0], "summary.json")) as f:
            summary = json.load(f)
    keys = ("env_steps", "updates", "startup_s", "wall_s")
    figures = {k: wc.rounded(summary.get(k), 2) for k in keys}
    after = (summary.get("wall_s") or seconds + STARTUP_S) - (summary.get("startup_s") or 0.0)
    rates = ({"env_steps_per_s": round(summary["env_steps"] / after, 1),
              "updates_per_s": round(summary.get("updates", 0) / after, 2)} if after > 0 else {})
    return {"serial": True, **figures, "after_startup_s": round(after, 2), **rates,
            "job_env_steps_per_s": wc.rounded(summary.get("env_steps_per_s"), 1)}


if __name__ == "__main__":
    sys.exit(main())
