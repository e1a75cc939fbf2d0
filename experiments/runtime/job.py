"""Running a job: the same path for every job and every mode.

``run_job`` validates the config, resolves what was left to "auto", checks the
user's parts and the env before any process starts, creates the run directory
(``config.json`` first), then runs the job's roles in one of three modes:

- ``serial`` (``--serial``): every role in this process, deterministic for a seed;
- local: the job's world spawned on this machine by ``rlpar.distributed.launch``
  (loopback, a free port from the OS); its ranks are watched: a rank the job names
  restartable (an actor) that dies is restarted alone and rejoins, any other death
  restarts the world from its newest checkpoint (both at most ``--max-restarts``
  times), which the lead first brings up to date (within ``DEATH_GRACE_S``), and a
  raise or a rank that keeps dying ends the job with its cause;
- under ``torchrun`` (RANK and WORLD_SIZE set): this process is one rank.

Ctrl-C or SIGTERM stops a run cleanly in every mode and at any moment (one that
lands before the world runs is kept for it): the lead (rank 0) finishes like a budget
stop (final curves, checkpoint, summary), every other rank sends what it owes and
leaves, and the lead does not wait for a source that has stopped reporting; a second
Ctrl-C aborts. Under torchrun, whose SIGTERM reaches every rank at once (a rank died and
the world restarts, say), that takes a few seconds, well inside torchrun's 30 s before
SIGKILL, so the restarted world resumes from this final checkpoint. The bounds are the
``*_S`` constants below.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from experiments.runtime.cli import flag, leaves, validate
from experiments.runtime.parts import Parts
from experiments.runtime.resume import check_fixed, resumed_config
from experiments.runtime.rundir import RunDir
from rlpar.distributed import stops
from rlpar.distributed.rendezvous import restart_count

log = logging.getLogger(__name__)

# What the zygote of a local world (rlpar.distributed.launch) does once before it forks
# the ranks: imports what every job's ranks import, and loads the prioritized replay's
# numba kernels (``module:function`` entry). Not the job's own module, which may be a
# user's script or test file that only cloudpickle can ship to the ranks.
# rlpar.distributed resolves its names lazily, so the modules of it that ranks use are
# named. Measured: each learner, replay rank or shard-holding actor loaded the kernels
# itself, 1.0-1.4 s of CPU (a fifth of a small Ape-X test's); in a warm 3-rank Ape-X world
# the ranks' own imports of the modules named here were 13% of their CPU.
# None of them starts a thread (with launch's OMP_NUM_THREADS=1), which is what keeps
# forking after them safe (tests/experiments/test_runtime_job.py).
RANK_PRELOAD = ("torch", "numba", "gymnasium", "gymnasium.envs.classic_control", "encodings.idna",
                "envs.registry", "rlpar.buffers", "rlpar.distributed", "rlpar.distributed.world",
                "rlpar.distributed.rpc_group", "rlpar.distributed.launcher_env",
                "rlpar.distributed.learner_group", "rlpar.servers", "experiments.runtime.lead",
                "experiments.runtime.checkpoints", "experiments.roles.actor_learner",
                "experiments.roles.sync", "rlpar.buffers.trees:kernels")

# The bounded times of an ending run (docs/jobs.md, "How a run ends"):
# A local run's ranks have this long to finish after a Ctrl-C/SIGTERM before they are killed.
STOP_GRACE_S = 60.0
# Once the lead returned its summary, the other ranks have this long to exit; then they
# are killed and named, and the run ends with the lead's summary.
FINISH_GRACE_S = 15.0
# When a rank of a local run dies (and is not restarted alone), the others are stopped
# as by SIGTERM and the lead has this long to keep what it holds in a checkpoint (a
# synchronous job: its last whole update) and exit before they are killed and the world
# restarts: torchrun's 30 s between SIGTERM and SIGKILL.
DEATH_GRACE_S = 30.0
# A stop by signal: the lead waits at most this long for a source that does not report
# (dead, hung or cut off; a live one reports several times a second), and a source's
# last calls to the lead (its final report) wait at most STOP_CALL_S: under torchrun
# every rank gets the SIGTERM at once, and the lead may be gone.
STOP_QUIET_S = 2.0
STOP_CALL_S = 5.0
# A stop by signal: a rank hosting a replay shard serves it at most this long for the
# lead's final checkpoint.
STOP_HOLD_S = 15.0
# The exit status of a rank of a launched world (torchrun, srun) that finished while
# ranks of its world were lost (rlpar.distributed.liveness.LOST_S without a heartbeat).
LOST_EXIT = 3


@dataclasses.dataclass(frozen=True)
class Job:
    """What makes a job: its name and roles. ``rank_main(ctx)`` runs one rank of a
    distributed run and returns the summary on rank 0 (``{}`` elsewhere);
    ``serial_main(ctx)`` runs all roles in one process. ``resolve(config,
    world_size)`` fills "auto" values (``world_size`` None: a local world we spawn)
    and returns the number of ranks; ``check(config, parts)`` raises ValueError
    naming a flag for what cannot run. ``describe(summary)`` gives the job's own
    summary lines."""

    name: str
    rank_main: Callable[[Any], dict[str, Any]]
    serial_main: Callable[[Any], dict[str, Any]]
    resolve: Callable[[Any, int | None], int]
    check: Callable[[Any, Parts], None]
    describe: Callable[[dict[str, Any]], list[str]]
    # ``env_fn(config, parts)``: the env factory, made once in the launching process
    # (so an env registered only there is rebuilt in every rank) and shipped to all.
    env_fn: Callable[[Any, Parts], Callable[[], Any]] | None = None
    # ``load_policy(ctx, state) -> act(obs batch) -> actions``: a saved policy.pt
    # (``state``) as a greedy policy (``python -m experiments.evaluate``).
    load_policy: Callable[[Any, dict[str, Any]], Any] | None = None
    # ``play(ctx, policy, episodes=, seed=) -> returns``: episodes of a loaded policy,
    # for jobs whose env is not a gymnasium vector env (MADDPG); else the runtime's.
    play: Callable[..., list[float]] | None = None
    # ``restartable(config, nprocs)``: the ranks of a local world that are restarted
    # alone when they die (they rejoin the running world; only ranks no peer calls).
    restartable: Callable[[Any, int], Sequence[int]] | None = None
    # ``env_defaults(config, parts)``: fill the fields left ``None`` whose default
    # depends on the env (e.g. a learning rate per observation family); runs after
    # ``check``, so the env is known to build, and before the config is saved.
    env_defaults: Callable[[Any, Parts], None] | None = None
    # ``roles(config, nprocs)``: each rank's role in words ("learner", "actor 3"), for
    # the warning that names a rank killed for not finishing (``FINISH_GRACE_S``).
    roles: Callable[[Any, int], Sequence[str]] | None = None


@dataclasses.dataclass
class JobContext:
    """Everything a rank needs, shipped to every rank."""

    job: str
    config: Any
    parts: Parts
    run_dir: str | None
    started: float
    quiet: bool = False
    nprocs: int = 1
    env_fn: Callable[[], Any] | None = None


def launcher():
    """This process's place in a launcher's world (``rlpar.distributed.launcher_env``:
    torchrun's environment, else an ``srun`` task's), None when it runs on its own. A
    step of one srun task is on its own: it spawns its local world as outside Slurm.
    ValueError naming the variable for a launcher's value that cannot be right."""
    from rlpar.distributed.launcher_env import from_environ

    found = from_environ()
    if found is not None and found.launcher == "srun" and found.world_size == 1:
        return None
    return found


