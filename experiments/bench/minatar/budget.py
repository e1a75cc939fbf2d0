"""MinAtar under a wall-clock budget: ours (Ape-X, A3C, IMPALA, PPO, PQN) against
Stable-Baselines3 (DQN with the paper's settings, A2C, PPO), side by side in one
run, on this machine.

    python -m experiments.bench.minatar.budget --games Breakout --impls rlpar-apex,sb3-dqn --budget-s 1800
    python -m experiments.bench.minatar.budget --games SpaceInvaders --impls rlpar-a3c,sb3-a2c --seeds 0,1
    python -m experiments.bench.minatar.budget --games Breakout --impls rlpar-pqn,rlpar-ppo --variant gymnax \
        --score 28 --report-at 300,900
    python -m experiments.bench.minatar.budget --games Breakout --impls rlpar-impala --flags "rlpar-impala=--num-actors 3"
    python -m experiments.bench.minatar.budget --quick          # smoke test (< 60 s), not a measurement

For each game, seed and implementation (in that order, one at a time: each gets
the whole machine), the bench starts two processes:

- a trainer (``--worker IMPL``): ours through the job's Python API with its
  default flags (:mod:`.ours`, :mod:`.ours_sync`; ``--flags IMPL=FLAGS``
  adds more, e.g. ``--flags "rlpar-impala=--num-actors 3"``, repeatable;
  ``--ours-flags`` / ``--a3c-flags`` are ``--flags rlpar-apex=`` / ``rlpar-a3c=``)
  or an SB3 peer (:mod:`.peers`, no flags). It stops at ``--budget-s``
  seconds, counted from its process's launch (imports and spawning included), or
  at ``--max-env-steps`` (the paper's 5M frames), and writes a snapshot of its
  acting network every ``--eval-every`` env steps and at the end;
- an evaluator (``--evaluator RUN_DIR``, ``nice`` 10, :mod:`.evaluation`) that
  plays every snapshot over ``--eval-episodes`` episodes with epsilon 0.1 (what
  the MinAtar paper's table reports) and 0.01 ("greedy").

``rlpar-ppo`` and ``rlpar-pqn`` run ``experiments.ppo`` / ``experiments.pqn``; in a
tree without them their lines say ``skipped: not available: ... is not installed
in this tree``, as for a peer that is not installed.

``--variant paper`` (default) is the MinAtar paper's protocol (``MinAtar/<Game>-v0``:
all six actions, sticky actions 0.1, no episode cap); ``--variant gymnax`` is MinAtar
as gymnax runs it, which PQN's authors (purejaxql) trained on: the minimal action
set, ``sticky_action_prob=0``, a 1,000-step cap (Freeway: gymnax's 2,500, where
MinAtar ends it anyway) (``MinAtar/<Game>-gymnax-v0``, see
:mod:`envs.registry`). Its runs and PNG go under ``<game>-gymnax``.

So evaluation never pauses a learner; what it costs is reported: the evaluator's
CPU seconds (``eval_cpu_s``, and the part spent while the trainer ran:
``eval_cpu_s_during_training``, taken from the trainer's 2 cores), how long it
went on after training (``eval_tail_s``) and the trainers' total pause to write
snapshots (``snapshot_pause_s``, milliseconds each).

One JSON line per run, printed and appended to ``<out>/results.jsonl``:
``reached_paper_at_s`` / ``_steps`` are the wall-clock and env steps of the first
snapshot whose epsilon-0.1 evaluation reached the paper's score;
``reached_score_at_s`` / ``_steps`` and ``reached_score_greedy_at_s`` / ``_steps``
the same for ``score`` (``--score``, default the paper's) at epsilon 0.1 and 0.01;
``best_greedy_by_s`` the best greedy return among the snapshots taken by each of
``--report-at`` seconds; ``final_eval_*`` score the final snapshot. A peer or job
that is not installed gives a ``skipped`` line. Curves go to
``<out>/<board>/<impl>-seed<k>/evals.jsonl`` (the board: the game, or
``<game>-gymnax``) and, for every run of a board under ``<out>``, to
``<out>/minatar-<board>.png``. Games may run in separate invocations: each appends
its lines and redraws its boards' PNGs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from experiments.bench.minatar import evaluation as ev
from experiments.bench.minatar import jobs
from experiments.bench.tools import wallclock as wc
from experiments.bench.tools.emit import emit

BENCH = "minatar"
IMPLS = ("rlpar-apex", "sb3-dqn", "rlpar-a3c", "sb3-a2c", "sb3-ppo", "rlpar-impala", "rlpar-ppo", "rlpar-pqn")
LEGACY_FLAGS = {"ours_flags": "rlpar-apex", "a3c_flags": "rlpar-a3c"}  # --ours-flags, --a3c-flags
# --quick stops at 1,000 env steps: a snapshot at 500 after learning started at 250, and
# the final one (a smoke test of the plumbing: more steps and episodes only cost the
# suite's CPU). Its 60 s only bound a stuck run: at 20 s a loaded 2-core machine's
# start-up (the trainer's imports and MinAtar's) used the whole budget, 0 env steps.
QUICK = {"games": "Breakout", "impls": "rlpar-apex,sb3-dqn", "budget_s": 60.0, "max_env_steps": 1_000,
         "eval_every": 500, "eval_episodes": 3}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--games", default=",".join(ev.PAPER_SCORES),
                        help=f"comma-separated, from {list(ev.PAPER_SCORES)} (default: all)")
    parser.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated, from {list(IMPLS)}")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--variant", choices=ev.VARIANTS, default="paper", help=(
        "paper: MinAtar/<Game>-v0, the paper's protocol; gymnax: minimal action set, no sticky actions, "
        "1000-step cap, Freeway 2500 (MinAtar/<Game>-gymnax-v0)"))
    parser.add_argument("--budget-s", type=float, default=1800.0, help="wall-clock seconds per run")
    parser.add_argument("--max-env-steps", type=int, default=5_000_000, help="env step cap per run (paper: 5M)")
    parser.add_argument("--eval-every", type=int, default=50_000, help="env steps between snapshots")
    parser.add_argument("--eval-episodes", type=int, default=30, help="episodes per evaluation and epsilon")
    parser.add_argument("--eval-max-steps", type=int, default=10_000, help=(
        "steps after which an evaluation episode is cut (MinAtar has no limit; cuts are counted)"))
    parser.add_argument("--score", default="", help=(
        "the score whose first crossing (epsilon 0.1 and greedy) each line reports: a number for every "
        "game, or GAME=X,... (default: the paper's)"))
    parser.add_argument("--report-at", default="", help=(
        "comma-separated seconds: each line's best_greedy_by_s gives the best greedy return by then"))
    parser.add_argument("--out", default=os.path.join("runs", "bench-minatar"), help="results directory")
    parser.add_argument("--flags", action="append", default=[], metavar="IMPL=FLAGS", help=(
        f"extra job flags for one of ours ({', '.join(jobs.JOBS)}), e.g. 'rlpar-impala=--num-actors 3'; "
        "repeatable"))
    parser.add_argument("--ours-flags", default="", help="extra experiments.apex flags for rlpar-apex")
    parser.add_argument("--a3c-flags", default="", help="extra experiments.a3c flags for rlpar-a3c")
    parser.add_argument("--quick", action="store_true", help=(
        "smoke test: Breakout, 1,000 env steps (60 s at most), rlpar-apex and sb3-dqn, tiny replay, 3 episodes"))
    wc.add_process_args(parser, "--game")
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.budget_s, args.eval_every = QUICK["budget_s"], QUICK["eval_every"]
        args.eval_episodes = QUICK["eval_episodes"]
        if args.max_env_steps == parser.get_default("max_env_steps"):
            args.max_env_steps = QUICK["max_env_steps"]
        if args.games == parser.get_default("games"):
            args.games = QUICK["games"]
        if args.impls == parser.get_default("impls"):
            args.impls = QUICK["impls"]
    args.game_list = wc.choose(parser, "--games", args.games, list(ev.PAPER_SCORES), what="game")
    args.impl_list = wc.choose(parser, "--impls", args.impls, IMPLS, what="implementation")
    args.seed_list = wc.seed_list(parser, args.seeds)
    for name in ("max_env_steps", "eval_every", "eval_episodes", "eval_max_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0 < args.budget_s < float("inf"):
        parser.error(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    try:
        args.scores = parse_scores(args.score, args.game_list)
        args.report_times = parse_times(args.report_at)
        args.impl_flags = impl_flags(args.flags, **{k: getattr(args, k) for k in LEGACY_FLAGS})
    except ValueError as exc:
        parser.error(str(exc))
    if importlib.util.find_spec("minatar") is None:
        parser.error("MinAtar is not installed: pip install 'rlpar[minatar]'")
    if not (args.worker or args.evaluator):
        check_job_flags(parser, args)
    return args


def parse_scores(text: str, games: list[str]) -> dict[str, float]:
    """``--score``: one number for every game, or ``GAME=X,...`` (games left out, and
    all of them for ``""``: the paper's score)."""
    scores = {game: ev.PAPER_SCORES[game] for game in games}
    if not text.strip():
        return scores
    if "=" not in text:
        return dict.fromkeys(games, _number(text, "--score"))
    for part in wc.names(text):
        game, _, value = part.partition("=")
        if game.strip() not in ev.PAPER_SCORES:
            raise ValueError(f"--score: unknown game {game.strip()!r}; choose from {list(ev.PAPER_SCORES)}")
        scores[game.strip()] = _number(value, f"--score {game.strip()}")
    return {game: scores[game] for game in games}


def parse_times(text: str) -> tuple[float, ...]:
    """``--report-at``: positive seconds, in increasing order."""
    times = sorted({_number(part, "--report-at") for part in wc.names(text)})
    if any(t <= 0 for t in times):
        raise ValueError(f"--report-at takes positive seconds, got {text!r}")
    return tuple(times)


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {text!r}")
    return value


def impl_flags(given: list[str], **legacy: str) -> dict[str, str]:
    """``{impl: job flags}`` from ``--flags IMPL=FLAGS`` (repeated: joined) and the
    older ``--ours-flags`` / ``--a3c-flags``."""
    flags: dict[str, list[str]] = {}
    for name, impl in LEGACY_FLAGS.items():
        if legacy.get(name, "").strip():
            flags.setdefault(impl, []).append(legacy[name])
    for item in given:
        impl, sep, text = item.partition("=")
        impl = impl.strip()
        if not sep or impl not in IMPLS:
            raise ValueError(f"--flags takes IMPL=FLAGS with IMPL one of {list(jobs.JOBS)}, got {item!r}")
        if impl not in jobs.JOBS:
            raise ValueError(f"--flags {impl}: the peers run the bench's own settings (minatar.peers) "
                             "and take no flags")
        if text.strip():
            flags.setdefault(impl, []).append(text)
    return {impl: " ".join(parts) for impl, parts in flags.items()}


def check_job_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Bad job flags exit 2 here, not in a child (only for jobs this tree has)."""
    for impl, flags in args.impl_flags.items():
        if impl in args.impl_list and not jobs.missing(impl):
            config = jobs.job_config(impl, flags)  # exits 2 on a flag the job does not take
            problem = _ours(impl).check_flags(impl, config, flags)
            if problem:
                parser.error(f"--flags {impl}: {problem}")


def _ours(impl: str):
    """The module that runs ``impl``, one of ours: ours_sync or ours."""
    if impl in jobs.SYNC:
        from experiments.bench.minatar import ours_sync

        return ours_sync
    from experiments.bench.minatar import ours

    return ours


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        print("RESULT " + json.dumps(train(args.worker, args)), flush=True)
        return 0
    if args.evaluator:
        ev.evaluator_main(args.evaluator, policy=lambda: policy(args.impl_list[0], args), game=args.game,
                          episodes=args.eval_episodes, max_steps=args.eval_max_steps,
                          seed=args.seed_list[0], variant=args.variant)
        return 0
    os.makedirs(args.out, exist_ok=True)
    for game in args.game_list:
        runnable = []
        for impl in args.impl_list:
            missing = _missing(impl)
            if missing:
                emit({"bench": BENCH, "game": game, "variant": args.variant, "impl": impl,
                      "skipped": missing}, results_dir=args.out)
            else:
                runnable.append(impl)
        for seed in args.seed_list:
            for impl in runnable:
                emit(run_one(game, impl, seed, args), results_dir=args.out)
        if runnable:
            ev.plot_game(args.out, game, list(IMPLS), variant=args.variant, score=args.scores[game])
    return 0


def _missing(impl: str) -> str | None:
    if impl.startswith("sb3-"):
        if importlib.util.find_spec("stable_baselines3") is None:
            return "stable_baselines3 is not installed (make bench-deps)"
        return None
    return jobs.missing(impl)


# --------------------------------------------------------------- one run


def child_command(args: argparse.Namespace, game: str, seed: int) -> list[str]:
    return [sys.executable, "-m", "experiments.bench.minatar.budget", "--games", game, "--game", game,
            "--seeds", str(seed), "--variant", args.variant, "--budget-s", repr(args.budget_s),
            "--max-env-steps", str(args.max_env_steps), "--eval-every", str(args.eval_every),
            "--eval-episodes", str(args.eval_episodes), "--eval-max-steps", str(args.eval_max_steps),
            *[f"--flags={impl}={flags}" for impl, flags in args.impl_flags.items()],
            *(["--quick"] if args.quick else [])]


def run_one(game: str, impl: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Trainer and evaluator of one run; its JSON line."""
    run_dir = os.path.abspath(os.path.join(args.out, ev.board(game, args.variant), f"{impl}-seed{seed}"))
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
    line = {"bench": BENCH, "game": game, "variant": args.variant, "env_id": ev.env_id(game, args.variant),
            "impl": impl, "seed": seed, "budget_s": args.budget_s, "paper_score": paper,
            **ev.summarize_curve(ev.read_curve(run_dir, budget_s=args.budget_s), paper_score=paper, score=args.scores[game],
                                 report_at=args.report_times)}
    for key in ("env_steps", "env_steps_per_s", "updates", "updates_per_s", "wait_fraction", "startup_s"):
        line[key] = _rounded(result.get(key))
    line.update({"eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
                 **{k: report.get(k) for k in ("eval_cpu_s", "eval_cpu_s_during_training", "eval_tail_s")},
                 "snapshot_pause_s": round(ev.snapshot_pause_s(run_dir), 3), "quick": args.quick,
                 "flags": args.impl_flags.get(impl, ""), "curve": os.path.join(run_dir, ev.CURVE),
                 "png": os.path.abspath(os.path.join(args.out, f"minatar-{ev.board(game, args.variant)}.png"))})
    if "error" in result:
        line["error"] = result["error"]
    return line


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


# ------------------------------------------------------ in the child processes


def train(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    common = {"run_dir": args.run_dir, "seed": args.seed_list[0], "started": args.started or time.time(),
              "budget_s": args.budget_s, "max_env_steps": args.max_env_steps, "eval_every": args.eval_every,
              "quick": args.quick, "variant": args.variant}
    if impl.startswith("sb3-"):
        from experiments.bench.minatar import peers

        return peers.train(impl, args.game, **common)
    return train_ours(impl, args.game, flags=args.impl_flags.get(impl, ""), **common)


def train_ours(impl: str, game: str, **common: Any) -> dict[str, Any]:
    """One of ours (``common``: the trainers' keywords); a RuntimeError naming what
    is missing if this tree lacks its job."""
    jobs.job_module(impl)
    return _ours(impl).train(impl, game, **common)


def policy(impl: str, args: argparse.Namespace):
    if impl.startswith("sb3-"):
        from experiments.bench.minatar import peers

        return peers.policy(impl, args.game, variant=args.variant)
    return policy_ours(impl, args.impl_flags.get(impl, ""), args.game, variant=args.variant,
                       run_dir=args.evaluator or "")


def policy_ours(impl: str, flags: str, game: str, *, variant: str = "paper", run_dir: str = ""):
    """``(load(state), scores(obs))`` for the snapshots of one of ours."""
    jobs.job_module(impl)
    return _ours(impl).policy(impl, flags, game, variant=variant, run_dir=run_dir)


if __name__ == "__main__":
    sys.exit(main())
