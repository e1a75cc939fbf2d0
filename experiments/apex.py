"""Ape-X DQN, the project's main job: ``python -m experiments.apex``.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR,
arXiv:1803.00933). With no launcher environment it spawns a local world (1 learner
+ actors sized to the CPU count, at least 2) and stops when greedy evaluation over
``--eval-episodes`` episodes averages ``--target-return`` (475 on CartPole-v1) or
at the time/step budget. ``--serial`` runs the learner and every actor in this one
process. Under ``torchrun`` every rank takes a role by this rule
(:func:`experiments.roles.program.role_of`):

    rank 0                      learner 0 (coordinator, parameter server, evaluation
                                bookkeeping, checkpoints, TensorBoard)
    ranks 1 .. K-1              learners 1 .. K-1 (K = --learners, default 1), which
                                learn in step with learner 0 (gradients averaged)
    ranks K .. K+R-1            dedicated replay ranks (R = --replay-ranks, only with
                                --replay-placement replay-ranks)
    remaining ranks             actors (actor index = rank - K - R)

Evaluation (greedy, ``--eval-episodes`` envs, each env's first episode) runs on the
last actor, the least exploring one, after it pulls the newest parameters: the
learner never stalls for it.

Multi-node: ``torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d
--rdzv-endpoint HOST:PORT -m experiments.apex --listen-address <this node's IP>``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import typing
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from experiments.roles.program import Program, describe_learners, validate_learners
from experiments.runtime import EnvConfig, Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.config import usable_cores
from experiments.runtime.data import ReplayConfig
from experiments.runtime.envs import check_env, env_factory
from experiments.runtime.job import main_for, run_job

# algorithms.fast.FAST_MODES, spelled out: this module does not import torch.
FastMode = Literal["auto", "off", "eager", "compile"]


def default_actors() -> int:
    # One actor per core; the learner shares, and actors throttle to the learner's pace.
    return max(2, usable_cores())


# Defaults by observation family (``algorithms.nets.observation_family``, the rule that
# picks the default network) for each of --lr, --eps-alpha, --n-step and
# --updates-per-step not given; how each was measured: experiments/tuning.md.
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | int]] = {
    "vector": {"lr": 2.5e-3, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
    "small_image": {"lr": 2.5e-4, "eps_alpha": 3.0, "n_step": 1, "updates_per_step": 0.0625},
    "frames": {"lr": 6.25e-5, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
    "other": {"lr": 2.5e-3, "eps_alpha": 7.0, "n_step": 3, "updates_per_step": 0.25},
}
# DQN's for every family, and TD3's and DDPG's (continuous actions, vector observations):
# the authors' reference settings (lr 3e-4, tau 0.005, 256x256, one-step targets; Fujimoto
# et al. 2018, sfujim/TD3) with a replay ratio of 0.125 updates of 256 per env step. Not
# Ape-X's n-step returns: uncorrected, they value the actors' noisy behaviour (sigma up to
# 0.5) rather than the greedy policy, and HalfCheetah-v5 then stayed on its back more often.
# The ratio: the learner is the bound (one core at ~175 updates/s on 2 cores) while actors
# held to 0.25 used an eighth of a core each; at 0.125 they feed it twice the data for no
# loss of updates, and Hopper-v5 took off sooner (experiments/tuning.md, "Ape-X TD3 on
# HalfCheetah" and "The replay ratio").
DQN_DEFAULTS: dict[str, float | int | str] = {"tau": 1.0, "hidden": "128,128", "batch_size": 128}
CONTINUOUS_DEFAULTS: dict[str, float | int | str] = {
    "lr": 3e-4, "tau": 0.005, "hidden": "256,256", "batch_size": 256, "n_step": 1, "updates_per_step": 0.125}


@dataclasses.dataclass
class LearnConfig:
    """Ape-X hyperparameters, of the DQN learner and, where they say so, of TD3/DDPG
    (defaults tuned for CartPole-v1; those left unset are filled by the algorithm and
    the observation family: ``DEFAULTS_BY_FAMILY``, ``DQN_DEFAULTS``,
    ``CONTINUOUS_DEFAULTS``)."""

    # Measured: env steps to solve CartPole with these defaults in one deterministic
    # process (greedy eval of 20 episodes every 5000 env steps, seeds 0-5): lr 2.5e-3:
    # 5K 10K 15K 20K >40K >40K (median 17.5K); lr 1e-3: 10K 25K 40K >40K >40K >40K.
    # With lr 1e-3 (3 seeds each), target updates every 100 or 250 updates instead of
    # 500 solved 1/3 and 0/3; batch 256 at 0.125 updates/step 1/3; a 64x64 MLP without
    # dueling head 0/3.
    lr: float | None = field(None, help=(
        "Adam learning rate (TD3/DDPG: the actor's; none: by algorithm and observation family, "
        "DQN 2.5e-3 for vectors, 2.5e-4 for MinAtar-size images, 6.25e-5 for 84x84 frames; TD3 3e-4)"))
    gamma: float = field(0.99, help="discount")
    n_step: int | None = field(None, help=(
        "n-step return length (none: TD3/DDPG 1; DQN by observation family, 1 for MinAtar-size images, "
        "3 otherwise)"))
    batch_size: int | None = field(None, help="learner batch size (none: 128 for DQN, 256 for TD3/DDPG)")
    target_update: int = field(500, help="DQN: learner updates between target network updates")
    tau: float | None = field(None, help=(
        "Polyak coefficient of target updates (none: 1.0, a hard copy every --target-update, for DQN; "
        "0.005 every update for TD3/DDPG)"))
    adam_eps: float = field(1e-8, help=(
        "Adam's epsilon (Rainbow: 1.5e-4): the gradient size below which Adam's steps shrink "
        "instead of being normalized to --lr"))
    recycle_every: int = field(0, help=(
        "learner updates between recyclings of dormant ReLU units (ReDo, Sokar et al. 2023: "
        "fresh incoming, zero outgoing weights); 0 = off, the paper's DQN setting 1000"))
    recycle_tau: float = field(0.1, help=(
        "ReDo's dormancy threshold: a unit's mean activation on the batch over its layer's mean"))
    fast: FastMode = field("auto", help=(
        "how the learner's updates and the actors' forwards run on CPU (algorithms.fast): auto "
        "(= eager), off (plain eager), eager (denormals flushed, leaner forwards), compile "
        "(torch.compile; falls back to eager without a C++ compiler)"))
    double_q: bool = field(True, help="double Q-learning")
    dueling: bool = field(True, help="dueling head")
    hidden: str | None = field(None, help=(
        "MLP hidden sizes for vector observations, comma separated (none: 128,128 for DQN, 256,256 "
        "for TD3/DDPG)"))
    updates_per_step: float | None = field(None, help=(
        "batches learned per env step (replay ratio / batch size), over all learners: K learners "
        "update together on K batches, every K / this env steps; actors throttle to hold it "
        "(none: TD3/DDPG 0.125; DQN by observation family, 0.0625 for MinAtar-size images, 0.25 otherwise)"))
    learning_starts: int = field(1000, help="env steps before learning starts")
    push_every: int = field(8, help="learner updates between parameter publications")
    pull_every: int = field(64, help="actor env steps between parameter pulls")
    eps: float = field(0.4, help="DQN: Ape-X base exploration rate")
    eps_alpha: float | None = field(None, help=(
        "Ape-X exploration exponent (none: by observation family, 3 for MinAtar-size images, "
        "the paper's 7 otherwise)"))
    # Measured like --lr (lr 1e-3, seeds 0-2): per env copy 10K 25K >50K env steps to
    # solve, per actor process 35K 35K >50K.
    eps_per_env: bool = field(True, help=(
        "spread the eps_i schedule over all env copies (else one rate per actor process)"))

    def validate(self) -> None:
        for name in ("n_step", "batch_size", "target_update", "push_every", "pull_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ValueError(f"{flag('learning_starts')} must be >= 0, got {self.learning_starts}")
        for name in ("lr", "updates_per_step"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{flag(name)} must be > 0, got {getattr(self, name)}")
        for name in ("gamma", "eps"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{flag(name)} must be in [0, 1], got {getattr(self, name)}")
        if self.tau is not None and not 0.0 < self.tau <= 1.0:
            raise ValueError(f"{flag('tau')} must be in (0, 1], got {self.tau}")
        if not self.adam_eps > 0:
            raise ValueError(f"{flag('adam_eps')} must be > 0, got {self.adam_eps}")
        if self.recycle_every < 0:
            raise ValueError(f"{flag('recycle_every')} must be >= 0 (0 = off), got {self.recycle_every}")
        if not 0.0 <= self.recycle_tau < 1.0:
            raise ValueError(f"{flag('recycle_tau')} must be in [0, 1), got {self.recycle_tau}")
        if self.eps_alpha is not None and self.eps_alpha < 0:
            raise ValueError(f"{flag('eps_alpha')} must be >= 0, got {self.eps_alpha}")
        if self.hidden is not None:
            self.hidden_sizes()
        if self.fast not in typing.get_args(FastMode):
            raise ValueError(f"{flag('fast')} must be one of {list(typing.get_args(FastMode))}, got {self.fast!r}")

    def hidden_sizes(self) -> tuple[int, ...]:
        self.require("hidden")
        return layer_sizes(self.hidden, name="hidden")

    def require(self, *names: str) -> None:
        """ValueError naming the first of ``names`` left unset (None)."""
        for name in names:
            if getattr(self, name) is None:
                raise ValueError(f"{flag(name)} is unset: the job fills it by algorithm and the env's "
                                 "observations (env_defaults); set it to build Ape-X parts directly")

    def apex_config(self):
        from algorithms.dqn import ApexConfig

        self.require("eps_alpha", "n_step", "batch_size")
        return ApexConfig(n_step=self.n_step, batch_size=self.batch_size,
                          learning_starts=self.learning_starts, push_every=self.push_every,
                          pull_every=self.pull_every, eps=self.eps, eps_alpha=self.eps_alpha,
                          eps_per_env=self.eps_per_env)

    def dqn_config(self):
        from algorithms.dqn import DQNConfig

        self.require("lr", "tau")
        return DQNConfig(gamma=self.gamma, lr=self.lr, double_q=self.double_q,
                         target_update_interval=self.target_update, tau=self.tau, adam_eps=self.adam_eps,
                         recycle_every=self.recycle_every, recycle_tau=self.recycle_tau, fast=self.fast)


@dataclasses.dataclass
class ContinuousConfig:
    """Ape-X for continuous actions: TD3 (and DDPG) settings besides ``learn``'s."""

    critic_lr: float | None = field(None, help="TD3/DDPG: the critics' learning rate (none: --lr)")
    policy_delay: int = field(2, help="TD3: critic updates per actor and target update")
    critic_layer_norm: bool = field(False, help=(
        "TD3/DDPG: a LayerNorm before each hidden activation of the critics (RLPD, Ball et al. 2023)"))
    target_noise: float = field(0.2, help=(
        "TD3: std of the target policy's smoothing noise, in actions normalized to [-1, 1]"))
    target_noise_clip: float = field(0.5, help="TD3: the smoothing noise is clipped to +-this")
    noise: Literal["gaussian", "ou"] = field("gaussian", help=(
        "TD3/DDPG actors' exploration: independent Gaussian noise (TD3's), or an Ornstein-Uhlenbeck "
        "process restarted with each episode (the DDPG paper's), at the scales below"))
    sigma: float = field(0.5, help=(
        "TD3/DDPG actors' widest exploration scale (normalized actions): env copy j of J explores at "
        "sigma^(1 + sigma_alpha j / (J - 1)); the Gaussian noise's std, or with --noise ou the OU process's "
        "sigma (theta 0.15, dt 0.01: from 0 at each episode's start, its std nears 1.8 sigma only after "
        "hundreds of steps)"))
    sigma_alpha: float = field(3.0, help="TD3/DDPG: the exponent of that schedule (0: every copy at sigma)")
    random_start: bool = field(True, help=(
        "TD3/DDPG: actors act uniformly at random until they pull the learner's first trained "
        "parameters (learning starts after --learning-starts env steps), as the TD3 reference and SB3 "
        "start; --no-random-start: by the fresh policy plus exploration noise from the first step"))

    def validate(self) -> None:
        if self.critic_lr is not None and not self.critic_lr > 0:
            raise ValueError(f"{flag('critic_lr')} must be > 0, got {self.critic_lr}")
        if self.policy_delay < 1:
            raise ValueError(f"{flag('policy_delay')} must be >= 1, got {self.policy_delay}")
        for name in ("target_noise", "target_noise_clip", "sigma_alpha"):
            if getattr(self, name) < 0:
                raise ValueError(f"{flag(name)} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.sigma <= 1.0:
            raise ValueError(f"{flag('sigma')} must be in (0, 1], got {self.sigma}")


@dataclasses.dataclass
class ApexJobConfig:
    """Ape-X (Horgan et al. 2018) on one machine or, under torchrun, a cluster: DQN for
    discrete actions, TD3 (or DDPG) for continuous ones."""

    # What the checkpoint's state is shaped by: --resume may not change these
    # (experiments.runtime.resume). The shard count of a sharded replay is checked
    # against the checkpoint's parts instead (check_resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "algorithm", "hidden", "dueling", "critic_layer_norm", "replay_capacity", "replay_placement",
        "share_frames", "learners")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=1_000_000, eval_every=5000))
    env: EnvConfig = section(EnvConfig)
    replay: ReplayConfig = section(ReplayConfig)
    learn: LearnConfig = section(LearnConfig)
    continuous: ContinuousConfig = section(ContinuousConfig)
    algorithm: Literal["auto", "dqn", "td3", "ddpg"] = field("auto", help=(
        "the learner: auto (by the action space: Discrete -> dqn, Box -> td3), dqn, td3 or ddpg"))
    num_actors: int = field(0, help=(
        "actors of a local run (0: one per CPU core this process may use, at least 2); under torchrun the "
        "world size decides"))
    learners: int = field(1, help=(
        "learner ranks (0 .. K-1), each sampling its own batch (with --replay-placement learner, from "
        "its own shard of the replay, fed by actors i mod K), gradients averaged so their parameters "
        "stay identical; learner 0 publishes and keeps the run"))

    def validate(self) -> None:
        if self.num_actors < 0:
            raise ValueError(f"{flag('num_actors')} must be >= 0, got {self.num_actors}")
        validate_learners(self)
        if self.learners > 1 and self.learn.recycle_every:
            raise ValueError(f"{flag('recycle_every')} needs --learners 1: each learner would recycle other "
                             "units (by its own batch) and their parameters would part")
        if self.learn.batch_size is not None and self.learn.batch_size > self.replay.replay_capacity:
            raise ValueError(f"{flag('batch_size')} {self.learn.batch_size} exceeds "
                             f"{flag('replay_capacity')} {self.replay.replay_capacity}")
        shard = self.replay.replay_capacity // max(1, self.learners)
        if (self.learners > 1 and self.replay.replay_placement == "learner" and self.learn.batch_size is not None
                and self.learn.batch_size > shard):
            # A shard that never holds a batch would hold every learner back for good.
            raise ValueError(f"{flag('batch_size')} {self.learn.batch_size} exceeds a learner's replay shard: "
                             f"{flag('replay_capacity')} {self.replay.replay_capacity} / --learners "
                             f"{self.learners} = {shard}")
        if self.run.serial and self.replay.replay_placement != "learner":
            raise ValueError(f"{flag('serial')} keeps the replay in its one process: "
                             "use --replay-placement learner")


