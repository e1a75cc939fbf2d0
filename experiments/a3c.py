"""A3C, the actor-learner program's gradients path: ``python -m experiments.a3c``.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (ICML,
arXiv:1602.01783). Rank 0 is the learner: it hosts the gradient server (which owns the
network and the optimizer, whose statistics every actor's gradients share: the paper's
shared RMSProp), the coordinator, checkpoints and TensorBoard. Every other rank is an
actor (a worker of the paper): it collects ``--n-steps`` steps of its ``--num-envs``
envs with its copy of the parameters, pushes the rollout's gradient and pulls the
newest parameters in one call; the last actor also evaluates. A gradient more than
``--max-staleness`` versions old is dropped or down-weighted (``--staleness-policy``).
``--num-workers`` counts the actors (default: one per CPU core; on fewer than 4 cores
a single actor in this process, against a local gradient server); ``--serial`` steps
every actor in turn in this one process. It stops when greedy evaluation over
``--eval-episodes`` episodes averages ``--target-return`` (the env's reward threshold:
475 on CartPole-v1), or at the time/step budget. A dead actor is restarted alone and
rejoins with the newest parameters (``experiments.roles.actor_learner``).

``--sync`` (synchronous A2C) is the job ``experiments.a2c``, the synchronous
data-parallel program; ``python -m experiments.a3c --sync ...`` runs it.

Continuous control (Gaussian head): the defaults are CartPole's, and on Pendulum-v1
they do not learn. These flags do (the command in docs/jobs.md)::

    python -m experiments.a3c --env-id Pendulum-v1 --num-workers 1 --gamma 0.9 \\
        --gae-lambda 0.9 --n-steps 8 --num-envs 16 --reward-scale 0.1 \\
        --log-std-init -0.5 --lr 1e-3 --max-seconds 120

Measured for 120 s each, one seed, on a 2-core machine shared with other jobs (load
average about 5; greedy evaluation of 20 episodes every 10K env steps, their median
from 60 s on, and the best): the defaults -1263 (best -882; the training mean stayed
at -1088), these flags at the default lr 2e-3 -321 (best -134, but the last
evaluation fell to -1009), at lr 1e-3 -189 (best -131, last -171). With
``experiments.evaluate`` playing ``policy-best.pt`` by default, the best is what it replays.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from algorithms.a2c.config import BY_FAMILY, DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY, A2CConfig
from experiments.roles.actor_learner.program import Program
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, field, flag, section
from experiments.runtime.entry import JobEntry, job_env_fn, unset_by_family
from experiments.runtime.envs import check_env, fill_by_family

# Flags of the job before issue 47 that no longer apply, and what replaced each.
RETIRED = {
    "--server-acts": "rank 0 is the learner, which hosts the gradient server and never acts; --num-workers "
                     "counts the actor ranks besides it",
    "--report-every": "A3C's actors report as every actor-learner job's do (experiments.roles.actor_learner.program.report_every)",
    "--round-timeout": "synchronous A2C is python -m experiments.a2c (--sync points there), whose members "
                       "all-reduce their gradients and wait for no round; a member's death restarts the world "
                       "from the newest checkpoint",
}
SYNC_MOVED = ("synchronous A2C is the job experiments.a2c (python -m experiments.a2c, config "
              "experiments.a2c.A2CJobConfig): its members all-reduce their gradients, no gradient server; "
              "python -m experiments.a3c --sync runs it with the other flags")


@dataclasses.dataclass
class A3CEnvConfig(FamilyEnvConfig):
    """The env each actor steps; ``--num-envs`` by observation family when not given
    (``algorithms.a2c.config.ENV_DEFAULTS_BY_FAMILY``)."""

    num_envs: int | None = field(None, help=(
        "env copies stepped by each worker (none: by observation family, 8 for vectors, 16 for images)"))


@dataclasses.dataclass
class ServerConfig:
    """The gradient server in the learner's process."""

    max_staleness: int | None = field(None, help=(
        "server drops/down-weights gradients older than this many versions ('none': accept all)"))
    staleness_policy: Literal["drop", "downweight"] = field("drop", help=(
        "what the server does with a gradient beyond --max-staleness"))
    # Retired with the worker shells and the reduce rounds (issue 47): kept so that an
    # older run's config.json still loads (experiments.evaluate plays its policy); as
    # flags they are refused, naming their replacement (RETIRED, main).
    report_every: float | None = field(None, help=(
        "retired: actors report as in every actor-learner job (experiments.roles.actor_learner.program.report_every)"))
    round_timeout: float | None = field(None, help=(
        "retired: --sync is now experiments.a2c, whose learner group all-reduces every gradient (no round "
        "waits; a member's death restarts the world from its checkpoint)"))

    def validate(self) -> None:
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"{flag('max_staleness')} must be >= 0 or none, got {self.max_staleness}")


