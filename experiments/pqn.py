"""PQN, synchronous data-parallel: ``python -m experiments.pqn``.

Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR,
arXiv:2407.04811): online Q(lambda) from many parallel envs, with no replay buffer and
no target network, held stable by LayerNorm. Every member (a rank) steps its own
``--num-envs`` envs epsilon-greedily for ``--n-steps`` steps and runs ``--epochs`` of
``--minibatches`` minibatches on that rollout, each minibatch's gradient averaged over
the members (the learner group), so their parameters are identical after every step.
Epsilon (``--epsilon-start`` to ``--epsilon-end`` over ``--epsilon-decay-steps``) and
the learning rate's decay count the env steps of all members together. DD-PPO's
preemption (``--preempt-fraction``) applies here too. Members, evaluation, stop,
checkpoints: as ``experiments.ppo``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar

from algorithms.pqn.config import BY_FAMILY, DEFAULTS_BY_FAMILY, PQNConfig
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

ENV_DEFAULTS_BY_FAMILY = {"vector": {"num_envs": 32}, "small_image": {"num_envs": 128},
                          "frames": {"num_envs": 128}, "other": {"num_envs": 32}}


@dataclasses.dataclass
class PQNEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family, 32 for vectors, 128 for images)")


LearnConfig = unset_by_family(PQNConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class PQNJobConfig:
    """PQN (Gallici et al. 2025) on one machine or, under torchrun, a cluster."""

    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "layer_norm", "optimizer")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000))
    env: PQNEnvConfig = section(PQNEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: PQNConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: PQNJobConfig, parts: Parts, spec: Any):
    from algorithms.pqn import PQNBuilder

    return PQNBuilder(learn=config.learn, spec=spec, network=parts.network, algorithm=parts.algorithm)


def check(config: PQNJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.pqn import PQN

    parts.check(algorithm=PQN)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete,), job="PQN")


# The fields left unset, by the env's observation family.
env_defaults = family_defaults(DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY)

PROGRAM = SyncProgram(name="pqn", builder=builder)
ENTRY = JobEntry(title="PQN", config_cls=PQNJobConfig, program=PROGRAM, roles="experiments.roles.sync",
                 describe=describe_members, hooks={"check": check, "env_defaults": env_defaults})
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
