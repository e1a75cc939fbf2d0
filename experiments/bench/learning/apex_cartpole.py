"""Time and env steps to solve CartPole-v1: ours (the default ``experiments.apex``)
against peer DQN implementations, in the same run, on this machine.

Protocol, the same for every implementation: every ``--eval-every`` env steps,
run ``--eval-episodes`` greedy episodes on separate envs; "solved" is the first
evaluation whose mean return is >= 475. Wall-clock counts from just before the
implementation's process starts (imports, process spawning and evaluation time
included), so it is what a user waits for. Env steps count training steps only.

Peers, each with its documented CartPole settings, 1 torch thread:

- ``sb3``: Stable-Baselines3 DQN with the rl-baselines3-zoo CartPole-v1
  hyperparameters (its exploration schedule keeps the zoo's length in env steps).
- ``tianshou``: tianshou DQN with the settings of its CartPole example/test
  (n-step 3, 10 train envs, 128x3 MLP, target update 320, update_per_step 0.1).

Our other jobs on the same protocol, their defaults: ``impala`` (``experiments.impala``,
a local actor-learner world) and ``ppo`` (``experiments.ppo``, one member); their
peer ``sb3-ppo`` is Stable-Baselines3 PPO with the zoo's CartPole-v1 settings. Only
``ours`` (Ape-X) is compared with the DQN peers in ``ratio_vs_best_peer``.

    python -m experiments.bench.learning.apex_cartpole --impls impala,ppo,sb3-ppo --seeds 3

``ours-1proc`` is not a peer: ours' algorithm and config in one deterministic process
(actors and learner taking turns), for env steps to solve free of timing noise; how
the experiment's defaults were chosen, e.g.
``--impls ours-1proc --seeds 6 --max-env-steps 40000 --ours-flags="--lr 1e-3"``.

Prints one JSON line per run and one summary line (median over seeds) per
implementation; ours carries ``ratio_vs_best_peer`` (best peer median wall-clock /
ours). A peer that is not installed prints a line with ``"skipped"``.

    python -m experiments.bench.learning.apex_cartpole --seeds 3
    python -m experiments.bench.learning.apex_cartpole --quick      # smoke test, < 20 s of runs
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

from experiments.bench.tools.emit import emit

BENCH = "apex_cartpole"
TARGET = 475.0
PEER_MODULES = {"sb3": "stable_baselines3", "sb3-ppo": "stable_baselines3", "tianshou": "tianshou"}
PEERS_OF = {"ours": ("sb3", "tianshou"), "ppo": ("sb3-ppo",)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per implementation (0..N-1)")
    parser.add_argument("--impls", default="ours,sb3,tianshou", help="comma-separated")
    parser.add_argument("--eval-every", type=int, default=5000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="per run")
    parser.add_argument("--max-env-steps", type=int, default=200_000, help="per run")
    parser.add_argument("--ours-flags", default="", help=(
        "extra experiments.apex flags for ours, e.g. --ours-flags=\"--lr 2e-3\""))
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (not a measurement)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("seeds", "eval_every", "eval_episodes", "max_env_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.quick:
        args.seeds, args.max_seconds, args.max_env_steps = 1, 15.0, 1000
        args.eval_every, args.eval_episodes = 500, 2
    if args.worker:
        result = WORKERS[args.worker](args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    unknown = [i for i in impls if i not in WORKERS]
    if unknown:
        parser.error(f"--impls: unknown {unknown}; choose from {sorted(WORKERS)}")
    if any(i.startswith("ours") for i in impls) and args.ours_flags:
        import shlex

        from experiments.apex import ApexJobConfig
        from experiments.runtime.cli import parse_config

        parse_config(ApexJobConfig, shlex.split(args.ours_flags))  # bad flags: exit 2 now
    runnable = []
    for impl in impls:
        module = PEER_MODULES.get(impl)
        if module is not None and importlib.util.find_spec(module) is None:
            emit({"bench": BENCH, "impl": impl, "skipped": f"{module} is not installed"})
        else:
            runnable.append(impl)
    # Seeds outermost: each implementation's runs are spread over the whole session,
    # so a burst of load from other processes does not land on one of them only.
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in runnable}
    for seed in range(args.seeds):
        for impl in runnable:
            run = run_worker(impl, seed, args)
            runs[impl].append(run)
            emit({"bench": BENCH, "impl": impl, "case": "run", **run})
    summaries = {impl: summarize(impl, runs[impl], quick=args.quick) for impl in runnable}
    # Ape-X against the DQN peers, PPO against SB3's PPO.
    for impl, summary in summaries.items():
        peers = [summaries[p]["median_wall_s"] for p in PEERS_OF.get(impl, ())
                 if p in summaries and summaries[p]["median_wall_s"]]
        if impl in PEERS_OF:
            best, ours = (min(peers) if peers else None), summary["median_wall_s"]
            summary["ratio_vs_best_peer"] = round(best / ours, 2) if best and ours else None
        emit(summary)
    return 0


def run_worker(impl: str, seed: int, args) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "experiments.bench.learning.apex_cartpole", "--worker", impl,
           "--seed", str(seed), "--started", repr(time.time()),
           "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
           "--max-seconds", str(args.max_seconds), "--max-env-steps", str(args.max_env_steps)]
    if impl.startswith("ours") and args.ours_flags:
        cmd.append(f"--ours-flags={args.ours_flags}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.max_seconds + 180)
    except subprocess.TimeoutExpired:
        return {"seed": seed, "solved": False, "error": "worker timed out"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("RESULT "):
            return {"seed": seed, **json.loads(line[len("RESULT "):])}
    tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
    return {"seed": seed, "solved": False, "error": f"exit {out.returncode}: {' | '.join(tail)}"}


def summarize(impl: str, runs: list[dict[str, Any]], *, quick: bool) -> dict[str, Any]:
    def median(key: str):
        values = [r[key] if r.get("solved") else math.inf for r in runs]
        m = statistics.median(values)
        return None if math.isinf(m) else round(m, 2)

    def mean(key: str):
        values = [r[key] for r in runs if r.get(key) is not None]
        return round(statistics.fmean(values), 3) if values else None

    return {"bench": BENCH, "impl": impl, "case": "median", "quick": quick, "seeds": len(runs),
            "solved_runs": sum(bool(r.get("solved")) for r in runs),
            "median_wall_s": median("wall_s"), "median_env_steps": median("env_steps"),
            "updates_per_s": mean("updates_per_s"), "wait_fraction": mean("wait_fraction")}


# ------------------------------------------------------------------- workers


def greedy_eval(predict, episodes: int, seed: int) -> float:
    """Mean return of ``episodes`` greedy episodes (each env's first episode)."""
    import gymnasium as gym
    import numpy as np

    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * episodes)
    obs, _ = env.reset(seed=seed)
    returns, running = np.zeros(episodes), np.ones(episodes, dtype=bool)
    while running.any():
        obs, reward, term, trunc, _ = env.step(predict(obs))
        returns += reward * running
        running &= ~(term | trunc)
    env.close()
    return float(returns.mean())


