"""The A3C roles: thin shells that own the transport and call algorithm methods.

Wiring (:func:`rank_main`, top to bottom): every rank joins the world and the RPC
group ``a3c``. Rank 0 hosts the gradient server (``PushPullGradServer`` named
``grads``, owning the optimizer) and the :class:`Coordinator` (progress reports,
evaluation schedule, stop flag, TensorBoard), and is worker 0 unless
``--no-server-acts``. Each worker holds an accessor of the server, which is a
:class:`~rlpar.protocols.GradientSink`, so :class:`~algorithms.a3c.A3C` is the
same object it is in the one-process tests with a local ``GradServer`` (rank 0's
own accessor calls stay in-process).
"""

from __future__ import annotations

import copy
import functools
import math
import time
from typing import Any

import numpy as np

from experiments.a3c_parts import (
    Coordinator,
    build_agent,
    check_env_id,
    env_spaces,
    make_env_fn,
    resolve_device,
)

__all__ = ["GROUP", "SERVER", "WorkerShell", "check_env_id", "rank_main", "role_of", "run_serial",
           "run_server", "run_worker_rank"]

GROUP = "a3c"
SERVER = "grads"


def role_of(rank: int, world_size: int, config) -> tuple[str, int]:
    """The documented role rule: rank 0 is the server (and worker 0 when
    ``server_acts``); every other rank is a worker, numbered after it."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    if rank == 0:
        return ("server+worker", 0) if config.server_acts else ("server", -1)
    return "worker", rank if config.server_acts else rank - 1


def rank_main(config, started: float, quiet: bool = False) -> dict[str, Any]:
    import torch

    from rlpar.distributed import World

    torch.set_num_threads(1)  # tiny networks: more threads only add contention
    world = World.from_env(rpc_timeout=config.rpc_timeout, listen_address=config.listen_address)
    ok = False
    try:
        role, index = role_of(world.rank, world.world_size, config)
        group = world.create_rpc_group(GROUP, world.names)
        num_workers = config.workers_for(world.world_size)
        if role.startswith("server"):
            result = run_server(config, group, num_workers=num_workers, started=started,
                                acts=role == "server+worker", quiet=quiet)
        else:
            run_worker_rank(config, group, index=index)
            result = {}
        ok = True
        return result
    finally:
        world.shutdown(graceful=ok)


class WorkerShell:
    """One worker's env, A3C object and metric window; ``step`` is one rollout."""

    def __init__(self, config, sink, *, index: int, device: str) -> None:
        import torch
        from gymnasium.vector import AutoresetMode

        from algorithms.a3c import A3C
        from algorithms.rollout import RolloutCollector
        from envs import make_vector_env

        seed = config.seed + 1000 * (index + 1)
        torch.manual_seed(seed)
        self.index = index
        self.env = make_vector_env(make_env_fn(config.env_id), num_envs=config.envs_per_worker,
                                   num_workers=config.env_workers,
                                   autoreset_mode=AutoresetMode.SAME_STEP, seed=seed)
        obs_space, act_space = env_spaces(config.env_id)
        self.worker = A3C(agent=build_agent(config, obs_space, act_space, device=device), sink=sink)
        self.worker.sync()
        self.collector = RolloutCollector(env=self.env, sample_actions=self.worker.sample_actions,
                                          n_steps=config.n_steps, seed=seed)
        self._sums: dict[str, float] = {}
        self._count = 0
        self._reported_steps = 0

    def step(self) -> None:
        metrics = self.worker.update(self.collector.collect())
        for key, value in metrics.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._count += 1

    def take_report(self) -> tuple[int, list[float], dict[str, float], int]:
        """``(new env steps, finished episode returns, metric sums, updates)`` since last time."""
        steps = self.collector.env_steps - self._reported_steps
        self._reported_steps = self.collector.env_steps
        returns, _ = self.collector.drain_episodes()
        out = (steps, returns, self._sums, self._count)
        self._sums, self._count = {}, 0
        return out

    def close(self) -> None:
        self.env.close()


