"""Single-process PPO (:mod:`algorithms.ppo`): time to solve CartPole-v1, and a
MinAtar return curve.

``python -m experiments.bench.learning.ppo_single cartpole [--case cleanrl] [--seeds 3] [--budget 180]``
``python -m experiments.bench.learning.ppo_single minatar [--game Breakout] [--minutes 4]``

One process, one torch thread, rlpar's in-process vector env (gymnasium's
next-step autoreset), :class:`algorithms.rollout.RolloutCollector` and ``PPO.update``
in turn: the loop of CleanRL's ``ppo.py``, without a job around it.

CartPole: every ``--eval-every`` env steps (2,048: every other update of 8 x 128) (checked after each update), 20 greedy
episodes (one per env of a 20-env vector env, each env's first episode); a run is
solved when their mean is at least 475. ``time_to_solve_s`` runs from the start of
training (after imports and env construction) and includes the evaluations;
``train_s`` leaves them out. A run that does not solve within ``--budget`` seconds
reports its budget and steps so far. Cases: ``cleanrl`` is CleanRL's CartPole
settings (its ``ppo.py`` defaults) with 8 envs (8 x 128 steps, lr 2.5e-4 annealed over 500k env steps, 4
epochs of 4 minibatches); the others are what was fastest here (see the results).
Flags after the case override it (``--envs``, ``--steps``, ``--lr`` ...).

MinAtar: the default conv network (Young & Tian 2019's torso) on ``MinAtar/<Game>-v0``
(all six actions, the paper's protocol) for ``--minutes``; one line per
``--curve-every`` env steps with the mean return of the training episodes that ended
in that window and env steps per second, then a final evaluation of the sampling
policy over 20 episodes (capped at 10,000 steps each).

Prints one JSON line per run (and per curve point) and one summary line per case.
Not a unit test.

Recorded (issue 32; 2 shared CPU cores, other engineers' jobs running, 1 torch thread):

CartPole, seeds 0-19 per case, eval every 2,048 env steps (load average 4.3 before,
2.4 after), env steps / seconds to solve (evaluations included; training alone in
brackets), median (quartiles, max); all 40 runs solved:

- ``cleanrl`` (8 x 128, lr 2.5e-4 annealed over 500k env steps): 27,159 (21,015-45,490,
  134,280) / 2.1 s (1.5-3.7, 10.9) [1.5 s]; about 18,000 env steps/s collect + update.
- ``fast`` (8 x 128, lr 1e-3 constant): 16,678 (9,049-27,364, 64,026) / 1.4 s (0.75-2.3,
  5.0) [0.9 s].
- The sweep that picked it (seeds 0-9, eval every 5,000, load 4-6, median seconds):
  cleanrl 3.6; lr 1e-3 with 8 x 128 1.7 (constant) or 2.1 (annealed over 200k), 8 x 64
  4.7, 8 x 32 3.0, 4 x 128 6.4, 16 x 64 4.3; lr 2.5e-3 4.1; 2 minibatches 2.7. More
  updates per env step cost more here than they save: an update of 16 minibatches of
  256 takes about as long as collecting its 1,024 steps.

MinAtar Breakout-v0, seed 0, 4 minutes, 8 x 128, otherwise PPOConfig defaults (load
2.3-3.6), training-episode return by env steps:

- ``--case minatar`` (lr 1e-3 annealed over 2M env steps): 2.8 at 100k, 5.8 at 200k,
  8.0 at 400k, 10.3 at 700k, 11.4 at 1.1M; 1,162,029 env steps at 4,840/s; final
  evaluation of the sampling policy 12.4 (20 episodes).
- lr 5e-4 annealed over 1.2M: 1.8 at 50k, 5.0 at 250k, then flat at 5.2-5.7 to 1.5M;
  1,542,125 env steps at 6,425/s (lower load); final evaluation 5.5.

    python -m experiments.bench.learning.ppo_single cartpole --case fast --seeds 20
    python -m experiments.bench.learning.ppo_single minatar --minutes 4
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import time
from typing import Any

from experiments.bench.tools.emit import emit

BENCH = "ppo_single"
TARGET = 475.0
# name: (num_envs, n_steps, PPOConfig overrides, anneal over this many env steps)
CASES: dict[str, tuple[int, int, dict[str, Any], int | None]] = {
    "cleanrl": (8, 128, {}, 500_000),
    "fast": (8, 128, {"lr": 1e-3}, None),
    "minatar": (8, 128, {"lr": 1e-3}, 2_000_000),
}


def _setup(env_id: str, num_envs: int, n_steps: int, overrides: dict[str, Any], anneal_steps: int | None,
           seed: int) -> tuple[Any, Any, Any]:
    import torch

    from algorithms.ppo import PPO, PPOConfig
    from algorithms.rollout import RolloutCollector
    from envs import make_vector_env
    from envs.registry import make_env

    torch.set_num_threads(1)
    # make_env: MinAtar's v0 is the paper's protocol, not an outdated version (no warning).
    env = make_vector_env(functools.partial(make_env, env_id), num_envs=num_envs, num_workers=0)
    if anneal_steps is not None:
        overrides = {**overrides, "lr_anneal_updates": max(1, anneal_steps // (num_envs * n_steps))}
    config = PPOConfig(**overrides)
    agent = PPO(observation_space=env.single_observation_space, action_space=env.single_action_space,
                config=config, device="cpu", seed=seed, sample_seed=seed)
    collector = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=n_steps, seed=seed)
    return agent, collector, config


def run_cartpole(*, seed: int, num_envs: int, n_steps: int, overrides: dict[str, Any],
                 anneal_steps: int | None, budget: float, eval_every: int) -> dict[str, Any]:
    from algorithms.rollout import evaluate
    from envs import make_vector_env

    agent, collector, config = _setup("CartPole-v1", num_envs, n_steps, overrides, anneal_steps, seed)
    eval_env = make_vector_env("CartPole-v1", num_envs=20, num_workers=0)
    started = time.perf_counter()
    eval_s, next_eval, evals, best, solved_at = 0.0, eval_every, 0, float("-inf"), None
    while time.perf_counter() - started < budget:
        agent.update(collector.collect())
        if collector.env_steps < next_eval:
            continue
        t0 = time.perf_counter()
        returns = evaluate(lambda obs: agent.act(obs, explore=False), eval_env, episodes=20,
                           seed=10_000 * (seed + 1) + evals)
        eval_s += time.perf_counter() - t0
        evals, next_eval = evals + 1, collector.env_steps + eval_every
        best = max(best, float(returns.mean()))
        if returns.mean() >= TARGET:
            solved_at = time.perf_counter() - started
            break
    wall = time.perf_counter() - started
    return {"solved": solved_at is not None, "time_to_solve_s": round(solved_at or wall, 2),
            "train_s": round((solved_at or wall) - eval_s, 2), "env_steps": collector.env_steps,
            "updates": agent.updates, "evals": evals, "best_eval": best,
            "env_steps_per_s": round(collector.env_steps / (wall - eval_s)),
            "config": {"num_envs": num_envs, "n_steps": n_steps, **dataclasses.asdict(config)}}


def run_minatar(*, game: str, seed: int, minutes: float, curve_every: int, num_envs: int, n_steps: int,
                overrides: dict[str, Any], anneal_steps: int | None) -> list[dict[str, Any]]:
    import gymnasium as gym
    import numpy as np

    from algorithms.rollout import evaluate
    from envs import InProcessVectorEnv
    from envs.registry import make_env

    env_id = f"MinAtar/{game}-v0"
    agent, collector, config = _setup(env_id, num_envs, n_steps, overrides, anneal_steps, seed)
    lines, started, window_start, next_point = [], time.perf_counter(), 0.0, curve_every
    last_steps = 0
    while time.perf_counter() - started < minutes * 60:
        metrics = agent.update(collector.collect())
        if collector.env_steps >= next_point:
            returns, _ = collector.drain_episodes()
            now = time.perf_counter() - started
            lines.append({"env_steps": collector.env_steps, "wall_s": round(now, 1),
                          "episodes": len(returns), "return_mean": round(float(np.mean(returns)), 2) if returns else None,
                          "env_steps_per_s": round((collector.env_steps - last_steps) / (now - window_start)),
                          "entropy": round(metrics["entropy"], 3), "approx_kl": round(metrics["approx_kl"], 4)})
            emit({"bench": BENCH, "case": f"minatar-{game}", "seed": seed, **lines[-1]})
            window_start, last_steps, next_point = now, collector.env_steps, next_point + curve_every
    wall = time.perf_counter() - started
    eval_env = InProcessVectorEnv([lambda: gym.wrappers.TimeLimit(make_env(env_id), 10_000)] * 20)
    sampled = evaluate(lambda obs: agent.act(obs, explore=True), eval_env, episodes=20, seed=seed + 1)
    summary = {"bench": BENCH, "case": f"minatar-{game}", "seed": seed, "summary": True,
               "env_steps": collector.env_steps, "wall_s": round(wall, 1), "updates": agent.updates,
               "env_steps_per_s": round(collector.env_steps / wall),
               "eval_return_mean": round(float(sampled.mean()), 2), "eval_return_std": round(float(sampled.std()), 2),
               "config": {"num_envs": num_envs, "n_steps": n_steps, **dataclasses.asdict(config)}}
    emit(summary)
    return lines


def _overrides(args: argparse.Namespace) -> tuple[int, int, dict[str, Any], int | None]:
    num_envs, n_steps, overrides, anneal = CASES[args.case]
    overrides = dict(overrides)
    for flag, field in (("lr", "lr"), ("epochs", "epochs"), ("minibatches", "minibatches"),
                        ("entropy_coef", "entropy_coef")):
        if getattr(args, flag) is not None:
            overrides[field] = getattr(args, flag)
    if args.no_clip_vloss:
        overrides["clip_vloss"] = False
    anneal = None if args.anneal_steps == 0 else (args.anneal_steps or anneal)
    return args.envs or num_envs, args.steps or n_steps, overrides, anneal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["cartpole", "minatar"])
    parser.add_argument("--case", choices=sorted(CASES), help="default: cleanrl / minatar")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--budget", type=float, default=180.0, help="CartPole: seconds per run")
    parser.add_argument("--eval-every", type=int, default=2_048)
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--curve-every", type=int, default=50_000)
    parser.add_argument("--envs", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--minibatches", type=int)
    parser.add_argument("--entropy-coef", type=float)
    parser.add_argument("--no-clip-vloss", action="store_true")
    parser.add_argument("--anneal-steps", type=int, help="0: constant lr")
    parser.add_argument("--quick", action="store_true", help="smoke test: one short run, not a measurement")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.budget, args.minutes, args.curve_every = 1, 0.5, 0.01, 1_024
    args.case = args.case or ("minatar" if args.task == "minatar" else "cleanrl")
    num_envs, n_steps, overrides, anneal = _overrides(args)
    load = os.getloadavg()
    if args.task == "minatar":
        run_minatar(game=args.game, seed=args.seed, minutes=args.minutes, curve_every=args.curve_every,
                    num_envs=num_envs, n_steps=n_steps, overrides=overrides, anneal_steps=anneal)
        emit({"bench": BENCH, "loadavg_before": [round(x, 2) for x in load],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()]})
        return 0
    runs = []
    for seed in range(args.seed, args.seed + args.seeds):
        result = run_cartpole(seed=seed, num_envs=num_envs, n_steps=n_steps, overrides=overrides,
                              anneal_steps=anneal, budget=args.budget, eval_every=args.eval_every)
        runs.append(result)
        line = {k: v for k, v in result.items() if k != "config"}
        emit({"bench": BENCH, "case": args.case, "seed": seed, **line})
    emit({
        "bench": BENCH, "case": args.case, "summary": True, "solved": f"{sum(r['solved'] for r in runs)}/{len(runs)}",
        "time_to_solve_s_median": statistics.median(r["time_to_solve_s"] for r in runs),
        "train_s_median": statistics.median(r["train_s"] for r in runs),
        "env_steps_median": statistics.median(r["env_steps"] for r in runs),
        "env_steps_per_s_median": statistics.median(r["env_steps_per_s"] for r in runs),
        "config": runs[0]["config"], "loadavg_before": [round(x, 2) for x in load],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
