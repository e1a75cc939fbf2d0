"""Synchronous A2C, data-parallel: ``python -m experiments.a2c`` (also reached as
``python -m experiments.a3c --sync``).

The synchronous variant of A3C (Mnih et al. 2016, "Asynchronous Methods for Deep
Reinforcement Learning", arXiv:1602.01783) on the synchronous data-parallel program,
as PPO and PQN: every member (a rank) steps its own ``--num-envs`` envs for
``--n-steps`` steps and takes one A2C step on that rollout, its gradient averaged over
the members by all-reduce, so their parameters are identical after every step (one
update per round of every member's gradient). A member's death restarts the world from
the newest checkpoint. Members, evaluation, stop, checkpoints: as ``experiments.ppo``.
The learning defaults by observation family are A3C's (``experiments.a3c``).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.a2c.config import BY_FAMILY, DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY, A2CConfig
from experiments.roles.sync.member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, entry, field, section
from experiments.runtime.config import evaluation_by_family
from experiments.runtime.group import GroupConfig

LearnConfig = entry.unset_by_family(A2CConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class A2CEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given
    (``algorithms.a2c.config.ENV_DEFAULTS_BY_FAMILY``, A3C's)."""

    num_envs: int | None = field(None, help=(
        "env copies per member (none: by observation family, 8 for vectors, 16 for images)"))


@dataclasses.dataclass
class A2CJobConfig:
    """Synchronous A2C (Mnih et al. 2016) on one machine or, under torchrun, a cluster."""

    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "hidden", "cnn", "shared_network", "state_dependent_std", "optimizer")

    # On CPU unless --device says otherwise, as A3C (a member per core).
    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=None, eval_episodes=None, device="cpu"))
    env: A2CEnvConfig = section(A2CEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: A2CConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: A2CJobConfig, parts: Parts, spec: Any):
    from algorithms.a2c.builder import A2CBuilder

    return A2CBuilder(learn=config.learn, spec=spec, network=parts.network, algorithm=parts.algorithm)


def check(config: A2CJobConfig, parts: Parts) -> None:
    from algorithms.a2c import A2C

    entry.check_job(config, parts, job="A2C", algorithm=A2C)


# The fields left unset, by the env's observation family.
env_defaults = entry.family_defaults(DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY,
                                     run=evaluation_by_family(every=10_000))

PROGRAM = SyncProgram(name="a2c", builder=builder)
ENTRY = entry.sync_job(title="A2C", config_cls=A2CJobConfig, program=PROGRAM, check=check,
                       env_defaults=env_defaults)
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
