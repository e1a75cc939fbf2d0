"""The learner's role in an actor-learner job: rank 0 (or the serial process).

It hosts the parameter server and the coordinator, holds the learner's side of the
data path (:class:`~experiments.roles.actor_learner.data.LearnerData`), runs the paced update loop
(:class:`LearnerLoop`) and keeps the run (checkpoints, ``policy-best.pt``, the summary;
:func:`run_keeper`). Which algorithm learns is the builder's business: this file names
none.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from algorithms.pacing import Pacing
from experiments.roles.actor_learner.backoff import Backoff
from experiments.roles.actor_learner.data import LearnerData, follow_key
from experiments.roles.actor_learner.filling import Filling
from experiments.roles.actor_learner.learners import (
    Lockstep,
    gather,
    make_learner,
    share_state,
)
from experiments.roles.actor_learner.program import Setup, pacing
from experiments.runtime.job import STOP_QUIET_S
from experiments.runtime.lead import announce_compile, run_lead, start_lead
from experiments.runtime.messages import Rejoin

PARAMS = "params"
# How long a learner that may not update sleeps before it asks again: briefly while
# pacing holds it between updates (data arrives with each actor's report, every 20 ms),
# longer once it has waited WAIT_LONG_AFTER asks in a row (0.1 s or more: learning
# starts, a late or restarting actor). 2,000 asks a second cost about 5% of a core,
# taken from the actors it waits for.
WAIT_S = 0.0005
WAIT_LONG_AFTER = 200
WAIT_LONG_S = 0.005


class LearnerLoop:
    """The learner's update loop and its bookkeeping (serial and distributed):
    an update whenever the data path is ready and pacing (a replay's ratio) allows."""

    def __init__(self, learner: Any, coordinator: Any, pacing: Pacing | None, *, data: Any) -> None:
        self.learner, self.coordinator, self.pacing, self.data = learner, coordinator, pacing, data
        self.started = self.cpu_started = self.process_started = 0.0
        self.waited = 0.0
        self.backoff = Backoff(short_s=WAIT_S, long_s=WAIT_LONG_S, after=WAIT_LONG_AFTER)
        self._window: dict[str, float] = {}
        self._n = 0

    def update(self) -> None:
        if not self.started:
            self.started, self.cpu_started = time.perf_counter(), time.thread_time()
            self.process_started = time.process_time()
        for key, value in self.learner.step().items():
            self._window[key] = self._window.get(key, 0.0) + value
        self._n += 1
        self.coordinator.updates = self.learner.updates

    def may_update(self, *, ahead: int = 0) -> bool:
        """Whether the data path is ready and pacing allows an update now (``ahead``:
        the one after ``ahead`` more, asked while one is under way)."""
        env_steps, updates = self.coordinator.env_steps, self.learner.updates + ahead
        return self.data.ready(self.coordinator.transitions) and (
            self.pacing is None or self.pacing.learner_may_update(env_steps=env_steps, updates=updates))

    def wait(self, seconds: float = WAIT_S) -> None:
        t0 = time.perf_counter()
        time.sleep(seconds)
        if self.started:
            self.waited += time.perf_counter() - t0

    def step(self) -> bool:
        """One update if pacing and data allow; False when it had to wait."""
        if not self.may_update():
            self.wait(self.backoff.missed())
            return False
        self.backoff.updated()
        self.update()
        return True

    def step_with(self, lockstep: Any) -> bool:
        """Several learners: one update if every learner may take it, as agreed in
        ``lockstep`` (with the stop); False to stop."""
        go, stop = lockstep.agree()
        if stop:
            return False
        if go:
            with lockstep.update():
                self.update()
        else:
            self.wait(lockstep.wait_s)
        return True

    def wait_fraction(self) -> float:
        busy = time.perf_counter() - self.started if self.started else 0.0
        return (self.waited + self.learner.sample_seconds) / busy if busy > 0 else 0.0

    def tick(self, held: int, *, force: bool = False, status: dict[str, Any] | None = None) -> None:
        means = {k: v / self._n for k, v in self._window.items()} if self._n else {}
        tag = "replay/size" if self.pacing is not None else "queue/size"
        if self.coordinator.tick(updates=self.learner.updates, learner_metrics=means, force=force,
                                 scalars={tag: held, "charts/learner_wait_fraction": self.wait_fraction(),
                                          **self.learner.scalars()},
                                 status={"wait%": round(100 * self.wait_fraction(), 1), **(status or {})}):
            self._window, self._n = {}, 0

    def summary(self, setup: Setup, *, algorithm: type, held: int, interrupted: bool) -> dict:
        learner = self.learner
        updates = max(learner.updates, 1)
        busy = time.perf_counter() - self.started if self.started else 0.0
        cpu = time.thread_time() - self.cpu_started if self.started else 0.0
        return self.coordinator.summary(
            algorithm=algorithm, updates=learner.updates, run_dir=setup.lead.run_dir, interrupted=interrupted,
            num_actors=self.coordinator.num_sources, batch_size=setup.flow.batch_size,
            data=setup.flow.data, replay_size=held, wait_fraction=self.wait_fraction(),
            learning_s=busy,  # since the first update: updates / learning_s is the learner's rate
            # CPU time of the learner loop's own thread: unlike updates/s, it does not
            # depend on how much of a core other processes left it (load-robust).
            learner_cpu_ms_per_update=1e3 * cpu / updates,
            learner_cpu_share=cpu / busy if busy > 0 else 0.0,
            # The learner process's (all threads: serving adds and reports too).
            process_cpu_ms_per_update=1e3 * (time.process_time() - self.process_started) / updates
            if self.started else 0.0,
            sample_ms_per_update=1e3 * learner.sample_seconds / updates,
            update_ms_per_update=1e3 * learner.update_seconds / updates, **learner.figures(),
            **setup.builder.summary(learner.algorithm))


def run_learner(setup: Setup, group: Any, *, shards: list[str], members: Any = None) -> dict[str, Any]:
    """Learner 0 (the only one by default); ``members``: the learner group when there
    are several (:mod:`experiments.roles.actor_learner.learners`)."""
    import torch

    from rlpar.servers import PushPullModelServer

    lead, num_actors = setup.lead, setup.num_actors
    torch.set_num_threads(setup.run.torch_threads)
    if setup.path.kernels:
        announce_compile(lead)
    data = setup.path.learner_data(setup, group, shards)
    params = PushPullModelServer.host(group, PARAMS)
    coordinator = start_lead(lead, num_sources=num_actors, target=target(setup), evaluator=num_actors - 1,
                             **setup.builder.episode_layout())
    lockstep = Lockstep(members) if members is not None else None
    learner = make_learner(setup, data.source, params, lockstep=lockstep)
    keeper = run_keeper(setup, coordinator, learner, data, group=group)
    if members is not None:  # the others start where this one starts (restored or fresh)
        share_state(members, learner.algorithm)
    released = threading.Event()  # the last checkpoint is written: shard hosts may go
    group.register("coord/report", coordinator.report)
    group.register("coord/eval", coordinator.eval_result)
    group.register("coord/stopped", coordinator.should_stop)
    group.register("coord/released", released.is_set)
    group.register("coord/rejoin", rejoin_handler(setup, coordinator, data, shards, group))
    loop = LearnerLoop(learner, coordinator, pacing(setup.flow, num_actors=num_actors, num_envs=setup.env.num_envs,
                                                    learners=setup.learners), data=data)
    # A replay's items are the flow's (R2D2's are sequences), a queue's unrolls.
    unit = setup.flow.items if setup.flow.data == "replay" else setup.path.unit
    filling = None
    if lockstep is not None:  # may the next update come: this learner's data and pacing, the stop
        lockstep.poll = lambda ahead: (data.local_ready() and loop.may_update(ahead=ahead),
                                       coordinator.should_stop())
        lockstep.lacking_of = data.lacking
        filling = Filling(coordinator, learners=setup.learners, num_actors=num_actors, need=data.need,
                          data=setup.path.noun, unit=unit, warn_after=coordinator.silent_after)
    elif loop.pacing is not None:  # one learner on a paced replay (a queue's actors are not paced)
        filling = Filling(coordinator, learners=1, num_actors=num_actors, need=data.min_size,
                          data="replay", unit=unit, warn_after=coordinator.silent_after)
    group.barrier()
    return run_lead(lead, coordinator, keeper, _LearnerTurns(setup, loop, data, lockstep, members, filling),
                    kept=released.set, whole=(lambda: lockstep.whole) if lockstep is not None else None)


class _LearnerTurns:
    """Learner 0 in the runtime's loop (``experiments.runtime.lead.run_lead``): an update
    when data and pacing allow (with several learners, when all agree: they stop
    together too), the curves; at the end the learners' figures gathered, the data
    path closed, the actors' final reports awaited."""

    def __init__(self, setup: Setup, loop: LearnerLoop, data: LearnerData, lockstep: Any, members: Any,
                 filling: Filling | None = None) -> None:
        self.setup, self.loop, self.data, self.lockstep, self.members = setup, loop, data, lockstep, members
        self.filling = filling
        self.ended = False  # the loop ended by its own rule (not by an error)
        self.together: dict[str, Any] = {}

    def held(self) -> int:
        return self.data.held(reported=self.loop.coordinator.held_transitions())

    def turn(self) -> bool:
        loop = self.loop
        if self.lockstep is None:
            if loop.coordinator.should_stop():
                self.ended = True
                return False
            before = loop.learner.updates
            loop.step()
            if self.filling is not None:
                self.filling.update([self.data.short_of(loop.coordinator.transitions)],
                                    updated=loop.learner.updates > before)
        else:
            before = loop.learner.updates
            if not loop.step_with(self.lockstep):
                self.ended = True
                return False
            self.filling.update(self.lockstep.lacking, updated=loop.learner.updates > before)
        loop.tick(self.held(), status=self.status())
        return True

    def status(self) -> dict[str, Any] | None:
        return self.filling.status() if self.filling is not None else None

    def wind_down(self, signalled: bool) -> int:
        loop, coordinator = self.loop, self.loop.coordinator
        if self.lockstep is not None and self.ended:  # every learner stopped after the same update
            self.together = gather(self.members, loop.learner,
                                   cpu_s=time.process_time() - loop.process_started)
        self.data.close()
        # Not for a source that stopped reporting (dead or hung), and briefly after
        # a signal: under torchrun the SIGTERM's grace is short and a rank just died.
        coordinator.wait_for_sources(timeout=30.0, quiet=STOP_QUIET_S if signalled else None)
        loop.learner.settle()
        loop.tick(self.held(), force=True, status=self.status())
        return loop.learner.updates

    def summary(self, interrupted: bool) -> dict[str, Any]:
        loop = self.loop
        return loop.summary(self.setup, algorithm=type(loop.learner.algorithm), held=self.held(),
                            interrupted=interrupted) | self.together


def target(setup: Setup) -> float:
    from experiments.runtime.envs import target_return

    return target_return(setup.run.target_return, setup.env_fn)


def rejoin_handler(setup: Setup, coordinator: Any, data: LearnerData, shards: list[str], group: Any = None):
    """``coord/rejoin``: a restarted actor rejoins (before its first add). With shards
    on the actors, the learner first hosts a fresh shard for it (it cannot call the
    new process) and counts what the dead shard held as lost; the other learners
    (several) then sample that shard where this one hosts it."""
    rehosts = setup.path.rehosts_dead_shards

    def rejoin(message: Rejoin) -> None:
        member = shards[message.source] if rehosts else None
        if member is not None and not data.sharded.hosts_shard_of(member):  # else: rehosted here before
            # What it reported adding bounds what its shard held from below: the size in
            # the shard's last sampling reply may lag the last adds.
            coordinator.count_lost(data.sharded.rehost(member, added=coordinator.added_by(message.source)))
            for k in range(1, setup.learners):
                group.call(follow_key(k), member)
        coordinator.rejoin(message)

    return rejoin


def run_keeper(setup: Setup, coordinator: Any, learner: Any, data: LearnerData, *, group: Any | None = None):
    """Checkpoints hold the learner's algorithm (networks, optimizer, update count),
    a replay held in this process with its priorities, and the coordinator's progress;
    replay shards write their own parts of each checkpoint (a checkpoint while one is
    down is skipped). A queue's unrolls are on-policy data, not kept. A resumed run
    loads them (each shard its part, before any actor adds) and publishes the restored
    parameters to the actors."""
    from experiments.runtime.checkpoints import RunKeeper

    lead, key, path = setup.lead, setup.builder.state_key, setup.path
    # A replay split over several learners is kept as parts, like remote shards.
    sharded, hosted = data.parts, data.in_state
    algorithm = learner.algorithm
    meta = path.checkpoint_meta(setup, data)
    parts_meta = {"replay_placement": path.placement}

    def snapshot() -> dict[str, Any]:
        return {key: algorithm.state_dict(), **({"replay": hosted.state_dict()} if hosted is not None else {})}

    def save_parts(directory: str, step: int) -> int:
        return sharded.save_parts(directory, step=step, kind=lead.job, meta=parts_meta)

    def restore(state: dict[str, Any]) -> None:
        algorithm.load_state_dict(state[key])
        if hosted is not None and "replay" in state:
            hosted.load_state_dict(state["replay"])
        if sharded is not None:
            # Before the barrier: the shard hosts have registered, but add nothing yet.
            for load in path.load_keys(data):
                group.wait_registered(load)
            sharded.load_parts(keeper.checkpointer.resumed_path, kind=lead.job, meta=parts_meta)
        if learner.updates > 0:  # version 0 (the initial weights) is already published
            learner.publish()

    keeper = RunKeeper(lead, coordinator, snapshot=snapshot, policy=algorithm.policy_state, meta=meta,
                       parts=sharded.part_names() if sharded is not None else (),
                       save_parts=save_parts if sharded is not None else None)
    keeper.restore(restore, keys=(key,))
    return keeper
