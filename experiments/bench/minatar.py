"""MinAtar under a wall-clock budget: ours (Ape-X, A3C) against Stable-Baselines3
(DQN with the paper's settings, A2C, PPO), side by side in one run, on this machine.

    python -m experiments.bench.minatar --games Breakout --impls rlpar-apex,sb3-dqn --budget-s 1800
    python -m experiments.bench.minatar --games SpaceInvaders --impls rlpar-a3c,sb3-a2c --seeds 0,1
    python -m experiments.bench.minatar --quick          # smoke test (< 60 s), not a measurement

For each game, seed and implementation (in that order, one at a time: each gets
the whole machine), the bench starts two processes:

- a trainer (``--worker IMPL``): ours through the job's Python API with its
  default flags (:mod:`.minatar_ours`; ``--ours-flags`` / ``--a3c-flags`` add
  more) or an SB3 peer (:mod:`.minatar_peers`). It stops at ``--budget-s``
  seconds, counted from its process's launch (imports and spawning included), or
  at ``--max-env-steps`` (the paper's 5M frames), and writes a snapshot of its
  acting network every ``--eval-every`` env steps and at the end;
- an evaluator (``--evaluator RUN_DIR``, ``nice`` 10, :mod:`.minatar_eval`) that
  plays every snapshot over ``--eval-episodes`` episodes with epsilon 0.1 (what
  the MinAtar paper's table reports) and 0.01 ("greedy").

So evaluation never pauses a learner; what it costs is reported: the evaluator's
CPU seconds (``eval_cpu_s``, and the part spent while the trainer ran:
``eval_cpu_s_during_training``, taken from the trainer's 2 cores), how long it
went on after training (``eval_tail_s``) and the trainers' total pause to write
snapshots (``snapshot_pause_s``, milliseconds each).

One JSON line per run, printed and appended to ``<out>/results.jsonl``:
``reached_paper_at_s`` / ``_steps`` are the wall-clock and env steps of the first
snapshot whose epsilon-0.1 evaluation reached the paper's score; ``final_eval_*``
score the final snapshot. A peer that is not installed gives a ``skipped`` line.
Curves go to ``<out>/<game>/<impl>-seed<k>/evals.jsonl`` and, for every run of a
game under ``<out>``, to ``<out>/minatar-<game>.png``. Games may run in separate
invocations: each appends its lines and redraws its games' PNGs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from experiments.bench import minatar_eval as ev

BENCH = "minatar"
IMPLS = ("rlpar-apex", "sb3-dqn", "rlpar-a3c", "sb3-a2c", "sb3-ppo")
QUICK = {"games": "Breakout", "impls": "rlpar-apex,sb3-dqn", "budget_s": 18.0, "eval_every": 1_000,
         "eval_episodes": 5}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--games", default=",".join(ev.PAPER_SCORES),
                        help=f"comma-separated, from {list(ev.PAPER_SCORES)} (default: all)")
    parser.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated, from {list(IMPLS)}")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--budget-s", type=float, default=1800.0, help="wall-clock seconds per run")
    parser.add_argument("--max-env-steps", type=int, default=5_000_000, help="env step cap per run (paper: 5M)")
    parser.add_argument("--eval-every", type=int, default=50_000, help="env steps between snapshots")
    parser.add_argument("--eval-episodes", type=int, default=30, help="episodes per evaluation and epsilon")
    parser.add_argument("--eval-max-steps", type=int, default=10_000, help=(
        "steps after which an evaluation episode is cut (MinAtar has no limit; cuts are counted)"))
    parser.add_argument("--out", default=os.path.join("runs", "bench-minatar"), help="results directory")
    parser.add_argument("--ours-flags", default="", help="extra experiments.apex flags for rlpar-apex")
    parser.add_argument("--a3c-flags", default="", help="extra experiments.a3c flags for rlpar-a3c")
    parser.add_argument("--quick", action="store_true", help=(
        "smoke test: Breakout, 18 s, rlpar-apex and sb3-dqn, tiny replay, 5 episodes"))
    for hidden in ("--worker", "--evaluator", "--game", "--run-dir"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.budget_s, args.eval_every = QUICK["budget_s"], QUICK["eval_every"]
        args.eval_episodes = QUICK["eval_episodes"]
        if args.games == parser.get_default("games"):
            args.games = QUICK["games"]
        if args.impls == parser.get_default("impls"):
            args.impls = QUICK["impls"]
    args.game_list = _names(args.games)
    unknown = [g for g in args.game_list if g not in ev.PAPER_SCORES]
    if unknown or not args.game_list:
        parser.error(f"--games: unknown game(s) {unknown}; choose from {list(ev.PAPER_SCORES)}")
    args.impl_list = _names(args.impls)
    unknown = [i for i in args.impl_list if i not in IMPLS]
    if unknown or not args.impl_list:
        parser.error(f"--impls: unknown implementation(s) {unknown}; choose from {list(IMPLS)}")
    try:
        args.seed_list = [int(s) for s in _names(args.seeds)]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not args.seed_list or any(s < 0 for s in args.seed_list):
        parser.error(f"--seeds must be non-negative integers, got {args.seeds!r}")
    for name in ("max_env_steps", "eval_every", "eval_episodes", "eval_max_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0 < args.budget_s < float("inf"):
        parser.error(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    if importlib.util.find_spec("minatar") is None:
        parser.error("MinAtar is not installed: pip install 'rlpar[minatar]'")
    if not (args.worker or args.evaluator) and (args.ours_flags or args.a3c_flags):
        # Bad job flags: exit 2 here, not in a child.
        from experiments.bench import minatar_ours as ours

        if args.ours_flags:
            ours.apex_config(args.ours_flags)
        if args.a3c_flags and ours.a3c_config(args.a3c_flags).num_workers not in (0, 1):
            parser.error("--a3c-flags: the bench runs one A3C worker (the 2-core default; its snapshots "
                         "count that worker's env steps): drop --num-workers")
    return args


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        print("RESULT " + json.dumps(train(args.worker, args)), flush=True)
        return 0
    if args.evaluator:
        ev.evaluator_main(args.evaluator, policy=lambda: policy(args.impl_list[0], args), game=args.game,
                          episodes=args.eval_episodes, max_steps=args.eval_max_steps,
                          seed=args.seed_list[0])
        return 0
    os.makedirs(args.out, exist_ok=True)
    for game in args.game_list:
        runnable = []
        for impl in args.impl_list:
            missing = _missing(impl)
            if missing:
                emit(args.out, {"bench": BENCH, "game": game, "impl": impl, "skipped": missing})
            else:
                runnable.append(impl)
        for seed in args.seed_list:
            for impl in runnable:
                emit(args.out, run_one(game, impl, seed, args))
        ev.plot_game(args.out, game, list(IMPLS))
    return 0


def _missing(impl: str) -> str | None:
    if impl.startswith("sb3-") and importlib.util.find_spec("stable_baselines3") is None:
        return "stable_baselines3 is not installed (make bench-deps)"
    return None


def emit(out: str, record: dict[str, Any]) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    with open(os.path.join(out, "results.jsonl"), "a") as f:
        f.write(line + "\n")


# --------------------------------------------------------------- one run


def child_command(args: argparse.Namespace, game: str, seed: int) -> list[str]:
    return [sys.executable, "-m", "experiments.bench.minatar", "--games", game, "--game", game,
            "--seeds", str(seed), "--budget-s", repr(args.budget_s), "--max-env-steps", str(args.max_env_steps),
            "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
            "--eval-max-steps", str(args.eval_max_steps), f"--ours-flags={args.ours_flags}",
            f"--a3c-flags={args.a3c_flags}", *(["--quick"] if args.quick else [])]


def run_one(game: str, impl: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Trainer and evaluator of one run; its JSON line."""
    run_dir = os.path.abspath(os.path.join(args.out, game, f"{impl}-seed{seed}"))
    shutil.rmtree(run_dir, ignore_errors=True)  # a re-run replaces its curve
    os.makedirs(run_dir)
    command = child_command(args, game, seed)
    with open(os.path.join(run_dir, "evaluator.log"), "w") as log:
        evaluator = subprocess.Popen([*command, "--impls", impl, "--evaluator", run_dir],
                                     stdout=log, stderr=subprocess.STDOUT)
    launched = time.time()
    result: dict[str, Any]
    try:
        out = subprocess.run([*command, "--impls", impl, "--worker", impl, "--run-dir", run_dir,
                              "--started", repr(launched)],
                             capture_output=True, text=True, timeout=args.budget_s + 240)
        with open(os.path.join(run_dir, "worker.log"), "w") as log:
            log.write(out.stdout + out.stderr)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
        result = json.loads(lines[-1][7:]) if lines else {"error": f"trainer exit {out.returncode}: {tail}"}
    except subprocess.TimeoutExpired:
        result = {"error": "trainer timed out"}
    finally:
        open(os.path.join(run_dir, ev.DONE), "w").close()
    try:
        evaluator.wait(timeout=max(300.0, args.budget_s))
    except subprocess.TimeoutExpired:
        evaluator.kill()
        evaluator.wait()
        result.setdefault("error", "evaluator timed out")
    report = {}
    if os.path.exists(os.path.join(run_dir, ev.EVALUATOR)):
        with open(os.path.join(run_dir, ev.EVALUATOR)) as f:
            report = json.load(f)
    elif evaluator.returncode:
        result.setdefault("error", f"evaluator exit {evaluator.returncode} (see {run_dir}/evaluator.log)")
    paper = ev.PAPER_SCORES[game]
    line = {"bench": BENCH, "game": game, "impl": impl, "seed": seed, "budget_s": args.budget_s,
            "paper_score": paper, **ev.summarize_curve(ev.read_curve(run_dir), paper_score=paper)}
    for key in ("env_steps", "env_steps_per_s", "updates", "updates_per_s", "wait_fraction", "startup_s"):
        line[key] = _rounded(result.get(key))
    line.update({"eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
                 **{k: report.get(k) for k in ("eval_cpu_s", "eval_cpu_s_during_training", "eval_tail_s")},
                 "snapshot_pause_s": round(ev.snapshot_pause_s(run_dir), 3), "quick": args.quick,
                 "curve": os.path.join(run_dir, ev.CURVE),
                 "png": os.path.abspath(os.path.join(args.out, f"minatar-{game}.png"))})
    if "error" in result:
        line["error"] = result["error"]
    return line


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


# ------------------------------------------------------ in the child processes


def train(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    common = {"run_dir": args.run_dir, "seed": args.seed_list[0], "started": args.started or time.time(),
              "budget_s": args.budget_s, "max_env_steps": args.max_env_steps, "eval_every": args.eval_every,
              "quick": args.quick}
    if impl.startswith("sb3-"):
        from experiments.bench import minatar_peers

        return minatar_peers.train(impl, args.game, **common)
    from experiments.bench import minatar_ours as ours

    if impl == "rlpar-apex":
        return ours.train_apex(args.game, flags=args.ours_flags, **common)
    return ours.train_a3c(args.game, flags=args.a3c_flags, **common)


def policy(impl: str, args: argparse.Namespace):
    if impl.startswith("sb3-"):
        from experiments.bench import minatar_peers

        return minatar_peers.policy(impl, args.game)
    from experiments.bench import minatar_ours as ours

    if impl == "rlpar-apex":
        return ours.apex_policy(args.ours_flags, args.game)
    return ours.a3c_policy(args.a3c_flags, args.game)


if __name__ == "__main__":
    sys.exit(main())
