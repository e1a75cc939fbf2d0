"""What the actor-learner roles take from a job, and the rules every rank agrees on.

A job that runs on the actor-learner program (Ape-X DQN and TD3, IMPALA) gives a
:class:`Program`: its name and how to make its algorithm's
:class:`~algorithms.builder.Builder` from the config and the user's parts. Each rank
turns the shipped job context into a :class:`Setup` once, the typed pieces the roles
use: the run and env sections, the data-path section its builder's flow names, the
builder itself and the numbers of learners and actors.

The role rule (also under torchrun), for ``K = --learners`` and ``R = --replay-ranks``
(only with ``--replay-placement replay-ranks``)::

    rank 0              learner 0 (coordinator, parameter server, evaluation
                        bookkeeping, checkpoints, TensorBoard)
    ranks 1 .. K-1      learners 1 .. K-1 (members of learner 0's learner group)
    ranks K .. K+R-1    dedicated replay ranks
    the others          actors, numbered from 0 (the last one also evaluates)

With one learner (the default) that is rank 0 learner, ranks 1..R replay, as always.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from algorithms.builder import Builder, EnvSpec, Flow
from algorithms.pacing import Pacing
from experiments.runtime.lead import LeadContext

if TYPE_CHECKING:
    from experiments.roles.actor_learner.paths import DataPath

# The config section each flow's data path is made from (A3C's gradient server: ``server``).
SECTIONS = {"replay": "replay", "queue": "queue", "gradients": "server"}

REPORT_EVERY_S = 0.02
# The most reports per second the actors send together. Each is an RPC that the
# learner's process serves, 0.2-0.3 ms of its CPU (the coordinator's own handler is
# 0.01-0.02 ms of that): 64 actors reporting every 20 ms (1.8K reports/s) took 49% of
# that process's CPU, and its learner made 12 updates/s; capped at 250/s, 9% and 28
# updates/s (python -m experiments.bench.scale.apex --cases fan_in).
REPORTS_PER_S = 250


@dataclasses.dataclass(frozen=True)
class Program:
    """An actor-learner job: ``name`` (run directories, checkpoints, the RPC group)
    and ``builder(config, parts, spec) -> Builder`` (module-level, so ranks unpickle
    it by reference)."""

    name: str
    builder: Callable[[Any, Any, EnvSpec], Builder]


@dataclasses.dataclass(frozen=True)
class Setup:
    """One rank's typed pieces of a job (see the module docstring), resolved once from
    the job context: ``lead`` (what the lead keeps a run with), the user's ``parts``,
    the builder and its flow, the run and env sections, the data ``path``
    (:mod:`experiments.roles.actor_learner.paths`), the actors' env options and the numbers of
    learners and actors (``num_actors``: the world's, once a rank knows it)."""

    lead: LeadContext
    parts: Any  # Parts
    builder: Builder
    flow: Flow
    run: Any  # RunConfig
    env: Any  # EnvConfig
    path: DataPath
    num_actors: int
    env_fn: Callable[[], Any]
    env_options: dict[str, Any]  # make_vector_env's keywords for an actor's envs
    learners: int = 1

    @classmethod
    def of(cls, program: Program, ctx: Any) -> Setup:
        from experiments.roles.actor_learner.paths import data_path
        from experiments.runtime.envs import env_factory, env_spaces, vector_env_options

        config = ctx.config
        env_fn = ctx.env_fn if ctx.env_fn is not None else env_factory(config.env.env_id, ctx.parts.env)
        obs_space, act_space = env_spaces(env_fn)
        # The user's algorithm, or the job's.
        builder = ctx.parts.make_builder(program.builder, config, EnvSpec(obs_space, act_space), Builder)
        flow = builder.flow
        name = SECTIONS.get(flow.data)
        section = getattr(config, name, None) if name is not None else None
        if section is None:
            raise TypeError(f"{type(config).__name__} has no {name or flow.data} section, which "
                            f"{type(builder).__name__}'s flow needs")
        path = data_path(flow.data, section)
        return cls(lead=LeadContext.of(ctx), parts=ctx.parts, builder=builder, flow=flow, run=config.run,
                   env=config.env, path=path, num_actors=config.num_actors, env_fn=env_fn,
                   env_options=vector_env_options(config), learners=learners_of(config))

    def extra_ranks(self) -> int:
        return self.path.extra_ranks


def learners_of(config: Any) -> int:
    """A job config's ``--learners`` (1 for a job without the flag)."""
    return int(getattr(config, "learners", 1))


def role_of(rank: int, world_size: int, extra: int, learners: int = 1) -> tuple[str, int]:
    """The documented role rule: ranks 0..``learners``-1 learners; the next ``extra``
    replay; the rest actors, numbered from 0."""
    if learners < 1:
        raise ValueError(f"--learners must be >= 1, got {learners}")
    if world_size - learners - extra < 1:
        raise ValueError(f"a world of {world_size} ranks with --learners {learners} and {extra} replay "
                         "ranks has no actor")
    if rank < learners:
        return "learner", rank
    if rank < learners + extra:
        return "replay", rank - learners
    return "actor", rank - learners - extra


def validate_learners(config: Any) -> None:
    """A job config's ``--learners`` checks that need no world: at least 1, and one
    process (``--serial``) runs one learner."""
    learners = learners_of(config)
    if learners < 1:
        raise ValueError(f"--learners must be >= 1, got {learners}")
    if learners > 1 and config.run.serial:
        raise ValueError(f"--serial runs one learner in its one process: use --learners 1, not {learners}")


def describe_learners(summary: dict[str, Any]) -> list[str]:
    """The summary box's line on several learners (none for one)."""
    if summary.get("learners", 1) == 1:
        return []
    same = "identical" if summary.get("learners_identical") else "DIFFERENT"
    return [f"learners           {summary['learners']} in step ({summary['updates']:,} updates each, "
            f"parameters {same})"]


def check_learners(learners: int, num_actors: int, *, own_data: bool) -> None:
    """ValueError naming ``--learners`` when it cannot run: fewer than 1, or, where each
    learner learns from its own actors' data (``own_data``: a replay split over the
    learners, or a queue each; actor ``i`` feeds learner ``i mod K``), fewer actors
    than learners, which would leave a learner with no data and all of them waiting."""
    if learners < 1:
        raise ValueError(f"--learners must be >= 1, got {learners}")
    if own_data and num_actors < learners:
        raise ValueError(f"--learners {learners} needs at least {learners} actors, got {num_actors}: each "
                         "learner learns from the data of its own actors (actor i feeds learner i mod K)")


def role_names(extra: int, nprocs: int, learners: int = 1) -> list[str]:
    """Each rank's role in words, for the launcher's warnings."""
    named = (role_of(r, nprocs, extra, learners) for r in range(nprocs))
    return [role if role == "learner" and learners == 1 else f"{role} {index}" for role, index in named]


def report_every(num_actors: int) -> float:
    """Seconds between one actor's reports: ``REPORT_EVERY_S``, stretched once
    ``num_actors`` would send more than ``REPORTS_PER_S`` together (above 5 actors).
    Pacing holds either way: an actor counts its own unreported steps; the others'
    add at most one interval's steps each to its bound."""
    return max(REPORT_EVERY_S, num_actors / REPORTS_PER_S)


def pacing(flow: Flow, *, num_actors: int, num_envs: int, learners: int = 1) -> Pacing | None:
    """The replay ratio both sides hold (None for a queue, whose bound paces).
    ``flow.updates_per_step`` counts batches: ``learners`` learners update in step, one
    batch each, so pacing counts their joint updates at ``1 / learners`` of that rate
    and the samples drawn per env step (the replay ratio) stay the same for any
    number of learners, which can then take ``learners`` times the env steps. Its
    slack covers the env steps the actors hold back (``flow.held_steps`` vector steps
    each before their transitions are added): the learner starts only on reported
    transitions, so with less slack than that pacing deadlocks. Measured: 32 actors
    with 4 envs hold up to 2432 env steps, past the default slack of 1000 (+
    learning_starts 200), and made no update in 30 s (python -m
    experiments.bench.scale.apex --cases actor_scaling)."""
    if flow.updates_per_step is None:
        return None
    held = num_actors * num_envs * flow.held_steps
    starts = flow.learning_starts if flow.start_steps is None else flow.start_steps  # env steps
    return Pacing(updates_per_step=flow.updates_per_step / learners, learning_starts=starts,
                  slack_steps=max(Pacing.slack_steps, held + flow.batch_size))


def actor_seed(run_seed: int, index: int, restarts: int = 0) -> int:
    """Actor ``index``'s env and exploration seed: its first process keeps the run's
    historical ``seed + 10000 (index + 1)``; the process that replaces it after its
    ``restarts``-th death gets a fresh one drawn from (seed, index, restarts), so it
    does not replay its predecessor's episodes."""
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, got {restarts}")
    if restarts == 0:
        return run_seed + 10_000 * (index + 1)
    return int(np.random.SeedSequence([run_seed & 0xFFFFFFFF, index, restarts]).generate_state(1)[0])


def eval_env(setup: Setup, *, seed: int):
    """Greedy evaluation envs: one per episode, each env's first episode counts. Their
    rewards are what the actors' envs give (a policy that takes the last reward sees
    them), their returns the game's."""
    from experiments.runtime.envs import learning_rewards

    return learning_rewards(setup.builder.make_vector_env(
        setup.env_fn, num_envs=setup.run.eval_episodes, num_workers=0, seed=seed), setup.env)


def evaluate(setup: Setup, algorithm: Any, envs: Any, *, env_steps: int, version: int):
    """A greedy evaluation of ``algorithm`` (parameters ``version``) on ``envs`` (the
    evaluator's, one per episode), on episodes seeded by the run's seed and
    ``env_steps``; the result holds the parameters and that seed, so the run keeps the
    network that scored and ``experiments.evaluate`` can replay it."""
    import functools

    from experiments.runtime.evaluation import evaluation

    builder = setup.builder
    seed, episodes = setup.run.seed + 7 + env_steps, setup.run.eval_episodes
    return evaluation(builder.network_of(algorithm),
                      functools.partial(builder.evaluation_episodes, algorithm, envs, episodes=episodes, seed=seed),
                      env_steps=env_steps, version=version, policy=algorithm.policy_state(), seed=seed)