# ------------------------------------------------------------ the job's hooks


def algorithm_of(config: ApexJobConfig, action_space: Any) -> str:
    """``--algorithm``, with ``auto`` resolved by the action space."""
    from gymnasium import spaces

    if config.algorithm != "auto":
        return config.algorithm
    return "td3" if isinstance(action_space, spaces.Box) else "dqn"


def builder_class(algorithm: str) -> type:
    if algorithm == "dqn":
        from algorithms.dqn import DQNBuilder

        return DQNBuilder
    from algorithms.td3 import TD3Builder

    return TD3Builder


def builder(config: ApexJobConfig, parts: Parts, spec: Any):
    """The algorithm's builder for this config (the Program's ``builder``)."""
    name = algorithm_of(config, spec.action_space)
    user = {"network": parts.network, "algorithm": parts.algorithm, "actor": parts.actor,
            "learner": parts.learner}
    if name == "dqn":
        return builder_class(name)(learn=config.learn, spec=spec, **user)
    return builder_class(name)(algorithm_name=name, learn=config.learn, continuous=config.continuous, spec=spec,
                               **user)


def resolve(config: ApexJobConfig, world_size: int | None) -> int:
    """Fill ``--num-actors 0``; the number of ranks (learners + replay + actors)."""
    from experiments.roles.program import check_learners

    extra, learners = config.replay.extra_ranks(), config.learners
    own_data = config.replay.replay_placement == "learner"
    if world_size is None:
        config.num_actors = config.num_actors or default_actors()
        check_learners(learners, config.num_actors, own_data=own_data)
        return learners + extra + config.num_actors
    actors = world_size - learners - extra
    if actors < 1:
        raise ValueError(f"a world of {world_size} ranks leaves no actor with --learners {learners} and "
                         f"{extra} replay ranks")
    check_learners(learners, actors, own_data=own_data)
    config.num_actors = actors
    return world_size


