"""One member of a synchronous data-parallel job's learner group: its algorithm, env
and runner (from the job's :class:`~algorithms.sync.SyncBuilder`), the hooks through
which the group reaches the algorithm, and the steps of one iteration that every
member takes in the same order (collect, learn, report, agree).

Lockstep: every collective of the group is called by every member the same number of
times in the same order, or the group deadlocks until its timeout. The update makes
``epochs x minibatches`` gradient averages whatever its rollout's length (the
builders' algorithms guarantee it); then :meth:`Member.agree` makes two tiny ones: a
sum of the iteration's env steps and stop signals, and the lead's decision to stop,
broadcast. So every member stops after the same iteration, whoever asked.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from algorithms.builder import EnvSpec
from algorithms.sync import SyncBuilder, SyncRunner
from experiments.runtime.messages import Episode, Report
from experiments.runtime.parts import checked

# Seconds between two looks at the preemption counter: a look is a store round trip
# (tens of microseconds on loopback, more across nodes), and a vector step of small
# envs takes about as long; a 2 ms lag is nothing beside a straggler's.
PREEMPT_POLL_S = 0.002


@dataclasses.dataclass(frozen=True)
class SyncProgram:
    """A synchronous job: ``name`` (run directories, checkpoints, groups) and
    ``builder(config, parts, spec) -> SyncBuilder`` (module-level, so ranks unpickle
    it by reference)."""

    name: str
    builder: Callable[[Any, Any, EnvSpec], SyncBuilder]


@dataclasses.dataclass
class SyncSetup:
    """One rank's typed pieces of a synchronous job; ``ctx`` is kept whole for the
    runtime's lead, checkpoints and run directory."""

    ctx: Any
    builder: SyncBuilder
    run: Any  # RunConfig
    env: Any  # EnvConfig
    group: Any  # GroupConfig
    env_fn: Callable[[], Any]

    @classmethod
    def of(cls, program: SyncProgram, ctx: Any) -> SyncSetup:
        from experiments.runtime.envs import env_factory, env_spaces

        config = ctx.config
        env_fn = ctx.env_fn if ctx.env_fn is not None else env_factory(config.env.env_id, ctx.parts.env)
        return cls(ctx=ctx, builder=make_builder(program, config, ctx.parts, EnvSpec(*env_spaces(env_fn))),
                   run=config.run, env=config.env, group=config.group, env_fn=env_fn)


def make_builder(program: SyncProgram, config: Any, parts: Any, spec: EnvSpec) -> SyncBuilder:
    """The user's builder (``Parts(builder=)``) or the job's, checked."""
    return parts.make_builder(program.builder, config, spec, SyncBuilder)


def member_seeds(run_seed: int, rank: int, start_step: int) -> tuple[int, int]:
    """``(sample seed, env seed)`` of member ``rank`` starting at ``start_step`` env
    steps: its own streams, and on a resume (``start_step > 0``) fresh ones, so it
    does not replay the episodes and samples of the run's start."""
    seq = np.random.SeedSequence([run_seed & 0xFFFFFFFF, rank, start_step])
    sample, env = seq.generate_state(2)
    return int(sample), int(env)


class Preemption:
    """DD-PPO's preemption of stragglers (Wijmans et al. 2020, sec. 4): a counter per
    iteration in the world's store (sealed like every key, scoped by the restart
    count), to which each member adds 1 when its rollout is complete; a member still
    collecting ends its rollout once ``threshold`` members have, never before
    ``min_steps`` steps (the collector's rule)."""

    def __init__(self, store: Any, *, name: str, threshold: int, min_steps: int) -> None:
        self.store, self.name, self.threshold, self.min_steps = store, name, threshold, min_steps

    def _key(self, iteration: int) -> str:
        return f"sync/{self.name}/finished/{iteration}"

    def should_stop(self, iteration: int) -> Callable[[int], bool]:
        key, next_look = self._key(iteration), [0.0]

        def check(steps: int) -> bool:
            now = time.monotonic()
            if now < next_look[0]:
                return False
            next_look[0] = now + PREEMPT_POLL_S
            return self.store.add(key, 0) >= self.threshold

        return check

    def finished(self, iteration: int) -> None:
        self.store.add(self._key(iteration), 1)

    def forget(self, iteration: int) -> None:
        """Drop the iteration's counter (the lead, once every member is past it)."""
        self.store.delete_key(self._key(iteration))


