"""Where one recorded run trails another at equal wall-clock: the check behind "ahead
of both peers throughout" in ``experiments.bench.continuous.budget``'s notes.

    python -m experiments.bench.continuous.compare OUT/Hopper-v5/rlpar-td3-seed2 \\
        --against OUT/Hopper-v5/sb3-sac-seed1 OUT/Hopper-v5/sb3-td3-seed0

Each argument is a run directory of that bench (it holds ``evals.jsonl``) or the file
itself. For every pair (run, peer), one JSON line on two views of the curves:

- ``grid``: the best greedy return so far (the best of all evaluations up to that
  second) of each, every ``--grid-s`` seconds from the first second at which both
  have been evaluated to the earlier of their last evaluations; ``trailing``: how many
  points the run is below the peer, ``spans`` (first and last second of each stretch)
  and ``max_deficit``. Ours is evaluated far more often than the peers (every 10K env
  steps, ~7 s at 1,400 env steps/s, against ~100 s), and a best-so-far of a noisy
  curve rises with the number of evaluations; hence
- ``at_peer_evals``: the same, only at the seconds of the peer's own evaluations (from
  that first second on), where the run counts only its evaluations up to that second.

``best_by``: each run's best so far at ``--at`` seconds (None after its last
evaluation: a shorter run says nothing about later seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from experiments.bench.tools.emit import emit
from experiments.bench.tools.wallclock import CURVE


def read(path: str) -> list[tuple[float, float]]:
    """``(wall_s, greedy)`` of every evaluation, in time order; ValueError naming the
    file if it has none or a line is not an evaluation."""
    file = os.path.join(path, CURVE) if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise ValueError(f"{path}: no {CURVE} (give a run directory of experiments.bench.continuous.budget or the file)")
    points = []
    with open(file) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                points.append((float(record["wall_s"]), float(record["greedy"])))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{file}:{number}: not an evaluation record ({exc})") from None
    if not points:
        raise ValueError(f"{file}: no evaluations")
    return sorted(points)


def best_so_far(curve: Sequence[tuple[float, float]], second: float) -> float | None:
    """The best return of the evaluations made by ``second`` (None before the first)."""
    taken = [value for wall_s, value in curve if wall_s <= second]
    return max(taken) if taken else None


def trailing(run: Sequence[tuple[float, float]], peer: Sequence[tuple[float, float]],
             seconds: Sequence[float]) -> dict[str, Any]:
    """At each of ``seconds``: whether ``run``'s best so far is below ``peer``'s (a run
    not yet evaluated trails a peer that is). Stretches of consecutive trailing points
    become ``spans``."""
    behind, deficit, spans = 0, 0.0, []
    previous = False
    for second in seconds:
        mine, theirs = best_so_far(run, second), best_so_far(peer, second)
        below = theirs is not None and (mine is None or mine < theirs)
        if below:
            behind += 1
            if mine is not None:  # before the run's first evaluation there is no gap to measure
                deficit = max(deficit, theirs - mine)
            if previous:
                spans[-1][1] = second
            else:
                spans.append([second, second])
        previous = below
    return {"points": len(seconds), "trailing": behind, "spans": spans, "max_deficit": round(deficit, 1)}


def compare(run: Sequence[tuple[float, float]], peer: Sequence[tuple[float, float]], *,
            grid_s: float) -> dict[str, Any]:
    start = max(run[0][0], peer[0][0])
    end = min(run[-1][0], peer[-1][0])
    count = int((end - start) // grid_s) + 1 if end >= start else 0
    grid = [round(start + i * grid_s, 3) for i in range(count)]
    at_peer = [wall_s for wall_s, _ in peer if start <= wall_s <= run[-1][0]]
    return {"grid_s": grid_s, "from_s": start, "to_s": end, "grid": trailing(run, peer, grid),
            "at_peer_evals": trailing(run, peer, at_peer)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (or evals.jsonl files) to check")
    parser.add_argument("--against", nargs="+", required=True, help="the peers' run directories or files")
    parser.add_argument("--grid-s", type=float, default=10.0, help="seconds between grid points (default 10)")
    parser.add_argument("--at", default="300,600,900,1200,1500,1800",
                        help="comma-separated seconds for best_by (default 300,...,1800)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.grid_s > 0:
        parser.error(f"--grid-s must be > 0, got {args.grid_s}")
    try:
        at = [float(s) for s in args.at.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--at takes comma-separated seconds, got {args.at!r}")
    try:
        runs = {path: read(path) for path in args.runs}
        peers = {path: read(path) for path in args.against}
    except ValueError as exc:
        parser.error(str(exc))
    for run_path, run in runs.items():
        for peer_path, peer in peers.items():
            line = {"run": run_path, "peer": peer_path, **compare(run, peer, grid_s=args.grid_s),
                    "best_by": {f"{s:g}": {"run": _best_by(run, s), "peer": _best_by(peer, s)} for s in at}}
            emit(line)
    return 0


def _best_by(curve: Sequence[tuple[float, float]], second: float) -> float | None:
    value = best_so_far(curve, second) if second <= curve[-1][0] else None
    return None if value is None else round(value, 1)


if __name__ == "__main__":
    sys.exit(main())