def under_launcher() -> bool:
    """True when a launcher (torchrun, srun) has set this process's rank and world size."""
    return launcher() is not None


def rank_label() -> str:
    found = launcher()
    return "?" if found is None else str(found.rank)


def run_job(job: Job, config: Any, *, parts: Parts | None = None, quiet: bool = False,
            started: float | None = None) -> dict[str, Any]:
    """Run ``job`` with ``config``; returns the lead's summary (``{}`` on other ranks
    under torchrun). Times count from ``started`` (``time.time()``; default now).
    ValueError (naming a flag) or TypeError (naming a part) before anything starts.

    With ``config.run.resume = DIR`` the run in DIR goes on with its saved config,
    overridden by each field of ``config`` that differs from the job's default (a
    field left at its default keeps the run's value; :mod:`.resume`)."""
    started = time.time() if started is None else float(started)
    if config.run.resume:
        config = resumed_config(config)
    return execute(job, prepare(job, config, parts=parts, quiet=quiet, started=started))


def prepare(job: Job, config: Any, *, parts: Parts | None = None, quiet: bool = False,
            started: float | None = None) -> JobContext:
    """Everything that can fail on bad input, before any process starts; then the
    run directory with its ``config.json`` (the resolved config). ``config`` is taken
    as it is: a resumed run's is its saved one with the changes wanted
    (``cli.parse_config``, :func:`run_job`)."""
    parts = parts or Parts()
    found = launcher()
    launched = found is not None
    config, nprocs = checked(job, config, parts=parts, world_size=found.world_size if launched else None)
    env_fn = job.env_fn(config, parts) if job.env_fn is not None else None
    lead = found is None or found.rank == 0
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID") if launched else None
    if config.run.resume:  # the same directory: curves, checkpoints and summary go on there
        run_dir = RunDir(config.run.resume if lead else None)
    elif lead and config.run.files() and elastic_id:
        restart = restart_count()
        run_dir = RunDir.for_elastic(config.run.log_dir, job.name, elastic_id, restart=restart)
        if restart > 0 and run_dir.has_checkpoint():
            config.run.resume = run_dir.path  # torchrun restarted the world: go on from there
    elif lead and config.run.files():
        run_dir = RunDir.create(config.run.log_dir, job.name)
    else:
        run_dir = RunDir(None)
    run_dir.write_config(config)
    if run_dir.path is not None:
        parts.save(run_dir.path)
    return JobContext(job=job.name, config=config, parts=parts, run_dir=run_dir.path,
                      started=time.time() if started is None else float(started), quiet=quiet,
                      nprocs=nprocs, env_fn=env_fn)


