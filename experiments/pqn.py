"""PQN, synchronous data-parallel: ``python -m experiments.pqn``.

Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR,
arXiv:2407.04811): online Q(lambda) from many parallel envs, with no replay buffer and
no target network. Members, schedules, preemption, evaluation and stop: as
``experiments.ppo`` (docs/learner-groups.md).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.pqn.config import BY_FAMILY, DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY, PQNConfig
from experiments.roles.sync.member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, entry, field, section
from experiments.runtime.config import evaluation_by_family
from experiments.runtime.group import GroupConfig

LearnConfig = entry.unset_by_family(PQNConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class PQNEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family, 32 for vectors, 128 for images)")


@dataclasses.dataclass
class PQNJobConfig:
    """PQN (Gallici et al. 2025) on one machine or, under torchrun, a cluster."""

    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "cnn", "layer_norm", "optimizer")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=None, eval_episodes=None))
    env: PQNEnvConfig = section(PQNEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: PQNConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: PQNJobConfig, parts: Parts, spec: Any):
    from algorithms.pqn import PQNBuilder

    return PQNBuilder(learn=config.learn, spec=spec, network=parts.network, algorithm=parts.algorithm)


def check(config: PQNJobConfig, parts: Parts) -> None:
    from algorithms.pqn import PQN

    entry.check_job(config, parts, job="PQN", algorithm=PQN, discrete_only=True)


# The fields left unset, by the env's observation family.
env_defaults = entry.family_defaults(DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY,
                                     run=evaluation_by_family(every=10_000))

PROGRAM = SyncProgram(name="pqn", builder=builder)
ENTRY = entry.sync_job(title="PQN", config_cls=PQNJobConfig, program=PROGRAM, check=check,
                       env_defaults=env_defaults)
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
