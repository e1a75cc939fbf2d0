"""The Ape-X roles: thin shells that own the transport and call algorithm methods.

Wiring (:func:`rank_main`, read top to bottom): every rank joins the world and the
RPC group ``apex``; rank 0 is the learner and hosts the parameter server and the
coordinator. The prioritized replay lives where ``--replay-placement`` says
(:func:`learner_replay` / :func:`actor_replay`):

- ``learner``: one buffer hosted in the learner process; actors add over RPC;
- ``actors``: one shard per actor (adds are local); the learner samples across
  shards, one round trip per shard, prefetched;
- ``replay-ranks``: shards on dedicated replay ranks; actors add there.

Checkpoints hold the replay with its priorities wherever it lives: the hosted
buffer in the learner's file, or each shard's own part beside it, written by its
host for the same step (:func:`run_keeper`). Faults: a dead actor is restarted alone
and rejoins (:func:`restartable`); with ``actors`` placement its shard is dropped
from sampling when it dies, and the learner hosts a fresh, empty one for its
replacement (see ``DistributedReplayBuffer.rehost``). A dead env worker is replaced
inside the actor's vector env and counted (``env_worker_restarts``). Any other death
restarts the world from the newest complete checkpoint.

:class:`~algorithms.apex.ApexActor` and :class:`~algorithms.apex.ApexLearner` (or
the user's subclasses) see only a Buffer and a ParameterStore, as in the
one-process :func:`serial_main`. Pacing (:class:`~algorithms.pacing.Pacing`)
holds ``--updates-per-step`` on both sides.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any

from algorithms.pacing import Pacing
from experiments.roles.apex_parts import (
    actor_seed,
    build_dqn,
    check,
    describe,
    env_defaults,
    env_fn,
    eval_env,
    job_env_fn,
    load_policy,
    local_replay,
    replay_layout,
    resolve,
    target,
)
from experiments.runtime.cli import flag
from experiments.runtime.evaluation import evaluation
from experiments.runtime.job import (
    STOP_CALL_S,
    STOP_HOLD_S,
    STOP_QUIET_S,
    Job,
    JobContext,
    StopSignals,
    last_call,
)
from experiments.runtime.lead import announce_compile, finish_lead, start_lead
from experiments.runtime.messages import Episode, EvalResult, Rejoin, Report

GROUP, REPLAY, PARAMS = "apex", "replay", "params"
REPORT_EVERY_S = 0.02
# The most reports per second the actors send together. Each is an RPC that the
# learner's process serves, 0.2-0.3 ms of its CPU (the coordinator's own handler is
# 0.01-0.02 ms of that): 64 actors reporting every 20 ms (1.8K reports/s) took 49% of
# that process's CPU, and its learner made 12 updates/s; capped at 250/s, 9% and 28
# updates/s (python -m experiments.bench.apex_scale --cases fan_in).
REPORTS_PER_S = 250


def report_every(num_actors: int) -> float:
    """Seconds between one actor's reports: ``REPORT_EVERY_S``, stretched once
    ``num_actors`` would send more than ``REPORTS_PER_S`` together (above 5 actors).
    Pacing holds either way: an actor counts its own unreported steps; the others'
    add at most one interval's steps each to its bound."""
    return max(REPORT_EVERY_S, num_actors / REPORTS_PER_S)


def role_of(rank: int, world_size: int, config: Any) -> tuple[str, int]:
    """The documented role rule: rank 0 learner; ranks 1..R replay (only with
    ``--replay-placement replay-ranks``); the rest actors, numbered from 0."""
    replay = config.replay.extra_ranks()
    if world_size - 1 - replay < 1:
        raise ValueError(f"a world of {world_size} ranks with {replay} replay ranks has no actor")
    if rank == 0:
        return "learner", 0
    if rank <= replay:
        return "replay", rank - 1
    return "actor", rank - 1 - replay


