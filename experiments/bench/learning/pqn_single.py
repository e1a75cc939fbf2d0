"""PQN in one process (:class:`algorithms.pqn_runner.PQNRunner`): does it learn,
how fast, and what limits the speed. By hand, not a unit test.

``cartpole``: CartPole-v1 with the authors' CartPole settings (purejaxql
``pqn_cartpole``: 32 envs x 64 steps, 4 epochs x 16 minibatches, RAdam 1e-4
decaying linearly over 500K env steps, epsilon 1 -> 0.2 over 100K, rewards x 0.1,
lambda 0.95, two hidden layers of 256 with LayerNorm). Every ``--eval-every`` env
steps, 20 greedy episodes (one per env, each env's first); solved when their mean
is >= 475. ``train_s`` excludes the evaluations.

``minatar``: a MinAtar game as the authors run it (gymnax: minimal action set,
no sticky actions, 1,000-step episode cap) with the ``pqn_minatar`` settings
(PQNConfig's defaults: 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam 5e-4,
Q(0.65), epsilon 1 -> 0.05 over the first 1M env steps; the lr decays over
``--lr-decay-steps``, the authors' budget being 10M) for ``--seconds``. Reports
the training return (epsilon-greedy, as the authors' curves) every
``--report-every`` env steps.

Both print one JSON line per evaluation or report and one result line, with the
seconds spent acting (network forward and epsilon-greedy), stepping the envs,
computing the targets and in the minibatch steps, and the load average.

    python -m experiments.bench.learning.pqn_single cartpole --seed 0
    python -m experiments.bench.learning.pqn_single minatar --game Breakout --seconds 240

Recorded (issue 33; 2 CPU cores shared with other jobs, 1 torch thread, in-process
envs; the 1-minute load average is given since it sets the speed):

- CartPole-v1, solved at 61K, 72K, 82K, 82K env steps after 7.8, 9.0, 7.5, 6.5 s of
  training (seeds 0-3, RAdam; load 4.7-5.3); with ``--optimizer adam`` seeds 1-3 at
  61K, 51K, 90K env steps, 5.4, 5.0, 8.1 s (load 4.5-4.8). 8-12.6K env steps/s, of
  which the minibatch steps take 70%.
- Breakout, seed 0, RAdam, 420 s (load 6.3 at the start, 2.3 at the end): training
  return 0.5 at 100K env steps, 1.8 at 500K, 8.8 at 1.0M (166 s, epsilon at 0.05),
  20 at 1.5M (214 s), 26 at 2.2M, 28-36 from 3M to 4.7M. 11.2K env steps/s over the
  run (5.5K at load 6, 16K at load 2.3). Of the time: minibatch steps 73%, acting
  (forward + epsilon-greedy) 15%, env stepping 10%, targets 2.5% (16% before the
  targets reused the acting Q values).
- Breakout, 240 s each: RAdam seed 1 (load 3.2-4.8) 6.4 at 1.0M, 16.5 at 1.5M, 21.6 at
  2.0M, 10.1K env steps/s; Adam seed 0 (load 2.0-3.7) 6.4 at 1.0M, 13.2 at 1.5M, 13.8 at
  2.0M, 17 at 2.5M, 11.3K env steps/s. The two cost the same per step (eager RAdam and
  eager Adam: 0.12 ms a step on this net; ``torch.optim.RAdam`` 0.6-1.0 ms and 1-1.5 s
  to import ``torch._dynamo`` on first use).

The authors' script on CPU (gymnax MinAtar, as here): 10 at 1.0M env steps, 100 s, 11K
env steps/s including learning.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from algorithms.pqn import PQN, PQNConfig, PQNRunner
from algorithms.rollout import evaluate
from envs.make import make_vector_env
from envs.registry import make_env
from experiments.bench.tools.emit import emit

CARTPOLE = {"lam": 0.95, "lr": 1e-4, "lr_decay_steps": 500_000, "epochs": 4, "minibatches": 16,
            "reward_scale": 0.1, "epsilon_end": 0.2, "epsilon_decay_steps": 100_000,
            "hidden": (256, 256)}


class TimedPQN(PQN):
    """A PQN that adds up the seconds its targets and its minibatch steps take."""

    seconds: defaultdict[str, float]

    def targets(self, data: Any) -> torch.Tensor:
        t0 = time.perf_counter()
        out = super().targets(data)
        self.seconds["targets"] += time.perf_counter() - t0
        return out

    def update(self, batch: Any) -> dict[str, float]:
        t0 = time.perf_counter()
        out = super().update(batch)
        self.seconds["update"] += time.perf_counter() - t0
        return out


def build(args: argparse.Namespace, env: Any, config: PQNConfig) -> tuple[TimedPQN, PQNRunner]:
    space = env.single_observation_space
    pqn = TimedPQN(num_actions=int(env.single_action_space.n), observation_shape=space.shape,
                   config=config, seed=args.seed)
    pqn.seconds = defaultdict(float)
    torch.manual_seed(args.seed)
    runner = PQNRunner(pqn=pqn, env=env, n_steps=args.num_steps, seed=args.seed)
    act = runner.collector.sample_actions

    def timed_act(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        out = act(obs)
        pqn.seconds["act"] += time.perf_counter() - t0
        return out

    runner.collector.sample_actions = timed_act
    return pqn, runner


def breakdown(pqn: TimedPQN, collect_s: float) -> dict[str, float]:
    s = pqn.seconds
    return {"act_s": round(s["act"], 1), "env_s": round(collect_s - s["act"], 1),
            "targets_s": round(s["targets"], 1), "minibatch_s": round(s["update"] - s["targets"], 1),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def cartpole(args: argparse.Namespace) -> None:
    config = PQNConfig(**{**CARTPOLE, "optimizer": args.optimizer})
    env = make_vector_env("CartPole-v1", num_envs=args.num_envs, num_workers=0,
                          autoreset_mode=AutoresetMode.SAME_STEP, seed=args.seed)
    evaluation = make_vector_env("CartPole-v1", num_envs=20, num_workers=0, seed=args.seed + 1)
    pqn, runner = build(args, env, config)
    started, eval_s, collect_s, next_eval, solved = time.perf_counter(), 0.0, 0.0, 0, None
    while pqn.env_steps < args.max_env_steps and time.perf_counter() - started < args.seconds:
        collect_s += runner.step()["collect_s"]
        if pqn.env_steps < next_eval:
            continue
        next_eval += args.eval_every
        t0 = time.perf_counter()
        greedy = float(evaluate(lambda o: pqn.act(o, explore=False), evaluation, episodes=20,
                                seed=args.seed + pqn.updates).mean())
        eval_s += time.perf_counter() - t0
        wall = time.perf_counter() - started
        emit({"bench": "pqn_single", "env": "CartPole-v1", "seed": args.seed, "env_steps": pqn.env_steps,
              "greedy_return": greedy, "wall_s": round(wall, 1), "train_s": round(wall - eval_s, 1)})
        if greedy >= 475 and solved is None:
            solved = {"env_steps_to_solve": pqn.env_steps, "train_s_to_solve": round(wall - eval_s, 1),
                      "wall_s_to_solve": round(wall, 1)}
            if not args.no_stop:
                break
    train_s = time.perf_counter() - started - eval_s
    emit({"bench": "pqn_single", "result": "CartPole-v1", "seed": args.seed, "optimizer": args.optimizer,
          "solved": solved is not None, **(solved or {}), "env_steps": pqn.env_steps,
          "env_steps_per_s": round(pqn.env_steps / train_s), **breakdown(pqn, collect_s)})


def minatar(args: argparse.Namespace) -> None:
    config = PQNConfig(optimizer=args.optimizer, lr_decay_steps=args.lr_decay_steps)
    env_id = f"MinAtar/{args.game}-v1"  # minimal action set, as gymnax
    factory = functools.partial(make_env, env_id, sticky_action_prob=0.0, max_episode_steps=1000)
    env = make_vector_env(factory, num_envs=args.num_envs, num_workers=args.num_workers,
                          autoreset_mode=AutoresetMode.SAME_STEP, seed=args.seed)
    pqn, runner = build(args, env, config)
    started, collect_s, next_report, returns = time.perf_counter(), 0.0, args.report_every, []
    while time.perf_counter() - started < args.seconds:
        metrics = runner.step()
        collect_s += metrics["collect_s"]
        if "episodic_return" in metrics:
            returns += [metrics["episodic_return"]] * int(metrics["episodes"])
        if pqn.env_steps >= next_report:
            next_report += args.report_every
            wall = time.perf_counter() - started
            emit({"bench": "pqn_single", "env": env_id, "seed": args.seed, "env_steps": pqn.env_steps,
                  "wall_s": round(wall, 1), "train_return": round(float(np.mean(returns)), 2) if returns else None,
                  "episodes": len(returns), "epsilon": round(metrics["epsilon"], 3),
                  "loss": round(metrics["loss"], 4), "q_mean": round(metrics["q_mean"], 3),
                  "env_steps_per_s": round(pqn.env_steps / wall), **breakdown(pqn, collect_s)})
            returns = []
    wall = time.perf_counter() - started
    emit({"bench": "pqn_single", "result": env_id, "seed": args.seed, "optimizer": args.optimizer,
          "num_envs": args.num_envs, "num_steps": args.num_steps, "env_steps": pqn.env_steps,
          "wall_s": round(wall, 1), "env_steps_per_s": round(pqn.env_steps / wall),
          "threads": torch.get_num_threads(), **breakdown(pqn, collect_s)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=("cartpole", "minatar"))
    add = parser.add_argument
    add("--seed", type=int, default=0)
    add("--optimizer", choices=("radam", "adam"), default="radam")
    add("--threads", type=int, default=1, help="torch intra-op threads")
    add("--num-envs", type=int, default=None, help="default: 32 (cartpole), 128 (minatar)")
    add("--num-steps", type=int, default=None, help="default: 64 (cartpole), 32 (minatar)")
    add("--seconds", type=float, default=None, help="default: 300 (cartpole), 240 (minatar)")
    add("--max-env-steps", type=int, default=500_000, help="cartpole")
    add("--eval-every", type=int, default=10_000, help="cartpole")
    add("--no-stop", action="store_true", help="cartpole: go on once solved")
    add("--game", default="Breakout", help="minatar")
    add("--num-workers", type=int, default=0, help="minatar: env processes (0: in this one)")
    add("--report-every", type=int, default=50_000, help="minatar")
    add("--lr-decay-steps", type=int, default=10_000_000, help="minatar")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    small = args.task == "cartpole"
    args.num_envs = args.num_envs or (32 if small else 128)
    args.num_steps = args.num_steps or (64 if small else 32)
    args.seconds = args.seconds or (300.0 if small else 240.0)
    (cartpole if small else minatar)(args)


if __name__ == "__main__":
    main()
