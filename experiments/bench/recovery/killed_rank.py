"""How fast a run recovers from a killed rank: ``python -m experiments.bench.recovery.killed_rank``.

Each case runs one job on CartPole (MADDPG: the cooperative multi-agent env) in the
default local world for ``--seconds`` (its budget; with ``--stop-after``, as
``--quick`` sets, until that many seconds after the learner's first update once the
killed process is back, stop reason ``recovered``) and SIGKILLs one process once (as
``kill -9`` or the OOM killer would), ``--kill-at`` seconds after that process first
stepped (the learner: first updated), so throughput is steady by then (see
:mod:`.faults`):

- ``apex-actor`` (alias ``actor``): an Ape-X actor, restarted alone; it rejoins;
- ``apex-learner`` (alias ``learner``): the Ape-X learner; the world restarts from the
  newest checkpoint (``--checkpoint-every``);
- ``apex-shard-actor``: an Ape-X actor holding a replay shard (``--replay-placement
  actors``): restarted alone, its shard rehosted empty on the learner;
- ``apex-shard-learner``: the learner of that layout: the world restarts from a sharded
  checkpoint (the learner's file and every shard's part);
- ``a3c-worker``: an A3C worker rank (not rank 0, the gradient server), restarted alone;
- ``maddpg-env-worker``: one of MADDPG's env worker subprocesses (of its actor),
  restarted by its vector env (the episodes it cut are dropped).

From the run's TensorBoard events (the coordinator's once-a-second ticks, stamped with
wall time, so times have about 1 s resolution) one JSON line per case:
``learner_recovery_s`` (death to the first tick showing more learner updates, A3C:
applied gradients, than the tick before), ``throughput_recovery_s`` (death to the first
tick from which the next 2 s of env steps run at >= 90% of the rate over the 5 s before
the death, ``rate_before``; ``rate_min_after``: the slowest tick-to-tick rate until
then), what was lost (``env_steps_lost``: progress after the newest checkpoint, redone
after a world restart; ``lost_transitions``: what dead actors or shards took with them;
``dropped_episodes``: cut episodes, where a job counts them), restarts
(``restarts`` = ``world_restarts`` + ``rank_restarts``: ranks and env workers restarted
alone), and the checkpoint's cost
(``checkpoint_pause_s``: the lead's pause for its last checkpoint, shard parts
included; ``checkpoint_bytes``: the newest checkpoint on disk, main file and parts).
The Atari-frame checkpoint cost (100K transitions) is ``python -m
experiments.bench.components.checkpoint``.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import sys
import tempfile
from typing import Any

from experiments.bench.recovery import faults
from experiments.bench.tools.emit import emit

ALIASES = {"actor": "apex-actor", "learner": "apex-learner"}
RATE_WINDOW_S, RECOVERED_SPAN_S, RECOVERED_FRACTION = 5.0, 2.0, 0.9


@dataclasses.dataclass(frozen=True)
class Case:
    job: str  # apex, a3c, maddpg
    kill: str  # rank (rank 1), lead (the Ape-X learner), env-worker
    placement: str = "learner"  # Ape-X's --replay-placement


CASES = {
    "apex-actor": Case("apex", "rank"),
    "apex-learner": Case("apex", "lead"),
    "apex-shard-actor": Case("apex", "rank", "actors"),
    "apex-shard-learner": Case("apex", "lead", "actors"),
    "a3c-worker": Case("a3c", "rank"),
    "maddpg-env-worker": Case("maddpg", "env-worker"),
}


def parse_cases(text: str) -> list[str]:
    """``--cases``: names or aliases, comma-separated; ``all`` (or empty) for every case."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names or names == ["all"]:
        return list(CASES)
    cases = [ALIASES.get(name, name) for name in names]
    unknown = [name for name, case in zip(names, cases) if case not in CASES]
    if unknown:
        raise ValueError(f"unknown case(s) {unknown}; choose from {sorted(CASES)} or {sorted(ALIASES)}")
    return cases


def _config(case: Case, args: argparse.Namespace, log_dir: str) -> Any:
    from experiments.runtime.cli import apply_overrides

    # A time budget, not an env step budget: the death comes at a time, and the run
    # must outlast it by the same margin on a fast machine as on a slow one.
    common = {"max_env_steps": 10**9, "max_seconds": args.seconds, "checkpoint_every": args.checkpoint_every,
              "log_dir": log_dir, "status_every": 0.0, "eval_every": 10**9, "target_return": 1e9}
    env = {"env_id": f"{faults.__name__}:{faults.CARTPOLE}"}
    if case.job == "apex":
        from experiments.apex import ApexJobConfig

        config, over = ApexJobConfig(), {**env, "num_actors": args.actors, "replay_placement": case.placement}
        if args.quick:  # the learner dies --kill-at after its first update: one batch in, not 1,000
            over["learning_starts"] = 256
    elif case.job == "a3c":
        from experiments.a3c import A3CJobConfig

        config, over = A3CJobConfig(), {**env, "num_workers": args.actors}
    else:
        from experiments.maddpg import MADDPGJobConfig

        # Small batches and an early start: the bench measures the env workers' restart,
        # and on 2 cores the paper's 1024-batch updates would set the pace instead.
        config, over = MADDPGJobConfig(), {"env_id": "cooperative", "env_workers": 2, "num_envs": 8,
                                           "learning_starts": 1000, "batch_size": 128,
                                           "updates_per_step": 0.05, "replay_capacity": 100_000}
    apply_overrides(config, {**common, **over})
    return config


