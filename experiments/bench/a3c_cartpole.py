"""Time and env steps to solve CartPole-v1: rlpar's A3C against Stable-Baselines3 A2C.

``python -m experiments.bench.a3c_cartpole [--seeds 3] [--budget 300] [--quick]``

Protocol, the same for both: every ``--eval-every`` env steps (default 2,500; at
10,000 the solve point is quantized so coarsely that whoever happens to solve just
before an evaluation wins), 20 greedy episodes
(one per env of a 20-env vector env, each env's first episode) with the current
parameters; a run is solved when their mean is at least 475. Wall-clock time runs
from the start of the run: for rlpar that is before its worker processes are
spawned (so it includes their start-up); for SB3 it is before the env and the
model are built, in this already-warm process. Both use one torch thread per
process. A run that does not solve within ``--budget`` seconds counts as the
budget (and its steps so far) in the median.

SB3 uses the rl-baselines3-zoo CartPole-v1 settings for A2C (n_envs 8,
MlpPolicy, ent_coef 0.0, all else SB3's defaults: n_steps 5, RMSprop lr 7e-4,
gae_lambda 1.0, vf_coef 0.5, max_grad_norm 0.5). rlpar runs ``experiments.a3c``
with its defaults. Seeds alternate between the two to share the machine's noise.

Prints one JSON line per run and one summary line per implementation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

BENCH = "a3c_cartpole"
TARGET = 475.0


def run_rlpar(seed: int, *, budget: float, eval_every: int, episodes: int,
              flags: str = "") -> dict[str, Any]:
    import dataclasses
    import shlex

    from experiments.a3c import A3CRunConfig, run
    from experiments.cli import parse_config

    config = dataclasses.replace(
        parse_config(A3CRunConfig, shlex.split(flags)), seed=seed, max_seconds=budget,
        eval_every=eval_every, eval_episodes=episodes, target_return=TARGET, log_dir=None)
    summary = run(config, quiet=True)
    solved = bool(summary["solved"])
    return {
        "solved": solved,
        "time_to_solve_s": summary["time_to_solve_s"] if solved else summary["wall_s"],
        "env_steps": summary["env_steps_at_solve"] if solved else summary["env_steps"],
        "best_eval": summary["best_eval_return"],
        "env_steps_per_s": round(summary["env_steps_per_s"]),
        "workers": summary["num_workers"],
    }


def run_sb3(seed: int, *, budget: float, eval_every: int, episodes: int) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from algorithms.rollout import evaluate

    torch.set_num_threads(1)
    started = time.time()
    eval_env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    state: dict[str, Any] = {"next": eval_every, "solved_at": None, "best": None}

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if time.time() - started >= budget:
                return False
            if self.num_timesteps < state["next"]:
                return True
            state["next"] = self.num_timesteps + eval_every
            returns = evaluate(lambda obs: self.model.predict(obs, deterministic=True)[0],
                               eval_env, episodes=episodes, seed=seed + 7 + self.num_timesteps)
            mean = float(returns.mean())
            state["best"] = mean if state["best"] is None else max(state["best"], mean)
            if mean >= TARGET:
                state["solved_at"] = (time.time() - started, self.num_timesteps)
                return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu")
    callback = Evaluate()
    model.learn(total_timesteps=10_000_000, callback=callback)
    wall = time.time() - started
    eval_env.close()
    env.close()
    solved = state["solved_at"] is not None
    return {
        "solved": solved,
        "time_to_solve_s": state["solved_at"][0] if solved else wall,
        "env_steps": state["solved_at"][1] if solved else int(model.num_timesteps),
        "best_eval": state["best"],
        "env_steps_per_s": round(model.num_timesteps / wall) if wall > 0 else 0,
    }


def _sb3_missing() -> str | None:
    try:
        import stable_baselines3  # noqa: F401
    except Exception as exc:  # an incompatible install counts as missing
        return f"stable-baselines3 not importable: {exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--eval-every", type=int, default=2_500, help=(
        "env steps between evaluations, both sides (finer: less quantization of the solve point)"))
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--impl", choices=["both", "rlpar", "sb3"], default="both")
    parser.add_argument("--rlpar-flags", default="", help=(
        "extra experiments.a3c flags for rlpar, e.g. \"--lr 2e-3 --n-steps 8\""))
    parser.add_argument("--quick", action="store_true", help="one seed, tiny budget (smoke test)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.budget <= 0 or args.eval_every < 1 or args.eval_episodes < 1:
        parser.error("--seeds, --budget, --eval-every and --eval-episodes must be positive")
    if args.quick:
        args.seeds, args.budget, args.eval_every, args.eval_episodes = 1, 4.0, 2000, 4
    kwargs = {"budget": args.budget, "eval_every": args.eval_every, "episodes": args.eval_episodes}
    runners = {"rlpar": run_rlpar, "sb3": run_sb3}
    impls = ["rlpar", "sb3"] if args.impl == "both" else [args.impl]
    missing = _sb3_missing() if "sb3" in impls else None
    results: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for seed in range(args.seeds):
        for impl in impls:
            if impl == "sb3" and missing:
                continue
            extra = {"flags": args.rlpar_flags} if impl == "rlpar" else {}
            result = runners[impl](seed, **kwargs, **extra)
            results[impl].append(result)
            print(json.dumps({"bench": BENCH, "impl": impl, "case": f"seed{seed}", "seed": seed,
                              "budget_s": args.budget, **_rounded(result)}), flush=True)
    medians = {}
    for impl in impls:
        if impl == "sb3" and missing:
            print(json.dumps({"bench": BENCH, "impl": "sb3", "skipped": missing}), flush=True)
            continue
        runs = results[impl]
        medians[impl] = statistics.median(r["time_to_solve_s"] for r in runs)
    for impl, median in medians.items():
        runs = results[impl]
        line = {"bench": BENCH, "impl": impl, "case": "median",
                "time_to_solve_s_median": round(median, 1),
                "env_steps_median": int(statistics.median(r["env_steps"] for r in runs)),
                "solved": f"{sum(r['solved'] for r in runs)}/{len(runs)}",
                "target_s": 120.0}
        peers = [m for other, m in medians.items() if other != impl]
        if impl == "rlpar" and peers:
            line["ratio_vs_best_peer"] = round(median / min(peers), 3)  # < 1: faster
        print(json.dumps(line), flush=True)
    return 0


def _rounded(result: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}


if __name__ == "__main__":
    raise SystemExit(main())