def role_names(config: Any, nprocs: int) -> list[str]:
    """Each rank's role in words, for the launcher's warnings."""
    named = (role_of(r, nprocs, config) for r in range(nprocs))
    return [role if role == "learner" else f"{role} {index}" for role, index in named]


def restartable(config: Any, nprocs: int) -> list[int]:
    """The actors: a dead one is restarted alone and rejoins while the learner trains.
    A replacement can call its peers but no peer that had called the dead process can
    call it (see rlpar.distributed.rendezvous); so with ``actors`` placement, the
    learner, which sampled the dead actor's shard, drops that shard and hosts a fresh
    one for the replacement to add to. Replay ranks are called by the learner and by
    every actor, so a dead one is not restarted alone: the world restarts from the
    newest checkpoint (the shards' parts included)."""
    return [r for r in range(nprocs) if role_of(r, nprocs, config)[0] == "actor"]


def pacing(config: Any) -> Pacing:
    """The job's Pacing. Its slack covers the env steps whose transitions the actors
    hold back (each buffers ``add_every`` vector steps, plus its n-step windows,
    before adding): the learner starts only on reported transitions, so with less
    slack than that pacing deadlocks. Measured: 32 actors with 4 envs hold up to 2432
    env steps, past the default slack of 1000 (+ learning_starts 200), and made no
    update in 30 s (python -m experiments.bench.apex_scale --cases actor_scaling)."""
    from algorithms.apex import ApexConfig

    learn = config.learn
    for name in ("n_step", "updates_per_step"):
        if getattr(learn, name) is None:
            raise ValueError(f"pacing needs {flag(name)}: fill the family defaults first (env_defaults)")
    # ApexConfig's own add_every: the job does not change it (LearnConfig has no flag).
    held = config.num_actors * config.env.num_envs * (ApexConfig.add_every + learn.n_step)
    return Pacing(updates_per_step=learn.updates_per_step, learning_starts=learn.learning_starts,
                  slack_steps=max(Pacing.slack_steps, held + learn.batch_size))


# --------------------------------------------------------------------- wiring


def rank_main(ctx: JobContext) -> dict[str, Any]:
    import torch

    from rlpar.distributed import World

    config = ctx.config
    torch.set_num_threads(1)  # actors and replay ranks: tiny ops; the learner raises it
    if config.replay.replay_placement != "learner" or os.environ.get("RANK") == "0":
        warm_in_background()  # this rank hosts replay: overlap the kernels' load with rendezvous
    world = World.from_env(rpc_timeout=config.run.rpc_timeout,
                           listen_address=config.run.resolved_listen_address())
    role, index = role_of(world.rank, world.world_size, config)
    group = world.create_rpc_group(GROUP, world.names)
    roles = [role_of(r, world.world_size, config)[0] for r in range(world.world_size)]
    shard_role = {"actors": "actor", "replay-ranks": "replay"}.get(config.replay.replay_placement)
    shards = [name for name, r in zip(world.names, roles) if r == shard_role]
    num_actors = roles.count("actor")
    if role == "learner":
        return run_learner(ctx, group, num_actors=num_actors, shards=shards)
    # Stopped by the learner's directive, or by a signal of its own: under torchrun
    # every rank gets the SIGTERM, and the learner may be gone.
    with StopSignals(lambda reason: None) as signals:
        if role == "replay":
            run_replay(ctx, group, shards=shards, signals=signals)
        else:
            run_actor(ctx, group, index=index, num_actors=num_actors, shards=shards, signals=signals)
    return {}


