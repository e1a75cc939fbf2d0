"""Atari from pixels under a wall-clock budget: ours (Ape-X DQN, IMPALA, PPO, PQN with
their jobs' frames defaults) against Stable-Baselines3 PPO and DQN (RL Baselines3 Zoo
settings), CleanRL's ``ppo_atari_envpool.py`` and, on a GPU, rl_games PPO with EnvPool,
one protocol for all (:mod:`.protocol`).

    python -m experiments.bench.atari                                     # Pong, every CPU impl, 1 h a run
    python -m experiments.bench.atari --impls rlpar-impala,sb3-ppo --budget-s 1800 --report-at 600,1200
    python -m experiments.bench.atari --impls cleanrl-ppo --cleanrl-script ~/cleanrl/cleanrl/ppo_atari_envpool.py
    python -m experiments.bench.atari --device cuda                       # one 8-minute call of a GPU machine
    python -m experiments.bench.atari --cpu-smoke                         # the --device cuda path, on CPU, seconds
    python -m experiments.bench.atari --quick                             # smoke test, not a measurement

For each seed and implementation (one at a time: each gets the whole machine) the
bench starts two processes (:func:`experiments.bench.tools.wallclock.run_pair`): a
trainer (ours through the job's Python API, :mod:`.ours`; a peer, :mod:`.peers`,
:mod:`.cleanrl`, :mod:`.rlgames`) that stops at ``--budget-s`` from its launch or
at ``--max-env-steps`` and writes its acting network every ``--eval-every`` env
steps and at the end; and an evaluator (``nice`` 10) that plays each snapshot over
``--eval-episodes`` protocol episodes, unclipped, epsilon-greedy at 0.05 (value
methods) or sampling the policy (policy methods). ``--evaluate after`` starts the
evaluator once the trainer has exited: on 2 cores the evaluator otherwise takes a
quarter of a core from the trainer for most of an hour, the more the longer the
episodes (the better the policy) get.

One JSON line per run, printed and appended to ``<out>/results.jsonl``: the
protocol; when the evaluation first reached ``--score`` (``reached_score_at_s`` /
``_steps``); the best and final evaluation; ``best_by_s``, the best evaluation by
each ``--report-at`` time; throughput (env steps and updates per second); the peak
memory of the trainer and every process of its job (``peak_memory_mb``: PSS summed,
so pages the ranks share count once); what evaluation cost; the load average at the
start and end. An implementation that
cannot run here (a peer not installed, no CleanRL script, a job this tree lacks)
gives a ``skipped`` line. Curves: ``<out>/<game>/<impl>-seed<k>/evals.jsonl``;
the PNG, every run of the game under ``<out>``: ``<out>/atari-<game>.png``.

``--device cuda`` is sized for one 8-minute call of a machine with one GPU and 16
cores: IMPALA (our job with the learner on the GPU and 14 actors on the cores,
``--fast compile`` unless ``--no-compile``) and rl_games PPO on EnvPool, 170 s each.
``--cpu-smoke`` runs that path on the CPU for a few seconds (rl_games skipped
without it). PPO and PQN have no compile option (their ``fast`` is internal), and
no job captures CUDA graphs: on a GPU they run eager.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import sys
import time
from typing import Any

from experiments.bench.atari import protocol
from experiments.bench.tools import wallclock as wc
from experiments.bench.tools.emit import emit

BENCH = "atari"
OURS = ("rlpar-apex", "rlpar-impala", "rlpar-ppo", "rlpar-pqn")
PEERS = ("sb3-ppo", "sb3-dqn", "cleanrl-ppo", "rlgames-ppo")
IMPLS = OURS + PEERS
CPU_IMPLS = OURS + PEERS[:3]
GPU_IMPLS = ("rlpar-impala", "rlgames-ppo")
SCORES = {"Pong": 18.0}  # the default --score by game (Pong: won by 18 points of 21)
# The bench's own flags for ours on a 16-core GPU machine (the jobs' defaults are for
# this 2-core one): 14 actors of 8 envs, the learner on the GPU; --cpu-smoke shrinks them.
GPU_FLAGS = {"rlpar-impala": "--num-actors 14 --num-envs 8", "rlpar-ppo": "--num-envs 64 --env-workers 14",
             "rlpar-apex": "--num-actors 14", "rlpar-pqn": "--num-envs 128 --env-workers 14"}
SMOKE_FLAGS = {"rlpar-impala": "--num-actors 1 --num-envs 2 --unroll-length 8 --batch-size 2",
               "rlpar-ppo": "--num-envs 2 --n-steps 16 --minibatches 2 --epochs 1",
               "rlpar-apex": "--num-actors 1 --num-envs 2 --learning-starts 200 --replay-capacity 2000 --batch-size 32",
               "rlpar-pqn": "--num-envs 4 --n-steps 8 --minibatches 2 --epochs 1"}
# --quick: ours in one process (a local world's start alone can outlast the budget on a
# loaded 2-core machine), an update within a few hundred env steps.
QUICK_FLAGS = {impl: "--serial " + flags for impl, flags in SMOKE_FLAGS.items()}
# The smoke tests stop at a few hundred env steps; the budget only bounds a stuck run
# (start-up alone took 17 s on the loaded 2-core machine).
QUICK = {"impls": "rlpar-impala,sb3-ppo,cleanrl-ppo", "budget_s": 60.0, "max_env_steps": 300, "eval_every": 200, "eval_episodes": 2,
         "eval_max_steps": 50}
MAX_ENV_STEPS = 10_000_000  # the zoo's and CleanRL's total timesteps for Atari
CPU = {"budget_s": 3600.0, "eval_every": 100_000}
GPU = {"budget_s": 170.0, "eval_every": 250_000}
SMOKE = {"budget_s": 60.0, "max_env_steps": 300, "eval_every": 200, "eval_episodes": 2, "eval_max_steps": 50}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    add = parser.add_argument
    add("--env-id", default="ALE/Pong-v5", help="an ALE v5 id (default ALE/Pong-v5)")
    add("--impls", default=None, help=f"comma-separated, from {list(IMPLS)} (default: {','.join(CPU_IMPLS)}; "
        f"with --device cuda or --cpu-smoke: {','.join(GPU_IMPLS)})")
    add("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    add("--device", choices=("cpu", "cuda"), default="cpu", help=(
        "where ours learn and rl_games runs (cuda: the one-call GPU run, see above)"))
    add("--compile", action=argparse.BooleanOptionalAction, default=None, help=(
        "torch.compile ours' forwards (--fast compile, for the jobs that take it: Ape-X, IMPALA); "
        "default on for cuda, off for cpu"))
    add("--budget-s", type=float, default=None, help="wall-clock seconds per run (default 3600; cuda 170)")
    add("--max-env-steps", type=int, default=None, help=(
        "agent-step cap per run (default 10M = 40M frames; the smoke tests 300)"))
    add("--eval-every", type=int, default=None, help="env steps between snapshots (default 100000; cuda 250000)")
    add("--eval-episodes", type=int, default=10, help="episodes per evaluation")
    add("--eval-max-steps", type=int, default=None, help=(
        "cut evaluation episodes after this many agent steps (default: the protocol's 27000 only)"))
    add("--evaluate", choices=("during", "after"), default="during", help=(
        "when the evaluator plays the snapshots: during training, at nice 10 (default), or after the "
        "trainer exits, so training has the whole machine"))
    add("--score", type=float, default=None, help="the score whose first crossing is reported (default: Pong 18)")
    add("--report-at", default="", help="comma-separated seconds: best_by_s gives the best evaluation by then")
    add("--out", default=os.path.join("runs", "bench-atari"), help="results directory")
    add("--flags", action="append", default=[], metavar="IMPL=FLAGS", help=(
        f"extra job flags for one of ours ({', '.join(OURS)}), e.g. 'rlpar-impala=--num-actors 3'; repeatable"))
    add("--cleanrl-script", default="", help=(
        "path to CleanRL's cleanrl/ppo_atari_envpool.py (run unedited; cleanrl-ppo is skipped without it)"))
    add("--quick", action="store_true", help=(
        "smoke test: IMPALA in one process for 300 env steps and the CPU peers, 2 evaluation episodes cut at 50 steps"))
    add("--cpu-smoke", action="store_true", help="the --device cuda path on the CPU for 300 env steps")
    wc.add_process_args(parser)
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick and args.cpu_smoke:
        parser.error("--quick and --cpu-smoke are two smoke tests: give one")
    if args.cpu_smoke and args.device == "cuda":
        parser.error("--cpu-smoke runs the cuda path on the CPU: drop --device cuda")
    gpu_path = args.device == "cuda" or args.cpu_smoke
    base = SMOKE if args.cpu_smoke else QUICK if args.quick else GPU if args.device == "cuda" else CPU
    for name in ("budget_s", "eval_every", "eval_max_steps", "max_env_steps"):
        if getattr(args, name) is None:
            setattr(args, name, base.get(name, MAX_ENV_STEPS if name == "max_env_steps" else None))
    if (args.quick or args.cpu_smoke) and args.eval_episodes == parser.get_default("eval_episodes"):
        args.eval_episodes = base["eval_episodes"]
    if args.impls is None:
        args.impls = QUICK["impls"] if args.quick else ",".join(GPU_IMPLS if gpu_path else CPU_IMPLS)
    if args.compile is None:
        args.compile = args.device == "cuda"
    args.impl_list = wc.choose(parser, "--impls", args.impls, IMPLS, what="implementation")
    args.seed_list = wc.seed_list(parser, args.seeds)
    for name in ("max_env_steps", "eval_every", "eval_episodes", "eval_max_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not 0 < args.budget_s < math.inf:
        parser.error(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    problem = protocol.check_env_id(args.env_id)
    if problem:
        parser.error(problem)
    args.game = protocol.game(args.env_id)
    if args.score is None:
        args.score = SCORES.get(args.game)
    try:
        args.report_times = parse_times(args.report_at)
        args.impl_flags = impl_flags(args.flags)
    except ValueError as exc:
        parser.error(str(exc))
    if not (args.worker or args.evaluator):
        for impl, flags in args.impl_flags.items():
            if impl in args.impl_list and not _missing(impl, args):
                from experiments.bench.atari import ours

                ours.config(impl, flags)  # a flag the job does not take: exit 2 here, not in a child
    return args


def parse_times(text: str) -> tuple[float, ...]:
    try:
        times = sorted({float(part) for part in wc.names(text)})
    except ValueError:
        raise ValueError(f"--report-at takes comma-separated seconds, got {text!r}") from None
    if any(not 0 < t < math.inf for t in times):
        raise ValueError(f"--report-at takes positive seconds, got {text!r}")
    return tuple(times)


def impl_flags(given: list[str]) -> dict[str, str]:
    flags: dict[str, list[str]] = {}
    for item in given:
        impl, sep, text = item.partition("=")
        impl = impl.strip()
        if not sep or impl not in IMPLS:
            raise ValueError(f"--flags takes IMPL=FLAGS with IMPL one of {list(OURS)}, got {item!r}")
        if impl not in OURS:
            raise ValueError(f"--flags {impl}: the peers run the bench's own settings and take no flags")
        if text.strip():
            flags.setdefault(impl, []).append(text)
    return {impl: " ".join(parts) for impl, parts in flags.items()}


def job_flags(impl: str, args: argparse.Namespace) -> str:
    """The flags one of ours runs with: the GPU path's (shrunk for --cpu-smoke), the
    compile option, then the user's ``--flags``."""
    from experiments.bench.atari import ours

    parts = []
    if args.cpu_smoke:
        parts.append(SMOKE_FLAGS[impl])
    elif args.quick:
        parts.append(QUICK_FLAGS[impl])
    elif args.device == "cuda":
        parts.append(GPU_FLAGS[impl])
    if impl in ours.FAST and args.compile:
        parts.append("--fast compile")
    parts.append(args.impl_flags.get(impl, ""))
    return " ".join(p for p in parts if p)