def job_env_fn(config: ApexJobConfig, parts: Parts):
    """The env factory, made in the launching process and shipped to every rank."""
    return env_factory(config.env.env_id, parts.env)


def check(config: ApexJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from experiments.runtime.envs import env_name, env_spaces

    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="Ape-X")
    obs_space, act_space = env_spaces(job_env_fn(config, parts))
    name = algorithm_of(config, act_space)
    wanted = spaces.Discrete if name == "dqn" else spaces.Box
    if not isinstance(act_space, wanted):
        raise ValueError(f"{flag('algorithm')} {name} needs a {wanted.__name__} action space; "
                         f"{env_name(config.env.env_id, parts.env)} has {act_space}")
    if name != "dqn" and len(obs_space.shape or ()) != 1 and parts.network is None:
        raise ValueError(f"{flag('algorithm')} {name}'s default networks are MLPs on vector observations; "
                         f"{env_name(config.env.env_id, parts.env)} has {obs_space.shape} (give a network factory)")
    cls = builder_class(name)
    parts.check(algorithm=cls.algorithm_base, actor=cls.actor_base, learner=cls.learner_base,
                why=f"the job runs {flag('algorithm')} {name} for {env_name(config.env.env_id, parts.env)}, "
                    f"whose action space is {act_space}")
    if config.run.resume:
        check_resume(config)