def sharded_replay(ctx: JobContext, group: Any, shards: list[str], *, rehosted: bool = False):
    """The sharded replay in any rank. With shards on the actors, the learner samples
    on without the shard of a dead actor (its first failed call drops it) until its
    replacement rejoins; shards on replay ranks are never dropped (a dead one restarts
    the world). ``rehosted``: this rank replaces a dead actor, whose shard the learner
    now hosts."""
    from rlpar.buffers import DistributedPrioritizedReplayBuffer

    config = ctx.config
    return DistributedPrioritizedReplayBuffer(
        group=group, name=REPLAY, capacity=max(1, config.replay.replay_capacity // len(shards)),
        alpha=config.replay.priority_alpha, beta=config.replay.priority_beta, shard_members=shards,
        timeout=config.run.rpc_timeout, seed=config.run.seed, rehosted=rehosted,
        on_shard_failure="drop" if config.replay.replay_placement == "actors" else "raise",
        **replay_layout(ctx))


def learner_replay(ctx: JobContext, group: Any, shards: list[str]):
    """The learner's Buffer, the buffer hosted here for the actors (None with shards)
    and the sharded replay (None without)."""
    from rlpar.buffers import HostedBuffer, PrefetchingBuffer

    hosted = None if shards else HostedBuffer.host(group, REPLAY, local_replay(ctx))
    sharded = sharded_replay(ctx, group, shards) if shards else None
    return PrefetchingBuffer(hosted if sharded is None else sharded, batch_size=ctx.config.learn.batch_size,
                             depth=ctx.config.replay.prefetch_depth(),
                             timeout=ctx.config.run.rpc_timeout), hosted, sharded


def actor_replay(ctx: JobContext, group: Any, shards: list[str], *, rehosted: bool = False):
    from rlpar.buffers import HostedBuffer

    if shards:
        return sharded_replay(ctx, group, shards, rehosted=rehosted)
    return HostedBuffer.connect(group, REPLAY)


def hold_shard_until_saved(ctx: JobContext, group: Any, signals: StopSignals) -> None:
    """A rank that hosts a shard stays (serving it) until the learner has written its
    last checkpoint, which asks every shard for its part; after a stop by signal
    (the world is ending) at most ``STOP_HOLD_S``."""
    from rlpar.errors import PeerUnavailable

    hold = STOP_HOLD_S if signals.stopped else max(60.0, 2 * ctx.config.run.rpc_timeout)
    deadline = time.monotonic() + hold
    try:
        while (not group.call("coord/released", timeout=min(hold, ctx.config.run.rpc_timeout))
               and time.monotonic() < deadline):
            time.sleep(0.05)
    except PeerUnavailable:  # the learner is gone: nothing left to save for it
        pass


# -------------------------------------------------------------------- learner


class LearnerLoop:
    """The learner's paced update loop and its bookkeeping (serial and distributed)."""

    def __init__(self, learner: Any, coordinator: Any, pacing: Pacing, *, min_size: int) -> None:
        self.learner, self.coordinator, self.pacing, self.min_size = learner, coordinator, pacing, min_size
        self.started = self.cpu_started = 0.0
        self.waited = 0.0
        self._window: dict[str, float] = {}
        self._n = 0

    def ready(self) -> bool:
        # Reported transitions, not len(replay): a sharded replay's size is only
        # refreshed by sampling.
        return self.coordinator.transitions >= self.min_size

    def update(self) -> None:
        if not self.started:
            self.started, self.cpu_started = time.perf_counter(), time.thread_time()
        for key, value in self.learner.step().items():
            self._window[key] = self._window.get(key, 0.0) + value
        self._n += 1
        self.coordinator.updates = self.learner.updates

    def step(self) -> bool:
        """One update if pacing and data allow; False when it had to wait."""
        env_steps, updates = self.coordinator.env_steps, self.learner.updates
        if not self.ready() or not self.pacing.learner_may_update(env_steps=env_steps, updates=updates):
            t0 = time.perf_counter()
            time.sleep(0.0005)
            if self.started:
                self.waited += time.perf_counter() - t0
            return False
        self.update()
        return True

    def wait_fraction(self) -> float:
        busy = time.perf_counter() - self.started if self.started else 0.0
        return (self.waited + self.learner.sample_seconds) / busy if busy > 0 else 0.0

    def tick(self, replay_size: int, *, force: bool = False) -> None:
        means = {k: v / self._n for k, v in self._window.items()} if self._n else {}
        if self.coordinator.tick(updates=self.learner.updates, learner_metrics=means, force=force,
                                 scalars={"replay/size": replay_size,
                                          "charts/learner_wait_fraction": self.wait_fraction()},
                                 status={"wait%": round(100 * self.wait_fraction(), 1)}):
            self._window, self._n = {}, 0

    def summary(self, ctx: JobContext, *, algorithm: type, replay_size: int, interrupted: bool) -> dict:
        learner, updates = self.learner, max(self.learner.updates, 1)
        busy = time.perf_counter() - self.started if self.started else 0.0
        cpu = time.thread_time() - self.cpu_started if self.started else 0.0
        config = ctx.config
        return self.coordinator.summary(
            algorithm=algorithm, updates=learner.updates, run_dir=ctx.run_dir, interrupted=interrupted,
            num_actors=self.coordinator.num_sources, batch_size=config.learn.batch_size,
            replay_size=replay_size, wait_fraction=self.wait_fraction(),
            # CPU time of the learner loop's own thread: unlike updates/s, it does not
            # depend on how much of a core other processes left it (load-robust).
            learner_cpu_ms_per_update=1e3 * cpu / updates,
            learner_cpu_share=cpu / busy if busy > 0 else 0.0,
            sample_ms_per_update=1e3 * learner.sample_seconds / updates,
            update_ms_per_update=1e3 * learner.update_seconds / updates)


def make_learner(ctx: JobContext, buffer: Any, params: Any):
    from algorithms.apex import ApexLearner
    from experiments.runtime.config import resolve_device

    config = ctx.config
    dqn = build_dqn(ctx, device=resolve_device(config.run.device), seed=config.run.seed)
    return (ctx.parts.learner or ApexLearner)(dqn=dqn, buffer=buffer, params=params,
                                             config=config.learn.apex_config())


def run_learner(ctx: JobContext, group: Any, *, num_actors: int, shards: list[str]) -> dict[str, Any]:
    import torch

    from rlpar.servers import PushPullModelServer

    config = ctx.config
    torch.set_num_threads(config.run.torch_threads)
    announce_compile(ctx)
    replay, hosted, sharded = learner_replay(ctx, group, shards)
    params = PushPullModelServer.host(group, PARAMS)
    coordinator = start_lead(ctx, num_sources=num_actors, target=target(ctx), evaluator=num_actors - 1)
    learner = make_learner(ctx, replay, params)
    keeper = run_keeper(ctx, coordinator, learner, hosted, sharded=sharded, group=group)
    released = threading.Event()  # the last checkpoint is written: shard hosts may go
    group.register("coord/report", coordinator.report)
    group.register("coord/eval", coordinator.eval_result)
    group.register("coord/stopped", coordinator.should_stop)
    group.register("coord/released", released.is_set)
    group.register("coord/rejoin", rejoin_handler(ctx, coordinator, sharded, shards))
    loop = LearnerLoop(learner, coordinator, pacing(config),
                       min_size=max(config.learn.learning_starts, config.learn.batch_size))

    def held() -> int:
        # What the replay holds: the hosted buffer is in this process. Shards report
        # their sizes only in sampling replies (asking them early would cache an
        # empty replay), so for them it is what was added, bounded by the capacity:
        # exact until a shard fills.
        if hosted is not None:
            return len(hosted)
        return min(config.replay.replay_capacity, coordinator.transitions)

    group.barrier()
    with StopSignals(coordinator.stop) as signals:
        try:
            while not coordinator.should_stop():
                loop.step()
                loop.tick(held())
                keeper.poll()
        finally:
            coordinator.stop("finished")
            replay.close()
            # Not for a source that stopped reporting (dead or hung), and briefly after
            # a signal: under torchrun the SIGTERM's grace is short and a rank just died.
            coordinator.wait_for_sources(timeout=30.0, quiet=STOP_QUIET_S if signals.stopped else None)
            loop.tick(held(), force=True)
            try:
                kept = keeper.finish(version=learner.updates)
            finally:
                released.set()
            summary = loop.summary(ctx, algorithm=type(learner.dqn), replay_size=held(),
                                   interrupted=signals.received is not None) | kept
    return finish_lead(ctx, coordinator, summary)


def rejoin_handler(ctx: JobContext, coordinator: Any, sharded: Any | None, shards: list[str]):
    """``coord/rejoin``: a restarted actor rejoins (before its first add). With shards
    on the actors, the learner first hosts a fresh shard for it (it cannot call the
    new process) and counts what the dead shard held as lost."""
    on_actors = sharded is not None and ctx.config.replay.replay_placement == "actors"

    def rejoin(message: Rejoin) -> None:
        if on_actors:
            coordinator.count_lost(sharded.rehost(shards[message.source]))
        coordinator.rejoin(message)

    return rejoin


def run_keeper(ctx: JobContext, coordinator: Any, learner: Any, replay: Any | None, *,
               sharded: Any | None = None, group: Any | None = None):
    """Checkpoints hold the learner's DQN (networks, optimizer, update count), the
    replay held in this process with its priorities, and the coordinator's progress;
    replay shards (``sharded``) write their own parts of each checkpoint (a checkpoint
    while one is down is skipped). A resumed run loads them (each shard its part,
    before any actor adds) and publishes the restored parameters to the actors."""
    from experiments.runtime.checkpoints import RunKeeper
    from rlpar.buffers.shard import service_keys

    placement = ctx.config.replay.replay_placement
    meta = {"replay_placement": placement, "replay_layout": sorted(replay_layout(ctx))}
    if sharded is not None:
        meta["replay_shards"] = len(sharded.shard_members)

    def snapshot() -> dict[str, Any]:
        return {"dqn": learner.dqn.state_dict(), **({"replay": replay.state_dict()} if replay else {})}

    def save_parts(directory: str, step: int) -> int:
        return sharded.save_parts(directory, step=step, kind=ctx.job, meta={"replay_placement": placement})

    def restore(state: dict[str, Any]) -> None:
        learner.dqn.load_state_dict(state["dqn"])
        if replay is not None and "replay" in state:
            replay.load_state_dict(state["replay"])
        if sharded is not None:
            # Before the barrier: the shard hosts have registered, but add nothing yet.
            for member in sharded.shard_members:
                group.wait_registered(service_keys(REPLAY, member)["load"])
            sharded.load_parts(keeper.checkpointer.resumed_path, kind=ctx.job,
                               meta={"replay_placement": placement})
        if learner.updates > 0:  # version 0 (the initial weights) is already published
            learner.publish()

    keeper = RunKeeper(ctx, coordinator, snapshot=snapshot, policy=learner.dqn.policy_state, meta=meta,
                       parts=sharded.part_names() if sharded is not None else (),
                       save_parts=save_parts if sharded is not None else None)
    keeper.restore(restore, keys=("dqn",))
    return keeper


def run_replay(ctx: JobContext, group: Any, *, shards: list[str], signals: StopSignals) -> None:
    """A dedicated replay rank: hosts one shard (served on RPC threads) until the
    learner has written its last checkpoint."""
    sharded_replay(ctx, group, shards)
    group.barrier()
    hold_shard_until_saved(ctx, group, signals)


# ---------------------------------------------------------------------- actor


class ActorShell:
    """One actor's env, ApexActor and the report it owes the coordinator."""

    def __init__(self, ctx: JobContext, *, index: int, num_actors: int, buffer: Any, params: Any,
                 restarts: int = 0) -> None:
        from gymnasium.vector import AutoresetMode

        from algorithms.apex import ApexActor
        from envs import make_vector_env
        from experiments.runtime.envs import vector_env_options

        config = ctx.config
        # A restarted actor (``restarts``) plays new episodes, not its predecessor's.
        self.seed = actor_seed(config.run.seed, index, restarts)
        self.index = index
        # A dead env worker is replaced inside the vector env; ApexActor drops what it cut.
        self.env = make_vector_env(env_fn(ctx), num_envs=config.env.num_envs,
                                   autoreset_mode=AutoresetMode.SAME_STEP, seed=self.seed,
                                   **vector_env_options(config))
        dqn = build_dqn(ctx, device="cpu", seed=self.seed)
        self.actor = (ctx.parts.actor or ApexActor)(
            dqn=dqn, env=self.env, buffer=buffer, params=params, index=index, num_actors=num_actors,
            config=config.learn.apex_config(), seed=self.seed)
        self.actor.sync()
        self._steps = self._transitions = self._env_restarts = 0

    def report(self, *, final: bool = False) -> Report:
        actor = self.actor
        episodes = [Episode(ret=r, length=n) for r, n in actor.finished_episodes]
        actor.finished_episodes = []
        env_restarts = getattr(self.env, "crash_count", 0)
        report = Report(source=self.index, env_steps=actor.env_steps - self._steps,
                        transitions=actor.transitions_added - self._transitions, episodes=episodes,
                        version=actor.version, final=final,
                        env_worker_restarts=env_restarts - self._env_restarts)
        self._steps, self._transitions = actor.env_steps, actor.transitions_added
        self._env_restarts = env_restarts
        return report

    def close(self) -> None:
        self.env.close()


def evaluate_dqn(ctx: JobContext, dqn: Any, envs: Any, *, env_steps: int, version: int) -> EvalResult:
    """A greedy evaluation of ``dqn`` (parameters ``version``) on ``envs`` (the
    evaluator's, one per episode), on episodes seeded by the run's seed and
    ``env_steps``; the result holds ``dqn``'s parameters and that seed, so the run
    keeps the network that scored and ``experiments.evaluate`` can replay it."""
    from algorithms.apex import evaluate

    seed, episodes = ctx.config.run.seed + 7 + env_steps, ctx.config.run.eval_episodes
    return evaluation(dqn.network, functools.partial(evaluate, dqn, envs, episodes=episodes, seed=seed),
                      env_steps=env_steps, version=version, policy=dqn.policy_state(), seed=seed)


def run_actor(ctx: JobContext, group: Any, *, index: int, num_actors: int, shards: list[str],
              signals: StopSignals) -> None:
    from rlpar.distributed import current_world
    from rlpar.servers import PushPullModelServer

    config = ctx.config
    restarts = current_world().rank_restarts
    if restarts:  # before any add: with shards on the actors, the learner rehosts ours
        group.call("coord/rejoin", Rejoin(source=index, restarts=restarts))
    holds_shard = config.replay.replay_placement == "actors" and not restarts
    replay = actor_replay(ctx, group, shards, rehosted=bool(restarts))
    group.barrier()  # a restarted actor passes at once (or completes it for the one that died)
    # Same index, so the same exploration rate; the shell pulls the newest parameters.
    shell = ActorShell(ctx, index=index, num_actors=num_actors, buffer=replay,
                       params=PushPullModelServer.connect(group, PARAMS), restarts=restarts)
    evaluator = eval_env(ctx, seed=shell.seed + 1) if index == num_actors - 1 else None
    paced, directive = pacing(config), group.call("coord/report", shell.report())
    last_report, every = time.monotonic(), report_every(num_actors)
    try:
        while not directive.stop and not signals.stopped:
            if time.monotonic() - last_report >= every:
                directive, last_report = group.call("coord/report", shell.report()), time.monotonic()
                if directive.evaluate and evaluator is not None:
                    shell.actor.sync()
                    # The result carries the parameters it played: the learner is many
                    # updates past this version by the time the result reaches it.
                    group.call("coord/eval", evaluate_dqn(ctx, shell.actor.dqn, evaluator,
                                                          env_steps=directive.env_steps,
                                                          version=shell.actor.version))
            elif paced.actor_may_step(env_steps=directive.env_steps + shell.actor.env_steps - shell._steps,
                                      updates=directive.updates):
                shell.actor.step()
            else:
                # Sleep until the next report instead of asking again at once: each
                # report is an RPC whose handler takes the learner's GIL, so a
                # throttled actor that polls slows the very learner it waits for.
                time.sleep(max(0.0, last_report + every - time.monotonic()))
    finally:
        try:
            last_call(signals.stopped, lambda: _send_final(group, shell, replay, signals.stopped))
        finally:
            shell.close()
            if evaluator is not None:
                evaluator.close()
    if holds_shard:
        hold_shard_until_saved(ctx, group, signals)


def _send_final(group: Any, shell: ActorShell, replay: Any, signalled: bool) -> None:
    """What an ending actor owes the learner: its buffered transitions, then its final report."""
    shell.actor.flush()
    if hasattr(replay, "wait"):
        replay.wait()
    group.call("coord/report", shell.report(final=True), timeout=STOP_CALL_S if signalled else None)


# --------------------------------------------------------------------- serial


def serial_main(ctx: JobContext) -> dict[str, Any]:
    """Every role in this process, deterministic for a seed: actors step in turn, the
    learner runs the updates pacing owes after each, the lead evaluates on schedule."""
    import torch

    from rlpar.servers.model import ModelStore

    config = ctx.config
    torch.set_num_threads(config.run.torch_threads)
    num_actors = ctx.nprocs - 1
    announce_compile(ctx)
    replay, params = local_replay(ctx), ModelStore()
    coordinator = start_lead(ctx, num_sources=num_actors, target=target(ctx), evaluator=None)
    learner = make_learner(ctx, replay, params)
    shells = [ActorShell(ctx, index=i, num_actors=num_actors, buffer=replay, params=params)
              for i in range(num_actors)]
    loop, paced = LearnerLoop(learner, coordinator, pacing(config), min_size=0), pacing(config)
    keeper = run_keeper(ctx, coordinator, learner, replay)
    evaluator = eval_env(ctx, seed=config.run.seed + 1)
    min_size = max(config.learn.learning_starts, config.learn.batch_size)
    # Env steps when the learner could first sample (a resumed run: where its
    # updates say it started, so pacing goes on as it was).
    since = coordinator.env_steps - learner.updates / paced.updates_per_step if learner.updates else None
    with StopSignals(coordinator.stop) as signals:
        try:
            while not coordinator.should_stop():
                for shell in shells:
                    shell.actor.step()
                    coordinator.report(shell.report())
                    if since is None and len(replay) >= min_size:
                        since = coordinator.env_steps
                    if since is not None:
                        for _ in range(paced.updates_due(env_steps=coordinator.env_steps,
                                                         updates=learner.updates, started_at=since)):
                            loop.update()
                if coordinator.eval_due():
                    coordinator.eval_result(evaluate_dqn(ctx, learner.dqn, evaluator,
                                                         env_steps=coordinator.env_steps,
                                                         version=learner.updates))
                loop.tick(len(replay))
                keeper.poll()
        finally:
            coordinator.stop("finished")
            for shell in shells:
                shell.actor.flush()
                coordinator.report(shell.report(final=True))
                shell.close()
            evaluator.close()
            loop.tick(len(replay), force=True)
            kept = keeper.finish(version=learner.updates)
            summary = loop.summary(ctx, algorithm=type(learner.dqn), replay_size=len(replay),
                                   interrupted=signals.received is not None) | kept
    return finish_lead(ctx, coordinator, summary)


JOB = Job(name="apex", rank_main=rank_main, serial_main=serial_main, resolve=resolve, check=check,
          describe=describe, env_fn=job_env_fn,
          load_policy=load_policy, restartable=restartable, env_defaults=env_defaults, roles=role_names)


def _warm_replay_kernels() -> None:
    from rlpar.buffers import trees

    trees.kernels()


def warm_in_background() -> threading.Thread:
    """Load the replay's compiled kernels while the RPC rendezvous waits on peers."""
    thread = threading.Thread(target=_warm_replay_kernels, name="warm-replay", daemon=True)
    thread.start()
    return thread

