"""A run's evaluations per span of env steps: learning per sample, apart from speed.

    python -m experiments.bench.tools.spans RUN_DIR [RUN_DIR ...] --span 150000
    python -m experiments.bench.tools.spans OUT/BreakoutNoTrail/rlpar-r2d2-seed0 --key greedy

The budget benches report returns at wall-clock times, which is what their targets
are about. Two runs of one config on a machine whose speed varies by a third make
different numbers of env steps by the same time, so a change that alters how much
is learned per env step hides behind the hour it ran in. This reads each run's
snapshot evaluations (the ``evals.jsonl`` in its run folder, as the pomdp,
continuous and MinAtar benches write it) and prints, per span of ``--span`` env steps,
the mean of the ``--key`` returns of the snapshots taken in it (the final snapshot
left out: its env steps are the budget's, not a span's). Averaging a span's snapshots
also damps the snapshot-to-snapshot noise that one report time carries.

One JSON line per run (``"kind": "spans"``): its folder, the span, the snapshots
read, and ``mean_by_steps``: ``{end of span: mean or null}`` for every span up to the
last the run reached.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from experiments.bench.tools.emit import emit, read_lines
from experiments.bench.tools.wallclock import CURVE


def read_snapshots(run_dir: str, *, key: str) -> list[tuple[int, float]]:
    """``(env_steps, return)`` of the run's non-final evaluations; ValueError naming
    the file and line where the folder has no curve or a line lacks what is needed."""
    path = os.path.join(run_dir, CURVE)
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir}: no {CURVE} (a run folder of a budget bench holds one)")
    out = []
    for number, line in read_lines(path):
        if "env_steps" not in line or key not in line:
            raise ValueError(f"{path}:{number}: an evaluation line needs env_steps and {key!r}")
        if line.get("final"):
            continue
        steps, value = line["env_steps"], line[key]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"{path}:{number}: env_steps must be an int >= 0, got {steps!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{path}:{number}: {key} must be a finite number, got {value!r}")
        out.append((steps, float(value)))
    return sorted(out)


def spans(snapshots: list[tuple[int, float]], *, span: int) -> dict[str, float | None]:
    """Mean return per span ``(k * span, (k + 1) * span]``, keyed by the span's end, up
    to the span of the last snapshot; a span with no snapshot is None."""
    if not snapshots:
        return {}
    last = -(-snapshots[-1][0] // span)  # spans reached (a snapshot at step 0 counts in the first)
    sums = [[0.0, 0] for _ in range(max(last, 1))]
    for steps, value in snapshots:
        index = max(-(-steps // span) - 1, 0)
        sums[index][0] += value
        sums[index][1] += 1
    return {str((k + 1) * span): (round(total / count, 4) if count else None) for k, (total, count) in enumerate(sums)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("runs", nargs="+", help="run folders, each holding an evals.jsonl")
    parser.add_argument("--span", type=int, default=150_000, help="env steps per span (default 150000)")
    parser.add_argument("--key", default="greedy", help=(
        "the evaluation's return to average (default: greedy; the MinAtar bench's also eps0.1)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.span < 1:
        parser.error(f"--span must be >= 1 env step, got {args.span}")
    lines: list[dict[str, Any]] = []
    for run in args.runs:
        try:
            snapshots = read_snapshots(run, key=args.key)
        except ValueError as exc:
            parser.error(str(exc))
        lines.append({"kind": "spans", "run": run, "key": args.key, "span": args.span,
                      "snapshots": len(snapshots), "mean_by_steps": spans(snapshots, span=args.span)})
    for line in lines:
        emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