def ours_config(args, *, serial: bool):
    """Ours' config: ``--ours-flags`` with the bench's budget and evaluation."""
    import shlex

    from experiments.apex import ApexJobConfig
    from experiments.runtime.cli import apply_overrides, parse_config

    config = parse_config(ApexJobConfig, shlex.split(args.ours_flags))
    apply_overrides(config, {"seed": args.seed, "eval_every": args.eval_every,
                             "eval_episodes": args.eval_episodes, "target_return": TARGET,
                             "max_seconds": args.max_seconds, "max_env_steps": args.max_env_steps,
                             "log_dir": "none", "status_every": 0.0, "serial": serial})
    return config


def worker_ours(args) -> dict[str, Any]:
    from experiments.apex import run

    s = run(ours_config(args, serial=False), quiet=True, started=args.started)
    return {"solved": s["solved"],
            "wall_s": round(s["time_to_solve_s"] if s["solved"] else s["wall_s"], 2),
            "env_steps": s["env_steps_at_solve"] if s["solved"] else s["env_steps"],
            "updates_per_s": round(s["updates_per_s"], 1), "wait_fraction": round(s["wait_fraction"], 4),
            "env_steps_per_s": round(s["env_steps_per_s"], 1), "best_eval": s["best_eval_return"]}


def worker_ours_1proc(args) -> dict[str, Any]:
    """Ours' algorithm and config in one process (``--serial``: deterministic given
    the seed): env steps to solve without the timing noise of a shared machine; how
    the defaults were chosen."""
    from experiments.apex import run

    s = run(ours_config(args, serial=True), quiet=True, started=args.started)
    return {"solved": s["solved"],
            "wall_s": round(s["time_to_solve_s"] if s["solved"] else s["wall_s"], 2),
            "env_steps": s["env_steps_at_solve"] if s["solved"] else s["env_steps"],
            "updates": s["updates"], "updates_per_s": None, "wait_fraction": None,
            "best_eval": s["best_eval_return"], "evals": [round(e[2]) for e in s["evals"]]}