def checked(job: Job, config: Any, *, parts: Parts, world_size: int | None) -> tuple[Any, int]:
    """A copy of ``config`` through every check of a launch that needs no process and
    writes nothing: the config's, the resume's, the job's (the env built once, the
    builder made once) and the env's defaults filled; with the number of ranks.
    ``world_size``: a launcher's world (None: the local world this job would spawn)."""
    config = copy.deepcopy(config)
    validate(config)
    if config.run.resume:
        check_fixed(config)
        parts.check_given(config.run.resume, doing="resume",
                          how=f"experiments.{job.name}.run(config, parts=Parts(...)) with "
                              f"config.run.resume = {config.run.resume!r}")
    nprocs = job.resolve(config, world_size)
    if under_launcher() and nprocs > 1:
        # Before the run directory: a world without its run secret would be refused by
        # World.from_env in every rank (a local world gets one from launch()).
        from rlpar.distributed.secret import secret_from_env

        secret_from_env()
    job.check(config, parts)
    if job.env_defaults is not None:
        job.env_defaults(config, parts)
        validate(config)
    warn_idle_steps(config)
    return config, nprocs


def warn_idle_steps(config: Any) -> None:
    """Log a warning where a learning rate annealed over env steps reaches 0 before
    the run's ``--max-env-steps``: the steps after it learn nothing. A resumed run
    keeps the annealing it started with, so a budget raised on resume meets this."""
    budget = config.run.max_env_steps
    for owner, field, _ in leaves(config):
        steps = getattr(owner, field.name)
        if field.name == "lr_anneal_steps" and steps and steps < budget:
            log.warning("%s %s is below %s %s: the learning rate is 0 from %s env steps on, and the run learns "
                        "nothing after them (give %s %d to anneal over the whole run)", flag(field.name),
                        f"{steps:,}", flag("max_env_steps"), f"{budget:,}", f"{steps:,}", flag(field.name), budget)


def check_command(job: Job | Callable[[], Job], config_cls: type, argv: Sequence[str], *,
                  world_size: int | None = None) -> tuple[Any, int]:
    """What ``python -m experiments.<job> ARGV`` would run with, checked as its launch
    checks it (:func:`checked`) but not run: no process, world or run directory. A bad
    flag exits with status 2 naming it, as on the command line; a check that needs the
    env raises ValueError (or TypeError for a part). ``world_size``: check for a
    torchrun world of that many ranks. Returns the resolved config and the number of
    ranks. The docs' command blocks are tested with it (tests/test_docs.py)."""
    from experiments.runtime.cli import parse_config

    job = job if isinstance(job, Job) else job()
    return checked(job, parse_config(config_cls, list(argv)), parts=Parts(), world_size=world_size)


