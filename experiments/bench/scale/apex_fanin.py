"""Report fan-in: what many actors' progress reports and parameter pulls cost the
learner process, and whether pacing holds.

Rank 0 is an Ape-X learner process as ``experiments/roles/actor_learner/learner.py`` wires it: the
job's :class:`~experiments.runtime.coordinator.Coordinator` behind ``coord/report``,
a :class:`~rlpar.servers.PushPullModelServer` with the Nature CNN's parameters
(1.7M, published every ``push_every`` updates), and the job's ``LearnerLoop`` running
a real :class:`~algorithms.apex.ApexLearner` (Nature CNN DQN) under the job's
:class:`~algorithms.pacing.Pacing`. Its replay is local and pre-filled: the replay's
own traffic is the ingest case's subject, not this one.

Ranks 1..K are simulated actors: the control loop of ``run_actor`` (a report every
``report_every(actors)`` seconds, pacing from the directive, a parameter pull every ``pull_every``
env steps), with the env and the policy replaced by a sleep of one vector step.

Phases: ``alone`` (the learner updates, no actor has started: its own cost per
update) then ``fan_in`` (actors run; the learner is paced). The learner process's CPU
is split by thread: the loop's own thread against everything else (RPC threads
serving reports and pulls, TensorPipe's I/O); the report handler's own CPU time is
measured around the coordinator's ``report`` (it runs holding the GIL).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class FanInPoint:
    actors: int
    seconds: float  # per phase
    vector_step_s: float = 0.08  # one actor vector step (env + policy), slept
    num_envs: int = 4
    batch_size: int = 32
    updates_per_step: float = 0.025
    learning_starts: int = 200
    push_every: int = 8
    pull_every: int = 64
    replay_rows: int = 2048


class _HandlerClock:
    """Thread CPU time spent inside a service handler (which holds the GIL)."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls, self.cpu_s = fn, 0, 0.0

    def __call__(self, *args: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self.fn(*args)
        finally:
            self.cpu_s += time.thread_time() - t0
            self.calls += 1


def _learner(point: FanInPoint, params: Any):
    from algorithms.dqn import DQN, ApexConfig, ApexLearner, DQNConfig
    from algorithms.nets import q_network
    from experiments.bench.scale.apex_ingest import IngestPoint, actor_batches
    from rlpar.buffers import PrioritizedReplayBuffer, SharedFrames

    replay = PrioritizedReplayBuffer(capacity=point.replay_rows, alpha=0.6, beta=0.4, seed=0,
                                     shared_frames=SharedFrames(shift=3))
    shape = IngestPoint(placement="learner", senders=1, replay_ranks=0, rate=0.0, seconds=0.0,
                        capacity=point.replay_rows)
    for batch, priorities in actor_batches(shape, -(-point.replay_rows // 128), seed=0):
        replay.add(batch, priorities)
    dqn = DQN(network=q_network((4, 84, 84), 4), num_actions=4, config=DQNConfig(), device="cpu", seed=0)
    return ApexLearner(dqn=dqn, buffer=replay, params=params,
                       config=ApexConfig(batch_size=point.batch_size, learning_starts=point.learning_starts,
                                         push_every=point.push_every, pull_every=point.pull_every))


class _Reported:
    """The learner loop's data readiness: ``min_size`` reported transitions (the job's
    rule for a replay in the learner process)."""

    def __init__(self, min_size: int) -> None:
        self.min_size = min_size

    def ready(self, reported: int) -> bool:
        return reported >= self.min_size


def _learner_rank(point: FanInPoint, group: Any) -> dict[str, Any]:
    from algorithms.pacing import Pacing
    from experiments.roles.actor_learner import PARAMS, LearnerLoop
    from experiments.runtime.config import RunConfig
    from experiments.runtime.coordinator import Coordinator
    from rlpar.logging import MetricLogger
    from rlpar.servers import PushPullModelServer

    params = PushPullModelServer.host(group, PARAMS)
    run = RunConfig(max_env_steps=10**12, max_seconds=1e9, eval_every=10**12, status_every=0.0)
    coordinator = Coordinator(job="apex", run=run, env_id="sleeping", num_sources=point.actors,
                              target=float("inf"), started=time.time(), logger=MetricLogger(log_dir=None),
                              quiet=True)
    report = _HandlerClock(coordinator.report)
    group.register("coord/report", report)
    learner = _learner(point, params)
    pacing = Pacing(updates_per_step=point.updates_per_step, learning_starts=point.learning_starts)
    loop = LearnerLoop(learner, coordinator, pacing, data=_Reported(point.learning_starts))
    out: dict[str, Any] = {}
    group.barrier()  # services registered: the actors connect

    # Alone: the same learner's updates with no actor and no pacing (a twin, so that
    # the paced learner starts from update 0 as in a job).
    from rlpar.servers.model import ModelStore

    twin = _learner(point, ModelStore())
    t0, c0 = time.perf_counter(), time.thread_time()
    n = 0
    while time.perf_counter() - t0 < point.seconds:
        twin.step()
        n += 1
    out["alone"] = {"update_ms": 1e3 * (time.perf_counter() - t0) / n,
                    "thread_cpu_ms_per_update": 1e3 * (time.thread_time() - c0) / n}
    del twin
    group.barrier()  # the actors start

    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    stats0, updating, updates0 = params.stats(), 0.0, learner.updates
    report_cpu0, report_calls0 = report.cpu_s, report.calls
    while time.perf_counter() - t0 < point.seconds:
        u0 = time.perf_counter()
        if loop.step():
            updating += time.perf_counter() - u0
        loop.tick(0)
    wall = time.perf_counter() - t0
    thread_cpu, process_cpu = time.thread_time() - c0, time.process_time() - p0
    stats = params.stats()
    updates = learner.updates - updates0
    # The window's report CPU only: the final reports that come after it are not in
    # process_cpu either, and under load they would push the share past the serving one.
    report_cpu, report_calls = report.cpu_s - report_cpu0, report.calls - report_calls0
    coordinator.stop("finished")
    finished = coordinator.wait_for_sources(timeout=60.0)
    serving = process_cpu - thread_cpu
    out["fan_in"] = {
        "wall_s": wall, "updates": updates, "update_ms": 1e3 * updating / max(1, updates),
        "thread_cpu_ms_per_update": 1e3 * thread_cpu / max(1, updates),
        "process_cpu_cores": process_cpu / wall, "serving_cpu_cores": serving / wall,
        "share_serving": serving / process_cpu if process_cpu > 0 else 0.0,
        "share_reports": report_cpu / process_cpu if process_cpu > 0 else 0.0,
        "reports": report_calls, "report_handler_us": 1e6 * report_cpu / max(1, report_calls),
        "gil_held_by_reports": report_cpu / wall,
        "pulls": stats["pulls"] - stats0["pulls"], "transfers": stats["transfers"] - stats0["transfers"],
        "mb_out": (stats["bytes_out"] - stats0["bytes_out"]) / 1e6,
        "env_steps": coordinator.env_steps, "total_updates": learner.updates, "all_final": finished,
        "wait_fraction": loop.wait_fraction()}
    return out


def _actor_rank(point: FanInPoint, group: Any, index: int) -> dict[str, Any]:
    """The control loop of ``experiments.roles.actor_learner.actor.run_actor``, env and policy slept."""
    from algorithms.pacing import Pacing
    from experiments.roles.actor_learner import PARAMS, report_every
    from experiments.runtime.messages import Report
    from rlpar.servers import PushPullModelServer

    params = PushPullModelServer.connect(group, PARAMS)
    paced = Pacing(updates_per_step=point.updates_per_step, learning_starts=point.learning_starts)
    version = params.pull(newer_than=-1)[1]
    group.barrier()  # the learner has measured its updates alone
    c0, t0 = time.process_time(), time.perf_counter()
    steps = reported = since_pull = 0
    every = report_every(point.actors)
    directive = group.call("coord/report", Report(source=index, env_steps=0, version=version))
    last = time.monotonic()
    while not directive.stop:
        if time.monotonic() - last >= every:
            new = steps - reported
            directive = group.call("coord/report", Report(source=index, env_steps=new, transitions=new,
                                                          version=version))
            reported, last = steps, time.monotonic()
        elif paced.actor_may_step(env_steps=directive.env_steps + steps - reported,
                                  updates=directive.updates):
            time.sleep(point.vector_step_s)
            steps += point.num_envs
            since_pull += point.num_envs
            if since_pull >= point.pull_every:
                since_pull = 0
                pulled = params.pull(newer_than=version)
                if pulled is not None:
                    version = pulled[1]
        else:
            time.sleep(max(0.0, last + every - time.monotonic()))
    new = steps - reported
    group.call("coord/report", Report(source=index, env_steps=new, transitions=new, version=version,
                                      final=True))
    return {"cpu_cores": (time.process_time() - c0) / (time.perf_counter() - t0), "version": version}


def fanin_rank(point: FanInPoint) -> dict[str, Any]:
    import torch

    from experiments.apex import PROGRAM
    from rlpar.distributed import World

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    with World.from_env(rpc_timeout=120.0) as world:
        group = world.create_rpc_group(PROGRAM.name, world.names)
        if rank == 0:
            out = _learner_rank(point, group)
        else:
            group.barrier()  # the learner's services are registered
            out = _actor_rank(point, group, rank - 1)
        group.barrier()
    return out


def summarize(point: FanInPoint, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    learner, actors = ranks[0], ranks[1:]
    fan, alone = learner["fan_in"], learner["alone"]
    wall = fan["wall_s"]
    # Pacing's bounds (algorithms/pacing.py): the learner never runs ahead of the env
    # steps' due updates plus slack; the actors together may overshoot theirs by the
    # steps each takes between two reports (their own unreported steps are counted,
    # the others' are not).
    from algorithms.pacing import Pacing

    slack = Pacing.slack_steps  # simulated actors hold no transitions back
    due = Pacing(updates_per_step=point.updates_per_step, learning_starts=point.learning_starts,
                 slack_steps=slack).learner_bound(fan["env_steps"])
    from experiments.roles.actor_learner import report_every

    per_report = point.num_envs * (1 + int(report_every(point.actors) / point.vector_step_s))
    allowed = point.learning_starts + fan["total_updates"] / point.updates_per_step + slack
    return {
        "bench": "apex_scale", "case": "fan_in", "actors": point.actors,
        "learner_cpu_share_reports": round(fan["share_reports"], 4),
        "learner_cpu_share_serving": round(fan["share_serving"], 4),
        "learner_process_cpu_cores": round(fan["process_cpu_cores"], 3),
        "serving_cpu_cores": round(fan["serving_cpu_cores"], 3),
        "reports_per_s": round(fan["reports"] / wall, 1),
        "report_handler_us": round(fan["report_handler_us"], 1),
        "gil_held_by_reports": round(fan["gil_held_by_reports"], 4),
        "pulls_per_s": round(fan["pulls"] / wall, 1),
        "param_transfers_per_s": round(fan["transfers"] / wall, 2),
        "param_mb_out_per_s": round(fan["mb_out"] / wall, 1),
        "updates_per_s": round(fan["updates"] / wall, 2), "batch_size": point.batch_size,
        "update_ms_alone": round(alone["update_ms"], 2), "update_ms_fan_in": round(fan["update_ms"], 2),
        "learner_thread_cpu_ms_per_update_alone": round(alone["thread_cpu_ms_per_update"], 2),
        "learner_thread_cpu_ms_per_update_fan_in": round(fan["thread_cpu_ms_per_update"], 2),
        "learner_wait_fraction": round(fan["wait_fraction"], 3),
        "actors_cpu_cores": round(sum(a["cpu_cores"] for a in actors), 3),
        "env_steps": fan["env_steps"], "updates": fan["total_updates"],
        "pacing_learner_within": bool(fan["total_updates"] <= due), "pacing_updates_due": due,
        "pacing_actor_overshoot_steps": int(fan["env_steps"] - allowed),
        "pacing_actor_overshoot_bound": point.actors * per_report,
        "pacing_ok": bool(fan["total_updates"] <= due
                          and fan["env_steps"] - allowed <= point.actors * per_report),
        "all_actors_final": fan["all_final"],
        "learner_version": fan["total_updates"],
        "oldest_actor_version": int(np.min([a["version"] for a in actors])) if actors else None,
    }
