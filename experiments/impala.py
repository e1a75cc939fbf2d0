"""IMPALA, the actor-learner of V-trace: ``python -m experiments.impala``.

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures" (ICML, arXiv:1802.01561). With no launcher environment it
spawns a local world (1 learner + actors, at least 2) and stops when greedy evaluation
over ``--eval-episodes`` episodes averages ``--target-return`` (the env's reward
threshold: 475 on CartPole-v1) or at the time/step budget. Actors act with the newest
parameters they pulled and put unrolls of ``--unroll-length`` steps into a bounded
queue in the learner's process (``--queue-capacity``; a full queue holds them back);
the learner takes ``--batch-size`` unrolls per update and corrects for their lag with
V-trace. ``--serial`` runs every role in one process. Roles by rank, also under
torchrun: ranks 0 .. K-1 the learners (K = ``--learners``, default 1; learner 0 keeps
the run), the others actors (the last one evaluates). With several learners each
hosts a queue of its own, which actors ``i mod K`` fill, and they update in step on
their own batches, gradients averaged (``experiments.roles.actor_learner.learners``).

The queue's unrolls are on-policy data: a checkpoint does not keep them (a resumed run
starts with an empty queue); networks, optimizer and progress are kept as in every job.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.impala.config import BY_FAMILY, DEFAULTS_BY_FAMILY, IMPALAConfig
from experiments.roles.actor_learner.program import Program, validate_learners
from experiments.runtime import EnvConfig, Parts, RunConfig, field, flag, section
from experiments.runtime.data import QueueConfig
from experiments.runtime.entry import (
    JobEntry,
    describe_actor_learner,
    family_defaults,
    job_env_fn,
    resolve_actors,
    unset_by_family,
)
from experiments.runtime.envs import check_env

LearnConfig = unset_by_family(IMPALAConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class ImpalaJobConfig:
    """IMPALA (Espeholt et al. 2018) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (network, optimizer) is shaped by (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "optimizer")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000))
    env: EnvConfig = section(EnvConfig)
    queue: QueueConfig = section(QueueConfig)
    learn: IMPALAConfig = section(LearnConfig)
    num_actors: int = field(0, help=(
        "actors of a local run (0: one per CPU core this process may use, at least 2); under torchrun the "
        "world size decides"))
    learners: int = field(1, help=(
        "learner ranks (0 .. K-1), each with a queue of its own that actors i mod K fill, updating in "
        "step with gradients averaged; learner 0 publishes and keeps the run"))

    def validate(self) -> None:
        if self.num_actors < 0:
            raise ValueError(f"{flag('num_actors')} must be >= 0, got {self.num_actors}")
        validate_learners(self)


# ------------------------------------------------------------ the job's hooks


def builder(config: ImpalaJobConfig, parts: Parts, spec: Any):
    from algorithms.impala import IMPALABuilder

    return IMPALABuilder(learn=config.learn, num_envs=config.env.num_envs, learners=config.learners, spec=spec,
                         network=parts.network, algorithm=parts.algorithm, actor=parts.actor, learner=parts.learner)


def resolve(config: ImpalaJobConfig, world_size: int | None) -> int:
    """Fill ``--num-actors 0``; the number of ranks (learners + actors)."""
    return resolve_actors(config, world_size)


def check(config: ImpalaJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.impala import IMPALABuilder

    parts.check(algorithm=IMPALABuilder.algorithm_base, actor=IMPALABuilder.actor_base,
                learner=IMPALABuilder.learner_base)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="IMPALA")



def describe(summary: dict[str, Any]) -> list[str]:
    return describe_actor_learner(summary, batch=f"batch {summary['batch_size']} unrolls", waits_for="unrolls")


def extra_ranks(config: ImpalaJobConfig) -> int:
    return 0


# The fields left unset, by the env's observation family.
env_defaults = family_defaults(DEFAULTS_BY_FAMILY)

PROGRAM = Program(name="impala", builder=builder)
ENTRY = JobEntry(title="IMPALA", config_cls=ImpalaJobConfig, program=PROGRAM, roles="experiments.roles.actor_learner",
                 describe=describe, hooks={"resolve": resolve, "check": check, "env_defaults": env_defaults,
                                           "extra_ranks": extra_ranks})
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
