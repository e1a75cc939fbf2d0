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
their own batches, gradients averaged (``experiments.roles.learners``).

The queue's unrolls are on-policy data: a checkpoint does not keep them (a resumed run
starts with an empty queue); networks, optimizer and progress are kept as in every job.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from experiments.roles.program import Program, check_learners, describe_learners, validate_learners
from experiments.runtime import EnvConfig, Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.config import usable_cores
from experiments.runtime.data import QueueConfig
from experiments.runtime.envs import RUN_BUDGET, check_env, env_factory, fill_by_family
from experiments.runtime.job import main_for, run_job

# By observation family (the rule that picks the default network), for the fields left
# unset. Measured in one process (algorithms/impala/impala.py's learner, 4 actors x 4 envs x
# unrolls of 20 per batch, greedy evaluation of 20 episodes every 2,500 env steps; the
# V-trace/IMPALA issue's notes): CartPole-v1 with RMSProp 2e-3 solved in a median 9.0K
# env steps over 8 seeds (the paper's 6e-4: 33.9K, two seeds over 85K; Adam 3e-3:
# 13.9K); MinAtar Breakout (one seed, 180 s) greedy 11.4 at 2e-3 against 5.2 at 6e-4.
# MinAtar's unrolls of 5 (A3C's n-step there, 4x the updates per env step of 20), an
# entropy bonus of 0.05 (Breakout left its plateau 8x sooner) and the rate annealed to 0
# over the run's --max-env-steps (the paper's linear decay; SpaceInvaders' epsilon-0.1
# return rose past SB3 PPO's): experiments/tuning.md ("IMPALA on MinAtar").
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 2e-3, "lr_anneal_steps": 0, "unroll_length": 20, "batch_size": 2, "entropy_coef": 0.01},
    "small_image": {"lr": 2e-3, "lr_anneal_steps": RUN_BUDGET, "unroll_length": 5, "batch_size": 2,
                    "entropy_coef": 0.05},
    # the paper's; not measured here
    "frames": {"lr": 6e-4, "lr_anneal_steps": 0, "unroll_length": 20, "batch_size": 4, "entropy_coef": 0.01},
    "other": {"lr": 2e-3, "lr_anneal_steps": 0, "unroll_length": 20, "batch_size": 2, "entropy_coef": 0.01},
}


def default_actors() -> int:
    return max(2, usable_cores())