def execute(job: Job, ctx: JobContext) -> dict[str, Any]:
    if ctx.config.run.serial:
        return _serial(job, ctx)
    if under_launcher():
        return _as_rank(job, ctx)
    from rlpar.distributed import launch
    from rlpar.errors import ChildDied, RankKeepsDying

    restarts, budget = 0, ctx.config.run.max_restarts
    alone = job.restartable(ctx.config, ctx.nprocs) if job.restartable is not None else ()
    roles = job.roles(ctx.config, ctx.nprocs) if job.roles is not None else ()
    while True:
        try:
            results = launch(_rank, nprocs=ctx.nprocs, args=(job.rank_main, ctx),
                             timeout=ctx.config.run.max_seconds + 120.0, stop_grace=STOP_GRACE_S,
                             restartable=alone, max_restarts=budget, finish_grace=FINISH_GRACE_S,
                             labels=roles, preload=RANK_PRELOAD, death_grace=DEATH_GRACE_S)
            break
        except RankKeepsDying:  # restarted --max-restarts times already: its cause ends the job
            raise
        except ChildDied as exc:  # killed or aborted, not a bug in the code: go on
            # Not after a stop was asked: the world was ending anyway.
            if restarts >= budget or ctx.run_dir is None or stops.requested() is not None:
                raise
            restarts += 1
            ctx = _restarted(job, ctx)
            print(f"[{job.name}] {exc}; restart {restarts} of {budget} from "
                  f"{'the newest checkpoint' if ctx.config.run.resume else 'the start'}",
                  file=sys.stderr, flush=True)
    summary = next((r for r in results if r), {})
    if summary:
        summary["restarts"] = restarts
        RunDir(ctx.run_dir).write_summary(summary)
    return summary


def _as_rank(job: Job, ctx: JobContext) -> dict[str, Any]:
    """This process is one rank of a launcher's world. It leaves the world here, not
    at exit, to know before it ends whether ranks were lost (its world names them,
    ``rlpar.distributed.liveness``): then it raises RanksLost, so that the process
    exits with LOST_EXIT and torchrun or Slurm end the job instead of waiting on the
    dead (torchrun's agent waits up to 300 s for every node after a success)."""
    from rlpar.distributed import current
    from rlpar.errors import RanksLost

    summary = job.rank_main(ctx)
    world = current.get()
    if world is None:
        return summary
    world.shutdown()
    if not world.lost_ranks and not world.store_lost:
        return summary
    lost = world.lost_ranks
    what = [f"ranks {lost} ({', '.join(world.name_of(r) for r in lost)}) were lost"] if lost else []
    if world.store_lost:
        what.append(f"the world's store at {world.master_addr}:{world.master_port} went away with its host")
    if summary:
        summary["lost_ranks"] = lost
        RunDir(ctx.run_dir).write_summary(summary)
    raise RanksLost(f"rank {world.rank}: {' and '.join(what)} before the run ended (no heartbeat: their "
                    "process or machine is gone, or cut off); this rank finished without them",
                    ranks=lost, summary=summary)


def _restarted(job: Job, ctx: JobContext) -> JobContext:
    """The context of a restarted local world: resumed from the run's newest
    checkpoint when it has one and the job can resume this config, else started
    again (same run directory)."""
    if not RunDir(ctx.run_dir).has_checkpoint():
        return ctx
    config = copy.deepcopy(ctx.config)
    config.run.resume = ctx.run_dir
    try:
        job.check(config, ctx.parts)
    except ValueError:  # e.g. a layout whose state is not checkpointed
        return ctx
    return dataclasses.replace(ctx, config=config)


def _rank(rank_main: Callable[[JobContext], dict], ctx: JobContext) -> dict[str, Any]:
    return rank_main(ctx)


def _serial(job: Job, ctx: JobContext) -> dict[str, Any]:
    import torch

    threads = torch.get_num_threads()
    try:
        return job.serial_main(ctx)
    finally:
        torch.set_num_threads(threads)


