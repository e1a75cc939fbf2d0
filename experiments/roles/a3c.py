"""The A3C roles: thin shells that own the transport and call algorithm methods.

Wiring (:func:`rank_main`, top to bottom): every rank joins the world and the RPC
group ``a3c``. Rank 0 (the lead) hosts the gradient server (``PushPullGradServer``
named ``grads``, owning the optimizer) and the coordinator, evaluates on schedule,
and is worker 0 unless ``--no-server-acts``. Each worker holds an accessor of the
server, which is a :class:`~rlpar.protocols.GradientSink`, so
:class:`~algorithms.a2c.a3c.A3C` is the same object it is with a local ``GradServer``
in :func:`serial_main`.

``--sync`` (synchronous A2C) hosts the same server in reduce mode: each step averages
one gradient of every worker, computed on that step's parameters (max staleness 0). A
remote worker's push is answered once its round has closed (a deferred service: no RPC
thread waits), so its next rollout runs on the new parameters. Rank 0's own worker
never blocks the lead: it steps only once its last round closed, and meanwhile the
lead ticks, evaluates and checkpoints. A round closes without a worker that has not
pushed within ``--round-timeout`` (dead, restarting, or rank 0 evaluating) and later
rounds do not wait for it until it pushes again (:mod:`rlpar.servers.rounds`); its
late gradient is dropped, never averaged into a newer round.

Workers are expendable (:func:`restartable`): a worker rank that dies is restarted
alone by the local launcher, rejoins the running world, pulls the newest parameters
and goes on with its index (so its seeds); the coordinator counts it
(``actor_restarts``, ``actors/restarts``). A dead env worker (``--env-workers``), rank
0's too, is replaced inside its vector env and counted (``env_worker_restarts``).
"""

from __future__ import annotations

import copy
import functools
import math
import time
from typing import Any

from experiments.roles.a3c_parts import (
    build_agent,
    check,
    describe,
    env_defaults,
    env_fn,
    fill_unset,
    job_env_fn,
    load_policy,
    resolve,
    target,
)
from experiments.runtime.config import resolve_device
from experiments.runtime.evaluation import evaluation
from experiments.runtime.job import (
    STOP_CALL_S,
    STOP_QUIET_S,
    Job,
    JobContext,
    StopSignals,
    last_call,
)
from experiments.runtime.lead import run_lead, start_lead
from experiments.runtime.messages import Episode, Rejoin, Report

GROUP, SERVER = "a3c", "grads"