@dataclasses.dataclass
class LearnConfig:
    """IMPALA's hyperparameters (those left unset: ``DEFAULTS_BY_FAMILY``)."""

    lr: float | None = field(None, help="learning rate (none: by observation family, 2e-3; 6e-4 for frames)")
    lr_anneal_steps: int | None = field(None, help=(
        "anneal the learning rate linearly to 0 over this many env steps, all learners together "
        "(0: constant; none: by observation family, over the run's --max-env-steps for MinAtar, else 0)"))
    optimizer: Literal["rmsprop", "adam"] = field("rmsprop", help="optimizer (the paper's RMSProp, eps 0.01)")
    gamma: float = field(0.99, help="discount")
    unroll_length: int | None = field(None, help="steps per unroll an actor sends (none: by family, 20; 5 for MinAtar)")
    batch_size: int | None = field(None, help="unrolls per learner update (none: by family, 2)")
    rho_bar: float = field(1.0, help="V-trace: clip of the importance weights in the value targets")
    c_bar: float = field(1.0, help="V-trace: clip of the trace-cutting weights")
    entropy_coef: float | None = field(None, help="entropy bonus weight (none: by family, 0.01; 0.05 for MinAtar)")
    value_coef: float = field(0.5, help="baseline loss weight")
    max_grad_norm: float | None = field(40.0, help="clip the summed loss's gradient to this norm ('none': no clip)")
    reward_clip: float | None = field(None, help="clip rewards to +-this ('none': no clip; the paper's Atari: 1)")
    hidden: str = field("64,64", help="MLP hidden sizes for vector observations, comma separated")
    push_every: int = field(1, help="learner updates between parameter publications")
    pull_every: int = field(0, help="actor env steps between parameter pulls (0: one unroll's, every unroll)")
    fast: Literal["auto", "off", "eager", "compile"] = field("auto", help=(
        "how updates and acting run on CPU (algorithms.fast): auto (= eager), off, eager (denormals "
        "flushed), compile (falls back to eager without a C++ compiler)"))

    def validate(self) -> None:
        for name in ("unroll_length", "batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(self, name)}")
        if self.lr_anneal_steps is not None and self.lr_anneal_steps < 0:
            raise ValueError(f"{flag('lr_anneal_steps')} must be >= 0, got {self.lr_anneal_steps}")
        if self.push_every < 1 or self.pull_every < 0:
            raise ValueError(f"{flag('push_every')} must be >= 1 and {flag('pull_every')} >= 0")
        layer_sizes(self.hidden, name="hidden")
        if self.fast not in ("auto", "off", "eager", "compile"):
            raise ValueError(f"{flag('fast')} must be one of ['auto', 'off', 'eager', 'compile'], got {self.fast!r}")
        if self.lr is not None:  # the algorithm's named checks, unset fields as for vectors
            unset = {k: v for k, v in DEFAULTS_BY_FAMILY["vector"].items() if getattr(self, k) is None}
            probe = dataclasses.replace(self, **{**unset, "lr_anneal_steps": 0})
            try:
                probe.impala_config(env_steps_per_update=1)
            except ValueError as exc:
                raise ValueError(f"{flag(str(exc).split()[0])}: {exc}") from None

    def impala_config(self, *, env_steps_per_update: int):
        """The IMPALAConfig; the annealing, given in env steps, counted in updates of
        ``env_steps_per_update`` (every learner's batch of unrolls together)."""
        from algorithms.impala import IMPALAConfig

        unset = [flag(k) for k in ("lr", "lr_anneal_steps", "entropy_coef") if getattr(self, k) is None]
        if unset:
            raise ValueError(f"{', '.join(unset)} unset: the job fills them by the env's observations "
                             "(env_defaults)")
        anneal = max(1, self.lr_anneal_steps // env_steps_per_update) if self.lr_anneal_steps else None
        return IMPALAConfig(gamma=self.gamma, rho_bar=self.rho_bar, c_bar=self.c_bar,
                            entropy_coef=self.entropy_coef, value_coef=self.value_coef,
                            max_grad_norm=self.max_grad_norm, reward_clip=self.reward_clip,
                            optimizer=self.optimizer, lr=self.lr, lr_anneal_updates=anneal,
                            hidden=layer_sizes(self.hidden, name="hidden"), fast=self.fast)


@dataclasses.dataclass
class ImpalaJobConfig:
    """IMPALA (Espeholt et al. 2018) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (network, optimizer) is shaped by (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "optimizer")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000))
    env: EnvConfig = section(EnvConfig)
    queue: QueueConfig = section(QueueConfig)
    learn: LearnConfig = section(LearnConfig)
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
    learners = config.learners
    if world_size is None:
        config.num_actors = config.num_actors or default_actors()
        check_learners(learners, config.num_actors, own_data=True)
        return learners + config.num_actors
    if world_size < learners + 1:
        raise ValueError(f"a world of {world_size} ranks has no actor with --learners {learners}: IMPALA "
                         f"needs at least {learners + 1} ranks")
    check_learners(learners, world_size - learners, own_data=True)
    config.num_actors = world_size - learners
    return world_size


def job_env_fn(config: ImpalaJobConfig, parts: Parts):
    return env_factory(config.env.env_id, parts.env)


def check(config: ImpalaJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.impala import IMPALABuilder

    parts.check(algorithm=IMPALABuilder.algorithm_base, actor=IMPALABuilder.actor_base,
                learner=IMPALABuilder.learner_base)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="IMPALA")


def env_defaults(config: ImpalaJobConfig, parts: Parts) -> None:
    """The fields left unset, by the env's observation family (``DEFAULTS_BY_FAMILY``)."""
    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, job_env_fn(config, parts), run_budget=config.run.max_env_steps)


def describe(summary: dict[str, Any]) -> list[str]:
    return [
        f"actors             {summary['num_actors']} (batch {summary['batch_size']} unrolls)",
        f"learner waiting    {100 * summary['wait_fraction']:.1f}% of its time (for unrolls)",
        f"learner CPU        {summary['learner_cpu_ms_per_update']:.2f} ms per update "
        f"(its thread had the CPU {100 * summary['learner_cpu_share']:.0f}% of the time)",
        *describe_learners(summary),
    ]


def extra_ranks(config: ImpalaJobConfig) -> int:
    return 0


PROGRAM = Program(name="impala", builder=builder)


@functools.cache
def job():
    """The runtime's Job (built on first use: the roles import torch)."""
    from experiments.roles.actor_learner import make_job

    return make_job(PROGRAM, resolve=resolve, check=check, describe=describe, env_fn=job_env_fn,
                    env_defaults=env_defaults, extra_ranks=extra_ranks)


def run(config: ImpalaJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job (serial, a local world, or this rank under torchrun); returns the
    learner's summary (``{}`` on other ranks under torchrun)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.runtime.summary import format_summary as box

    return box(summary, describe(summary), title="IMPALA")


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(job, ImpalaJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
