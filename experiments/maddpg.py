"""MADDPG on any PettingZoo parallel env: ``python -m experiments.maddpg``.

Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments" (NeurIPS, arXiv:1706.02275), on the actor-learner program with
:class:`algorithms.maddpg.builder.MADDPGBuilder`. Envs, teams, the Python API,
TensorBoard tags and policy ensembles: docs/jobs.md, "MADDPG".
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any, ClassVar, Literal

from algorithms.maddpg.spec import MADDPGConfig
from experiments.roles.actor_learner.program import Program
from experiments.runtime import RunConfig, entry, field, section
from experiments.runtime.data import ReplayConfig as ProgramReplayConfig
from experiments.runtime.multiagent import (  # noqa: F401  (public, for scripts)
    MultiAgentEnvConfig,
    agent_specs,
    check_parallel_env,
    critic_sees,
    describe_teams,
    env_factory,
    evaluate,
    final_measures,
    teams_of,
)


@dataclasses.dataclass
class ReplayConfig(ProgramReplayConfig):
    """The actor-learner program's replay, sampled uniformly by default (MADDPG's), and
    how policy ensembles draw from it."""

    replay_capacity: int = field(1_000_000, help="replay capacity (transitions)")
    priority_alpha: float = field(0.0, help="prioritization exponent (0: uniform, MADDPG's replay)")
    ensemble_buffers: Literal["shared", "separate"] = field("shared", help=(
        "with --ensemble-size > 1: every sub-policy learns from every transition, or each from those "
        "its agent played with it (the paper's sub-buffers)"))


@dataclasses.dataclass
class MADDPGJobConfig:
    """MADDPG (Lowe et al. 2017) on a PettingZoo parallel env, on the actor-learner program."""

    # What the checkpoint's state (networks per agent and sub-policy, the replay) is
    # shaped by: --resume may not change these (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "n_agents", "continuous", "hidden", "ensemble_size", "ensemble_buffers",
        "critic_observes", "replay_capacity", "replay_placement", "learners")

    # Learning on CPU unless --device says otherwise: MPE's small networks made 1.3x fewer
    # updates/s on a GPU (an H100 machine, the cooperative env: 23 against 31; docs/gpu.md,
    # "A3C and MADDPG learn on the CPU").
    run: RunConfig = section(lambda: RunConfig(max_env_steps=1_000_000, eval_every=25_000,
                                               eval_episodes=10, device="cpu"))
    env: MultiAgentEnvConfig = section(MultiAgentEnvConfig)
    replay: ReplayConfig = section(ReplayConfig)
    learn: MADDPGConfig = section(MADDPGConfig)
    num_actors: int = entry.actors_field(1)
    learners: int = field(1, help=(
        "learner ranks (0 .. K-1), each sampling its own batch, gradients averaged so their parameters "
        "stay identical; learner 0 publishes and keeps the run"))

    def validate(self) -> None:
        entry.validate_actors(self)
        self.replay.check_batches(self.learn.batch_size, learners=self.learners, serial=self.run.serial)

    def algo_config(self) -> MADDPGConfig:
        """The algorithm's config: ``learn`` with the run's seed and the replay's layout."""
        return dataclasses.replace(self.learn, seed=self.run.seed, ensemble_buffers=self.replay.ensemble_buffers)


LearnConfig = MADDPGConfig  # the name the job's section had


# ------------------------------------------------------------ the job's hooks


def job_env_fn(config: MADDPGJobConfig, parts: Any):
    """The PettingZoo env factory, made in the launching process and shipped to every rank."""
    return env_factory(config.env, parts.env)


def builder(config: MADDPGJobConfig, parts: Any, spec: Any):
    """The MADDPG builder for this config (the Program's ``builder``): the agents and
    their spaces read from one env (``spec``, a gymnasium view of none, is replaced by
    the agents' joint spaces)."""
    from algorithms.builder import EnvSpec
    from algorithms.maddpg.builder import MADDPGBuilder
    from envs.multiagent import ParallelEnvAdapter

    env = ParallelEnvAdapter(job_env_fn(config, parts)())
    try:
        agents, obs_spaces, act_spaces = env.agents, env.agent_observation_spaces, env.agent_action_spaces
        joint = EnvSpec(env.observation_space, env.action_space)
    finally:
        env.close()
    return MADDPGBuilder(config=config.algo_config(), agents=agents, observation_spaces=obs_spaces,
                         action_spaces=act_spaces, spec=joint,
                         critic_sees=critic_sees(agents, config.learn.critic_observes), teams=teams_of(agents),
                         num_envs=config.env.num_envs,
                         measures=functools.partial(final_measures, job_env_fn(config, parts),
                                                    episodes=config.run.eval_episodes, seed=config.run.seed + 10_000),
                         evaluator=functools.partial(evaluate, env_fn=job_env_fn(config, parts)),
                         network=parts.network, algorithm=parts.algorithm,
                         actor=parts.actor, learner=parts.learner)


resolve = entry.resolve_with_replay  # fills --num-actors 0; ranks: learners, replay, actors


def check(config: MADDPGJobConfig, parts: Any) -> None:
    """The user's parts fit, and the env is a ParallelEnv whose agents MADDPG can drive."""
    from algorithms.maddpg import MADDPG
    from algorithms.maddpg.builder import MADDPGActor, MADDPGLearner

    parts.check(algorithm=MADDPG, actor=MADDPGActor, learner=MADDPGLearner)
    check_parallel_env(config.env, parts.env)


def describe(summary: dict[str, Any]) -> list[str]:
    return describe_teams(summary) + entry.describe_actor_learner(summary, waits_for="data", batch=(
        f"batch {summary['batch_size']}, replay {summary['replay_size']:,} transitions"))


PROGRAM = Program(name="maddpg", builder=builder)
ENTRY = entry.actor_learner_job(
    title="MADDPG", config_cls=MADDPGJobConfig, program=PROGRAM, describe=describe, check=check,
    env_defaults=None, resolve=resolve, extra_ranks=entry.replay_ranks, env_fn=job_env_fn,
    play=functools.partial(entry.play_with_builder, PROGRAM))
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