def role_of(rank: int, world_size: int, config: Any) -> tuple[str, int]:
    """The documented role rule: rank 0 is the server (and worker 0 when
    ``server_acts``); every other rank is a worker, numbered after it."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    if rank == 0:
        return ("server+worker", 0) if config.server_acts else ("server", -1)
    return "worker", rank if config.server_acts else rank - 1


def role_names(config: Any, nprocs: int) -> list[str]:
    """Each rank's role in words, for the launcher's warnings."""
    named = (role_of(r, nprocs, config) for r in range(nprocs))
    return [{"server": "server", "server+worker": "server (worker 0)"}.get(role, f"{role} {index}")
            for role, index in named]


def restartable(config: Any, nprocs: int) -> list[int]:
    """Every worker rank (not rank 0, which hosts the gradient server): a worker only
    calls rank 0 and nobody calls it, so a dead one can be restarted alone and rejoin
    (see rlpar.distributed.rendezvous) while the server and the other workers go on."""
    return [r for r in range(nprocs) if role_of(r, nprocs, config)[0] == "worker"]


def rank_main(ctx: JobContext) -> dict[str, Any]:
    import torch

    from rlpar.distributed import World, current_world
    from rlpar.servers import PushPullGradServer

    config = ctx.config
    torch.set_num_threads(1)  # tiny networks: more threads only add contention
    world = World.from_env(rpc_timeout=config.run.rpc_timeout,
                           listen_address=config.run.resolved_listen_address())
    role, index = role_of(world.rank, world.world_size, config)
    group = world.create_rpc_group(GROUP, world.names)
    if role.startswith("server"):
        lead = Lead(ctx, num_workers=config.num_workers)
        grads = PushPullGradServer.host(group, SERVER, **lead.server_args(round_timeout=True))
        group.register("coord/report", lead.coordinator.report)
        group.register("coord/rejoin", lead.coordinator.rejoin)
        group.barrier()
        own = [WorkerShell(ctx, grads.server.member(0), index=0)] if role == "server+worker" else []
        return lead.run(grads, server=grads.server, shells=own)
    group.barrier()  # a restarted worker passes at once (the round is complete)
    # --sync: pushes name their worker, and each is answered when its round has closed.
    sink = PushPullGradServer.connect(group, SERVER, timeout=config.run.rpc_timeout,
                                      source=index if config.sync else None)
    # Stopped by the lead's directive, or by a signal of its own: under torchrun every
    # rank gets the SIGTERM, and the lead may be gone.
    with StopSignals(lambda reason: None) as signals:
        # Same index, so the same seeds; the shell pulls the newest parameters.
        shell = WorkerShell(ctx, sink, index=index)
        restarts = current_world().rank_restarts
        if restarts:
            group.call("coord/rejoin", Rejoin(source=index, restarts=restarts))
        run_worker(ctx, group, shell, signals)
    return {}


class WorkerShell:
    """One worker's env, A3C object and the report it owes; ``step`` is one rollout."""

    def __init__(self, ctx: JobContext, sink: Any, *, index: int) -> None:
        import torch
        from gymnasium.vector import AutoresetMode

        from algorithms.a2c import A3C
        from algorithms.rollout import RolloutCollector
        from envs import make_vector_env
        from experiments.runtime.envs import vector_env_options
        from rlpar.servers.grad import GradMember

        config = ctx.config
        fill_unset(ctx)
        seed = config.run.seed + 1000 * (index + 1)
        torch.manual_seed(seed)
        self.index = index
        # A dead env worker is replaced inside the vector env (in rank 0's worker too);
        # the collector drops what it cut.
        self.env = make_vector_env(env_fn(ctx), num_envs=config.env.num_envs,
                                   autoreset_mode=AutoresetMode.SAME_STEP, seed=seed,
                                   **vector_env_options(config))
        self.worker = A3C(agent=build_agent(ctx, device=resolve_device(config.run.device)), sink=sink)
        self.worker.sync()
        self.collector = RolloutCollector(env=self.env, sample_actions=self.worker.sample_actions,
                                          n_steps=config.learn.n_steps, seed=seed)
        # --sync in the server's process: this worker's round may have been closed by
        # another's push, so it pulls before its rollout (a remote one's push returns
        # with the new parameters).
        self.pull_first = config.sync and isinstance(sink, GradMember)
        self._sums: dict[str, float] = {}
        self._count = self._reported = self._env_restarts = 0
        self.dropped = False  # the last gradient was dropped by the server

    def ready(self) -> bool:
        """Whether the round of its last gradient has closed (always, but in --sync)."""
        return not (self.pull_first and self.worker.sink.waiting)

    def step(self) -> None:
        if self.pull_first:
            self.worker.sync()
        metrics = self.worker.update(self.collector.collect())
        for key, value in metrics.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._count += 1
        # --sync: a dropped push is a restarted worker's repeat, or the lead released
        # the rounds at the end; either way, report now rather than keep computing
        # gradients that are dropped until the next scheduled report.
        self.dropped = not metrics.get("accepted", 1.0)

    def report(self, *, final: bool = False) -> Report:
        returns, lengths = self.collector.drain_episodes()
        steps = self.collector.env_steps - self._reported
        env_restarts = getattr(self.env, "crash_count", 0)
        # Every reported step is in a gradient already pushed (a report follows whole
        # rollouts), so a worker that dies loses none of them: transitions == steps.
        report = Report(source=self.index, env_steps=steps, transitions=steps,
                        episodes=[Episode(ret=float(r), length=int(n)) for r, n in zip(returns, lengths)],
                        version=self.worker.version, metric_sums=self._sums, metric_count=self._count,
                        final=final, env_worker_restarts=env_restarts - self._env_restarts)
        self._reported, self._sums, self._count = self.collector.env_steps, {}, 0
        self._env_restarts = env_restarts
        return report

    def close(self) -> None:
        self.env.close()