def worker_sb3(args) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import gymnasium as gym
    from stable_baselines3 import DQN

    zoo_steps = 50_000  # rl-zoo n_timesteps; the exploration schedule spans 16% of it
    model = DQN("MlpPolicy", gym.make("CartPole-v1"), learning_rate=2.3e-3, batch_size=64,
                buffer_size=100_000, learning_starts=1000, gamma=0.99, target_update_interval=10,
                train_freq=256, gradient_steps=128,
                exploration_fraction=min(1.0, 0.16 * zoo_steps / args.max_env_steps),
                exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]),
                seed=args.seed, device="cpu", verbose=0)
    return _learn_sb3(model, args)


def _learn_sb3(model, args) -> dict[str, Any]:
    """An SB3 model's ``learn`` under the shared protocol: greedy evaluations every
    ``--eval-every`` env steps, stopped when solved or out of budget; its gradient
    steps timed for updates/s."""
    from stable_baselines3.common.callbacks import BaseCallback

    train_time = [0.0]
    original_train = model.train

    def timed_train(*a, **k):
        t0 = time.perf_counter()
        original_train(*a, **k)
        train_time[0] += time.perf_counter() - t0

    model.train = timed_train
    state: dict[str, Any] = {"solved": False, "best": None}

    class Evaluate(BaseCallback):
        next_eval = args.eval_every

        def _on_step(self) -> bool:
            if time.time() - args.started > args.max_seconds:
                return False
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += args.eval_every
            mean = greedy_eval(lambda o: model.predict(o, deterministic=True)[0],
                               args.eval_episodes, seed=self.num_timesteps)
            state["best"] = mean if state["best"] is None else max(state["best"], mean)
            if mean >= TARGET:
                state.update(solved=True, wall_s=time.time() - args.started, env_steps=self.num_timesteps)
                return False
            return True

    model.learn(total_timesteps=args.max_env_steps, callback=Evaluate())
    return {"solved": state["solved"],
            "wall_s": round(state.get("wall_s", time.time() - args.started), 2),
            "env_steps": state.get("env_steps", model.num_timesteps),
            "updates_per_s": round(model._n_updates / train_time[0], 1) if train_time[0] else None,
            "wait_fraction": None, "best_eval": state["best"]}


