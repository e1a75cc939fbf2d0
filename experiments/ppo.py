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
import functools
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from experiments.roles.sync_member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.envs import RUN_BUDGET, check_env, env_factory, fill_by_family
from experiments.runtime.group import GroupConfig
from experiments.runtime.job import main_for, run_job

# By observation family, for the fields left unset. Measured in one process
# (experiments/bench/learning/ppo_single.py, 8 envs x 128 steps, 2 shared cores): CartPole-v1
# with lr 1e-3 constant solved (greedy 475) in a median 16.7K env steps / 1.4 s over 20
# seeds, against 27.2K / 2.1 s with CleanRL's 2.5e-4 annealed. MinAtar: experiments/tuning.md
# ("PPO on MinAtar": 7e-4 annealed over the run's budget, from 30-minute runs of
# Breakout and SpaceInvaders against 1e-3 over 2M or 5M and 5e-4 over 5M; 32 envs and an
# entropy bonus of 0.05, which left Breakout's plateau at seeds where 8 envs and 0.01
# stayed on it, and step faster). Frames:
# CleanRL's Atari settings, annealed over the run as CleanRL does (not measured).
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 1e-3, "lr_anneal_steps": 0, "entropy_coef": 0.01},
    "small_image": {"lr": 7e-4, "lr_anneal_steps": RUN_BUDGET, "entropy_coef": 0.05},
    "frames": {"lr": 2.5e-4, "lr_anneal_steps": RUN_BUDGET, "entropy_coef": 0.01},
    "other": {"lr": 1e-3, "lr_anneal_steps": 0, "entropy_coef": 0.01},
}
ENV_DEFAULTS_BY_FAMILY = {"vector": {"num_envs": 8}, "small_image": {"num_envs": 32},
                          "frames": {"num_envs": 8}, "other": {"num_envs": 8}}


@dataclasses.dataclass
class PPOEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family, 8; 32 for MinAtar)")


