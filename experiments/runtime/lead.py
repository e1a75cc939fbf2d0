"""The lead process's start and end, the same for every job: its TensorBoard
logger and coordinator, the first-run compile notice, and the final summary
written to the run directory."""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.runtime.cli import config_to_dict
from experiments.runtime.coordinator import Coordinator
from experiments.runtime.rundir import RunDir
from rlpar.logging import MetricLogger


def start_lead(ctx: Any, *, num_sources: int, target: float, evaluator: int | None,
               agent_names: Sequence[str] = (), teams: Mapping[str, Sequence[int]] | None = None
               ) -> Coordinator:
    logger = MetricLogger(log_dir=ctx.run_dir)
    logger.config(_flat(config_to_dict(ctx.config)))
    return Coordinator(job=ctx.job, run=ctx.config.run, env_id=ctx.config.env.env_id,
                       num_sources=num_sources, target=target, started=ctx.started, logger=logger,
                       evaluator=evaluator, quiet=ctx.quiet, agent_names=agent_names, teams=teams)


def finish_lead(ctx: Any, coordinator: Coordinator, summary: dict[str, Any]) -> dict[str, Any]:
    coordinator.logger.close()
    RunDir(ctx.run_dir).write_summary(summary)
    return summary


def announce_compile(ctx: Any) -> None:
    """The replay's compiled kernels (numba) take 10-20 s to build on a machine's
    first run and load from a disk cache after that (``rlpar.buffers.jit``: under
    ``~/.cache/rlpar/numba`` by default): say so instead of going silent."""
    import rlpar.buffers
    from rlpar.buffers.jit import cache_dir

    # The kernels' source path without importing them (that would compile nothing
    # yet but set up their cache).
    source = os.path.join(os.path.dirname(rlpar.buffers.__file__), "tree_kernels.py")
    cache = cache_dir(source)
    if not glob.glob(os.path.join(cache, "tree_kernels.*.nbi")) and not ctx.quiet:
        print(f"[{ctx.job}] compiling the replay's kernels (first run on this machine; "
              f"cached in {cache}) ...", file=sys.stderr, flush=True)


def _flat(config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(_flat(value))
        else:
            out[key] = value
    return out
