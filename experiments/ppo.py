"""PPO and DD-PPO, synchronous data-parallel: ``python -m experiments.ppo``.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv:1707.06347);
data-parallel and preemptive as DD-PPO (Wijmans et al. 2020, "DD-PPO: Learning
Near-Perfect PointGoal Navigators from 2.5 Billion Frames", ICLR). Every member (a
rank) steps its own ``--num-envs`` envs for ``--n-steps`` steps and runs PPO's
``--epochs`` of ``--minibatches`` minibatches on its rollout, each minibatch's gradient
averaged over the members, so their parameters are identical after every step. With
``--preempt-fraction f`` a member still collecting stops once a fraction f of the
members have finished (never before ``--preempt-min`` of its rollout). It stops when a
greedy evaluation over ``--eval-episodes`` episodes averages ``--target-return`` (the
env's reward threshold: 475 on CartPole-v1), or at the time/step budget.

Members: ``--num-workers N`` on this machine (default: one per GPU when learning on
CUDA, else one per core and a single one in this process below 4 cores, see
:func:`experiments.runtime.group.default_members`),
or the world under torchrun (rank 0 also leads: coordinator, evaluation, checkpoints).
Measured (CartPole-v1, 8 x 128 per member, lr 1e-3, 10 seeds, 2 shared cores): one
member solved in a median 14.3K env steps / 8.3 s, two in 33.8K / 16.3 s (docs/benchmarks.md,
"Learner groups and data-parallel jobs").
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.ppo.config import BY_FAMILY, DEFAULTS_BY_FAMILY, PPOConfig
from experiments.roles.sync.member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, field, section
from experiments.runtime.entry import (
    JobEntry,
    describe_members,
    family_defaults,
    job_env_fn,
    unset_by_family,
)
from experiments.runtime.envs import check_env
from experiments.runtime.group import GroupConfig

ENV_DEFAULTS_BY_FAMILY = {"vector": {"num_envs": 8}, "small_image": {"num_envs": 32},
                          "frames": {"num_envs": 8}, "other": {"num_envs": 8}}


@dataclasses.dataclass
class PPOEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family, 8; 32 for MinAtar)")


LearnConfig = unset_by_family(PPOConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class PPOJobConfig:
    """PPO / DD-PPO (Schulman et al. 2017; Wijmans et al. 2020) on one machine or, under
    torchrun, a cluster."""

    # What the checkpoint's state (network, optimizer) is shaped by (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "activation", "shared_network")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=5_000))
    env: PPOEnvConfig = section(PPOEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: PPOConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: PPOJobConfig, parts: Parts, spec: Any):
    from algorithms.ppo import PPOBuilder

    return PPOBuilder(learn=config.learn, num_envs=config.env.num_envs, members=max(1, config.group.num_workers),
                      spec=spec, network=parts.network, algorithm=parts.algorithm)


def check(config: PPOJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.ppo import PPO

    parts.check(algorithm=PPO)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="PPO")


# The fields left unset, by the env's observation family.
env_defaults = family_defaults(DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY)

PROGRAM = SyncProgram(name="ppo", builder=builder)
ENTRY = JobEntry(title="PPO", config_cls=PPOJobConfig, program=PROGRAM, roles="experiments.roles.sync",
                 describe=describe_members, hooks={"check": check, "env_defaults": env_defaults})
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