class Member:
    """Member ``rank`` of ``group`` (None: a group of one, no collective at all)."""

    def __init__(self, setup: SyncSetup, *, rank: int, group: Any | None = None) -> None:
        from experiments.runtime.config import resolve_device

        self.setup, self.rank = setup, rank
        self.group = group if group is not None and group.size > 1 else None
        self.device = device_of(resolve_device(setup.run.device), group)
        together = self.group is not None
        builder = setup.builder
        self.algorithm = checked(builder.make_algorithm(
            device=self.device, seed=setup.run.seed, sample_seed=member_seeds(setup.run.seed, rank, 0)[0],
            grad_hook=self._average if together else None, mean_hook=self._mean if together else None),
            builder.algorithm_base, builder.make_algorithm, given=setup.ctx.parts.algorithm, part="algorithm")
        self.runner: Any = None
        self.env: Any = None
        self.global_steps = 0
        self.comm_s = 0.0  # seconds in the group's collectives (waiting for the slowest included)
        self._updating = False
        # The lead of a group keeps the state each update starts from (whole_state).
        self._keeps_whole = together and rank == 0
        self._before: Any = None
        self._reported = self._env_restarts = 0

    # ------------------------------------------------------------ start
    def adopt(self, state: Any, *, start_step: int) -> None:
        """Load the lead's algorithm state, then sample on our own stream again."""
        self.algorithm.load_state_dict(state)
        self.setup.builder.reseed(self.algorithm, member_seeds(self.setup.run.seed, self.rank, start_step)[0])

    def begin(self, *, start_step: int) -> None:
        """This member's envs and runner, at the group's ``start_step`` env steps."""
        from gymnasium.vector import AutoresetMode

        from envs import make_vector_env
        from experiments.runtime.envs import learning_rewards, vector_env_options

        setup = self.setup
        env_seed = member_seeds(setup.run.seed, self.rank, start_step)[1]
        self.env = learning_rewards(make_vector_env(
            setup.env_fn, num_envs=setup.env.num_envs, seed=env_seed, autoreset_mode=AutoresetMode.SAME_STEP,
            **vector_env_options(setup.ctx.config)), setup.env)
        self.runner = checked(setup.builder.make_runner(self.algorithm, env=self.env, seed=env_seed), SyncRunner,
                              setup.builder.make_runner)
        self.global_steps = start_step
        self.runner.set_progress(start_step)

    # ------------------------------------------------------------ the group's hooks
    def _average(self, grads: list[Any]) -> None:
        t0 = time.perf_counter()
        self.group.average(grads)
        self.comm_s += time.perf_counter() - t0

    def _mean(self, tensor: Any) -> Any:
        t0 = time.perf_counter()
        flat = tensor.detach().reshape(1).to(self.group.device, copy=True)
        self.group.all_reduce(flat)
        self.comm_s += time.perf_counter() - t0
        return (flat / self.group.size).reshape(()).to(tensor.device)

    def whole_state(self) -> Any:
        """The algorithm's state after its last whole update: what a checkpoint may
        hold. A member's death stops an update between two of its gradient averages,
        with some optimizer steps taken and others not; the lead's checkpoint then holds
        the state that update started from (a copy it keeps; the other members never
        save)."""
        if not self._updating:
            return self.algorithm.state_dict()
        if self._before is None:
            raise RuntimeError(f"member {self.rank} keeps no state from before its update")
        return self._before

    # ------------------------------------------------------------ one iteration
    def collect(self, preemption: Preemption | None, iteration: int) -> dict[str, np.ndarray]:
        if preemption is None:
            rollout = self.runner.collect()
        else:
            rollout = self.runner.collect(should_stop=preemption.should_stop(iteration),
                                          min_steps=preemption.min_steps)
            preemption.finished(iteration)
        return rollout

    def learn(self, rollout: dict[str, np.ndarray]) -> dict[str, float]:
        # A copy of the state (parameters, optimizer moments, counters, generator), on
        # its device: for the MinAtar actor-critic 1.6 MB in 0.24 ms on a CPU (p50),
        # against 1.3 ms for copy.deepcopy; an update takes tens of milliseconds.
        self._before = copied(self.algorithm.state_dict()) if self._keeps_whole else None
        self._updating = True
        metrics = self.runner.learn(rollout)
        self._updating, self._before = False, None
        return metrics

    def report(self, metrics: dict[str, float] | None = None, *, final: bool = False) -> Report:
        """What the lead's coordinator gets: new env steps and episodes, and this
        iteration's metrics (``sync/...``: the program's own, logged apart)."""
        returns, lengths = self.runner.drain_episodes()
        steps = self.runner.env_steps - self._reported
        env_restarts = getattr(self.env, "crash_count", 0)
        report = Report(source=self.rank, env_steps=steps, transitions=steps, version=self.algorithm.updates,
                        episodes=[Episode(ret=float(r), length=int(n)) for r, n in zip(returns, lengths)],
                        metric_sums=dict(metrics or {}), metric_count=1 if metrics else 0, final=final,
                        env_worker_restarts=env_restarts - self._env_restarts)
        self._reported, self._env_restarts = self.runner.env_steps, env_restarts
        return report

    def agree(self, steps: int, *, signalled: bool, lead_stop: Callable[[], bool] | None) -> bool:
        """The group's env steps after this iteration (for the runner's schedules) and
        whether every member stops now: the sum of the members' ``steps`` and signals,
        then the lead's decision, broadcast. Each member sent its report before, and a
        report is a synchronous call: once the sum is in, the lead has them all."""
        import torch

        if self.group is None:
            self._advance(steps)
            return signalled or (lead_stop is not None and lead_stop())
        t0 = time.perf_counter()
        total = torch.tensor([float(steps), float(signalled)], dtype=torch.float64, device=self.group.device)
        self.group.all_reduce(total)
        self._advance(int(total[0]))
        stop = torch.zeros(1, dtype=torch.float64, device=self.group.device)
        if lead_stop is not None:
            stop[0] = float(total[1] > 0 or lead_stop())
        self.group.broadcast(stop, src=0)
        self.comm_s += time.perf_counter() - t0
        return bool(stop[0] > 0)

    def _advance(self, steps: int) -> None:
        self.global_steps += steps
        self.runner.set_progress(self.global_steps)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def device_of(device: Any, group: Any | None) -> Any:
    """The member's device: the group's GPU under NCCL (one per member), else the
    run's ``--device`` (gloo averages CUDA gradients through host copies)."""
    if group is not None and group.backend == "nccl":
        return group.device
    return device


def backend_for(device: Any, local_members: int) -> str:
    """NCCL when members learn on CUDA with a GPU each on their node; gloo otherwise
    (NCCL cannot put two members on one GPU)."""
    import torch

    if device.type == "cuda" and torch.cuda.device_count() >= local_members:
        return "nccl"
    return "gloo"


def copied(value: Any) -> Any:
    """``value`` (a state dict: nested dicts/lists of tensors, arrays and numbers)
    with its tensors cloned where they are: a snapshot later steps leave alone."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):  # a user's algorithm may keep arrays it changes in place
        return value.copy()
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(v) for v in value)
    return value


def to_cpu(value: Any) -> Any:
    """``value`` (a state dict: nested dicts/lists of tensors) with CPU tensors: what
    crosses RPC without device maps."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value

