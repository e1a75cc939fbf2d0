"""Ape-X, the project's main job: ``python -m experiments.apex``.

Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR,
arXiv:1803.00933): actors fill a prioritized replay that the learner samples; DQN for
Discrete actions (or R2D2, recurrent), TD3, DDPG or SAC for a Box. Roles by rank,
evaluation, the config's sections: docs/jobs.md, "Ape-X"; the learners: "Ape-X's learners".
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, ClassVar, Literal

from algorithms.dqn.config import BY_FAMILY, DEFAULTS_BY_FAMILY, NOISY_DEFAULTS, ApexConfig  # noqa: F401 (the job's tables)
from algorithms.dqn.dqn import DQNConfig
from algorithms.r2d2.config import DEFAULTS_BY_FAMILY as R2D2_BY_FAMILY
from algorithms.r2d2.config import R2D2Config
from algorithms.sac.config import SACConfig
from algorithms.td3.config import ContinuousConfig
from experiments.roles.actor_learner.program import Program
from experiments.runtime import EnvConfig, Parts, RunConfig, entry, field, flag, section
from experiments.runtime.config import evaluation_by_family
from experiments.runtime.data import ReplayConfig
from experiments.runtime.envs import check_env

LearnConfig = entry.unset_by_family(ApexConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class ApexJobConfig:
    """Ape-X (Horgan et al. 2018) on one machine or, under torchrun, a cluster: DQN for
    discrete actions (or R2D2, recurrent), TD3 (or DDPG, or SAC) for continuous ones."""

    # What the checkpoint's state is shaped by: --resume may not change these
    # (experiments.runtime.resume). The shard count of a sharded replay is checked
    # against the checkpoint's parts instead (ReplayConfig.check_resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "algorithm", "hidden", "cnn", "dueling", "distributional", "n_atoms", "noisy", "critic_layer_norm",
        "replay_capacity", "replay_placement", "share_frames", "learners", "lstm_size", "last_action_reward", "burn_in",
        "unroll")

    def fixed_fields(self) -> tuple[str, ...]:
        """R2D2's stored sequences are burn-in + unroll + n-step steps long: its replay
        holds them at that length (a DQN's transitions take any n-step)."""
        return ("n_step",) if self.algorithm == "r2d2" else ()

    run: RunConfig = section(lambda: RunConfig(max_env_steps=1_000_000, eval_every=None, eval_episodes=None))
    env: EnvConfig = section(EnvConfig)
    replay: ReplayConfig = section(ReplayConfig)
    learn: ApexConfig = section(LearnConfig)
    dqn: DQNConfig = section(DQNConfig)
    continuous: ContinuousConfig = section(ContinuousConfig)
    sac: SACConfig = section(SACConfig)
    # R2D2's own; the job's defaults are for small envs (the paper's Atari ones: 40, 40,
    # 40, 512), a sequence of burn_in + unroll + n_step steps starting every period. An
    # LSTM of 128 was not measured better on BreakoutNoTrail (experiments/tuning.md, "R2D2").
    # lr_anneal_steps None: filled by observation family (fill_r2d2).
    r2d2: R2D2Config = section(lambda: R2D2Config(burn_in=4, unroll=16, period=8, lstm_size=64,
                                                  lr_anneal_steps=None))
    algorithm: Literal["auto", "dqn", "td3", "ddpg", "sac", "r2d2"] = field("auto", help=(
        "the learner: auto (by the action space: Discrete -> dqn, Box -> td3), dqn, td3, ddpg, sac or "
        "r2d2 (recurrent: replays sequences, for partially observed envs)"))
    num_actors: int = entry.actors_field()
    learners: int = field(1, help=(
        "learner ranks (0 .. K-1), each sampling its own batch (with --replay-placement learner, from "
        "its own shard of the replay, fed by actors i mod K), gradients averaged so their parameters "
        "stay identical; learner 0 publishes and keeps the run"))

    def validate(self) -> None:
        entry.validate_actors(self)
        if self.learners > 1 and self.learn.recycle_every:
            raise ValueError(f"{flag('recycle_every')} needs --learners 1: each learner would recycle other "
                             "units (by its own batch) and their parameters would part")
        # R2D2's items are sequences, each adding --period env steps to the replay.
        period = self.r2d2.period if self.algorithm == "r2d2" else 1
        self.replay.check_batches(self.learn.batch_size, learners=self.learners, serial=self.run.serial,
                                  steps_per_item=period, item=f" / --period {period}" if period > 1 else "")


# ------------------------------------------------------------ the job's hooks


def algorithm_of(config: ApexJobConfig, action_space: Any) -> str:
    """``--algorithm``, with ``auto`` resolved by the action space."""
    from gymnasium import spaces

    if config.algorithm != "auto":
        return config.algorithm
    return "td3" if isinstance(action_space, spaces.Box) else "dqn"


def builder_class(algorithm: str) -> type:
    from algorithms.dqn import DQNBuilder
    from algorithms.r2d2 import R2D2Builder
    from algorithms.sac import SACBuilder
    from algorithms.td3 import TD3Builder

    builders = {"dqn": DQNBuilder, "td3": TD3Builder, "ddpg": TD3Builder, "sac": SACBuilder, "r2d2": R2D2Builder}
    if algorithm not in builders:
        raise ValueError(f"{flag('algorithm')} must be resolved to one of {sorted(builders)}, got {algorithm!r}")
    return builders[algorithm]


def builder(config: ApexJobConfig, parts: Parts, spec: Any):
    """The algorithm's builder for this config (the Program's ``builder``)."""
    name = algorithm_of(config, spec.action_space)
    user = {"network": parts.network, "algorithm": parts.algorithm, "actor": parts.actor, "learner": parts.learner}
    if name == "dqn":
        return builder_class(name)(learn=config.learn, dqn=config.dqn, spec=spec, **user)
    if name == "sac":
        return builder_class(name)(learn=config.learn, continuous=config.continuous, sac=config.sac, spec=spec,
                                   **user)
    if name == "r2d2":
        return builder_class(name)(learn=config.learn, r2d2=config.r2d2, spec=spec, **user)
    return builder_class(name)(algorithm_name=name, learn=config.learn, continuous=config.continuous, spec=spec,
                               **user)


# The algorithms' own sections, and which of them each algorithm reads: a flag of
# another's would change nothing in this run, so it is refused, not ignored.
SECTIONS = {"dqn": ("dqn",), "r2d2": ("r2d2",), "td3": ("continuous",), "ddpg": ("continuous",),
            "sac": ("continuous", "sac")}
# The learn fields an algorithm never reads. R2D2: a hard target copy every
# --target-update updates, always double Q, eager forwards, no recycling. TD3, DDPG
# and SAC: Polyak targets (--tau), Adam at its default epsilon, MLPs without a dueling
# head, exploration by --sigma (the continuous section), not epsilon.
_CONTINUOUS_UNREAD = ("target_update", "adam_eps", "recycle_every", "recycle_tau", "double_q", "dueling", "cnn",
                      "eps", "eps_alpha")
LEARN_UNREAD = {"r2d2": ("tau", "fast", "double_q", "recycle_every", "recycle_tau"), "td3": _CONTINUOUS_UNREAD,
                "ddpg": _CONTINUOUS_UNREAD, "sac": _CONTINUOUS_UNREAD}


def check_sections(config: ApexJobConfig, algorithm: str, *, family: str) -> None:
    """ValueError naming the flags set (away from their defaults) in the sections of
    algorithms other than ``algorithm``, and whose they are, or in ``learn`` where the
    algorithm never reads them (its own defaults for the observation ``family``, as
    :func:`fill_learn` fills them, are not flagged). Not on ``--resume``: a saved
    config holds the defaults of the version that wrote it."""
    from experiments.runtime.cli import changed_fields

    if config.run.resume:
        return
    default = ApexJobConfig()
    stray = []
    for name in ("dqn", "r2d2", "continuous", "sac"):
        if name not in SECTIONS[algorithm]:
            owners = " or ".join(a for a, sections in SECTIONS.items() if name in sections)
            stray += [f"{flag(f)} ({owners})" for f in changed_fields(getattr(config, name), getattr(default, name))]
    unread = set(LEARN_UNREAD.get(algorithm, ()))
    filled = builder_class(algorithm).defaults(family)
    stray += [f"{flag(f)} (unused by {algorithm})" for f, value in changed_fields(config.learn, default.learn).items()
              if f in unread and not (f in filled and value == filled[f])]
    if stray:
        raise ValueError(f"{', '.join(stray)}: not {algorithm}'s flags, and this run is {flag('algorithm')} "
                         f"{algorithm}: drop them, or choose the algorithm they belong to")


resolve = entry.resolve_with_replay  # fills --num-actors 0; ranks: learners, replay, actors


def check(config: ApexJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.nets import observation_family
    from experiments.runtime.envs import env_name, env_spaces

    check_env(lambda: entry.job_env_fn(config, parts), env_id=config.env.env_id,
              user_env=parts.env, actions=(spaces.Discrete, spaces.Box), job="Ape-X")
    obs_space, act_space = env_spaces(entry.job_env_fn(config, parts))
    name, env = algorithm_of(config, act_space), env_name(config.env.env_id, parts.env)
    wanted = spaces.Discrete if name in ("dqn", "r2d2") else spaces.Box
    if not isinstance(act_space, wanted):
        raise ValueError(f"{flag('algorithm')} {name} needs a {wanted.__name__} action space; {env} has {act_space}")
    if name not in ("dqn", "r2d2") and len(obs_space.shape or ()) != 1 and parts.network is None:
        raise ValueError(f"{flag('algorithm')} {name}'s default networks are MLPs on vector observations; "
                         f"{env} has {obs_space.shape} (give a network factory)")
    check_sections(config, name, family=observation_family(obs_space.shape or ()))
    cls = builder_class(name)
    parts.check(algorithm=cls.algorithm_base, actor=cls.actor_base, learner=cls.learner_base,
                why=f"the job runs {flag('algorithm')} {name} for {env}, whose action space is {act_space}")
    if config.run.resume:
        config.replay.check_resume(config.run.resume, learners=config.learners, num_actors=config.num_actors)


RUN_DEFAULTS_BY_FAMILY = evaluation_by_family(every=5000)


def env_defaults(config: ApexJobConfig, parts: Parts) -> None:
    """``--algorithm auto`` resolved by the action space, then every ``learn`` field left
    unset filled by :func:`fill_learn` (DQN with ``--noisy``: ``--eps`` 0 first, the
    noisy layers explore), ``--replay-capacity`` by the builder's ``replay_steps``, and
    the evaluations' ``--eval-every`` and ``--eval-episodes`` by family
    (:data:`RUN_DEFAULTS_BY_FAMILY`). The config saved in the run directory holds the
    results."""
    from algorithms.nets import observation_family
    from experiments.runtime.envs import env_spaces, fill_family

    obs_space, act_space = env_spaces(entry.job_env_fn(config, parts))
    config.algorithm = algorithm_of(config, act_space)
    if config.algorithm == "dqn" and config.dqn.noisy:
        entry.fill_unset(config.learn, NOISY_DEFAULTS)
    family = observation_family(obs_space.shape or ())
    fill_learn(config.learn, algorithm=config.algorithm, family=family)
    fill_family(config.run, RUN_DEFAULTS_BY_FAMILY, family)
    if config.algorithm == "r2d2":
        fill_r2d2(config.r2d2, family=family, run_budget=config.run.max_env_steps)
    if config.replay.replay_capacity is None:
        config.replay.replay_capacity = builder_class(config.algorithm).replay_steps
    check_replay_fits(config, obs_space, user_env=parts.env is not None)


def check_replay_fits(config: ApexJobConfig, obs_space: Any, *, user_env: bool = False,
                      available: int | None = None) -> None:
    """The replay's observations fit in memory (:meth:`ReplayConfig.check_fits`). An
    R2D2 sequence stores every step's observation (frames are not shared between
    sequences: 25 Atari frame stacks are 0.7 MB), a transition its obs and next_obs,
    about one frame where ``--share-frames`` stores each distinct frame once."""
    import numpy as np

    from experiments.roles.actor_learner.data import shares_frames
    from experiments.runtime.job import under_launcher

    if under_launcher():
        # A torchrun rank checks on its own node, maybe after the replay's holder has
        # taken the memory (a rank that rejoins): the local launch checks before any rank.
        return
    obs = int(np.prod(obs_space.shape or (1,))) * np.dtype(obs_space.dtype or np.float32).itemsize
    shape = tuple(obs_space.shape or ())
    if config.algorithm == "r2d2":  # the builder's sequence length, with learn's n-step
        length = dataclasses.replace(config.r2d2, n_step=config.learn.n_step).sequence_length
        steps, per_item, what = config.r2d2.period, length * obs, f"sequences of {length} observations of shape {shape}"
    elif shares_frames(config.replay, env_id=config.env.env_id, user_env=user_env, items="transitions",
                       obs_space=obs_space):
        steps, per_item, what = 1, obs // shape[0], f"transitions of about one {shape[1:]} frame"
    else:
        steps, per_item, what = 1, 2 * obs, f"transitions of obs and next_obs of shape {shape}"
    config.replay.check_fits(item_bytes=per_item, steps_per_item=steps, learners=config.learners,
                             num_actors=config.num_actors, what=what, available=available)


def fill_learn(learn: ApexConfig, *, algorithm: str, family: str) -> ApexConfig:
    """The ``learn`` fields left unset (None) filled by ``algorithm``'s builder's
    ``defaults(family)``. Returns ``learn``."""
    return entry.fill_unset(learn, builder_class(algorithm).defaults(family))


def fill_r2d2(r2d2: R2D2Config, *, family: str, run_budget: int) -> R2D2Config:
    """The ``r2d2`` section's fields left unset filled by observation ``family``
    (``algorithms.r2d2.config.DEFAULTS_BY_FAMILY``; ``RUN_BUDGET``: ``run_budget``, the
    run's ``--max-env-steps``). Returns ``r2d2``."""
    from experiments.runtime.envs import fill_family

    fill_family(r2d2, R2D2_BY_FAMILY, family, run_budget=run_budget)
    return r2d2


def describe(summary: dict[str, Any]) -> list[str]:
    items = "sequences" if summary.get("algorithm", "").endswith(".R2D2") else "transitions"
    return entry.describe_actor_learner(summary, waits_for="data", batch=(
        f"batch {summary['batch_size']}, replay {summary['replay_size']:,} {items}"))


def pacing(config: ApexJobConfig):
    """The replay ratio the job's actors and learner hold (see
    :func:`experiments.roles.actor_learner.program.pacing`); the family defaults must be filled."""
    from algorithms.dqn import DQNBuilder
    from experiments.roles.actor_learner.program import pacing as program_pacing

    return program_pacing(DQNBuilder.flow_of(config.learn), num_actors=config.num_actors,
                          num_envs=config.env.num_envs, learners=config.learners)


def title(summary: dict[str, Any]) -> str:
    return "Ape-X " + (summary.get("algorithm", "").rsplit(".", 1)[-1] or "DQN")


PROGRAM = Program(name="apex", builder=builder)
ENTRY = entry.actor_learner_job(
    title=title, config_cls=ApexJobConfig, program=PROGRAM, describe=describe, check=check,
    env_defaults=env_defaults, resolve=resolve, extra_ranks=entry.replay_ranks)
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
