"""The synchronous data-parallel program: one set of roles that runs any algorithm's
:class:`~algorithms.sync.SyncBuilder` (PPO/DD-PPO, PQN, a user's).

Wiring (:func:`rank_main`, read top to bottom): every rank joins the world, the RPC
group named after the job (reports to the lead, the lead's state) and one learner
group of all ranks (gloo on CPU, NCCL when every member learns on a GPU of its own).
Every rank is a member (:mod:`.sync_member`): it steps its own envs with its own
seeds, updates on its own rollout with every minibatch's gradient averaged over the
group, reports to the lead, and agrees with the others on when to stop. Rank 0 is also
the lead (:mod:`.sync_lead`): coordinator, TensorBoard, evaluations, checkpoints,
policy files, summary. Every member starts from the lead's algorithm state (a resumed
run's checkpoint is on the lead's node only). With one member (``--serial``, or a
local run of one) there is no world and no collective at all (:func:`serial_main`).

DD-PPO's preemption (``--preempt-fraction``): see
:class:`~experiments.roles.sync.member.Preemption`.

Faults: a collective cannot go on without a member, so no rank is restarted alone: a
member's death breaks the group (the others get ``PeerUnavailable`` at their next
collective), the lead keeps its last whole update in a checkpoint (in the middle of an
update: the state it started from, ``Member.whole_state``), and the world restarts
from it (a local run: the runtime's supervision, whose launcher first stops the others
as by SIGTERM and gives the lead ``DEATH_GRACE_S``; torchrun: ``--max-restarts``).
"""

from __future__ import annotations

import copy
import functools
import time
import warnings
from collections.abc import Callable
from typing import Any

from experiments.roles.sync.member import (
    Member,
    Preemption,
    SyncProgram,
    SyncSetup,
    backend_for,
    make_builder,
)
from experiments.runtime.cli import flag
from experiments.runtime.job import STOP_CALL_S, Job, StopSignals, last_call, launcher
from experiments.runtime.parts import tell_filled

STATE = "sync/state"


def rank_main(program: SyncProgram, ctx: Any) -> dict[str, Any]:
    import torch

    from experiments.roles.sync.lead import Lead
    from experiments.runtime.config import resolve_device
    from rlpar.distributed import World
    from rlpar.errors import PeerUnavailable

    setup = SyncSetup.of(program, ctx)
    torch.set_num_threads(setup.run.torch_threads)
    world = World.from_env(rpc_timeout=setup.run.rpc_timeout, listen_address=setup.run.resolved_listen_address())
    rank, size = world.rank, world.world_size
    rpc = world.create_rpc_group(program.name, world.names)
    found = launcher()
    backend = backend_for(resolve_device(setup.run.device), found.local_world_size if found is not None else size)
    # Its timeout also bounds how long the others wait for the lead's evaluations.
    group = (world.create_learner_group(program.name, range(size), backend=backend, timeout=setup.run.rpc_timeout)
             if size > 1 else None)
    member = Member(setup, rank=rank, group=group)
    threshold = setup.group.threshold(size)
    preemption = None if threshold is None else Preemption(
        world.store, name=program.name, threshold=threshold, min_steps=setup.group.min_steps(setup.builder.n_steps))
    lead = None
    if rank == 0:
        lead = Lead(setup, member, members=size, backend=group.backend if group else None)
        rpc.register("coord/report", lead.report)
        rpc.register(STATE, lead.state)
        rpc.barrier()
        member.begin(start_step=lead.start_step)
    else:
        rpc.barrier()
        start = rpc.call(STATE)
        member.adopt(start["algorithm"], start_step=start["env_steps"])
        member.begin(start_step=start["env_steps"])
    if group is not None:
        group.barrier()  # no member learns before every member holds the lead's state
    send = lead.report if lead is not None else functools.partial(rpc.call, "coord/report")
    # Stopped by a signal of its own or the lead's decision (Member.agree): under
    # torchrun every rank gets the SIGTERM.
    with StopSignals(lead.coordinator.stop if lead is not None else (lambda reason: None)) as signals:
        try:
            train(member, lead=lead, send=send, preemption=preemption, signals=signals)
        except PeerUnavailable:
            if lead is not None:
                lead.save_last_whole()
            raise
        if lead is not None:
            summary = lead.finish(interrupted=signals.received is not None, signalled=signals.stopped)
            member.close()
            return summary
        last_call(signals.stopped, lambda: rpc.call("coord/report", member.report(final=True),
                                                    timeout=STOP_CALL_S if signals.stopped else None))
    member.close()
    return {}


def serial_main(program: SyncProgram, ctx: Any) -> dict[str, Any]:
    """One member in this process: no world, no collective; deterministic for a seed."""
    import torch

    from experiments.roles.sync.lead import Lead

    setup = SyncSetup.of(program, ctx)
    torch.set_num_threads(setup.run.torch_threads)
    member = Member(setup, rank=0)
    lead = Lead(setup, member, members=1, backend=None)
    member.begin(start_step=lead.start_step)
    with StopSignals(lead.coordinator.stop) as signals:
        train(member, lead=lead, send=lead.report, preemption=None, signals=signals)
        summary = lead.finish(interrupted=signals.received is not None, signalled=signals.stopped)
    member.close()
    return summary