def check_resume(config: ApexJobConfig) -> None:
    """Before any process starts: the run to resume has a complete checkpoint for this
    replay layout (CheckpointMismatch for shards of another count)."""
    from experiments.runtime.rundir import RunDir
    from rlpar.buffers.distributed import shard_part_names
    from rlpar.checkpoint import latest_checkpoint

    directory = RunDir(config.run.resume).checkpoints
    split = config.learners if config.learners > 1 else 0  # a replay split over the learners
    shards = {"actors": config.num_actors, "replay-ranks": config.replay.replay_ranks,
              "learner": split}[config.replay.replay_placement]
    if shards and directory and os.path.isdir(directory):  # not on a node without the run dir
        latest_checkpoint(directory, parts=shard_part_names(shards))


def env_defaults(config: ApexJobConfig, parts: Parts) -> None:
    """``--algorithm auto`` resolved by the action space, then every ``learn`` field left
    unset filled by :func:`fill_learn`. The config saved in the run directory holds the
    results."""
    from algorithms.nets import observation_family
    from experiments.runtime.envs import env_spaces

    obs_space, act_space = env_spaces(job_env_fn(config, parts))
    config.algorithm = algorithm_of(config, act_space)
    fill_learn(config.learn, algorithm=config.algorithm, family=observation_family(obs_space.shape or ()))