def _missing(impl: str, args: argparse.Namespace) -> str | None:
    if impl in OURS:
        from experiments.bench.atari import ours

        return ours.missing(impl)
    if impl.startswith("sb3-"):
        if importlib.util.find_spec("stable_baselines3") is None:
            return "stable_baselines3 is not installed (make bench-deps)"
        return None
    if impl == "cleanrl-ppo":
        from experiments.bench.atari import cleanrl

        return cleanrl.missing(args.cleanrl_script)
    from experiments.bench.atari import rlgames

    return rlgames.missing(args.device)


def acting(impl: str) -> str:
    from experiments.bench.atari import ours, peers

    return {**ours.ACTING, **peers.ACTING}.get(impl, protocol.POLICY)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        wc.report(train(args.worker, args))
        return 0
    if args.evaluator:
        evaluate_runs(args.evaluator, args)
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: no CUDA device here (--cpu-smoke runs the same path on the CPU)", file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    runnable = []
    for impl in args.impl_list:
        missing = _missing(impl, args)
        if missing:
            emit({"bench": BENCH, "env_id": args.env_id, "impl": impl, "device": args.device,
                  "protocol": protocol.PROTOCOL, "skipped": missing}, results_dir=args.out)
        else:
            runnable.append(impl)
    for seed in args.seed_list:
        for impl in runnable:
            emit(run_one(impl, seed, args), results_dir=args.out)
    if runnable:
        plot(args.out, args.game, args.score)
    return 0