def run_worker(ctx: JobContext, group: Any, shell: WorkerShell, signals: StopSignals) -> None:
    try:
        last = time.monotonic()
        while not signals.stopped:
            shell.step()
            if shell.dropped or time.monotonic() - last >= ctx.config.server.report_every:
                last = time.monotonic()
                if group.call("coord/report", shell.report()).stop:
                    break
        last_call(signals.stopped, lambda: group.call("coord/report", shell.report(final=True),
                                                      timeout=STOP_CALL_S if signals.stopped else None))
    finally:
        shell.close()


class _LeadTurns:
    """The A3C lead's turns in the runtime's loop (``experiments.runtime.lead.run_lead``):
    its local workers' rollouts (each reported at once, so evaluations fall on time),
    the server's curves, evaluations on schedule."""

    def __init__(self, lead: Lead, grads: Any, server: Any, shells: list[WorkerShell], evaluator: Any) -> None:
        self.lead, self.grads, self.server, self.shells, self.evaluator = lead, grads, server, shells, evaluator

    def turn(self) -> bool:
        coordinator, shells = self.lead.coordinator, self.shells
        if coordinator.should_stop():
            return False
        stepped = False
        for shell in shells:
            if shell.ready():
                shell.step()
                coordinator.report(shell.report())
                stepped = True
        if not stepped and shells:  # --sync: until its round closes, at most 10 ms
            shells[0].worker.sink.wait(0.01)
        elif not shells:
            time.sleep(0.01)
        self.lead.tick(self.grads)
        if coordinator.eval_due():
            self.lead.evaluate(self.grads, self.evaluator)
        return True

    def wind_down(self, signalled: bool) -> int:
        coordinator = self.lead.coordinator
        self.server.release()  # --sync: no worker waits for a round any more
        for shell in self.shells:
            coordinator.report(shell.report(final=True))
            shell.close()
        self.evaluator.close()
        # Not for a source that stopped reporting (dead or hung); briefly after a signal.
        coordinator.wait_for_sources(timeout=self.lead.ctx.config.run.rpc_timeout,
                                     quiet=STOP_QUIET_S if signalled else None)
        self.lead.tick(self.grads, force=True)
        return int(self.server.metrics()["version"])

    def summary(self, interrupted: bool) -> dict[str, Any]:
        return self.lead.summary(self.grads, interrupted=interrupted)


