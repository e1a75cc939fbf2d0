"""IMPALA, the actor-learner of V-trace: ``python -m experiments.impala``.

Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures" (ICML, arXiv:1802.01561). Actors put unrolls into a
bounded queue in the learner's process; the learner corrects for their lag with
V-trace. Roles, several learners, checkpoints: docs/jobs.md, "IMPALA".
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.impala.config import BY_FAMILY, DEFAULTS_BY_FAMILY, IMPALAConfig
from experiments.roles.actor_learner.program import Program
from experiments.runtime import EnvConfig, Parts, RunConfig, entry, field, section
from experiments.runtime.config import evaluation_by_family
from experiments.runtime.data import QueueConfig

LearnConfig = entry.unset_by_family(IMPALAConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class ImpalaJobConfig:
    """IMPALA (Espeholt et al. 2018) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (network, optimizer) is shaped by (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "cnn", "optimizer")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=None, eval_episodes=None))
    env: EnvConfig = section(EnvConfig)
    queue: QueueConfig = section(QueueConfig)
    learn: IMPALAConfig = section(LearnConfig)
    num_actors: int = entry.actors_field()
    learners: int = field(1, help=(
        "learner ranks (0 .. K-1), each with a queue of its own that actors i mod K fill, updating in "
        "step with gradients averaged; learner 0 publishes and keeps the run"))

    def validate(self) -> None:
        entry.validate_actors(self)


# ------------------------------------------------------------ the job's hooks


def builder(config: ImpalaJobConfig, parts: Parts, spec: Any):
    from algorithms.impala import IMPALABuilder

    return IMPALABuilder(learn=config.learn, num_envs=config.env.num_envs, learners=config.learners, spec=spec,
                         network=parts.network, algorithm=parts.algorithm, actor=parts.actor, learner=parts.learner)


resolve = entry.resolve_actors  # fills --num-actors 0; the ranks: learners and actors


def check(config: ImpalaJobConfig, parts: Parts) -> None:
    from algorithms.impala import IMPALABuilder

    entry.check_job(config, parts, job="IMPALA", algorithm=IMPALABuilder.algorithm_base,
                    actor=IMPALABuilder.actor_base, learner=IMPALABuilder.learner_base)


def describe(summary: dict[str, Any]) -> list[str]:
    return entry.describe_actor_learner(summary, batch=f"batch {summary['batch_size']} unrolls",
                                        waits_for="unrolls")


# The fields left unset, by the env's observation family.
env_defaults = entry.family_defaults(DEFAULTS_BY_FAMILY, run=evaluation_by_family(every=10_000))

PROGRAM = Program(name="impala", builder=builder)
ENTRY = entry.actor_learner_job(title="IMPALA", config_cls=ImpalaJobConfig, program=PROGRAM,
                                describe=describe, check=check, env_defaults=env_defaults)
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