@dataclasses.dataclass
class LearnConfig:
    """PPO's hyperparameters (those left unset: ``DEFAULTS_BY_FAMILY``; the rest are
    CleanRL's ``ppo.py`` defaults)."""

    n_steps: int = field(128, help="steps per env in a member's rollout")
    lr: float | None = field(None, help=(
        "Adam learning rate (none: by observation family, 1e-3; 7e-4 for MinAtar, 2.5e-4 for frames)"))
    lr_anneal_steps: int | None = field(None, help=(
        "anneal the learning rate linearly to 0 over this many env steps, all members together "
        "(0: constant; none: by observation family, 0 for vectors, the run's --max-env-steps for images)"))
    epochs: int = field(4, help="passes over each rollout")
    minibatches: int = field(4, help="minibatches per pass (a count: every member takes as many steps)")
    gamma: float = field(0.99, help="discount")
    gae_lambda: float = field(0.95, help="GAE lambda")
    clip_coef: float = field(0.2, help="surrogate clipping range")
    clip_vloss: bool = field(True, help="clip the value change like the ratio")
    normalize_advantages: bool = field(True, help="normalize advantages per minibatch")
    entropy_coef: float | None = field(None, help="entropy bonus weight (none: by observation family, 0.01; 0.05 for MinAtar)")
    value_coef: float = field(0.5, help="value loss weight")
    max_grad_norm: float | None = field(0.5, help="clip the averaged gradient to this norm ('none': no clipping)")
    target_kl: float | None = field(None, help="stop an update's epochs once an epoch's mean KL (over all members) passes this")
    reward_scale: float = field(1.0, help="multiply rewards by this")
    hidden: str = field("64,64", help="MLP hidden sizes for vector observations, comma separated")
    activation: Literal["tanh", "relu"] = field("tanh", help="MLP hidden activation")
    shared_network: bool = field(False, help="one body for actor and critic")

    def validate(self) -> None:
        if self.n_steps < 1:
            raise ValueError(f"{flag('n_steps')} must be >= 1, got {self.n_steps}")
        if self.lr_anneal_steps is not None and self.lr_anneal_steps < 0:
            raise ValueError(f"{flag('lr_anneal_steps')} must be >= 0, got {self.lr_anneal_steps}")
        layer_sizes(self.hidden, name="hidden")
        # Unset fields are checked with the vector family's values, as PQN's config does.
        unset = {k: v for k, v in DEFAULTS_BY_FAMILY["vector"].items() if getattr(self, k) is None}
        probe = dataclasses.replace(self, **{**unset, "lr_anneal_steps": 0})
        try:  # the algorithm's own checks, named by flag
            probe.ppo_config(env_steps_per_update=1)
        except ValueError as exc:
            raise ValueError(f"{flag(str(exc).split()[0])}: {exc}") from None

    def ppo_config(self, *, env_steps_per_update: int):
        """The PPOConfig; the annealing, given in env steps, counted in updates of
        ``env_steps_per_update`` (every member's full rollouts together)."""
        from algorithms.ppo import PPOConfig

        unset = [flag(k) for k in DEFAULTS_BY_FAMILY["vector"] if getattr(self, k) is None]
        if unset:
            raise ValueError(f"{', '.join(unset)} unset: the job fills them by the env's observations "
                             "(env_defaults)")
        anneal = max(1, self.lr_anneal_steps // env_steps_per_update) if self.lr_anneal_steps else None
        return PPOConfig(gamma=self.gamma, gae_lambda=self.gae_lambda, clip_coef=self.clip_coef,
                         epochs=self.epochs, minibatches=self.minibatches, clip_vloss=self.clip_vloss,
                         normalize_advantages=self.normalize_advantages, value_coef=self.value_coef,
                         entropy_coef=self.entropy_coef, max_grad_norm=self.max_grad_norm, lr=self.lr,
                         lr_anneal_updates=anneal, target_kl=self.target_kl, reward_scale=self.reward_scale,
                         hidden=layer_sizes(self.hidden, name="hidden"), activation=self.activation,
                         shared_network=self.shared_network)


@dataclasses.dataclass
class PPOJobConfig:
    """PPO / DD-PPO (Schulman et al. 2017; Wijmans et al. 2020) on one machine or, under
    torchrun, a cluster."""

    # What the checkpoint's state (network, optimizer) is shaped by (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "activation", "shared_network")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=5_000))
    env: PPOEnvConfig = section(PPOEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: LearnConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: PPOJobConfig, parts: Parts, spec: Any):
    from algorithms.ppo import PPOBuilder

    return PPOBuilder(learn=config.learn, num_envs=config.env.num_envs, members=max(1, config.group.num_workers),
                      spec=spec, network=parts.network, algorithm=parts.algorithm)


def job_env_fn(config: PPOJobConfig, parts: Parts):
    return env_factory(config.env.env_id, parts.env)


def check(config: PPOJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.ppo import PPO

    parts.check(algorithm=PPO)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="PPO")


def env_defaults(config: PPOJobConfig, parts: Parts) -> None:
    env_fn = job_env_fn(config, parts)
    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, env_fn, run_budget=config.run.max_env_steps)
    fill_by_family(config.env, ENV_DEFAULTS_BY_FAMILY, env_fn)


def describe(summary: dict[str, Any]) -> list[str]:
    from experiments.roles.sync_lead import describe_members

    return describe_members(summary)


PROGRAM = SyncProgram(name="ppo", builder=builder)


@functools.cache
def job():
    """The runtime's Job (built on first use: the roles import torch)."""
    from experiments.roles.sync import make_job

    return make_job(PROGRAM, check=check, describe=describe, env_fn=job_env_fn, env_defaults=env_defaults)


def run(config: PPOJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job (one member in this process, a local world, or this rank under
    torchrun); returns the lead's summary (``{}`` on other ranks under torchrun)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.runtime.summary import format_summary as box

    return box(summary, describe(summary), title="PPO")


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(job, PPOJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
