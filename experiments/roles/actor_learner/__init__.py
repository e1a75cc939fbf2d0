"""The actor-learner program: one set of roles that runs any algorithm's builder.

Wiring (:func:`rank_main`, read top to bottom): every rank joins the world and the
RPC group named after the job, and takes its role by the rule of
:mod:`experiments.roles.actor_learner.program`: the learner (:mod:`.learner`; with ``--learners K``
learner 0 and the K-1 others of its learner group, :mod:`.learners`), replay ranks
(:mod:`.data`) and actors (:mod:`.actor`). ``--serial`` runs every role in this one
process, deterministic for a seed (:func:`serial_main`). What the algorithm is (Ape-X
DQN, TD3, IMPALA, a user's) is its :class:`~algorithms.builder.Builder`'s business;
no role names one. A job built on it is a :class:`~experiments.roles.actor_learner.program.Program`
plus its config and hooks (:func:`make_job`). The job context is read once, into the
typed :class:`~experiments.roles.actor_learner.program.Setup` (its data path, the lead's
:class:`~experiments.runtime.lead.LeadContext`): no role takes the context itself.

Faults: a dead actor is restarted alone and rejoins (:func:`restartable`); with
shards on the actors its shard is dropped from sampling when it dies, and the learner
hosts a fresh, empty one for its replacement (see
``DistributedReplayBuffer.rehost``). Any other death restarts the world from the
newest complete checkpoint (a learner's too: its group cannot go on without it).

Public (``__all__``, what jobs, benchmarks and users' own launchers may import; the
other role modules are internal and may change): the program and its entry points,
the learner's loop, the service names the roles meet under (``PARAMS``: the model
server; ``REPLAY``: the replay shards) and how often an actor reports.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from algorithms.builder import Builder, EnvSpec
from experiments.roles.actor_learner.data import REPLAY, LearnerData, run_replay, warm_in_background
from experiments.roles.actor_learner.learner import (
    PARAMS,
    LearnerLoop,
    run_keeper,
    run_learner,
    target,
)
from experiments.roles.actor_learner.program import (
    Program,
    Setup,
    eval_env,
    evaluate,
    learners_of,
    pacing,
    report_every,
    role_names,
    role_of,
)
from experiments.runtime.job import Job, StopSignals, launcher
from experiments.runtime.lead import announce_compile, run_lead, start_lead
from experiments.runtime.parts import tell_filled

__all__ = ["PARAMS", "REPLAY", "LearnerLoop", "Program", "Setup", "load_policy", "make_job", "rank_main",
           "report_every", "restartable", "serial_main"]


def rank_main(program: Program, ctx: Any) -> dict[str, Any]:
    import torch

    from experiments.roles.actor_learner.actor import run_actor
    from experiments.roles.actor_learner.learners import join, run_follower
    from experiments.runtime.config import resolve_device
    from rlpar.distributed import World

    setup = Setup.of(program, ctx)  # the job context's last reader here: the roles take typed parts
    torch.set_num_threads(1)  # actors and replay ranks: tiny ops; the learner raises it
    found = launcher()
    if setup.path.hosts_data(found.rank if found is not None else None, learners=setup.learners):
        warm_in_background()  # this rank hosts replay: overlap the kernels' load with rendezvous
    world = World.from_env(rpc_timeout=setup.run.rpc_timeout,
                           listen_address=setup.run.resolved_listen_address())
    extra, learners = setup.extra_ranks(), setup.learners
    role, index = role_of(world.rank, world.world_size, extra, learners)
    group = world.create_rpc_group(program.name, world.names)
    roles = [role_of(r, world.world_size, extra, learners)[0] for r in range(world.world_size)]
    shards = setup.path.shard_members(world.names, roles)
    setup = dataclasses.replace(setup, num_actors=roles.count("actor"))
    # Several learners: a learner group of theirs alone (none with one learner).
    members = join(world, setup, device=resolve_device(setup.run.device)) if role == "learner" else None
    if role == "learner" and index == 0:
        return run_learner(setup, group, shards=shards, members=members)
    # Stopped by the learner's directive, or by a signal of its own: under torchrun
    # every rank gets the SIGTERM, and the learner may be gone.
    with StopSignals(lambda reason: None) as signals:
        if role == "learner":
            run_follower(setup, group, members, index=index, shards=shards, signals=signals)
        elif role == "replay":
            run_replay(setup, group, shards=shards, signals=signals)
        else:
            run_actor(setup, group, index=index, shards=shards, signals=signals)
    return {}


def serial_main(program: Program, ctx: Any) -> dict[str, Any]:
    """Every role in this process, deterministic for a seed: actors step in turn, the
    learner runs the updates pacing owes after each (with a queue: every update a
    batch of unrolls allows), the lead evaluates on schedule."""
    import torch

    from experiments.roles.actor_learner.actor import ActorShell
    from rlpar.servers.model import ModelStore

    setup = Setup.of(program, ctx)
    setup = dataclasses.replace(setup, num_actors=ctx.nprocs - 1 - setup.extra_ranks())
    torch.set_num_threads(setup.run.torch_threads)
    if setup.path.kernels:
        announce_compile(setup.lead)
    data, params = setup.path.learner_data(setup, None, []), ModelStore()
    coordinator = start_lead(setup.lead, num_sources=setup.num_actors, target=target(setup), evaluator=None,
                             **setup.builder.episode_layout())
    learner = _learner(setup, data.source, params)
    shells = [ActorShell(setup, index=i, sink=data.sink, params=params) for i in range(setup.num_actors)]
    paced = pacing(setup.flow, num_actors=setup.num_actors, num_envs=setup.env.num_envs)
    loop = LearnerLoop(learner, coordinator, paced, data=data)
    keeper = run_keeper(setup, coordinator, learner, data)
    evaluator = eval_env(setup, seed=setup.run.seed + 1)
    return run_lead(setup.lead, coordinator, keeper, _SerialTurns(setup, loop, data, shells, evaluator))


class _SerialTurns:
    """Every role in turn, in the runtime's loop (``experiments.runtime.lead.run_lead``):
    each actor's vector step and the updates it makes due (replay: pacing's; queue:
    every batch of unrolls there is), evaluations on schedule, the curves."""

    def __init__(self, setup: Setup, loop: LearnerLoop, data: LearnerData, shells: list, evaluator: Any) -> None:
        self.setup, self.loop, self.data, self.shells, self.evaluator = setup, loop, data, shells, evaluator
        learner, paced = loop.learner, loop.pacing
        # Env steps when the learner could first sample (a resumed run: where its
        # updates say it started, so pacing goes on as it was).
        self.since = (loop.coordinator.env_steps - learner.updates / paced.updates_per_step
                      if paced is not None and learner.updates else None)

    def held(self) -> int:
        return self.data.held(reported=self.loop.coordinator.held_transitions())

    def turn(self) -> bool:
        loop, data, coordinator = self.loop, self.data, self.loop.coordinator
        if coordinator.should_stop():
            return False
        learner, paced = loop.learner, loop.pacing
        for shell in self.shells:
            shell.actor.step()
            coordinator.report(shell.report())
            if paced is None:  # a queue: learn from every batch of unrolls there is
                while data.source.ready():
                    loop.update()
                continue
            if self.since is None and len(data.hosted) >= data.min_size:
                self.since = coordinator.env_steps
            if self.since is not None:
                for _ in range(paced.updates_due(env_steps=coordinator.env_steps, updates=learner.updates,
                                                 started_at=self.since)):
                    loop.update()
        if coordinator.eval_due():
            coordinator.eval_result(evaluate(self.setup, learner.algorithm, self.evaluator,
                                             env_steps=coordinator.env_steps, version=learner.updates))
        loop.tick(self.held())
        return True

    def wind_down(self, signalled: bool) -> int:
        coordinator = self.loop.coordinator
        for shell in self.shells:
            shell.actor.finish()
            coordinator.report(shell.report(final=True))
            shell.close()
        self.evaluator.close()
        self.loop.tick(self.held(), force=True)
        return self.loop.learner.updates

    def summary(self, interrupted: bool) -> dict[str, Any]:
        loop = self.loop
        return loop.summary(self.setup, algorithm=type(loop.learner.algorithm), held=self.held(),
                            interrupted=interrupted)


def _learner(setup: Setup, source: Any, params: Any):
    from experiments.roles.actor_learner.learners import make_learner

    return make_learner(setup, source, params)


def restartable(extra_of: Callable[[Any], int], config: Any, nprocs: int) -> list[int]:
    """The actors: a dead one is restarted alone and rejoins while the learners train
    (a learner never is: its group's collectives cannot go on without it).
    A replacement can call its peers but no peer that had called the dead process can
    call it (see rlpar.distributed.rendezvous); so with ``actors`` placement, the
    learner, which sampled the dead actor's shard, drops that shard and hosts a fresh
    one for the replacement to add to. Replay ranks are called by the learner and by
    every actor, so a dead one is not restarted alone: the world restarts from the
    newest checkpoint (the shards' parts included)."""
    extra, learners = extra_of(config), learners_of(config)
    return [r for r in range(nprocs) if role_of(r, nprocs, extra, learners)[0] == "actor"]


def load_policy(program: Program, ctx: Any, state: dict[str, Any]):
    """A saved ``policy.pt`` as a greedy policy (``experiments.evaluate``)."""
    setup = Setup.of(program, ctx)
    algorithm = setup.builder.make_algorithm(device="cpu", seed=0)
    algorithm.load_policy_state(state)
    return setup.builder.greedy(algorithm)


def make_job(program: Program, *, resolve: Callable, check: Callable, describe: Callable,
             env_fn: Callable, env_defaults: Callable | None, extra_ranks: Callable[[Any], int],
             play: Callable | None = None) -> Job:
    """The runtime's :class:`~experiments.runtime.job.Job` of an actor-learner
    ``program`` with the job's own hooks (``extra_ranks(config)``: its replay ranks;
    ``play``: how ``experiments.evaluate`` plays a loaded policy, where gymnasium's
    vector env cannot)."""
    return Job(name=program.name, rank_main=functools.partial(rank_main, program),
               serial_main=functools.partial(serial_main, program), resolve=resolve, check=check,
               describe=describe, env_fn=env_fn, load_policy=functools.partial(load_policy, program), play=play,
               restartable=functools.partial(restartable, extra_ranks),
               env_defaults=functools.partial(_fill_and_probe, program, env_defaults, env_fn),
               roles=functools.partial(_role_names, extra_ranks))


def _fill_and_probe(program: Program, env_defaults: Callable | None, env_fn: Callable, config: Any,
                    parts: Any) -> None:
    """The job's own defaults, then its builder (the user's, if given) made once here,
    before any process starts: a builder that cannot be made for this config and env
    fails now, with its own error, not in every rank."""
    from experiments.runtime.envs import env_spaces, fill_reward_clip

    fill_reward_clip(config.env, env_fn(config, parts))
    if env_defaults is not None:
        before = copy.deepcopy(config)
        env_defaults(config, parts)
        tell_filled(parts, before, config, job=program.name)
    builder = parts.make_builder(program.builder, config, EnvSpec(*env_spaces(env_fn(config, parts))), Builder)
    builder.flow  # noqa: B018 (its checks: a flow that cannot run is refused here)


def _role_names(extra_ranks: Callable[[Any], int], config: Any, nprocs: int) -> list[str]:
    return role_names(extra_ranks(config), nprocs, learners_of(config))