def plot(out: str, game: str, score: float | None) -> str | None:
    return wc.plot_runs(os.path.join(out, game), os.path.join(out, f"atari-{game}.png"), key="return",
                        title=f"Atari {game} (ALE v5 protocol): evaluation return, unclipped",
                        impl_order=list(IMPLS), levels=[] if score is None else [(score, f"score {score:g}")])


# --------------------------------------------------------------- one run


def child_command(args: argparse.Namespace, impl: str, seed: int, run_dir: str) -> list[str]:
    return [sys.executable, "-m", "experiments.bench.atari", "--env-id", args.env_id, "--impls", impl,
            "--seeds", str(seed), "--device", args.device, "--compile" if args.compile else "--no-compile",
            "--budget-s", repr(args.budget_s), "--max-env-steps", str(args.max_env_steps),
            "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
            *(["--eval-max-steps", str(args.eval_max_steps)] if args.eval_max_steps else []),
            *[f"--flags={i}={f}" for i, f in args.impl_flags.items()],
            f"--cleanrl-script={args.cleanrl_script}", "--run-dir", run_dir,
            *(["--quick"] if args.quick else []), *(["--cpu-smoke"] if args.cpu_smoke else [])]


def run_one(impl: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Trainer and evaluator of one run; its JSON line."""
    run_dir = os.path.abspath(os.path.join(args.out, args.game, f"{impl}-seed{seed}"))
    shutil.rmtree(run_dir, ignore_errors=True)  # a re-run replaces its curve
    os.makedirs(run_dir)
    command = child_command(args, impl, seed, run_dir)
    load_start, began = wc.loadavg(), time.time()
    result, figures = wc.run_pair([*command, "--worker", impl], [*command, "--evaluator", impl], run_dir=run_dir,
                                  trainer_timeout_s=args.budget_s + 300, evaluator_timeout_s=max(300.0, args.budget_s),
                                  evaluate_after=args.evaluate == "after")
    curve = wc.read_curve(run_dir, budget_s=args.budget_s)
    line: dict[str, Any] = {
        "bench": BENCH, "env_id": args.env_id, "impl": impl, "seed": seed, "device": args.device,
        "budget_s": args.budget_s, "max_env_steps": args.max_env_steps, "protocol": protocol.PROTOCOL,
        "eval_acting": acting(impl), "evaluate": args.evaluate, "eval_episodes": args.eval_episodes,
        "eval_every": args.eval_every,
        "eval_max_steps": args.eval_max_steps, "training_reward_clip": result.get("training_reward_clip"),
        **summarize(curve, score=args.score, report_at=args.report_times)}
    for key in ("env_steps", "env_steps_per_s", "updates", "updates_per_s", "wait_fraction", "startup_s",
                "num_actors", "members", "peak_memory_mb"):
        line[key] = wc.rounded(result.get(key))
    line.update({"settings": result.get("settings"), "flags": job_flags(impl, args) if impl in OURS else "",
                 "compile": bool(args.compile and impl in OURS and "--fast compile" in job_flags(impl, args)),
                 **{k: figures.get(k) for k in ("eval_cpu_s", "eval_cpu_s_during_training", "eval_tail_s")},
                 "snapshot_pause_s": round(wc.snapshot_pause_s(run_dir), 3), "loadavg_start": load_start,
                 "loadavg_end": wc.loadavg(), "run_s": round(time.time() - began, 1), "cpu_count": os.cpu_count(),
                 "quick": args.quick, "cpu_smoke": args.cpu_smoke, "curve": os.path.join(run_dir, wc.CURVE),
                 "png": os.path.abspath(os.path.join(args.out, f"atari-{args.game}.png"))})
    if "error" in result:
        line["error"] = result["error"]
    return line


def summarize(curve: list[dict[str, Any]], *, score: float | None, report_at: tuple[float, ...]) -> dict[str, Any]:
    reached = wc.first_reaching(curve, "return", score) if score is not None else None
    final = next((r for r in curve if r["final"]), curve[-1] if curve else None)
    return {
        "score": score,
        "reached_score_at_s": reached["wall_s"] if reached else None,
        "reached_score_at_steps": reached["env_steps"] if reached else None,
        "best_eval": max(r["return"] for r in curve) if curve else None,
        "final_eval": final["return"] if final else None,
        "final_written_s": final.get("written_s", final["wall_s"]) if final else None,
        "best_by_s": {f"{t:g}": max((r["return"] for r in curve if r["wall_s"] <= t), default=None)
                      for t in report_at},
        "evaluations": len(curve),
        "eval_episodes_cut": sum(r["cut"] for r in curve),
    }


# ------------------------------------------------------ in the child processes


def train(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    common = {"run_dir": args.run_dir, "seed": args.seed_list[0], "started": args.started or time.time(),
              "budget_s": args.budget_s, "max_env_steps": args.max_env_steps, "eval_every": args.eval_every}
    if impl in OURS:
        from experiments.bench.atari import ours

        flags = job_flags(impl, args)
        figures = ours.train(impl, args.env_id, flags=flags, device=args.device, **common)
        return {**figures, "training_reward_clip": ours.training_reward_clip(impl, flags)}
    if impl.startswith("sb3-"):
        from experiments.bench.atari import peers

        figures = peers.train(impl, args.env_id, quick=args.quick or args.cpu_smoke, **common)
    elif impl == "cleanrl-ppo":
        from experiments.bench.atari import cleanrl

        figures = cleanrl.train(args.cleanrl_script, args.env_id, quick=args.quick or args.cpu_smoke,
                                device=args.device, **common)
    else:
        from experiments.bench.atari import rlgames

        figures = rlgames.train(args.env_id, device=args.device, smoke=args.cpu_smoke, **common)
    return {**figures, "training_reward_clip": "sign"}


def policy(impl: str, args: argparse.Namespace):
    if impl in OURS:
        from experiments.bench.atari import ours

        return ours.policy(impl, job_flags(impl, args), args.env_id, run_dir=args.run_dir)
    if impl.startswith("sb3-"):
        from experiments.bench.atari import peers

        return peers.policy(impl, args.env_id)
    if impl == "cleanrl-ppo":
        from experiments.bench.atari import cleanrl

        return cleanrl.policy(args.cleanrl_script, args.env_id)
    from experiments.bench.atari import rlgames

    return rlgames.policy(args.env_id, smoke=args.cpu_smoke)


def evaluate_runs(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    """The evaluator process: unclipped protocol returns of every snapshot."""
    load, scores = policy(impl, args)
    env = protocol.eval_env(args.env_id, episodes=args.eval_episodes, max_steps=args.eval_max_steps)
    seed, how = args.seed_list[0], acting(impl)

    def evaluate(snap: dict[str, Any]) -> dict[str, Any]:
        load(snap["state"])
        returns, cut = protocol.play(scores, env, acting=how, seed=seed * 1_000_003 + snap["env_steps"])
        return {"return": float(returns.mean()), "return_std": float(returns.std()),
                "return_min": float(returns.min()), "cut": cut}

    try:
        return wc.watch_snapshots(args.run_dir, evaluate)
    finally:
        env.close()