def run_worker_rank(config, group, *, index: int) -> None:
    from rlpar.servers import PushPullGradServer

    group.barrier()
    sink = PushPullGradServer.connect(group, SERVER, timeout=config.rpc_timeout)
    shell = WorkerShell(config, sink, index=index, device=resolve_device(config.device))
    try:
        last = time.monotonic()
        while True:
            shell.step()
            if time.monotonic() - last >= config.report_every:
                last = time.monotonic()
                if group.call("coord/report", index, *shell.take_report(), False)["stop"]:
                    break
        group.call("coord/report", index, *shell.take_report(), True)
    finally:
        shell.close()


def run_server(config, group, *, num_workers: int, started: float, acts: bool,
               quiet: bool) -> dict[str, Any]:
    from rlpar.servers import PushPullGradServer

    lead = _Lead(config, started=started, num_workers=num_workers, quiet=quiet)
    grads = PushPullGradServer.host(
        group, SERVER, model=lead.model, optimizer_factory=lead.optimizer_factory,
        mode="async", max_staleness=config.max_staleness,
        staleness_policy=config.staleness_policy, timeout=config.rpc_timeout)
    group.register("coord/report", lead.coordinator.report)
    group.barrier()
    return lead.run(grads, acts=acts)


def run_serial(config, started: float, quiet: bool = False) -> dict[str, Any]:
    """A one-worker job in this process: the worker pushes to a local GradServer
    (no world, no RPC, no spawned process); otherwise rank 0 of a distributed run."""
    import torch

    from rlpar.servers import GradServer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lead = _Lead(config, started=started, num_workers=1, quiet=quiet)
        grads = GradServer(model=lead.model, optimizer_factory=lead.optimizer_factory,
                           mode="async", max_staleness=config.max_staleness,
                           staleness_policy=config.staleness_policy)
        return lead.run(grads, acts=True)
    finally:
        torch.set_num_threads(threads)


class _Lead:
    """Rank 0's side: the server's model and optimizer, coordinator, evaluation loop."""

    def __init__(self, config, *, started: float, num_workers: int, quiet: bool) -> None:
        import torch

        from algorithms.a2c import make_optimizer

        self.config = config
        self.device = resolve_device(config.device)
        obs_space, act_space = env_spaces(config.env_id)
        torch.manual_seed(config.seed)
        self.eval_agent = build_agent(config, obs_space, act_space, device=self.device)
        self.model = copy.deepcopy(self.eval_agent.model)
        self.initial = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.optimizer_factory = functools.partial(make_optimizer, config=config.a2c_config())
        self.coordinator = Coordinator(config, num_workers=num_workers, started=started,
                                       quiet=quiet)

    def run(self, grads, *, acts: bool) -> dict[str, Any]:
        from algorithms.rollout import evaluate
        from envs import make_vector_env

        config, coordinator, eval_agent = self.config, self.coordinator, self.eval_agent
        shell = WorkerShell(config, grads, index=0, device=self.device) if acts else None
        eval_env = make_vector_env(make_env_fn(config.env_id), num_envs=config.eval_episodes,
                                   num_workers=0, seed=config.seed + 7)
        try:
            while not coordinator.should_stop():
                if shell is not None:
                    shell.step()
                    # A local call: report every rollout so evaluations fall on time.
                    coordinator.report(0, *shell.take_report(), False)
                else:
                    time.sleep(0.01)
                coordinator.tick(grads.metrics)
                if coordinator.eval_due():
                    state, version = grads.pull()
                    eval_agent.load_parameters(state)
                    returns = evaluate(functools.partial(eval_agent.act, explore=False), eval_env,
                                       episodes=config.eval_episodes,
                                       seed=config.seed + 7 + coordinator.env_steps)
                    coordinator.record_eval(float(np.mean(returns)), version)
        finally:
            coordinator.stop("finished")
            if shell is not None:
                coordinator.report(0, *shell.take_report(), True)
                shell.close()
            eval_env.close()
            coordinator.wait_for_workers(timeout=config.rpc_timeout)
            final, _ = grads.pull()
            change = math.sqrt(sum(float((final[k].cpu() - v.cpu()).float().pow(2).sum())
                                   for k, v in self.initial.items()))
            summary = coordinator.summary(grads.metrics(), param_change=change)
            coordinator.close()
        return summary
