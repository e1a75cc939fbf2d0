"""Time and env steps to solve CartPole-v1: rlpar's A3C against Stable-Baselines3 A2C.

``python -m experiments.bench.learning.a3c_cartpole [--seeds 3] [--budget 120] [--quick]``

Protocol, the same for both: every run is a fresh Python process, and its clock
starts when the benchmark launches that process, so each side pays its own
interpreter start, imports, process spawning and evaluations. Every
``--eval-every`` env steps (default 2,500; at 10,000 the solve point is quantized
so coarsely that whoever happens to solve just before an evaluation wins), 20
greedy episodes (one per env of a 20-env vector env, each env's first episode)
run with the current parameters; a run is solved when their mean is at least 475.
Both use one torch thread per process. A run that does not solve within
``--budget`` seconds counts as the budget (and its steps so far) in the median.
``import_s`` is when the run itself began (after interpreter start and imports),
so ``time_to_solve_s - import_s`` is the time a warm process would have taken.

SB3 uses the rl-baselines3-zoo CartPole-v1 settings for A2C (n_envs 8,
MlpPolicy, ent_coef 0.0, all else SB3's defaults: n_steps 5, RMSprop lr 7e-4,
gae_lambda 1.0, vf_coef 0.5, max_grad_norm 0.5). rlpar runs ``experiments.a3c``
with its defaults plus ``--rlpar-flags`` (on fewer than 4 cores that is one worker
in the run's own process; ``--rlpar-flags "--num-workers 2"`` times the
multi-process path). Seeds alternate between the two to
share the machine's noise. Load-robust figures ride along: env steps to solve and
updates per second.

Prints one JSON line per run and one summary line per implementation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from experiments.bench.tools.emit import emit

BENCH = "a3c_cartpole"
TARGET = 475.0


def run_rlpar(seed: int, *, launched: float, budget: float, eval_every: int, episodes: int,
              max_env_steps: int | None, flags: str = "") -> dict[str, Any]:
    import shlex

    from experiments.a3c import A3CJobConfig, run
    from experiments.runtime.cli import apply_overrides, parse_config

    config = parse_config(A3CJobConfig, shlex.split(flags))
    import_s = time.time() - launched
    # The job's clock, and so its time budget, counts from the launch (``started``): the
    # imports are inside the budget once, as they are for SB3.
    apply_overrides(config, {"seed": seed, "max_seconds": budget,
                             "eval_every": eval_every, "eval_episodes": episodes,
                             "target_return": TARGET, "log_dir": "none", "status_every": 0.0,
                             **({} if max_env_steps is None else {"max_env_steps": max_env_steps})})
    summary = run(config, quiet=True, started=launched)
    solved = bool(summary["solved"])
    wall = summary["wall_s"]
    return {
        "solved": solved,
        "time_to_solve_s": summary["time_to_solve_s"] if solved else wall,
        "env_steps": summary["env_steps_at_solve"] if solved else summary["env_steps"],
        "best_eval": summary["best_eval_return"],
        "import_s": import_s,
        "updates": summary["updates"],
        "updates_per_s": summary["updates"] / (wall - import_s) if wall > import_s else 0.0,
        "env_steps_per_s": round(summary["env_steps"] / (wall - import_s)) if wall > import_s else 0,
        "workers": summary["num_sources"],
        "mean_staleness": summary["mean_staleness"],
    }


def run_sb3(seed: int, *, launched: float, budget: float, eval_every: int,
            episodes: int, max_env_steps: int | None) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from algorithms.rollout import evaluate

    torch.set_num_threads(1)
    began = time.time()
    eval_env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    state: dict[str, Any] = {"next": eval_every, "solved_at": None, "best": None}

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if time.time() - launched >= budget:
                return False
            if self.num_timesteps < state["next"]:
                return True
            state["next"] = self.num_timesteps + eval_every
            returns = evaluate(lambda obs: self.model.predict(obs, deterministic=True)[0],
                               eval_env, episodes=episodes, seed=seed + 7 + self.num_timesteps)
            mean = float(returns.mean())
            state["best"] = mean if state["best"] is None else max(state["best"], mean)
            if mean >= TARGET:
                state["solved_at"] = (time.time() - launched, self.num_timesteps)
                return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu")
    model.learn(total_timesteps=10_000_000 if max_env_steps is None else max_env_steps, callback=Evaluate())
    wall = time.time() - launched
    eval_env.close()
    env.close()
    solved = state["solved_at"] is not None
    updates = model.num_timesteps // (model.n_steps * env.num_envs)
    run_s = time.time() - began
    return {
        "solved": solved,
        "time_to_solve_s": state["solved_at"][0] if solved else wall,
        "env_steps": state["solved_at"][1] if solved else int(model.num_timesteps),
        "best_eval": state["best"],
        "import_s": began - launched,
        "updates": int(updates),
        "updates_per_s": updates / run_s if run_s > 0 else 0.0,
        "env_steps_per_s": round(model.num_timesteps / run_s) if run_s > 0 else 0,
    }


def _sb3_missing() -> str | None:
    try:
        import stable_baselines3  # noqa: F401
    except Exception as exc:  # an incompatible install counts as missing
        return f"stable-baselines3 not importable: {exc}"
    return None


def run_child(impl: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run in a fresh interpreter, timed from just before its launch."""
    command = [sys.executable, "-m", "experiments.bench.learning.a3c_cartpole", "--child", impl,
               "--seed", str(seed), "--budget", str(args.budget),
               "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
               f"--rlpar-flags={args.rlpar_flags}",
               *([] if args.max_env_steps is None else ["--max-env-steps", str(args.max_env_steps)])]
    launched = time.time()
    out = subprocess.run([*command, "--launched", repr(launched)], capture_output=True, text=True,
                         timeout=args.budget + 180)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{impl} seed {seed} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--eval-every", type=int, default=2_500, help=(
        "env steps between evaluations, both sides (finer: less quantization of the solve point)"))
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--impl", choices=["both", "rlpar", "sb3"], default="both")
    parser.add_argument("--rlpar-flags", default="", help=(
        "extra experiments.a3c flags for rlpar, e.g. \"--lr 2e-3 --n-steps 8\""))
    parser.add_argument("--max-env-steps", type=int, default=None, help=(
        "env step cap per run, both sides (default: none, the budget alone ends a run)"))
    parser.add_argument("--quick", action="store_true", help=(
        "smoke test: one seed, 1,000 env steps per run (60 s only bounds a stuck run)"))
    parser.add_argument("--child", choices=["rlpar", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.budget, args.eval_every, args.eval_episodes = 1, 60.0, 500, 4
        args.max_env_steps = 1_000
    if (args.seeds < 1 or args.budget <= 0 or args.eval_every < 1 or args.eval_episodes < 1
            or (args.max_env_steps is not None and args.max_env_steps < 1)):
        parser.error("--seeds, --budget, --eval-every, --eval-episodes and --max-env-steps must be positive")
    kwargs = {"budget": args.budget, "eval_every": args.eval_every, "episodes": args.eval_episodes,
              "max_env_steps": args.max_env_steps}
    if args.child:  # a run, in its own process
        launched = time.time() if args.launched is None else args.launched
        extra = {"flags": args.rlpar_flags} if args.child == "rlpar" else {}
        runner = run_rlpar if args.child == "rlpar" else run_sb3
        emit(runner(args.seed, launched=launched, **kwargs, **extra))
        return 0
    impls = ["rlpar", "sb3"] if args.impl == "both" else [args.impl]
    missing = _sb3_missing() if "sb3" in impls else None
    results: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for seed in range(args.seeds):
        # Alternate who goes first, so neither always runs right after the other.
        for impl in impls if seed % 2 == 0 else impls[::-1]:
            if impl == "sb3" and missing:
                continue
            result = run_child(impl, seed, args)
            results[impl].append(result)
            emit({"bench": BENCH, "impl": impl, "case": f"seed{seed}", "seed": seed,
                  "budget_s": args.budget, **_rounded(result)})
    medians = {}
    for impl in impls:
        if impl == "sb3" and missing:
            emit({"bench": BENCH, "impl": "sb3", "skipped": missing})
            continue
        medians[impl] = statistics.median(r["time_to_solve_s"] for r in results[impl])
    for impl, median in medians.items():
        runs = results[impl]
        line = {"bench": BENCH, "impl": impl, "case": "median",
                "time_to_solve_s_median": round(median, 2),
                "env_steps_median": int(statistics.median(r["env_steps"] for r in runs)),
                "updates_per_s_median": round(statistics.median(r["updates_per_s"] for r in runs), 1),
                "import_s_median": round(statistics.median(r["import_s"] for r in runs), 2),
                "solved": f"{sum(r['solved'] for r in runs)}/{len(runs)}",
                "target_s": 120.0}
        peers = [m for other, m in medians.items() if other != impl]
        if impl == "rlpar" and peers:
            line["ratio_vs_best_peer"] = round(median / min(peers), 3)  # < 1: faster
            sb3 = results.get("sb3") or []
            if len(sb3) == len(runs):
                line["faster_seeds"] = (f"{sum(a['time_to_solve_s'] < b['time_to_solve_s'] for a, b in zip(runs, sb3, strict=True))}"
                                        f"/{len(runs)}")
        emit(line)
    return 0


def _rounded(result: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}


if __name__ == "__main__":
    raise SystemExit(main())
