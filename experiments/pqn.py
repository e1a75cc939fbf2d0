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

from algorithms.pqn.config import BY_FAMILY, PQNConfig
from experiments.roles.sync_member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, field, section
from experiments.runtime.entry import JobEntry, job_env_fn
from experiments.runtime.envs import check_env, fill_by_family
from experiments.runtime.group import GroupConfig

# By observation family, for the fields left unset: the authors' settings (purejaxql),
# measured in one process (experiments/bench/learning/pqn_single.py, 2 shared cores):
# - vector (pqn_cartpole): 32 envs x 64 steps, 4 epochs x 16 minibatches, RAdam 1e-4
#   decaying over 500K env steps, epsilon 1 -> 0.2 over 100K, rewards x 0.1, lambda
#   0.95, 256-256 MLP: CartPole-v1 solved at 61-82K env steps in 6.5-9 s (seeds 0-3);
# - small_image (pqn_minatar): 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam
#   5e-4, lambda 0.65, epsilon 1 -> 0.05 over 1M: Breakout training return 8.8 at 1.0M
#   env steps, 20 at 1.5M, about 30 from 3M, 11.2K env steps/s;
# - frames: the MinAtar settings at lr 2.5e-4 (not measured here).
DEFAULTS_BY_FAMILY: dict[str, dict[str, Any]] = {
    "vector": {"n_steps": 64, "lr": 1e-4, "lr_decay_steps": 500_000, "epochs": 4, "minibatches": 16,
               "lam": 0.95, "reward_scale": 0.1, "epsilon_end": 0.2, "epsilon_decay_steps": 100_000,
               "hidden": (256, 256)},
    "small_image": {"n_steps": 32, "lr": 5e-4, "lr_decay_steps": 0, "epochs": 2, "minibatches": 32,
                    "lam": 0.65, "reward_scale": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 1_000_000,
                    "hidden": (128, 128)},
    "frames": {"n_steps": 32, "lr": 2.5e-4, "lr_decay_steps": 0, "epochs": 2, "minibatches": 32,
               "lam": 0.65, "reward_scale": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 1_000_000,
               "hidden": (128, 128)},
}
DEFAULTS_BY_FAMILY["other"] = DEFAULTS_BY_FAMILY["vector"]
ENV_DEFAULTS_BY_FAMILY = {"vector": {"num_envs": 32}, "small_image": {"num_envs": 128},
                          "frames": {"num_envs": 128}, "other": {"num_envs": 32}}


@dataclasses.dataclass
class PQNEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family, 32 for vectors, 128 for images)")


def LearnConfig(**values: Any) -> PQNConfig:  # noqa: N802 (the name the job's section had)
    """The job's ``learn`` section: a :class:`PQNConfig` whose fields left None are
    filled by observation family."""
    return PQNConfig(**{**dict.fromkeys(BY_FAMILY), **values})


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


def env_defaults(config: PQNJobConfig, parts: Parts) -> None:
    factory = job_env_fn(config, parts)
    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, factory)
    fill_by_family(config.env, ENV_DEFAULTS_BY_FAMILY, factory)


def describe(summary: dict[str, Any]) -> list[str]:
    from experiments.roles.sync_lead import describe_members

    return describe_members(summary)


PROGRAM = SyncProgram(name="pqn", builder=builder)
ENTRY = JobEntry(title="PQN", config_cls=PQNJobConfig, program=PROGRAM, roles="experiments.roles.sync",
                 describe=describe, hooks={"check": check, "env_defaults": env_defaults})
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
