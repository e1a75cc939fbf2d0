"""A3C, the actor-learner program's gradients path: ``python -m experiments.a3c``.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (ICML,
arXiv:1602.01783): rank 0, the learner, hosts the gradient server (the paper's shared
RMSProp); every other rank is an actor that pushes its rollout's gradient and pulls the
newest parameters. ``--sync`` runs synchronous A2C (``experiments.a2c``). Roles,
staleness, the local default of actors and continuous control (measured): docs/jobs.md, "A3C".
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any, ClassVar, Literal

from algorithms.a2c.config import BY_FAMILY, DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY, A2CConfig
from experiments.roles.actor_learner.program import Program
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, entry, field, flag, section
from experiments.runtime.config import evaluation_by_family

# Flags of the job before issue 47 that no longer apply, and what replaced each.
RETIRED = {
    "--server-acts": "rank 0 is the learner, which hosts the gradient server and never acts; --num-workers "
                     "counts the actor ranks besides it",
    "--report-every": "A3C's actors report as every actor-learner job's do (experiments.roles.actor_learner.program.report_every)",
    "--round-timeout": "synchronous A2C is python -m experiments.a2c (--sync points there), whose members "
                       "all-reduce their gradients and wait for no round; a member's death restarts the world "
                       "from the newest checkpoint",
}
SYNC_RUNS = "synchronous A2C, the synchronous data-parallel program"  # what --sync runs
SYNC_MOVED = ("synchronous A2C is the job experiments.a2c (python -m experiments.a2c, config "
              "experiments.a2c.A2CJobConfig): its members all-reduce their gradients, no gradient server; "
              "python -m experiments.a3c --sync runs it with the other flags")


@dataclasses.dataclass
class A3CEnvConfig(FamilyEnvConfig):
    """The env each actor steps; ``--num-envs`` by observation family when not given
    (``algorithms.a2c.config.ENV_DEFAULTS_BY_FAMILY``)."""

    num_envs: int | None = field(None, help=(
        "env copies stepped by each worker (none: by observation family, 8 for vectors, 16 for images)"))


@dataclasses.dataclass
class ServerConfig:
    """The gradient server in the learner's process."""

    max_staleness: int | None = field(None, help=(
        "server drops/down-weights gradients older than this many versions ('none': accept all)"))
    staleness_policy: Literal["drop", "downweight"] = field("drop", help=(
        "what the server does with a gradient beyond --max-staleness"))
    # Retired with the worker shells and the reduce rounds (issue 47): kept so that an
    # older run's config.json still loads (experiments.evaluate plays its policy); as
    # flags they are refused, naming their replacement (RETIRED, main).
    report_every: float | None = field(None, help=(
        "retired: actors report as in every actor-learner job (experiments.roles.actor_learner.program.report_every)"))
    round_timeout: float | None = field(None, help=(
        "retired: --sync is now experiments.a2c, whose learner group all-reduces every gradient (no round "
        "waits; a member's death restarts the world from its checkpoint)"))

    def validate(self) -> None:
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"{flag('max_staleness')} must be >= 0 or none, got {self.max_staleness}")


LearnConfig = entry.unset_by_family(A2CConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class A3CJobConfig(entry.WorkersAreActors):
    """A3C (Mnih et al. 2016) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (the network and the optimizer) is shaped by:
    # --resume may not change these (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "hidden", "cnn", "shared_network", "state_dependent_std", "optimizer")

    # The server learns on CPU unless --device says otherwise (the actors always do):
    # its work is one optimizer step per gradient, and A3C's networks are small.
    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=None, eval_episodes=None, device="cpu"))
    env: A3CEnvConfig = section(A3CEnvConfig)
    learn: A2CConfig = section(LearnConfig)
    server: ServerConfig = section(ServerConfig)
    num_workers: int = field(0, help=(
        "actors (workers) of a local run (0: one per CPU core; 1, in-process, below 4 cores); under torchrun "
        "the world size less the learner decides"))
    server_acts: bool = field(False, help=(
        "retired: rank 0 is the learner (hosts the gradient server) and never acts; every other rank is an "
        "actor"))
    sync: bool = field(False, help=(
        "synchronous A2C: runs python -m experiments.a2c (the synchronous data-parallel program) with "
        "the other flags"))

    def validate(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"{flag('num_workers')} must be >= 0, got {self.num_workers}")
        if self.sync:
            raise ValueError(SYNC_MOVED)


# ------------------------------------------------------------ the job's hooks

# Seconds between two times learner 0's algorithm follows the gradient server in a
# world (a copy of the network and optimizer each, under the server's lock): its
# checkpoints lag the server by at most this. Serial mode shares them (no copy).
FOLLOW_S = 0.05


def builder(config: A3CJobConfig, parts: Parts, spec: Any):
    from algorithms.a2c.builder import A3CBuilder

    server = {"mode": "async", "max_staleness": config.server.max_staleness,
              "staleness_policy": config.server.staleness_policy}
    return A3CBuilder(learn=config.learn, num_envs=config.env.num_envs, spec=spec, server_args=server,
                      serial=config.run.serial, follow_s=FOLLOW_S, network=parts.network,
                      algorithm=parts.algorithm, actor=parts.actor, learner=parts.learner)


def resolve(config: A3CJobConfig, world_size: int | None) -> int:
    """Fill ``--num-workers 0``; the number of ranks (the learner and the actors). One
    local actor runs serially, in this process, with the server. A local run's actors
    are one per core, one below 4 cores (measured: docs/jobs.md, "A3C")."""
    from experiments.runtime.group import default_members

    if world_size is not None:
        if world_size < 2:
            raise ValueError("a world of 1 rank has no actor: A3C's rank 0 is the learner")
        config.num_workers = world_size - 1
        return world_size
    config.num_workers = config.num_workers or default_members("cpu")
    if config.num_workers == 1:
        config.run.serial = True
    return config.num_workers + 1


def check(config: A3CJobConfig, parts: Parts) -> None:
    from algorithms.a2c.builder import A3CBuilder

    entry.check_job(config, parts, job="A3C", algorithm=A3CBuilder.algorithm_base,
                    actor=A3CBuilder.actor_base, learner=A3CBuilder.learner_base)


# The fields left unset, by the env's observation family (fill_defaults: from a factory).
RUN_DEFAULTS_BY_FAMILY = evaluation_by_family(every=10_000)
env_defaults = entry.family_defaults(DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY, run=RUN_DEFAULTS_BY_FAMILY)
fill_defaults = functools.partial(entry.fill_family, learn=DEFAULTS_BY_FAMILY,
                                  env=ENV_DEFAULTS_BY_FAMILY, run=RUN_DEFAULTS_BY_FAMILY)


def describe(summary: dict[str, Any]) -> list[str]:
    return [
        f"actors             {summary['num_sources']} x {summary['num_envs']} envs",
        f"server             {summary['applied']:,} gradients applied, {summary['dropped']:,} dropped, "
        f"mean staleness {summary['mean_staleness']:.2f}",
    ] + ([f"restarts           {summary['actor_restarts']} actor(s) restarted and rejoined"]
         if summary.get("actor_restarts") else [])


PROGRAM = Program(name="a3c", builder=builder)
ENTRY = entry.actor_learner_job(
    title="A3C", config_cls=A3CJobConfig, program=PROGRAM, describe=describe, check=check,
    env_defaults=env_defaults, resolve=resolve, retired=RETIRED,
    forward={"--sync": ("experiments.a2c", SYNC_RUNS)})
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
