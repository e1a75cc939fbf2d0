"""PPO and DD-PPO, synchronous data-parallel: ``python -m experiments.ppo``.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347);
data-parallel and preemptive as DD-PPO (Wijmans et al. 2020, "DD-PPO: Learning
Near-Perfect PointGoal Navigators from 2.5 Billion Frames", ICLR). Members, preemption,
evaluation and stop: docs/learner-groups.md; measurements: docs/benchmarks.md.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.ppo.config import BY_FAMILY, DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY, PPOConfig
from experiments.roles.sync.member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, entry, field, section
from experiments.runtime.config import evaluation_by_family
from experiments.runtime.group import GroupConfig

LearnConfig = entry.unset_by_family(PPOConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class PPOEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family, 8; 32 for MinAtar)")


@dataclasses.dataclass
class PPOJobConfig:
    """PPO / DD-PPO (Schulman et al. 2017; Wijmans et al. 2020) on one machine or, under
    torchrun, a cluster."""

    # What the checkpoint's state (network, optimizer) is shaped by (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "cnn", "activation", "shared_network")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=None, eval_episodes=None))
    env: PPOEnvConfig = section(PPOEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: PPOConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: PPOJobConfig, parts: Parts, spec: Any):
    from algorithms.ppo import PPOBuilder

    return PPOBuilder(learn=config.learn, num_envs=config.env.num_envs, members=max(1, config.group.num_workers),
                      spec=spec, network=parts.network, algorithm=parts.algorithm)


def check(config: PPOJobConfig, parts: Parts) -> None:
    from algorithms.ppo import PPO

    entry.check_job(config, parts, job="PPO", algorithm=PPO)


# The fields left unset, by the env's observation family.
env_defaults = entry.family_defaults(DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY,
                                     run=evaluation_by_family(every=5_000))

PROGRAM = SyncProgram(name="ppo", builder=builder)
ENTRY = entry.sync_job(title="PPO", config_cls=PPOJobConfig, program=PROGRAM, check=check,
                       env_defaults=env_defaults)
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
