"""The lead process's start, loop and end, the same for every job: its TensorBoard
logger and coordinator, the loop until a budget, a target or a signal stops the run
(:func:`run_lead`), the first-run compile notice, and the final summary written to
the run directory."""

from __future__ import annotations

import dataclasses
import glob
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from experiments.runtime.cli import config_to_dict
from experiments.runtime.coordinator import Coordinator
from experiments.runtime.rundir import RunDir
from rlpar.logging import MetricLogger


@dataclasses.dataclass(frozen=True)
class LeadContext:
    """What the lead takes of the job context: the job's name (checkpoints' kind, the
    notices), its config (logged whole; its run section rules the stop and the
    checkpoints), the run directory, when the run started and whether to be quiet.
    The job context itself (``JobContext``) has these fields too, so a job may pass it."""

    job: str
    config: Any
    run_dir: str | None
    started: float
    quiet: bool = False

    @classmethod
    def of(cls, ctx: Any) -> LeadContext:
        return cls(job=ctx.job, config=ctx.config, run_dir=ctx.run_dir, started=ctx.started, quiet=ctx.quiet)


def start_lead(lead: LeadContext, *, num_sources: int, target: float, evaluator: int | None,
               agent_names: Sequence[str] = (), teams: Mapping[str, Sequence[int]] | None = None
               ) -> Coordinator:
    logger = MetricLogger(log_dir=lead.run_dir)
    logger.config(_flat(config_to_dict(lead.config)))
    return Coordinator(job=lead.job, run=lead.config.run, env_id=lead.config.env.env_id,
                       num_sources=num_sources, target=target, started=lead.started, logger=logger,
                       evaluator=evaluator, quiet=lead.quiet, agent_names=agent_names, teams=teams)


class Turns(Protocol):
    """What a job's lead does inside :func:`run_lead`: ``turn()`` one pass of its loop
    (step or wait, tick the curves, evaluate when due), False once the run is over
    (usually: the coordinator says stop; several learners in step stop when they
    agree); ``wind_down(signalled)`` after
    the stop (close its sources and wait for their final reports, briefly when a
    signal stopped the run; the last tick) and the version of the parameters it ends
    with; ``summary(interrupted)`` the job's summary."""

    def turn(self) -> bool: ...

    def wind_down(self, signalled: bool) -> int: ...

    def summary(self, interrupted: bool) -> dict[str, Any]: ...


def run_lead(lead: LeadContext, coordinator: Coordinator, keeper: Any, turns: Turns, *,
             kept: Callable[[], None] | None = None,
             whole: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The lead's loop, written once for every job: turns until one says the run is
    over (the coordinator's stop: a budget, the target, Ctrl-C/SIGTERM through
    ``StopSignals``), the run kept
    on schedule (``keeper.poll``: checkpoints, ``policy-best.pt``); then, however the
    loop ended, the wind-down, the last checkpoint and ``policy.pt``, the summary
    (``kept()`` is called once the last checkpoint is written or failed: shard hosts
    may go), written to the run directory. ``whole()`` False (several learners, one
    lost in the middle of an update): no last checkpoint nor ``policy.pt`` of a
    half-applied update; the error goes on, and the world restarts from the newest
    checkpoint."""
    from experiments.runtime.job import StopSignals

    with StopSignals(coordinator.stop) as signals:
        try:
            while turns.turn():
                keeper.poll()
        finally:
            coordinator.stop("finished")
            version = turns.wind_down(signals.stopped)
            try:
                saved = keeper.finish(version=version) if whole is None or whole() else {}
            finally:
                if kept is not None:
                    kept()
            summary = turns.summary(signals.received is not None) | saved
    return finish_lead(lead, coordinator, summary)


def finish_lead(lead: LeadContext, coordinator: Coordinator, summary: dict[str, Any]) -> dict[str, Any]:
    coordinator.logger.close()
    RunDir(lead.run_dir).write_summary(summary)
    return summary


def announce_compile(lead: LeadContext) -> None:
    """The replay's compiled kernels (numba) take 10-20 s to build on a machine's
    first run and load from a disk cache after that (``rlpar.buffers.jit``: under
    ``~/.cache/rlpar/numba`` by default): say so instead of going silent."""
    import rlpar.buffers
    from rlpar.buffers.jit import cache_dir

    # The kernels' source path without importing them (that would compile nothing
    # yet but set up their cache).
    source = os.path.join(os.path.dirname(rlpar.buffers.__file__), "tree_kernels.py")
    cache = cache_dir(source)
    if not glob.glob(os.path.join(cache, "tree_kernels.*.nbi")) and not lead.quiet:
        print(f"[{lead.job}] compiling the replay's kernels (first run on this machine; "
              f"cached in {cache}) ...", file=sys.stderr, flush=True)


def _flat(config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(_flat(value))
        else:
            out[key] = value
    return out