LearnConfig = unset_by_family(A2CConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class A3CJobConfig:
    """A3C (Mnih et al. 2016) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (the network and the optimizer) is shaped by:
    # --resume may not change these (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "hidden", "shared_network", "state_dependent_std", "optimizer")

    # The server learns on CPU unless --device says otherwise (the actors always do):
    # its work is one optimizer step per gradient, and A3C's networks are small.
    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000, device="cpu"))
    env: A3CEnvConfig = section(A3CEnvConfig)
    learn: A2CConfig = section(LearnConfig)
    server: ServerConfig = section(ServerConfig)
    num_workers: int = field(0, help=(
        "actors (workers) of a local run (0: one per CPU core; 1, in-process, below 4 cores); under torchrun "
        "the world size less the learner decides"))
    server_acts: bool = field(False, help=(
        "retired: rank 0 is the learner (hosts the gradient server) and never acts; every other rank is an "
        "actor"))
    sync: bool = field(False, help=(
        "synchronous A2C: runs python -m experiments.a2c (the synchronous data-parallel program) with "
        "the other flags"))

    @property
    def num_actors(self) -> int:
        """The actor-learner program's name for ``--num-workers``."""
        return self.num_workers

    @num_actors.setter
    def num_actors(self, value: int) -> None:
        self.num_workers = value

    def validate(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"{flag('num_workers')} must be >= 0, got {self.num_workers}")
        if self.sync:
            raise ValueError(SYNC_MOVED)


# ------------------------------------------------------------ the job's hooks

# Seconds between two times learner 0's algorithm follows the gradient server in a
# world (a copy of the network and optimizer each, under the server's lock): its
# checkpoints lag the server by at most this. Serial mode shares them (no copy).
FOLLOW_S = 0.05


def builder(config: A3CJobConfig, parts: Parts, spec: Any):
    from algorithms.a2c.builder import A3CBuilder

    server = {"mode": "async", "max_staleness": config.server.max_staleness,
              "staleness_policy": config.server.staleness_policy}
    return A3CBuilder(learn=config.learn, num_envs=config.env.num_envs, spec=spec, server_args=server,
                      serial=config.run.serial, follow_s=FOLLOW_S, network=parts.network,
                      algorithm=parts.algorithm, actor=parts.actor, learner=parts.learner)


def resolve(config: A3CJobConfig, world_size: int | None) -> int:
    """Fill ``--num-workers 0``; the number of ranks (the learner and the actors). One
    local actor runs serially, in this process, with the server.

    A local run's actors are one per core, one below 4 cores. Measured for A3C on a
    2-core machine (CartPole-v1, bench a3c_cartpole, 3 seeds): two ranks paid 2-3 s of
    spawning, RPC start-up and gradient staleness (mean 0.6-0.75 versions, more env
    steps to solve: 16-100k against 13-23k) and solved in 8-33 s; one in-process worker
    solved in 6-9 s under the same load."""
    from experiments.runtime.group import default_members

    if world_size is not None:
        if world_size < 2:
            raise ValueError("a world of 1 rank has no actor: A3C's rank 0 is the learner")
        config.num_workers = world_size - 1
        return world_size
    config.num_workers = config.num_workers or default_members("cpu")
    if config.num_workers == 1:
        config.run.serial = True
    return config.num_workers + 1


def check(config: A3CJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.a2c.builder import A3CBuilder

    parts.check(algorithm=A3CBuilder.algorithm_base, actor=A3CBuilder.actor_base, learner=A3CBuilder.learner_base)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="A3C")


def env_defaults(config: A3CJobConfig, parts: Parts) -> None:
    """The ``learn`` fields left unset and ``--num-envs`` when not given, by the env's
    observation family (``algorithms.a2c.config.DEFAULTS_BY_FAMILY``, ``ENV_DEFAULTS_BY_FAMILY``)."""
    fill_defaults(config, job_env_fn(config, parts))


def fill_defaults(config: A3CJobConfig, factory: Any) -> None:
    """The family defaults left unset in an ``A3CJobConfig``, from ``factory``'s env
    (built once: ``env_spaces`` caches it per factory)."""
    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, factory)
    fill_by_family(config.env, ENV_DEFAULTS_BY_FAMILY, factory)


def describe(summary: dict[str, Any]) -> list[str]:
    return [
        f"actors             {summary['num_sources']} x {summary['num_envs']} envs",
        f"server             {summary['applied']:,} gradients applied, {summary['dropped']:,} dropped, "
        f"mean staleness {summary['mean_staleness']:.2f}",
    ] + ([f"restarts           {summary['actor_restarts']} actor(s) restarted and rejoined"]
         if summary.get("actor_restarts") else [])


def extra_ranks(config: A3CJobConfig) -> int:
    return 0


PROGRAM = Program(name="a3c", builder=builder)
ENTRY = JobEntry(title="A3C", config_cls=A3CJobConfig, program=PROGRAM, roles="experiments.roles.actor_learner",
                 describe=describe, hooks={"resolve": resolve, "check": check, "env_defaults": env_defaults,
                                           "extra_ranks": extra_ranks})
job, run, format_summary = ENTRY.job, ENTRY.run, ENTRY.format_summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m experiments.a3c``; with ``--sync``, ``python -m experiments.a2c`` with
    the other flags (synchronous A2C is a job of the synchronous program)."""
    args = list(sys.argv[1:] if argv is None else argv)
    retired = [a for a in args if a.split("=")[0] in RETIRED]
    if retired:
        name = retired[0].split("=")[0]
        print(f"a3c.py: error: {name} is retired: {RETIRED[name]}", file=sys.stderr)
        return 2
    if "--sync" in args:
        from experiments import a2c

        print("--sync: running python -m experiments.a2c (synchronous A2C, the synchronous data-parallel "
              "program)", file=sys.stderr)
        return a2c.main([a for a in args if a != "--sync"])
    return ENTRY.main(args)


if __name__ == "__main__":
    sys.exit(main())
