"""Ape-X at scale on one machine: can one learner process take the traffic of tens of
actors, how does its cost grow with their number, where does it break?

The Ape-X paper (Horgan et al. 2018, arXiv:1803.00933) ran 360 actors making about
12.5K transitions/s (50K frames/s at frame skip 4) into a replay served to one
learner that consumed about 19 batches of 512 per second. This machine cannot run
that many real actors, so:

``ingest`` (:mod:`.apex_ingest`)
    K sender processes replay Atari batches (4x84x84 uint8 stacks, 128 n-step
    transitions per add, as an actor with 8 envs adds them) into each replay
    placement (``learner``: in the learner process; ``replay-ranks``: shards on 2
    replay ranks; ``actors``: a shard in every sender), at the paper's 12.5K
    transitions/s together (``offered``) and as fast as they can (``max``), while the
    learner samples batches of 512 and sends their priorities back non-stop. Raw
    bounds of the same run: ``raw_transitions_per_s`` (the same arrays by
    ``rpc_async`` to a no-op on the same host) and ``raw_local_transitions_per_s``
    (the replay's host adding them itself, no RPC).
``actor_scaling`` (:mod:`.apex_actors`)
    The real job, 1 to 32 actors on an env that sleeps per step (no CPU), frames and
    the Nature CNN (1.7M parameters), one learner: env steps/s against actor count,
    what a parameter pull costs an actor, the coordinator's report rate.
``fan_in`` (:mod:`.apex_fanin`)
    What 64 actors' reports and parameter pulls cost the learner process (share of
    its CPU, GIL held by the report handler) and whether pacing holds.

One JSON line per result, then a ``machine`` line (cores, load averages before and
after: this machine is shared, so compare figures of one run).

    python -m experiments.bench.scale.apex [--quick] [--cases ingest,actor_scaling,fan_in]
"""

from __future__ import annotations

import argparse
import os
import time

from experiments.bench.tools.emit import emit

PRELOAD = ("torch", "numba", "rlpar.buffers", "rlpar.distributed")


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive ints, got {text!r}")
    return values


def run_ingest(args: argparse.Namespace) -> None:
    from experiments.bench.scale import apex_ingest as ingest
    from rlpar.distributed import launch

    for placement in args.placements.split(","):
        for senders in args.senders:
            point = ingest.IngestPoint(
                placement=placement, senders=senders,
                replay_ranks=args.replay_ranks if placement == "replay-ranks" else 0,
                rate=args.rate, seconds=args.seconds, capacity=args.capacity)
            ranks = launch(ingest.ingest_rank, nprocs=point.nprocs, args=(point,), timeout=600,
                           preload=PRELOAD)
            for line in ingest.summarize(point, ranks):
                emit(line)


def run_actor_scaling(args: argparse.Namespace) -> None:
    from experiments.bench.scale import apex_actors as actors

    single = None
    for n in args.actors:
        # The job's budget counts its world's start (slower with more ranks).
        # --quick: shorter sleeps, so that a few-second run still holds several adds
        # (each one a point of every actor's trace) after the last actor started.
        step_s = 0.01 if args.quick else actors.ScalingPoint.step_s
        point = actors.ScalingPoint(actors=n, seconds=args.scaling_seconds + 4.0 + 0.3 * n, step_s=step_s,
                                    max_env_steps=args.scaling_env_steps or actors.ScalingPoint.max_env_steps)
        summary, records = actors.run_point(point)
        line = actors.scaling_line(point, summary, records, single)
        if n == 1:
            single = line["env_steps_per_s"]
        emit(line)


def run_fan_in(args: argparse.Namespace) -> None:
    from experiments.bench.scale import apex_fanin as fanin
    from rlpar.distributed import launch

    # --quick: half a second per phase, as the ingest's (its learner is busy throughout).
    point = fanin.FanInPoint(actors=args.fan_in_actors, seconds=args.seconds * (1 if args.quick else 2))
    ranks = launch(fanin.fanin_rank, nprocs=point.actors + 1, args=(point,), timeout=600,
                   preload=PRELOAD)
    emit(fanin.summarize(point, ranks))


CASES = {"ingest": run_ingest, "actor_scaling": run_actor_scaling, "fan_in": run_fan_in}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of every case (< 60 s)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    parser.add_argument("--placements", default="learner,replay-ranks,actors",
                        help="replay placements of the ingest case")
    parser.add_argument("--senders", type=_ints, default=[1, 4, 16, 32, 64], help="ingest senders")
    parser.add_argument("--replay-ranks", type=int, default=2, help="replay ranks (replay-ranks placement)")
    parser.add_argument("--rate", type=float, default=12_500.0,
                        help="offered transitions/s of all senders together (the paper's 12.5K)")
    parser.add_argument("--capacity", type=int, default=50_000, help="replay capacity of the ingest case")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measured phase")
    parser.add_argument("--actors", type=_ints, default=[1, 2, 4, 8, 16, 32],
                        help="actor counts of the scaling case (1 first: it is the linear reference)")
    parser.add_argument("--scaling-seconds", type=float, default=16.0,
                        help="seconds each scaling run steps (its world's start comes on top)")
    parser.add_argument("--scaling-env-steps", type=int, default=None,
                        help="stop each scaling run at this many env steps, all actors together "
                             "(default: at its time budget; --quick 128)")
    parser.add_argument("--fan-in-actors", type=int, default=64, help="simulated actors of the fan-in case")
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {sorted(CASES)}")
    if args.quick:
        args.placements, args.senders, args.capacity, args.seconds = "learner", [2], 2048, 0.5
        # One scaling point: its line's figures for more actors are unit-tested on
        # made-up records (tests/experiments/bench/scale/test_bench_apex_scale.py).
        # Its run stops on env steps, not time: 4 adds (each a point of the trace); a
        # time budget would burn CPU to its end, and under load its world's start could
        # eat it. The seconds are only a bound.
        args.actors, args.scaling_seconds, args.fan_in_actors = [1], 60.0, 4
        args.scaling_env_steps = args.scaling_env_steps or 128
    if args.scaling_env_steps is not None and args.scaling_env_steps < 1:
        parser.error(f"--scaling-env-steps must be >= 1, got {args.scaling_env_steps}")
    if args.actors[0] != 1:
        parser.error("--actors must start with 1 (the reference of linear scaling)")
    load0, started = os.getloadavg(), time.time()
    for case in cases:
        CASES[case](args)
    emit({"bench": "apex_scale", "case": "machine", "cpus": os.cpu_count(),
           "loadavg_start": [round(v, 2) for v in load0],
           "loadavg_end": [round(v, 2) for v in os.getloadavg()], "wall_s": round(time.time() - started, 1),
           "quick": args.quick})


if __name__ == "__main__":
    main()