class StopSignals:
    """While active, Ctrl-C and SIGTERM call ``on_stop`` instead of raising; a second
    one raises KeyboardInterrupt (abort). SIGUSR1/SIGUSR2 are the local launcher's
    forwarded Ctrl-C/SIGTERM (``rlpar.distributed.launch``): they stop, never abort,
    since a terminal's Ctrl-C reaches a rank both directly and forwarded. A request
    that came before (noted by ``rlpar.distributed.stops``, from the moment a local
    rank is forked) calls ``on_stop`` on entry. Only in the main thread. ``on_stop``
    runs inside the handler, so it must not take a lock the interrupted code may hold
    (see ``Coordinator.stop``)."""

    REASONS = stops.REASONS

    def __init__(self, on_stop: Callable[[str], None]) -> None:
        self.on_stop = on_stop
        self.received: str | None = None
        self._forwarded_first, self._at = False, 0.0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in self.REASONS:
                self._old[sig] = signal.signal(sig, self._handle)
        early = stops.take()
        if early is not None:
            self._stop(early)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            # A forwarded request, or the terminal's own Ctrl-C landing just after
            # the forwarded one, is the same stop; only a later signal aborts.
            if signum in stops.FORWARDED or (self._forwarded_first and time.monotonic() - self._at < 1.0):
                return
            raise KeyboardInterrupt
        stops.acted(signum)
        self._stop(signum)

    @property
    def stopped(self) -> bool:
        """A stop signal came (or had come before entry)."""
        return self.received is not None

    def _stop(self, signum: int) -> None:
        self.received = signal.Signals(signum).name
        self._forwarded_first, self._at = signum in stops.FORWARDED, time.monotonic()
        self.on_stop(stops.reason(signum))

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def last_call(signalled: bool, send: Callable[[], None]) -> None:
    """A source's last calls to the lead (``send``: its final report, what it still
    owes). After a stop by signal the lead may be gone, since torchrun stops every
    rank at once: a failure is then only reported, and the source leaves."""
    if not signalled:
        send()
        return
    try:
        send()
    except Exception as exc:
        print(f"[rank {rank_label()}] stopping: the lead did not take its final report "
              f"({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def main_for(job: Job | Callable[[], Job], config_cls: type, format_summary: Callable[[dict], str],
             argv: list[str] | None = None, *, parts: Parts | None = None) -> int:
    """``python -m experiments.<job>``: parse flags, run, print the summary. ``job``
    may be a function returning the Job (importing the roles takes a second)."""
    from experiments.runtime.cli import parse_config

    # From now on a Ctrl-C/SIGTERM is a stop request, even before the world runs (the
    # launch asks the ranks at once, serial mode's StopSignals picks it up). Not under
    # torchrun: there a rank's SIGTERM before its role handles stops still kills it,
    # since a world that has not started has nothing to save and may wait on a dead peer.
    from rlpar.errors import CheckpointMismatch, RanksLost

    try:
        launched = under_launcher()
    except (ValueError, RuntimeError) as exc:  # a launcher's variable that cannot be right
        print(f"{os.path.basename(sys.argv[0])}: error: {exc}", file=sys.stderr)
        return 2
    noted = {} if launched else stops.record((signal.SIGINT, signal.SIGTERM))
    status = 0
    try:
        job = job if isinstance(job, Job) else job()
        config = parse_config(config_cls, argv)
        try:
            ctx = prepare(job, config, parts=parts)
        except ValueError as exc:  # a check that needed the env: same form as a flag error
            print(f"{os.path.basename(sys.argv[0])}: error: {exc}", file=sys.stderr)
            return 2
        try:
            summary = execute(job, ctx)
        except CheckpointMismatch as exc:  # --resume of a run this job's layout cannot continue
            print(f"{os.path.basename(sys.argv[0])}: error: cannot resume: {exc}", file=sys.stderr)
            return 2
        except RanksLost as exc:
            summary, status = exc.summary, LOST_EXIT
            # What is left is to print and exit: torchrun's SIGTERM, sent to every rank
            # of the node once one of them exits with this status, must not cut it short.
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print(f"[{job.name}] {exc}; exit status {LOST_EXIT}, so that torchrun and Slurm end the job "
                  "(see docs/cluster.md)", file=sys.stderr, flush=True)
    finally:
        if noted:
            stops.restore(noted)  # called in-process (tests): as it was before
    if summary:
        print(format_summary(summary), flush=True)
    return status