def fill_learn(learn: LearnConfig, *, algorithm: str, family: str) -> LearnConfig:
    """The one place the ``learn`` fields left unset (None) get their value: by
    ``algorithm`` and, for DQN, the observation ``family`` (``DEFAULTS_BY_FAMILY``,
    ``DQN_DEFAULTS``; ``CONTINUOUS_DEFAULTS`` for TD3/DDPG). Returns ``learn``."""
    if algorithm == "dqn":
        table = {**DEFAULTS_BY_FAMILY[family], **DQN_DEFAULTS}
    elif algorithm in ("td3", "ddpg"):
        table = dict(CONTINUOUS_DEFAULTS)
    else:
        raise ValueError(f"{flag('algorithm')} must be resolved to dqn, td3 or ddpg, got {algorithm!r}")
    for name, value in table.items():
        if getattr(learn, name) is None:
            setattr(learn, name, value)
    return learn


def describe(summary: dict[str, Any]) -> list[str]:
    return [
        f"actors             {summary['num_actors']} (batch {summary['batch_size']}, "
        f"replay {summary['replay_size']:,} transitions)",
        f"learner waiting    {100 * summary['wait_fraction']:.1f}% of its time (for data)",
        f"learner CPU        {summary['learner_cpu_ms_per_update']:.2f} ms per update "
        f"(its thread had the CPU {100 * summary['learner_cpu_share']:.0f}% of the time)",
        *describe_learners(summary),
    ]


