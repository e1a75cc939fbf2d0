"""The Ape-X roles: thin shells that own the transport and call algorithm methods.

Wiring (:func:`rank_main`, read top to bottom): every rank joins the world and the
RPC group ``apex``; rank 0 hosts the parameter server and the coordinator
(progress reports, evaluation schedule, stop flag). The prioritized replay lives
where ``--replay-placement`` says:

- ``learner``: one buffer in the learner process; actors send batches with
  asynchronous RPCs (cheapest on one small machine: sampling is a local call);
- ``actors``: one shard per actor (adds are local), the learner samples across
  shards with one round trip per shard, prefetched;
- ``replay-ranks``: shards on dedicated replay ranks; actors send adds there.

Actors get a Buffer handle and a ParameterStore accessor, so
:class:`~algorithms.apex.ApexActor` and :class:`~algorithms.apex.ApexLearner`
see only those protocols, exactly as in the one-process
:class:`~algorithms.apex.DQNApex`.

Pacing: on 2 cores, free-running actors would starve the learner, so both sides
hold ``--updates-per-step`` learner updates per env step within ``AHEAD_STEPS``
env steps: actors pause when they are further ahead of what the learner has
consumed, and the learner waits (counted as waiting for data) when it is further
ahead of the data.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from experiments.roles.apex_parts import (
    Coordinator,
    LearnerReplay,
    LockedBuffer,
    ReplayAdder,
    build_dqn,
    env_spaces,
    learner_metrics_logger,
    make_env_fn,
    replay_layout,
    resolve_device,
)

GROUP = "apex"
AHEAD_STEPS = 1000  # env steps actors may run ahead of the learner's consumption
REPORT_EVERY_S = 0.02
REPLAY = "replay"


def role_of(rank: int, world_size: int, config) -> tuple[str, int]:
    """The documented role rule: rank 0 learner; ranks 1..R replay (R dedicated
    replay ranks, only with ``--replay-placement replay-ranks``); the rest actors,
    numbered from 0."""
    replay = config.replay_ranks if config.replay_placement == "replay-ranks" else 0
    if world_size - 1 - replay < 1:
        raise ValueError(f"a world of {world_size} ranks with {replay} replay ranks has no actor")
    if rank == 0:
        return "learner", 0
    if rank <= replay:
        return "replay", rank - 1
    return "actor", rank - 1 - replay


def rank_main(config, started: float, quiet: bool = False, dqn_class=None) -> dict[str, Any]:
    """One rank of the job: its role from its rank (:func:`role_of`). ``dqn_class``
    (a :class:`~algorithms.dqn.DQN` subclass, importable by name) replaces DQN in
    the learner and the actors."""
    import os
    import threading

    import torch

    from rlpar.distributed import World

    # No rank imports torch._dynamo: DQN's default optimizer (optim.EagerAdam) does not
    # need it, and on a 2-core box its import is seconds of CPU taken from the others.
    torch.set_num_threads(1)  # actors and replay ranks: tiny ops; the learner raises it
    if _hosts_replay(os.environ.get("RANK"), config):
        # Loading the replay's compiled kernels (numba) takes seconds on a small box;
        # overlap it with the RPC rendezvous, which mostly waits on the other ranks.
        threading.Thread(target=_warm_replay_kernels, name="warm-replay", daemon=True).start()
    world = World.from_env(rpc_timeout=config.rpc_timeout, listen_address=config.listen_address)
    role, index = role_of(world.rank, world.world_size, config)
    group = world.create_rpc_group(GROUP, world.names)
    num_actors = config.actors_for(world.world_size)
    roles = [role_of(r, world.world_size, config)[0] for r in range(world.world_size)]
    shard_role = {"actors": "actor", "replay-ranks": "replay"}.get(config.replay_placement)
    shards = [name for name, r in zip(world.names, roles) if r == shard_role]
    if role == "learner":
        return run_learner(config, group, num_actors=num_actors, shards=shards, started=started,
                           quiet=quiet, dqn_class=dqn_class)
    if role == "replay":
        run_replay(config, group, shards=shards)
    else:
        run_actor(config, group, index=index, num_actors=num_actors, shards=shards,
                  dqn_class=dqn_class)
    return {}


def _hosts_replay(rank: str | None, config) -> bool:
    """Whether the rank with this RANK value builds a prioritized replay (every rank
    except plain actors of a learner-hosted replay); True when unknown."""
    if rank is None:
        return True
    return config.replay_placement != "learner" or rank == "0"


def _warm_replay_kernels() -> None:
    from rlpar.buffers import trees

    trees.kernels()


def distributed_replay(config, group, shards: list[str]):
    from rlpar.buffers import DistributedPrioritizedReplayBuffer

    return DistributedPrioritizedReplayBuffer(
        group=group, name=REPLAY, capacity=max(1, config.replay_capacity // len(shards)),
        alpha=config.priority_alpha, beta=config.priority_beta, shard_members=shards,
        timeout=config.rpc_timeout, seed=config.seed, **replay_layout(config))


# ---------------------------------------------------------------------- learner


def run_learner(config, group, *, num_actors: int, shards: list[str], started: float,
                quiet: bool, dqn_class=None) -> dict[str, Any]:
    import torch

    from algorithms.apex import ApexLearner
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers import PushPullModelServer

    torch.set_num_threads(config.learner_threads)
    device = resolve_device(config.device)
    obs_space, num_act = env_spaces(config.env_id)
    dqn = build_dqn(config, obs_space, num_act, device=device, seed=config.seed,
                    dqn_class=dqn_class)
    if shards:
        buffer: Any = distributed_replay(config, group, shards)
    else:
        buffer = LockedBuffer(PrioritizedReplayBuffer(
            capacity=config.replay_capacity, alpha=config.priority_alpha,
            beta=config.priority_beta, seed=config.seed, **replay_layout(config)))
        group.register("replay/add", buffer.add)
        group.register("replay/size", buffer.__len__)
    replay = LearnerReplay(buffer, batch_size=config.batch_size, depth=config.prefetch_depth())
    params = PushPullModelServer.host(group, "params")
    coordinator = Coordinator(config, num_actors=num_actors, started=started)
    group.register("coord/report", coordinator.report)
    group.register("coord/eval", coordinator.eval_result)
    group.register("coord/stopped", coordinator.should_stop)
    learner = ApexLearner(dqn=dqn, buffer=replay, params=params, config=config.apex_config())
    group.barrier()

    logger, status = learner_metrics_logger(config, quiet=quiet)
    # The learner may run as far ahead of the data as actors may run ahead of it: in
    # steady state neither side waits; only a starved learner does.
    ratio, slack = config.updates_per_step, AHEAD_STEPS * config.updates_per_step
    min_size = max(config.learning_starts, config.batch_size)
    loop_start = wait = cpu_start = 0.0
    window: dict[str, float] = {}
    last_metrics: dict[str, float] = {}
    last_log = time.monotonic()
    try:
        while not coordinator.should_stop():
            if not loop_start:
                # Reported transitions, not len(replay): a sharded replay's size is
                # only refreshed by sampling.
                if coordinator.transitions < min_size:
                    time.sleep(0.002)
                    continue
                loop_start, cpu_start = time.perf_counter(), time.thread_time()
            consumed = config.learning_starts + learner.updates / ratio
            if coordinator.env_steps + slack / ratio < consumed:
                t0 = time.perf_counter()
                time.sleep(0.0005)
                wait += time.perf_counter() - t0
                continue
            metrics = learner.step()
            coordinator.updates = learner.updates
            for key, value in metrics.items():
                window[key] = window.get(key, 0.0) + value
            window["n"] = window.get("n", 0.0) + 1
            now = time.monotonic()
            if now - last_log >= 1.0:
                busy = time.perf_counter() - loop_start
                waiting = wait + learner.sample_seconds
                last_metrics = dict(window)
                coordinator.log_learner(logger, status, window, learner, replay,
                                        wait_fraction=waiting / busy if busy > 0 else 0.0)
                window, last_log = {}, now
    finally:
        coordinator.stop("finished")
        busy = time.perf_counter() - loop_start if loop_start else 0.0
        waiting = wait + learner.sample_seconds
        summary = coordinator.summary(learner, algorithm=type(dqn), metrics=last_metrics or window,
                                      wait_fraction=waiting / busy if busy > 0 else 0.0,
                                      busy_seconds=busy, log_dir=config.log_dir,
                                      replay_size=coordinator.transitions)
        # CPU time of the learner loop's own thread: unlike updates/s, it does not
        # depend on how much of a core other processes left us (load-robust).
        cpu = time.thread_time() - cpu_start if loop_start else 0.0
        summary["learner_cpu_ms_per_update"] = 1e3 * cpu / max(learner.updates, 1)
        summary["learner_cpu_share"] = cpu / busy if busy > 0 else 0.0
        summary["sample_ms_per_update"] = 1e3 * learner.sample_seconds / max(learner.updates, 1)
        summary["update_ms_per_update"] = 1e3 * learner.update_seconds / max(learner.updates, 1)
        replay.close()
        coordinator.wait_for_actors(timeout=30.0)
        logger.close()
    return summary


# ------------------------------------------------------------------- replay rank


def run_replay(config, group, *, shards: list[str]) -> None:
    """A dedicated replay rank: hosts one shard (served on RPC threads) until the
    learner stops."""
    distributed_replay(config, group, shards)
    group.barrier()
    while not group.call("coord/stopped"):
        time.sleep(0.1)


# ------------------------------------------------------------------------ actor


def run_actor(config, group, *, index: int, num_actors: int, shards: list[str],
              dqn_class=None) -> None:
    from gymnasium.vector import AutoresetMode

    from algorithms.apex import ApexActor, evaluate
    from envs import make_vector_env
    from rlpar.servers import PushPullModelServer

    seed = config.seed + 10_000 * (index + 1)
    env = make_vector_env(make_env_fn(config.env_id), num_envs=config.envs_per_actor,
                          num_workers=config.env_workers, autoreset_mode=AutoresetMode.SAME_STEP,
                          seed=seed)
    obs_space, num_act = env_spaces(config.env_id)
    dqn = build_dqn(config, obs_space, num_act, device="cpu", seed=seed, dqn_class=dqn_class)
    replay = distributed_replay(config, group, shards) if shards else ReplayAdder(group)
    group.barrier()
    params = PushPullModelServer.connect(group, "params")
    actor = ApexActor(dqn=dqn, env=env, buffer=replay, params=params, index=index,
                      num_actors=num_actors, config=config.apex_config(), seed=seed)
    actor.sync()
    eval_env = None
    if index == num_actors - 1:  # the least exploring actor also evaluates
        eval_env = make_vector_env(make_env_fn(config.env_id), num_envs=config.eval_episodes,
                                   num_workers=0, seed=seed + 1)
    ratio = config.updates_per_step
    reported = reported_transitions = 0
    reply = {"stop": False, "updates": 0, "env_steps": 0, "eval": False}
    last_report = 0.0

    def report(final: bool = False) -> dict[str, Any]:
        nonlocal reported, reported_transitions, last_report
        episodes, actor.finished_episodes = actor.finished_episodes, []
        out = group.call("coord/report", index, actor.env_steps - reported,
                         actor.transitions_added - reported_transitions, episodes,
                         actor.version, final)
        reported, reported_transitions = actor.env_steps, actor.transitions_added
        last_report = time.monotonic()
        return out

    try:
        while True:
            allowed = config.learning_starts + reply["updates"] / ratio + AHEAD_STEPS
            ahead = reply["env_steps"] + (actor.env_steps - reported) >= allowed
            if time.monotonic() - last_report >= REPORT_EVERY_S:
                reply = report()
                if reply["stop"]:
                    break
                if reply["eval"] and eval_env is not None:
                    actor.sync()
                    returns = evaluate(dqn, eval_env, episodes=config.eval_episodes,
                                       seed=config.seed + 7 + reply["env_steps"])
                    group.call("coord/eval", float(np.mean(returns)), reply["env_steps"],
                               actor.version)
                continue
            if ahead:
                # Sleep until the next report instead of asking again at once: each
                # report is an RPC whose handler takes the learner's GIL, so a
                # throttled actor that polls slows the very learner it waits for.
                time.sleep(max(0.0, last_report + REPORT_EVERY_S - time.monotonic()))
                continue
            actor.step()
    finally:
        actor.flush()
        if isinstance(replay, ReplayAdder):
            replay.wait()
        try:
            report(final=True)
        finally:
            env.close()
            if eval_env is not None:
                eval_env.close()