def worker_tianshou(args) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import gymnasium as gym
    import numpy as np
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.policy import DQNPolicy
    from tianshou.trainer import OffpolicyTrainer
    from tianshou.utils.net.common import Net

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    train_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(10)])
    test_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(args.eval_episodes)])
    train_envs.seed(args.seed)
    test_envs.seed(args.seed + 100)
    net = Net(state_shape=4, action_shape=2, hidden_sizes=[128, 128, 128])
    optim = torch.optim.Adam(net.parameters(), lr=1e-3)
    policy = DQNPolicy(net, optim, discount_factor=0.9, estimation_step=3, target_update_freq=320)
    train_collector = Collector(policy, train_envs, VectorReplayBuffer(20_000, 10), exploration_noise=True)
    test_collector = Collector(policy, test_envs, exploration_noise=False)
    train_collector.collect(n_step=64 * 10)
    state: dict[str, Any] = {"solved": False, "env_step": 0, "best": None}
    learn_time, updates = [0.0], [0]
    original_learn = policy.learn

    def timed_learn(*a, **k):
        t0 = time.perf_counter()
        out = original_learn(*a, **k)
        learn_time[0] += time.perf_counter() - t0
        updates[0] += 1
        return out

    policy.learn = timed_learn

    def train_fn(epoch: int, env_step: int) -> None:
        state["env_step"] = env_step
        if time.time() - args.started > args.max_seconds:
            raise _OutOfBudget
        eps = 0.1 if env_step <= 10_000 else max(0.01, 0.1 - (env_step - 10_000) / 40_000 * 0.09)
        policy.set_eps(eps)

    def test_fn(epoch: int, env_step: int | None) -> None:
        policy.set_eps(0.0)  # greedy, the shared protocol

    def stop_fn(mean_rewards: float) -> bool:
        best = state["best"]
        state["best"] = float(mean_rewards) if best is None else max(best, float(mean_rewards))
        if mean_rewards >= TARGET and state["env_step"] > 0:
            state.update(solved=True, wall_s=time.time() - args.started)
            return True
        return time.time() - args.started > args.max_seconds

    try:
        OffpolicyTrainer(
            policy, train_collector, test_collector,
            max_epoch=max(1, args.max_env_steps // args.eval_every), step_per_epoch=args.eval_every,
            step_per_collect=10, episode_per_test=args.eval_episodes, batch_size=64,
            update_per_step=0.1, train_fn=train_fn, test_fn=test_fn, stop_fn=stop_fn,
            test_in_train=False, verbose=False, show_progress=False).run()
    except _OutOfBudget:
        pass
    return {"solved": state["solved"],
            "wall_s": round(state.get("wall_s", time.time() - args.started), 2),
            "env_steps": state["env_step"],
            "updates_per_s": round(updates[0] / learn_time[0], 1) if learn_time[0] else None,
            "wait_fraction": None, "best_eval": state["best"]}


class _OutOfBudget(Exception):
    pass


def _job_worker(module: str, config_class: str):
    """Another of our jobs on the same protocol (its defaults, the bench's budget,
    evaluation and seed): ``experiments.impala`` (a local actor-learner world) or
    ``experiments.ppo`` (one member)."""

    def worker(args) -> dict[str, Any]:
        import importlib

        from experiments.runtime.cli import apply_overrides

        job = importlib.import_module(module)
        config = getattr(job, config_class)()
        apply_overrides(config, {"seed": args.seed, "eval_every": args.eval_every,
                                 "eval_episodes": args.eval_episodes, "target_return": TARGET,
                                 "max_seconds": args.max_seconds, "max_env_steps": args.max_env_steps,
                                 "log_dir": "none", "status_every": 0.0})
        s = job.run(config, quiet=True, started=args.started)
        rate = s.get("updates_per_s")
        return {"solved": s["solved"],
                "wall_s": round(s["time_to_solve_s"] if s["solved"] else s["wall_s"], 2),
                "env_steps": s["env_steps_at_solve"] if s["solved"] else s["env_steps"],
                "updates_per_s": None if rate is None else round(rate, 1),
                "wait_fraction": None if s.get("wait_fraction") is None else round(s["wait_fraction"], 4),
                "best_eval": s["best_eval_return"]}

    return worker


def worker_sb3_ppo(args) -> dict[str, Any]:
    """Stable-Baselines3 PPO with the rl-baselines3-zoo CartPole-v1 hyperparameters
    (8 envs x 32 steps, 20 epochs of minibatches of 256, gamma 0.98, GAE 0.8, lr and
    clip range annealed linearly from 1e-3 and 0.2), evaluated like the others."""
    import torch

    torch.set_num_threads(1)
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    def linear(start: float):
        return lambda remaining: remaining * start

    model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=args.seed), n_steps=32,
                batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                learning_rate=linear(1e-3), clip_range=linear(0.2), seed=args.seed, device="cpu", verbose=0)
    return _learn_sb3(model, args)


WORKERS = {"ours": worker_ours, "ours-1proc": worker_ours_1proc, "sb3": worker_sb3,
           "tianshou": worker_tianshou, "impala": _job_worker("experiments.impala", "ImpalaJobConfig"),
           "ppo": _job_worker("experiments.ppo", "PPOJobConfig"), "sb3-ppo": worker_sb3_ppo}

if __name__ == "__main__":
    sys.exit(main())
