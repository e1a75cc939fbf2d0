"""Partially observed envs under a wall-clock budget: ours R2D2 (``python -m
experiments.apex --algorithm r2d2``, recurrent) against ours feed-forward Ape-X DQN
(``--algorithm dqn``) and sb3-contrib's RecurrentPPO, side by side on this machine.

    python -m experiments.bench.pomdp --envs StatelessCartPole               # 10 min per run
    python -m experiments.bench.pomdp --envs BreakoutNoTrail --seeds 0,1,2   # 30 min per run (minatar extra)
    python -m experiments.bench.pomdp --quick                                # smoke test, not a measurement

Envs (:mod:`envs.partial`): ``StatelessCartPole`` is ``rlpar/StatelessCartPole-v1``
(CartPole observing position and angle, not the velocities; solved at 475);
``BreakoutNoTrail`` is ``rlpar/BreakoutNoTrail-v1`` (MinAtar Breakout with its minimal
action set, one frame without the trail channel, so the ball's direction is hidden;
episodes cut at 1,000 steps). A memoryless agent sees where things are, not where
they go.

For each env, seed and implementation (in that order, one at a time: each gets the
whole machine) the bench runs a trainer and a niced evaluator
(:func:`experiments.bench.tools.wallclock.run_pair`, as the continuous bench): the
trainer (ours: :mod:`.ours`, with ``--flags IMPL=FLAGS`` after the job's defaults;
the peer: :mod:`.peers`) stops at ``--budget-s`` (counted from its launch) or at
``--max-env-steps`` (by env: 1.2M on BreakoutNoTrail, see ``ENVS``), and writes its
acting network every ``--eval-every`` env steps and at the end; the evaluator plays
every snapshot greedily over ``--eval-episodes`` episodes (each env copy's first
episode, seeded by the snapshot's env steps): ours
with the builder's greedy policy (R2D2 with its recurrent state, one per episode),
RecurrentPPO's deterministic action with its LSTM state.

JSON lines, printed and appended to ``<out>/results.jsonl``: one per report time
(``"kind": "report"``, at ``--reports`` equal fractions of the budget: the greedy
return of the last snapshot taken by then, its env steps and wall-clock) and one per
run (``"kind": "run"``: env steps, ``env_steps_per_s``, updates, ``updates_per_s``,
``wait_fraction``, best and final greedy returns, ``return_at_s`` (the reports),
when each of the env's levels was first reached, the load averages and what
evaluation cost). A peer that is not installed gives a ``skipped`` line. Curves go to
``<out>/<env>/<impl>-seed<k>/evals.jsonl`` and ``<out>/pomdp-<env>.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import shutil
import sys
import time
from typing import Any

from experiments.bench.tools import wallclock as wc
from experiments.bench.tools.emit import emit

BENCH = "pomdp"
IMPLS = ("rlpar-r2d2", "rlpar-dqn", "sb3-recurrent-ppo")
OURS = IMPLS[:2]
MAX_ENV_STEPS = 10_000_000  # out of reach within the budgets here: runs end at their budget


@dataclasses.dataclass(frozen=True)
class EnvDefaults:
    env_id: str
    budget_s: float
    eval_every: int
    levels: tuple[float, ...]  # the first is the run's headline ``score``
    needs: str | None = None  # a module the env needs
    max_env_steps: int = MAX_ENV_STEPS


# Levels: StatelessCartPole's solved score and a half-way mark; BreakoutNoTrail's 10 is
# the MinAtar paper's DQN on full Breakout after 5M frames (Young & Tian 2019), 5 a step
# on the way. BreakoutNoTrail's runs stop at 1.2M env steps: about what a 30-minute run
# of R2D2 steps at its fastest here (755 env steps/s, 1.36M), and what R2D2's rate is
# annealed over (the job's default for small images is its run's --max-env-steps; the
# rate annealed over 1.2M lifted its late plateau, experiments/tuning.md, "R2D2"). The
# same cap for every implementation; a run that reaches it early is reported from its
# final snapshot, as the MinAtar bench's 5M cap.
ENVS = {
    "StatelessCartPole": EnvDefaults("rlpar/StatelessCartPole-v1", budget_s=600.0, eval_every=5_000,
                                     levels=(475.0, 200.0)),
    "BreakoutNoTrail": EnvDefaults("rlpar/BreakoutNoTrail-v1", budget_s=1800.0, eval_every=25_000,
                                   levels=(10.0, 5.0), needs="minatar", max_env_steps=1_200_000),
}
# --quick stops at 1,000 env steps (20 s bounds a slow start): a snapshot at 500, after
# learning started at 200, and the final one.
QUICK = {"envs": "StatelessCartPole", "budget_s": 20.0, "max_env_steps": 1_000, "eval_every": 500,
         "eval_episodes": 3}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    add = parser.add_argument
    add("--envs", default=",".join(ENVS), help=f"comma-separated, from {list(ENVS)} (default: all)")
    add("--impls", default=",".join(IMPLS), help=f"comma-separated, from {list(IMPLS)} (default: all)")
    add("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    add("--budget-s", type=float, default=None, help=(
        "wall-clock seconds per run (default by env: 600 for StatelessCartPole, 1800 for BreakoutNoTrail)"))
    add("--max-env-steps", type=int, default=None, help=(
        "env step cap per run (default by env: "
        + ", ".join(f"{name} {'none reached' if env.max_env_steps == MAX_ENV_STEPS else f'{env.max_env_steps:,}'}"
                    for name, env in ENVS.items()) + ")"))
    add("--eval-every", type=int, default=None, help=(
        "env steps between snapshots (default by env: 5000 for StatelessCartPole, 25000 for BreakoutNoTrail)"))
    add("--eval-episodes", type=int, default=10, help="greedy episodes per evaluation")
    add("--reports", type=int, default=6, help="report times per run: every budget/REPORTS seconds")
    add("--out", default=os.path.join("runs", "bench-pomdp"), help="results directory")
    add("--flags", action="append", default=[], metavar="IMPL=FLAGS", help=(
        f"extra experiments.apex flags for one of ours ({', '.join(OURS)}), e.g. 'rlpar-r2d2=--lstm-size 256'; "
        "repeatable"))
    add("--quick", action="store_true", help=(
        "smoke test: StatelessCartPole, 1,000 env steps or 20 s per run, tiny networks and replay, 3 episodes"))
    wc.add_process_args(parser, "--env")
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        if args.envs == parser.get_default("envs"):
            args.envs = QUICK["envs"]
        for name in ("budget_s", "eval_every", "max_env_steps"):
            if getattr(args, name) is None:
                setattr(args, name, QUICK[name])
        if args.eval_episodes == parser.get_default("eval_episodes"):
            args.eval_episodes = QUICK["eval_episodes"]
    args.env_list = wc.choose(parser, "--envs", args.envs, list(ENVS), what="env")
    args.impl_list = wc.choose(parser, "--impls", args.impls, IMPLS, what="implementation")
    args.seed_list = wc.seed_list(parser, args.seeds)
    for name in ("max_env_steps", "eval_every", "eval_episodes", "reports"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.budget_s is not None and not 0 < args.budget_s < float("inf"):
        parser.error(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    try:
        args.impl_flags = impl_flags(args.flags)
    except ValueError as exc:
        parser.error(str(exc))
    for env in args.env_list:
        needs = ENVS[env].needs
        if needs and importlib.util.find_spec(needs) is None:
            parser.error(f"{env} needs {needs}: pip install 'rlpar[{needs}]'")
    if not (args.worker or args.evaluator):
        from experiments.bench.pomdp import ours

        for impl, flags in args.impl_flags.items():  # bad job flags: exit 2 here, not in a child
            try:
                ours.apex_config(impl, ENVS[args.env_list[0]].env_id, flags, quick=args.quick)
            except ValueError as exc:
                parser.error(str(exc))
    return args


def impl_flags(given: list[str]) -> dict[str, str]:
    """``{impl: experiments.apex flags}`` from ``--flags IMPL=FLAGS`` (repeated: joined)."""
    flags: dict[str, list[str]] = {}
    for item in given:
        impl, sep, text = item.partition("=")
        impl = impl.strip()
        if not sep or impl not in OURS:
            raise ValueError(f"--flags takes IMPL=FLAGS with IMPL one of {list(OURS)} (the peer runs the "
                             f"bench's settings, pomdp.peers), got {item!r}")
        flags.setdefault(impl, []).append(text)
    return {impl: " ".join(parts) for impl, parts in flags.items()}


def budget_of(args: argparse.Namespace, env: str) -> float:
    return args.budget_s if args.budget_s is not None else ENVS[env].budget_s


def max_env_steps_of(args: argparse.Namespace, env: str) -> int:
    return args.max_env_steps if args.max_env_steps is not None else ENVS[env].max_env_steps


def eval_every_of(args: argparse.Namespace, env: str) -> int:
    return args.eval_every if args.eval_every is not None else ENVS[env].eval_every


def report_times(budget_s: float, reports: int) -> list[float]:
    return [budget_s * (k + 1) / reports for k in range(reports)]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        wc.report(train(args.worker, args))
        return 0
    if args.evaluator:
        evaluate_runs(args.evaluator, args)
        return 0
    os.makedirs(args.out, exist_ok=True)
    for env in args.env_list:
        runnable = []
        for impl in args.impl_list:
            missing = _missing(impl)
            if missing:
                emit({"bench": BENCH, "kind": "run", "env": env, "impl": impl, "skipped": missing},
                     results_dir=args.out)
            else:
                runnable.append(impl)
        for seed in args.seed_list:
            for impl in runnable:
                reports, line = run_one(env, impl, seed, args)
                for report in reports:
                    emit(report, results_dir=args.out)
                emit(line, results_dir=args.out)
        if runnable:
            wc.plot_runs(os.path.join(args.out, env), os.path.join(args.out, f"pomdp-{env}.png"), key="greedy",
                         title=f"{ENVS[env].env_id}: greedy return (mean of the evaluation's episodes)",
                         impl_order=list(IMPLS), levels=ENVS[env].levels)
    return 0


def _missing(impl: str) -> str | None:
    if impl.startswith("sb3-"):
        from experiments.bench.pomdp import peers

        if importlib.util.find_spec(peers.MODULE) is None:
            return f"{peers.MODULE} is not installed (pip install -c constraints.txt 'rlpar[bench]')"
    return None


# --------------------------------------------------------------- one run


def child_command(args: argparse.Namespace, env: str, impl: str, seed: int, run_dir: str) -> list[str]:
    return [sys.executable, "-m", "experiments.bench.pomdp.budget", "--envs", env, "--env", env,
            "--impls", impl, "--seeds", str(seed), "--budget-s", repr(budget_of(args, env)),
            "--max-env-steps", str(max_env_steps_of(args, env)), "--eval-every", str(eval_every_of(args, env)),
            "--eval-episodes", str(args.eval_episodes),
            *[f"--flags={i}={f}" for i, f in args.impl_flags.items()], "--run-dir", run_dir,
            *(["--quick"] if args.quick else [])]


def run_one(env: str, impl: str, seed: int, args: argparse.Namespace) -> tuple[list[dict], dict[str, Any]]:
    """Trainer and evaluator of one run; its report lines and its run line."""
    run_dir = os.path.abspath(os.path.join(args.out, env, f"{impl}-seed{seed}"))
    shutil.rmtree(run_dir, ignore_errors=True)  # a re-run replaces its curve
    os.makedirs(run_dir)
    budget = budget_of(args, env)
    command = child_command(args, env, impl, seed, run_dir)
    load_start, began = wc.loadavg(), time.time()
    result, figures = wc.run_pair([*command, "--worker", impl], [*command, "--evaluator", impl], run_dir=run_dir,
                                  trainer_timeout_s=budget + 300, evaluator_timeout_s=max(300.0, budget))
    curve = wc.read_curve(run_dir, budget_s=budget)
    head = {"bench": BENCH, "env": env, "env_id": ENVS[env].env_id, "impl": impl, "seed": seed, "budget_s": budget}
    reports = [{**head, "kind": "report", **report_at(curve, seconds)}
               for seconds in report_times(budget, args.reports)]
    line = {**head, "kind": "run", **summarize(curve, levels=ENVS[env].levels, times=report_times(budget, args.reports))}
    for key in ("env_steps", "env_steps_per_s", "updates", "updates_per_s", "wait_fraction", "startup_s",
                "num_actors", "peak_memory_mb"):
        line[key] = wc.rounded(result.get(key))
    line.update({"settings": result.get("settings"), "flags": args.impl_flags.get(impl, ""),
                 "max_env_steps": max_env_steps_of(args, env),
                 "eval_every": eval_every_of(args, env), "eval_episodes": args.eval_episodes,
                 **{k: figures.get(k) for k in ("eval_cpu_s", "eval_cpu_s_during_training", "eval_tail_s")},
                 "snapshot_pause_s": round(wc.snapshot_pause_s(run_dir), 3), "loadavg_start": load_start,
                 "loadavg_end": wc.loadavg(), "run_s": round(time.time() - began, 1), "cpu_count": os.cpu_count(),
                 "quick": args.quick, "curve": os.path.join(run_dir, wc.CURVE),
                 "png": os.path.abspath(os.path.join(args.out, f"pomdp-{env}.png"))})
    if "error" in result:
        line["error"] = result["error"]
    return reports, line


def report_at(curve: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The last evaluation of a snapshot taken by ``seconds`` of the trainer's wall-clock."""
    taken = [r for r in curve if r["wall_s"] <= seconds]
    last = max(taken, key=lambda r: r["wall_s"]) if taken else None
    return {"at_s": round(seconds, 1), "greedy": last["greedy"] if last else None,
            "greedy_std": last["greedy_std"] if last else None, "env_steps": last["env_steps"] if last else None,
            "snapshot_s": last["wall_s"] if last else None}