class Lead:
    """Rank 0 (or the serial process): the server's model and optimizer, the
    coordinator, and the evaluation loop."""

    def __init__(self, ctx: JobContext, *, num_workers: int) -> None:
        import torch

        from algorithms.a2c import make_optimizer

        self.ctx, config = ctx, ctx.config
        torch.manual_seed(config.run.seed)
        self.eval_agent = build_agent(ctx, device=resolve_device(config.run.device))
        self.model = copy.deepcopy(self.eval_agent.model)
        self.initial = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.optimizer_factory = functools.partial(make_optimizer, config=config.learn)
        self.coordinator = start_lead(ctx, num_sources=num_workers, target=target(ctx), evaluator=None)

    def server_args(self, *, round_timeout: bool) -> dict[str, Any]:
        """Async: every gradient applied on arrival. --sync: one step per round of one
        gradient per worker, all of the round's version; ``round_timeout`` (not in
        serial mode, where the workers take turns and every round fills)."""
        config = self.ctx.config
        server = config.server
        args = {"model": self.model, "optimizer_factory": self.optimizer_factory}
        if not config.sync:
            return args | {"mode": "async", "max_staleness": server.max_staleness,
                           "staleness_policy": server.staleness_policy}
        return args | {"mode": "reduce", "reduce_batch_size": config.num_workers, "max_staleness": 0,
                       "staleness_policy": "drop",
                       "round_timeout": server.round_timeout if round_timeout else None}

    def keeper(self, server: Any):
        """Checkpoints hold the gradient server (model, shared optimizer statistics,
        version, counters) and the coordinator's progress."""
        from experiments.runtime.checkpoints import RunKeeper

        keeper = RunKeeper(self.ctx, self.coordinator, snapshot=lambda: {"server": server.state_dict()},
                           policy=self.model.state_dict)
        keeper.restore(lambda state: server.load_state_dict(state["server"]), keys=("server",))
        return keeper

    def run(self, grads: Any, *, server: Any, shells: list[WorkerShell]) -> dict[str, Any]:
        from envs import make_vector_env

        config, coordinator = self.ctx.config, self.coordinator
        keeper = self.keeper(server)
        for shell in shells:
            shell.worker.sync()  # a resumed server has newer parameters
        evaluator = make_vector_env(env_fn(self.ctx), num_envs=config.run.eval_episodes, num_workers=0,
                                    seed=config.run.seed + 7)
        return run_lead(self.ctx, coordinator, keeper, _LeadTurns(self, grads, server, shells, evaluator))

    def evaluate(self, grads: Any, evaluator: Any) -> None:
        from algorithms.rollout import evaluate

        # The pulled version, not the server's model: workers go on pushing gradients
        # while this evaluates, so the result carries the parameters it played.
        state, version = grads.pull()
        self.eval_agent.load_policy_state(state)
        steps = self.coordinator.env_steps
        seed = self.ctx.config.run.seed + 7 + steps
        self.coordinator.eval_result(evaluation(
            self.eval_agent.model, functools.partial(
                evaluate, functools.partial(self.eval_agent.act, explore=False), evaluator,
                episodes=self.ctx.config.run.eval_episodes, seed=seed),
            env_steps=steps, version=version, policy=state, seed=seed))

    def tick(self, grads: Any, *, force: bool = False) -> None:
        server = grads.metrics()
        scalars = {"server/staleness_mean": server["mean_staleness"], "server/applied": server["applied"],
                   "server/dropped": server["dropped"]}
        status = {"staleness": round(server["mean_staleness"], 2)}
        if self.ctx.config.sync:  # rounds that stepped without a worker, workers not waited for
            scalars |= {"server/short_rounds": server["short_rounds"], "server/absent": server["absent"]}
            status = {"short": server["short_rounds"], "absent": server["absent"]}
        self.coordinator.tick(updates=int(server["steps"]), force=force, scalars=scalars, status=status)

    def summary(self, grads: Any, *, interrupted: bool) -> dict[str, Any]:
        server = grads.metrics()
        final, _ = grads.pull()
        change = math.sqrt(sum(float((final[k].cpu() - v.cpu()).float().pow(2).sum())
                               for k, v in self.initial.items()))
        return self.coordinator.summary(
            algorithm=type(self.eval_agent), updates=int(server["steps"]), run_dir=self.ctx.run_dir,
            interrupted=interrupted, num_envs=self.ctx.config.env.num_envs,
            applied=int(server["applied"]), dropped=int(server["dropped"]),
            received=int(server["received"]), version=int(server["version"]),
            mean_staleness=float(server["mean_staleness"]), param_change=change,
            sync=bool(self.ctx.config.sync), short_rounds=int(server["short_rounds"]),
            pending=int(server["pending"]))


def serial_main(ctx: JobContext) -> dict[str, Any]:
    """Every worker in this process, in turn, against a local GradServer (no world,
    no RPC, no spawned process)."""
    import torch

    from rlpar.servers import GradServer

    torch.set_num_threads(1)
    lead = Lead(ctx, num_workers=ctx.config.num_workers)
    grads = GradServer(**lead.server_args(round_timeout=False))
    return lead.run(grads, server=grads,
                    shells=[WorkerShell(ctx, grads.member(i), index=i) for i in range(ctx.config.num_workers)])


JOB = Job(name="a3c", rank_main=rank_main, serial_main=serial_main, resolve=resolve, check=check,
          describe=describe, env_fn=job_env_fn,
          load_policy=load_policy, restartable=restartable, env_defaults=env_defaults, roles=role_names)


