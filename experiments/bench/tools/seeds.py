"""The mean over seeds of recorded benchmark runs, per report time, and who leads.

    python -m experiments.bench.tools.seeds runs/a/results.jsonl runs/b   # files, or folders holding one
    python -m experiments.bench.tools.seeds OUT --key best_greedy_by_s    # the MinAtar bench's column

The budget benches (``pomdp``, ``continuous``, ``minatar``) run one implementation and
seed per invocation when timings matter (each run alone), so one comparison's runs
land in several ``results.jsonl`` files. Their targets read "ahead at every report
time on the mean over seeds": this reads the runs' lines back and prints that.

A run line is a line carrying ``--key`` (default: ``return_at_s``, the pomdp and
continuous benches' reports; the MinAtar bench's are ``best_greedy_by_s``) as a
``{seconds: return}`` mapping; skipped runs and report lines are passed over. Runs are
grouped by bench, env (or game), budget, implementation and extra flags; a seed recorded twice
in a group counts once, from its last line (a re-run replaces its curve, as the benches
do), and the output says so.

JSON lines: one per group (``"kind": "seeds"``: its seeds, and per report time the
mean, min and max over them; the mean is null at a time some seed has no value for)
and one per env and budget (``"kind": "leader"``: per report time the implementation with the
highest mean, the runner-up and the margin; ``same_seeds`` is false when the groups'
seed sets differ, so their means are not paired).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from experiments.bench.tools.emit import RESULTS, emit, read_lines

DEFAULT_KEY = "return_at_s"

Group = tuple[str, str, Any, str, str]  # bench, env, budget_s, impl, flags


def read_runs(paths: Sequence[str], *, key: str = DEFAULT_KEY) -> list[dict[str, Any]]:
    """The run lines carrying ``key`` in ``paths`` (files, or folders holding a
    ``results.jsonl``), in order; ValueError naming the file and line of a line that
    is not a JSON object, or a ``key`` that is not a mapping of times to numbers."""
    runs = []
    for path in paths:
        file = os.path.join(path, RESULTS) if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise ValueError(f"{path}: no such results file (a results.jsonl, or a folder holding one)")
        for number, line in read_lines(file):
            if key not in line or "skipped" in line:
                continue
            runs.append({**line, key: _times(line[key], f"{file}:{number}: {key}")})
    return runs


def _times(value: Any, where: str) -> dict[float, float | None]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must map report times to returns, got {type(value).__name__}")
    out = {}
    for at, ret in value.items():
        try:
            seconds = float(at)
        except ValueError:
            raise ValueError(f"{where}: report time {at!r} is not a number of seconds") from None
        if ret is not None and (isinstance(ret, bool) or not isinstance(ret, (int, float))):
            raise ValueError(f"{where}: the return at {at} s must be a number or null, got {ret!r}")
        out[seconds] = None if ret is None else float(ret)
    return out


def group_of(run: dict[str, Any]) -> Group:
    env = str(run.get("env", run.get("game", "")))
    if run.get("variant"):  # the MinAtar bench's two variants of a game are two envs
        env = f"{env} ({run['variant']})"
    return str(run.get("bench", "")), env, run.get("budget_s"), str(run.get("impl", "")), str(run.get("flags") or "")


def summarize(runs: Iterable[dict[str, Any]], *, key: str = DEFAULT_KEY) -> list[dict[str, Any]]:
    """One ``seeds`` line per group and one ``leader`` line per (bench, env, budget), as the
    module docstring says."""
    by_group: dict[Group, dict[Any, dict[float, float | None]]] = {}
    replaced: dict[Group, set[Any]] = {}
    for run in runs:
        group, seed = group_of(run), run.get("seed")
        seeds = by_group.setdefault(group, {})
        if seed in seeds:
            replaced.setdefault(group, set()).add(seed)
        seeds[seed] = run[key]
    lines = []
    for (bench, env, budget, impl, flags), seeds in by_group.items():
        times = sorted({t for curve in seeds.values() for t in curve})
        stats = {t: _stats([curve.get(t) for curve in seeds.values()]) for t in times}
        lines.append({"bench": bench, "env": env, "budget_s": budget, "impl": impl, "flags": flags, "kind": "seeds",
                      "key": key,
                      "seeds": sorted(seeds, key=str), "n": len(seeds),
                      "replaced_seeds": sorted(replaced.get((bench, env, budget, impl, flags), ()), key=str),
                      **{f"{name}_at_s": {f"{t:g}": s[name] for t, s in stats.items()}
                         for name in ("mean", "min", "max")}})
    return lines + _leaders(lines)


def _stats(values: list[float | None]) -> dict[str, float | None]:
    if any(v is None for v in values) or not values:
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(sum(values) / len(values), 4), "min": min(values), "max": max(values)}


def _leaders(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_env: dict[tuple[str, str, Any], list[dict[str, Any]]] = {}
    for line in groups:
        by_env.setdefault((line["bench"], line["env"], line["budget_s"]), []).append(line)
    out = []
    for (bench, env, budget), lines in by_env.items():
        if len(lines) < 2:
            continue
        times = sorted({t for line in lines for t in line["mean_at_s"]}, key=float)
        at = {}
        for t in times:
            ranked = sorted(((line["mean_at_s"].get(t), _label(line)) for line in lines
                             if line["mean_at_s"].get(t) is not None), reverse=True)
            if not ranked:
                at[t] = None
                continue
            (best, leader), runner = ranked[0], ranked[1] if len(ranked) > 1 else (None, None)
            at[t] = {"impl": leader, "mean": best, "next": runner[1],
                     "margin": None if runner[0] is None else round(best - runner[0], 4)}
        out.append({"bench": bench, "env": env, "budget_s": budget, "kind": "leader",
                    "impls": [_label(line) for line in lines],
                    "same_seeds": len({tuple(map(str, line["seeds"])) for line in lines}) == 1, "at_s": at})
    return out


def _label(line: dict[str, Any]) -> str:
    return f"{line['impl']} {line['flags']}" if line["flags"] else line["impl"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("paths", nargs="+", help="results.jsonl files, or folders holding one")
    parser.add_argument("--key", default=DEFAULT_KEY, help=(
        f"the run lines' mapping of report times to returns (default: {DEFAULT_KEY}; "
        "the MinAtar bench's: best_greedy_by_s)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        runs = read_runs(args.paths, key=args.key)
    except ValueError as exc:
        parser.error(str(exc))
    if not runs:
        parser.error(f"no run line with {args.key!r} in {args.paths}")
    for line in summarize(runs, key=args.key):
        emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
