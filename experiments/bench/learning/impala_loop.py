"""IMPALA in one process on CartPole-v1: env steps and seconds to a greedy return of 475.

``python -m experiments.bench.learning.impala_loop [--seeds 3] [--budget 120] [--lr 1e-3] ...``
(``--env MinAtar/Breakout-v0`` runs another env for the whole budget, or to ``--target``;
``--quick`` is a smoke test, not a measurement.)

The algorithm side of the actor-learner program without transport: ``--actors``
vector envs of ``--num-envs`` CartPole copies each (same-step autoreset), stepped
in turn by an actor copy of the policy; each feeds an
:class:`~algorithms.unroll.UnrollAdder`, and every batch of ``--actors`` unrolls
(one per actor, ``B = actors x num_envs`` columns) goes through
:func:`~algorithms.unroll.collate_unrolls` into :meth:`IMPALA.update`. The actor
copy loads the learner's parameters every ``--sync-every`` updates, so its data lags
the learner by up to that many updates and V-trace has something to correct.
Every ``--eval-every`` env steps 20 greedy episodes run with the learner's policy;
a run is solved when their mean is at least ``--target`` (475 on CartPole-v1). One torch thread; the clocks (wall
and this process's CPU time, the figure that holds on a loaded machine) start after
imports. Prints one JSON line per run and a median line.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.impala import IMPALA, IMPALAConfig, UnrollAdder, collate_unrolls
from algorithms.rollout import evaluate
from envs.registry import make_env
from experiments.bench.tools.emit import emit

EVAL_MAX_STEPS = 10_000  # a greedy policy may never end an episode (MinAtar has no limit)


def make_vec(env_id: str, n: int, seed: int, **kwargs: Any) -> SyncVectorEnv:
    env = SyncVectorEnv([lambda: make_env(env_id, **kwargs)] * n, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=seed)
    return env


def run(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(seed)
    config = IMPALAConfig(lr=args.lr, optimizer=args.optimizer, entropy_coef=args.entropy_coef,
                          loss_reduction=args.loss_reduction, max_grad_norm=args.max_grad_norm,
                          optimizer_eps=args.optimizer_eps)
    envs = [make_vec(args.env, args.num_envs, seed * 1000 + i) for i in range(args.actors)]
    space = envs[0]
    learner = IMPALA(observation_space=space.single_observation_space,
                     action_space=space.single_action_space, config=config, device="cpu")
    actor = IMPALA(observation_space=space.single_observation_space,
                   action_space=space.single_action_space, config=config, device="cpu")
    actor.load_policy_state(learner.policy_state())
    adders = [UnrollAdder(unroll_length=args.unroll_length, num_envs=args.num_envs) for _ in envs]
    observations = [env.reset(seed=seed * 1000 + i)[0] for i, env in enumerate(envs)]
    eval_env = make_vec(args.env, args.eval_episodes, seed + 7, max_episode_steps=EVAL_MAX_STEPS)
    started, cpu_started = time.time(), time.process_time()
    env_steps, next_eval, best, last, solved_at, rho_means = 0, args.eval_every, -np.inf, None, None, []
    while time.time() - started < args.budget:
        items = []
        for i, env in enumerate(envs):
            item = None
            while item is None:
                obs = observations[i]
                action, log_prob = actor.sample_actions(obs)
                next_obs, reward, term, trunc, infos = env.step(actor.to_env(action))
                item = adders[i].add(obs=obs, action=action, reward=reward, terminated=term,
                                     truncated=trunc, behaviour_log_prob=log_prob,
                                     next_obs=next_obs, infos=infos)
                observations[i] = next_obs
                env_steps += args.num_envs
            items.append(item)
        metrics = learner.update(collate_unrolls(items))
        rho_means.append(metrics["rho_mean"])
        if learner.updates % args.sync_every == 0:
            actor.load_policy_state(learner.policy_state())
        if env_steps >= next_eval:
            next_eval += args.eval_every
            mean = float(evaluate(lambda o: learner.act(o, explore=False), eval_env,
                                  episodes=args.eval_episodes, seed=seed + env_steps).mean())
            best, last = max(best, mean), mean
            if args.target is not None and mean >= args.target:
                solved_at = (time.time() - started, env_steps, time.process_time() - cpu_started)
                break
    wall, cpu = time.time() - started, time.process_time() - cpu_started
    return {"solved": solved_at is not None, "seconds": round(solved_at[0] if solved_at else wall, 2),
            "cpu_seconds": round(solved_at[2] if solved_at else cpu, 2),
            "env_steps": solved_at[1] if solved_at else env_steps, "best_eval": best, "last_eval": last,
            "updates": learner.updates, "updates_per_s": round(learner.updates / wall, 1),
            "rho_mean": round(float(np.mean(rho_means)), 4) if rho_means else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--target", type=float, default=None, help="greedy return that ends a run "
                        "(default: 475 for CartPole-v1, none otherwise)")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--eval-every", type=int, default=2_500)
    parser.add_argument("--actors", type=int, default=4, help="unrolls per batch (one per actor)")
    parser.add_argument("--num-envs", type=int, default=4, help="envs per actor")
    parser.add_argument("--unroll-length", type=int, default=20)
    parser.add_argument("--sync-every", type=int, default=1, help="updates between actor pulls")
    parser.add_argument("--lr", type=float, default=IMPALAConfig.lr)
    parser.add_argument("--optimizer", choices=["adam", "rmsprop"], default=IMPALAConfig.optimizer)
    parser.add_argument("--optimizer-eps", type=float, default=None)
    parser.add_argument("--entropy-coef", type=float, default=IMPALAConfig.entropy_coef)
    parser.add_argument("--loss-reduction", choices=["sum", "mean"], default=IMPALAConfig.loss_reduction)
    parser.add_argument("--max-grad-norm", type=float, default=IMPALAConfig.max_grad_norm)
    parser.add_argument("--quick", action="store_true", help="one seed, tiny budget (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.budget, args.eval_every, args.eval_episodes = 1, 2.0, 500, 2
    if args.target is None and args.env == "CartPole-v1":
        args.target = 475.0
    torch.set_num_threads(1)
    results = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        result = run(seed, args)
        results.append(result)
        emit({"bench": "impala_loop", "seed": seed, **result})
    emit({"bench": "impala_loop", "case": "median", "flags": vars(args),
          "seconds_median": statistics.median(r["seconds"] for r in results),
          "cpu_seconds_median": statistics.median(r["cpu_seconds"] for r in results),
          "env_steps_median": statistics.median(r["env_steps"] for r in results),
          "solved": f"{sum(r['solved'] for r in results)}/{len(results)}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