def pacing(config: ApexJobConfig):
    """The replay ratio the job's actors and learner hold (see
    :func:`experiments.roles.program.pacing`); the family defaults must be filled."""
    from algorithms.dqn import DQNBuilder
    from experiments.roles.program import pacing as program_pacing

    for name in ("n_step", "updates_per_step", "batch_size"):
        if getattr(config.learn, name) is None:
            raise ValueError(f"pacing needs {flag(name)}: fill the family defaults first (env_defaults)")
    return program_pacing(DQNBuilder.flow_of(config.learn), num_actors=config.num_actors,
                          num_envs=config.env.num_envs, learners=config.learners)


def extra_ranks(config: ApexJobConfig) -> int:
    return config.replay.extra_ranks()


PROGRAM = Program(name="apex", builder=builder)


@functools.cache
def job():
    """The runtime's Job (built on first use: the roles import torch)."""
    from experiments.roles.actor_learner import make_job

    return make_job(PROGRAM, resolve=resolve, check=check, describe=describe, env_fn=job_env_fn,
                    env_defaults=env_defaults, extra_ranks=extra_ranks)


def run(config: ApexJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job (serial, a local world, or this rank under torchrun); returns the
    learner's summary (``{}`` on other ranks under torchrun). With
    ``config.run.resume = DIR`` the run in DIR goes on with its saved config; each field
    of ``config`` that differs from ``ApexJobConfig()`` overrides it
    (``experiments.runtime.resume``)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.runtime.summary import format_summary as box

    learner = summary.get("algorithm", "").rsplit(".", 1)[-1] or "DQN"
    return box(summary, describe(summary), title=f"Ape-X {learner}")


def main(argv: Sequence[str] | None = None) -> int:
    # The job function, not the job: building it imports the roles (torch), and a
    # Ctrl-C in that first second is a stop too.
    return main_for(job, ApexJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
