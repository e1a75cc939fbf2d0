"""One summary box for every job, printed at the end (also after Ctrl-C)."""

from __future__ import annotations

import math
from typing import Any


def _num(value: Any, fmt: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, fmt)


def format_summary(summary: dict[str, Any], job_lines: list[str], *, title: str) -> str:
    """The box: outcome, time, env steps, rates, the job's own lines, where the run is."""
    if not summary:
        return ""
    solved = summary["solved"]
    if solved:
        head = f"SOLVED (eval mean {summary['eval_return']:.1f} >= {summary['target_return']:g})"
    else:
        target = summary["target_return"]
        head = (f"not solved ({summary['stop_reason']}; best eval mean {_num(summary['best_eval_return'])}"
                + (f", target {target:g})" if math.isfinite(target) else ")"))
    steps = summary["env_steps_at_solve"] if solved else summary["env_steps"]
    run_dir = summary.get("run_dir")
    lines = [
        "=" * 64,
        f"{title} on {summary['env_id']}: {head}",
        (f"  time to solve      {summary['time_to_solve_s']:.1f} s wall-clock (from launch)" if solved
         else f"  wall-clock         {summary['wall_s']:.1f} s"),
        f"  env steps          {steps:,} (total {summary['env_steps']:,})",
        f"  env steps/s        {summary['env_steps_per_s']:.0f}",
        f"  updates/s          {summary['updates_per_s']:.1f} ({summary['updates']:,} updates)",
        f"  episodes           {summary['episodes']:,} (last 100 mean return {_num(summary['train_return'])})",
        f"  evaluations        {summary['evaluations']} (last mean {_num(summary['last_eval_return'])})",
        *[f"  {line}" for line in job_lines],
        f"  run directory      {run_dir if run_dir else 'none (--log-dir none)'}",
    ]
    if run_dir:
        lines.append(f"  TensorBoard        tensorboard --logdir {run_dir}")
    if summary.get("interrupted"):
        lines.append(f"  stopped early      {summary['stop_reason']} (partial results)")
    lines.append("=" * 64)
    return "\n".join(lines)
