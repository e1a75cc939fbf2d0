"""MADDPG on any PettingZoo parallel env: ``python -m experiments.maddpg``.

Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments" (NeurIPS, arXiv:1706.02275), on the actor-learner program
(:mod:`experiments.roles.actor_learner`) with :class:`algorithms.maddpg.builder.MADDPGBuilder`:
``--num-actors`` actors each step ``--num-envs`` env copies (in ``--env-workers``
subprocesses) and act for all of them at once (one batched forward per agent group);
the learner samples the replay uniformly (``--priority-alpha 0``) and makes
``--updates-per-step`` updates per env step; the defaults are the paper's (batch
1024, one update per 100 env steps, 25-step episodes). ``--serial`` runs the learner
and the actors in one process; under torchrun every rank takes its role by the
program's rule (rank 0 the learner, the others actors), a dead actor is restarted and
rejoins, and ``--learners K`` learns in step on K ranks.

Envs (``--env-id``): an mpe2 scenario by short name (``simple_spread``,
``simple_adversary``, ``simple_tag``, ``simple_push``, ``simple_reference``,
``simple_speaker_listener``, ...), ``module:factory`` (any callable that returns a
PettingZoo ParallelEnv) or the built-in ``cooperative`` / ``cooperative_hetero``;
``--n-agents``, ``--episode-steps`` and ``--continuous`` reach the env when its
factory takes them (``N``/``n_agents``, ``max_cycles``/``max_steps``,
``continuous_actions``/``continuous``). Agents form teams by name
(``adversary_0`` -> ``adversary``); ``--critic-observes team`` shows each critic
only its own team's observations and actions.

Python API: ``run(MADDPGJobConfig(...), parts=Parts(env=factory,
algorithm=MyMADDPG, network=actor_factory, actor=MyActor, learner=MyLearner))``.
``network(observation_space, action_space)`` builds one agent's actor (raw outputs:
logits for Discrete actions, pre-tanh values for a Box); the critics are MLPs of
``--hidden``; ``actor``/``learner`` subclass
:class:`~algorithms.maddpg.builder.MADDPGActor` / ``MADDPGLearner``.

TensorBoard (``--log-dir``, per run directory): ``charts/episodic_return`` (team
return: the sum over agents), ``charts/episodic_length``, ``charts/SPS``,
``losses/*``, ``eval/return`` (greedy, every ``--eval-every`` env steps), and
``agents/<agent>/episodic_return``, ``teams/<team>/episodic_return``.

Policy ensembles with ``--ensemble-buffers separate``: each update trains sub-policy
``updates % K`` of every agent on the transitions that agent played with it (the
paper's sub-buffers D_i^(k), drawn from the one replay; see
:mod:`algorithms.maddpg.builder`). ``shared`` trains all sub-policies each update.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from typing import Any, ClassVar, Literal

from algorithms.maddpg.spec import MADDPGConfig
from experiments.roles.actor_learner.program import Program, validate_learners
from experiments.runtime import RunConfig, field, flag, section
from experiments.runtime.data import ReplayConfig as ProgramReplayConfig
from experiments.runtime.entry import JobEntry, describe_actor_learner, resolve_actors
from experiments.runtime.envs import env_name
from experiments.runtime.multiagent import (  # noqa: F401  (public, for scripts)
    MultiAgentEnvConfig,
    agent_specs,
    critic_sees,
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
    num_actors: int = field(1, help=(
        "actors of a local run (0: one per CPU core this process may use, at least 2); under torchrun the "
        "world size decides"))
    learners: int = field(1, help=(
        "learner ranks (0 .. K-1), each sampling its own batch, gradients averaged so their parameters "
        "stay identical; learner 0 publishes and keeps the run"))

    def validate(self) -> None:
        if self.num_actors < 0:
            raise ValueError(f"{flag('num_actors')} must be >= 0, got {self.num_actors}")
        validate_learners(self)
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


def resolve(config: MADDPGJobConfig, world_size: int | None) -> int:
    """Fill ``--num-actors 0``; the number of ranks (learners + replay ranks + actors)."""
    return resolve_actors(config, world_size, extra=config.replay.extra_ranks(),
                          own_data=config.replay.replay_placement == "learner")


def extra_ranks(config: MADDPGJobConfig) -> int:
    return config.replay.extra_ranks()


def check(config: Any, parts: Any) -> None:
    """The user's parts fit, the env id resolves, the env flags reach it, and the
    env it builds is a ParallelEnv whose agents MADDPG can drive."""
    from algorithms.maddpg import MADDPG
    from algorithms.maddpg.builder import MADDPGActor, MADDPGLearner
    from envs.multiagent import ParallelEnvAdapter
    from envs.multiagent.registry import NotParallelEnv

    parts.check(algorithm=MADDPG, actor=MADDPGActor, learner=MADDPGLearner)
    factory = env_factory(config.env, parts.env)
    try:
        env = factory()
    except NotParallelEnv as exc:  # the message names where the env came from
        if parts.env is not None:
            raise
        raise ValueError(str(exc)) from None
    except TypeError as exc:  # e.g. a module:factory that needs arguments
        if parts.env is not None:
            raise
        raise ValueError(f"{flag('env_id')} {config.env.env_id!r}: calling its factory failed: {exc}") from None
    try:
        adapter = ParallelEnvAdapter(env)
        agent_specs(adapter.agents, adapter.agent_observation_spaces, adapter.agent_action_spaces)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{env_name(config.env.env_id, parts.env)}: {exc}") from None
    finally:
        env.close()


def _num(value: Any, fmt: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, fmt)


def describe(summary: dict[str, Any]) -> list[str]:
    teams = summary["teams"]
    lines = [f"agents             {len(summary['agents'])} in {len(teams)} team(s); critics observe "
             f"{summary['critic_observes']} (input sizes {', '.join(map(str, summary['critic_inputs']))})"]
    for team, members in teams.items():
        value = summary["team_return_last100"].get(team)
        lines.append(f"  team {team:<12} {len(members)} agent(s), last 100 mean return {_num(value, '.2f')}")
    if math.isfinite(summary.get("landmark_distance", math.nan)) or \
            math.isfinite(summary.get("collisions_per_episode", math.nan)):
        lines.append(f"final eval         landmark distance {_num(summary['landmark_distance'], '.3f')}, "
                     f"collisions {_num(summary['collisions_per_episode'], '.2f')} per episode")
    if math.isfinite(summary.get("tags_per_episode", math.nan)):
        lines.append(f"final eval         {summary['tags_per_episode']:.2f} adversary-good contacts per episode")
    lines.append(f"networks           {summary['mode']}")
    if summary.get("env_worker_restarts"):
        lines.append(f"env workers        {summary['env_worker_restarts']} restart(s), "
                     f"{summary.get('dropped_episodes', 0)} cut episode(s) dropped")
    return lines + describe_actor_learner(summary, waits_for="data", batch=(
        f"batch {summary['batch_size']}, replay {summary['replay_size']:,} transitions"))


def play(ctx: Any, policy: Any, *, episodes: int, seed: int) -> list[float]:
    """Team returns of ``episodes`` greedy episodes of a loaded policy (``experiments.evaluate``)."""
    from experiments.roles.actor_learner.program import Setup

    setup = Setup.of(PROGRAM, ctx)
    envs = setup.builder.make_vector_env(setup.env_fn, num_envs=episodes, num_workers=0)
    try:
        return [float(r) for r in setup.builder.play(policy, envs, episodes=episodes, seed=seed)]
    finally:
        envs.close()


PROGRAM = Program(name="maddpg", builder=builder)
ENTRY = JobEntry(title="MADDPG", config_cls=MADDPGJobConfig, program=PROGRAM, roles="experiments.roles.actor_learner",
                 describe=describe, env_fn=job_env_fn,
                 hooks={"resolve": resolve, "check": check, "env_defaults": None, "extra_ranks": extra_ranks,
                        "play": play})
job, run, format_summary, main = ENTRY.job, ENTRY.run, ENTRY.format_summary, ENTRY.main

if __name__ == "__main__":
    sys.exit(main())