def summarize(curve: list[dict[str, Any]], *, levels: tuple[float, ...], times: list[float]) -> dict[str, Any]:
    """A run's greedy curve in its JSON line (see the module docstring)."""
    headline = wc.first_reaching(curve, "greedy", levels[0])
    final = next((r for r in curve if r["final"]), curve[-1] if curve else None)
    return {
        "score": levels[0],
        "reached_score_at_s": headline["wall_s"] if headline else None,
        "reached_score_at_steps": headline["env_steps"] if headline else None,
        "crossings": wc.crossings(curve, "greedy", sorted(levels)),
        "best_eval_greedy": max(r["greedy"] for r in curve) if curve else None,
        "final_eval_greedy": final["greedy"] if final else None,
        "return_at_s": {f"{t:g}": report_at(curve, t)["greedy"] for t in times},
        "evaluations": len(curve),
    }


# ------------------------------------------------------ in the child processes


def train(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    env_id = ENVS[args.env].env_id
    common = {"run_dir": args.run_dir, "seed": args.seed_list[0], "started": args.started or time.time(),
              "budget_s": budget_of(args, args.env), "max_env_steps": max_env_steps_of(args, args.env),
              "eval_every": eval_every_of(args, args.env), "quick": args.quick}
    if impl.startswith("sb3-"):
        from experiments.bench.pomdp import peers

        return peers.train(env_id, **common)
    from experiments.bench.pomdp import ours

    return ours.train(impl, env_id, flags=args.impl_flags.get(impl, ""), **common)


def evaluate_runs(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    """The evaluator process: greedy returns of every snapshot of ``args.run_dir``."""
    import gymnasium as gym

    from algorithms.rollout import evaluate
    from envs.registry import EnvFactory

    env_id = ENVS[args.env].env_id
    if impl.startswith("sb3-"):
        from experiments.bench.pomdp import peers

        load, act = peers.policy(env_id)
    else:
        from experiments.bench.pomdp import ours

        load, act = ours.policy(impl, env_id, flags=args.impl_flags.get(impl, ""), quick=args.quick)
    env = gym.vector.SyncVectorEnv([EnvFactory.from_id(env_id)] * args.eval_episodes)
    seed = args.seed_list[0]

    def evaluate_snapshot(snap: dict[str, Any]) -> dict[str, Any]:
        import torch

        load(snap["state"])
        with torch.no_grad():
            returns = evaluate(act, env, episodes=args.eval_episodes, seed=seed * 1_000_003 + snap["env_steps"])
        return {"greedy": float(returns.mean()), "greedy_std": float(returns.std()),
                "greedy_min": float(returns.min())}

    try:
        return wc.watch_snapshots(args.run_dir, evaluate_snapshot)
    finally:
        env.close()


if __name__ == "__main__":
    sys.exit(main())