def run_case(name: str, args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    from experiments import a3c, apex, maddpg
    from experiments.runtime import Parts

    case = CASES[name]
    marker = os.path.join(workdir, f"{name}.killed")
    target = {"rank": "rank:1", "lead": "lead", "env-worker": f"env-worker:{os.getpid()}"}[case.kill]
    keys = (faults.KILL, faults.KILL_AT, faults.MARKER, faults.STOP_AFTER)
    saved = {key: os.environ.get(key) for key in keys}
    os.environ.update({faults.KILL: target, faults.KILL_AT: str(args.kill_at), faults.MARKER: marker})
    if args.stop_after is not None:
        os.environ[faults.STOP_AFTER] = str(args.stop_after)
    else:
        os.environ.pop(faults.STOP_AFTER, None)
    try:
        config = _config(case, args, os.path.join(workdir, name))
        if case.job == "apex":
            from algorithms.dqn import ApexLearner

            learner = faults.KillOnceLearner if case.kill == "lead" else ApexLearner
            summary = apex.run(config, parts=Parts(learner=faults.stopping(learner)), quiet=True)
        elif case.job == "a3c":
            from algorithms.a2c.builder import A3CBuilder

            summary = a3c.run(config, parts=Parts(learner=faults.stopping(A3CBuilder.learner_base)), quiet=True)
        else:
            from algorithms.maddpg.builder import MADDPGLearner

            parts = Parts(env=faults.KillOnceWorkerEnv, learner=faults.stopping(MADDPGLearner))
            summary = maddpg.run(config, parts=parts, quiet=True)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if not os.path.exists(marker):
        raise RuntimeError(f"case {name}: nothing was killed (the run ended within --kill-at "
                           f"{args.kill_at} s of its first step?); raise --seconds")
    with open(marker) as f:
        death = json.load(f)
    world = int(summary.get("restarts", 0))
    # Processes restarted alone: ranks, and env workers (replaced inside their actor).
    rank = int(summary["actor_restarts"]) + int(summary.get("env_worker_restarts", 0))
    ticks = _ticks(summary["run_dir"])
    resumed = summary["resumed_from_step"]
    line = {"case": name, "job": case.job, "killed": case.kill, "restarts": world + rank,
            "world_restarts": world, "rank_restarts": rank,
            **_recovery(ticks, died=death["time"], resumed=resumed if world else None)}
    # A restarted world redoes what it did after its newest checkpoint (known when the
    # lead died: it wrote its count; None when another death took the world down).
    at_death = death.get("env_steps")
    line["env_steps_lost"] = (0 if not world else None if at_death is None
                              else max(0, at_death - (resumed or 0)))
    line.update({"lost_transitions": int(summary["lost_transitions"]),
                 "dropped_episodes": int(summary.get("dropped_episodes", 0)),
                 "checkpoint_every_s": args.checkpoint_every, "checkpoints": summary["checkpoints"],
                 "checkpoint_pause_s": round(summary["checkpoint_pause_s"], 4),
                 "checkpoint_bytes": checkpoint_bytes(summary["run_dir"]),
                 "resumed_from_step": resumed, "env_steps": summary["env_steps"],
                 "budget_s": config.run.max_seconds, "stop_after_s": args.stop_after,
                 "stop_reason": summary["stop_reason"],
                 "wall_s": round(summary["wall_s"], 1)})
    return line


def checkpoint_bytes(run_dir: str) -> int:
    """Bytes of the newest checkpoint on disk: its main file and every part."""
    directory = os.path.join(run_dir, "checkpoints")
    mains = sorted(glob.glob(os.path.join(directory, "ckpt-" + "[0-9]" * 12 + ".pt")))
    if not mains:
        return 0
    stem = mains[-1][:-len(".pt")]
    return sum(os.path.getsize(p) for p in [mains[-1], *glob.glob(stem + ".*.pt")])


def _ticks(run_dir: str) -> list[tuple[float, int, float]]:
    """The coordinator's ticks: (wall time, env steps, learner updates), by time."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ticks = []
    for path in glob.glob(os.path.join(run_dir, "events.out.tfevents.*")):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        if "charts/updates" in acc.Tags()["scalars"]:
            ticks += [(e.wall_time, e.step, e.value) for e in acc.Scalars("charts/updates")]
    return sorted(ticks)


def _recovery(ticks: list[tuple[float, int, float]], *, died: float, resumed: int | None) -> dict[str, Any]:
    """Rate before the death and the times to learning and to throughput again (None
    when the run shows neither; see the module docstring for the definitions).
    ``resumed``: the env step of the checkpoint a restarted world went on from (None
    when the world lived on)."""
    before = [(t, s) for t, s, _ in ticks if died - RATE_WINDOW_S <= t < died]
    rate = None
    if len(before) >= 2 and before[-1][0] > before[0][0]:
        rate = (before[-1][1] - before[0][1]) / (before[-1][0] - before[0][0])
    after = [tick for tick in ticks if tick[0] >= died]
    back = None
    if rate is not None:
        for i, (t0, s0, _) in enumerate(after):
            end = next((tick for tick in after[i + 1:] if tick[0] - t0 >= RECOVERED_SPAN_S), None)
            if end is not None and (end[1] - s0) / (end[0] - t0) >= RECOVERED_FRACTION * rate:
                back = t0 - died
                break
    # The first tick after the death shows an update when its count is above the one
    # the learner had: the last tick's before the death, or, from a restarted world,
    # the one the checkpoint held, bounded above by the first tick at or past its step.
    earlier = [tick for tick in ticks if tick[0] < died]
    baseline = earlier[-1:]
    if resumed is not None:
        baseline = [tick for tick in earlier if tick[1] >= resumed][:1] or baseline
    chain = baseline + after
    first = next((b[0] for a, b in zip(chain, chain[1:]) if b[2] > a[2]), None)
    # The dip: the slowest tick-to-tick rate from the death until throughput is back.
    until = died + (back if back is not None else math.inf)
    chain = earlier[-1:] + after
    rates = [max(0.0, (b[1] - a[1]) / (b[0] - a[0])) for a, b in zip(chain, chain[1:])
             if a[0] < until and b[0] > a[0]]
    return {"rate_before": _round(rate, 1), "rate_min_after": _round(min(rates, default=None), 1),
            "learner_recovery_s": _round(first and first - died, 2), "throughput_recovery_s": _round(back, 2)}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="all", help=f"comma-separated: {', '.join(CASES)} (or all)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="wall-clock budget of each run, from its launch (default 60, --quick 90: "
                             "a bound that --stop-after comes well before)")
    parser.add_argument("--kill-at", type=float, default=None,
                        help="seconds after the killed process's first step (update) that it dies "
                             "(default 20, --quick 2)")
    parser.add_argument("--checkpoint-every", type=float, default=None,
                        help="seconds between checkpoints (default 5, --quick 1)")
    parser.add_argument("--stop-after", type=float, default=None,
                        help="stop each run this many seconds after the learner's first update once the "
                             "killed process is back (default: run to --seconds; --quick 3)")
    parser.add_argument("--actors", type=int, default=2, help="Ape-X actors, A3C workers")
    parser.add_argument("--quick", action="store_true", help="small budgets (tests)")
    args = parser.parse_args(argv)
    try:
        cases = parse_cases(args.cases)
    except ValueError as exc:
        parser.error(f"--cases: {exc}")
    if args.kill_at is None:
        # --quick: 2 s still leaves the rate before the death two ticks or more, since the
        # window (RATE_WINDOW_S) also holds the lead's ticks from before that first step.
        args.kill_at = 2.0 if args.quick else 20.0
    if args.stop_after is None and args.quick:
        # The recovery, then 3 s of ticks (RECOVERED_SPAN_S and one more) to see the
        # throughput's: a run stopped by the event costs only what it measures, where a
        # wall-clock budget burns CPU to its end and, on a loaded machine, could end
        # before the death (a local world's start took 5-8 s on 2 loaded cores, more
        # under heavier load).
        args.stop_after = RECOVERED_SPAN_S + 1.0
    if args.seconds is None:
        args.seconds = 90.0 if args.quick else 60.0
    if args.stop_after is not None and not args.stop_after > 0:
        parser.error(f"--stop-after must be > 0 seconds, got {args.stop_after:g}")
    if not 0 < args.kill_at < args.seconds:
        parser.error(f"--kill-at must be in (0, --seconds {args.seconds:g}), got {args.kill_at:g}")
    if args.checkpoint_every is None:
        args.checkpoint_every = 1.0 if args.quick else 5.0
    if args.actors < 2:
        parser.error("--actors must be >= 2 (one is killed, the others go on)")
    with tempfile.TemporaryDirectory(prefix="rlpar-recovery-") as workdir:
        for name in cases:
            emit({"bench": "recovery", **run_case(name, args, workdir)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