def train(member: Member, *, lead: Any | None, send: Callable[[Any], Any], preemption: Preemption | None,
          signals: StopSignals) -> None:
    """Iterations until the members agree to stop: collect (preemptible), learn (every
    minibatch's gradient averaged), report, agree; then the lead's bookkeeping while
    the others start collecting the next rollout."""
    n_steps = member.setup.builder.n_steps
    iteration = 0
    while True:
        t0 = time.perf_counter()
        rollout = member.collect(preemption, iteration)
        t1, comm = time.perf_counter(), member.comm_s
        metrics = member.learn(rollout)
        steps = len(rollout["rewards"])
        metrics.update({"sync/rollout_steps": float(steps), "sync/preempted": float(steps < n_steps),
                        "sync/collect_s": t1 - t0, "sync/update_s": time.perf_counter() - t1,
                        "sync/allreduce_s": member.comm_s - comm})
        report = member.report(metrics)
        new_steps = report.env_steps
        send(report)
        stop = member.agree(new_steps, signalled=signals.stopped,
                            lead_stop=lead.should_stop if lead is not None else None)
        if lead is not None:
            if preemption is not None:
                preemption.forget(iteration)
            if not stop:
                lead.between_iterations()
        if stop:
            return
        iteration += 1


# ---------------------------------------------------------------- the job's hooks


def resolve(config: Any, world_size: int | None) -> int:
    """The number of members: the world's under torchrun; else ``--num-workers`` (0:
    by GPUs or cores, see ``experiments.runtime.group.default_members``); one local member runs
    in this process (no world to spawn)."""
    from experiments.runtime.group import default_members

    group = config.group
    if world_size is not None:
        group.num_workers = world_size
        return world_size
    group.num_workers = group.num_workers or (1 if config.run.serial else default_members(config.run.device))
    if group.num_workers == 1:
        config.run.serial = True
    return group.num_workers


def check_members(config: Any) -> None:
    if config.run.serial and config.group.num_workers > 1:
        # A run of one member saved serial: true in its config.json; resuming it with
        # more members takes --no-serial.
        raise ValueError(f"{flag('serial')} runs one member in this process; {flag('num_workers')} "
                         f"{config.group.num_workers} needs a local world (drop {flag('serial')}, "
                         f"or give --no-serial to a run saved with it)")


def role_names(config: Any, nprocs: int) -> list[str]:
    return ["member 0 (lead)", *(f"member {r}" for r in range(1, nprocs))]


def load_policy(program: SyncProgram, ctx: Any, state: dict[str, Any]):
    """A saved ``policy.pt`` as a greedy policy (``experiments.evaluate``)."""
    setup = SyncSetup.of(program, ctx)
    algorithm = setup.builder.make_algorithm(device="cpu", seed=0, sample_seed=0)
    algorithm.load_policy_state(state)
    return setup.builder.greedy(algorithm)


def make_job(program: SyncProgram, *, check: Callable, describe: Callable, env_fn: Callable,
             env_defaults: Callable | None) -> Job:
    """The runtime's :class:`~experiments.runtime.job.Job` of a synchronous ``program``
    with the job's own hooks; no rank is restartable alone (see the module docstring)."""
    return Job(name=program.name, rank_main=functools.partial(rank_main, program),
               serial_main=functools.partial(serial_main, program), resolve=resolve,
               check=functools.partial(_check, check), describe=describe, env_fn=env_fn,
               load_policy=functools.partial(load_policy, program),
               env_defaults=functools.partial(_fill_and_probe, program, env_defaults, env_fn), roles=role_names)


def _check(check: Callable, config: Any, parts: Any) -> None:
    check_members(config)
    check(config, parts)


def _fill_and_probe(program: SyncProgram, env_defaults: Callable | None, env_fn: Callable, config: Any,
                    parts: Any) -> None:
    """The job's own defaults, then its builder (the user's, if given) made once here,
    before any process starts; and a rollout, a preempted one too, must hold a step per
    minibatch (every member takes the same number of gradient steps)."""
    from algorithms.builder import EnvSpec
    from experiments.runtime.envs import env_spaces, fill_reward_clip

    fill_reward_clip(config.env, env_fn(config, parts))
    if env_defaults is not None:
        before = copy.deepcopy(config)
        env_defaults(config, parts)
        tell_filled(parts, before, config, job=program.name)
    builder = make_builder(program, config, parts, EnvSpec(*env_spaces(env_fn(config, parts))))
    steps = builder.n_steps
    members, fraction = config.group.num_workers, config.group.preempt_fraction
    if config.group.threshold(members) is not None:
        steps = config.group.min_steps(steps)
    elif fraction > 0 and members >= 2:
        warnings.warn(f"{flag('preempt_fraction')} {fraction:g} of {members} members needs all {members} "
                      f"finished: no rollout will be preempted (at most {(members - 1) / members:.3g} "
                      "of them preempts the rest)", stacklevel=2)
    if steps * config.env.num_envs < builder.minibatch_steps:
        raise ValueError(f"a rollout of {steps} steps x {config.env.num_envs} envs cannot make "
                         f"{builder.minibatch_steps} minibatches: raise {flag('num_envs')}, "
                         f"{flag('n_steps')} or {flag('preempt_min')}, or lower {flag('minibatches')}")
