"""A job's entry points, written once: ``experiments/<job>.py`` names its program,
config, hooks and summary lines, and :func:`define_job` gives it ``job()``, ``run``,
``format_summary`` and ``main`` (``python -m experiments.<job>``). The hooks and fields
that several jobs share are here too."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from experiments.runtime.cli import field, flag
from experiments.runtime.envs import check_env, env_factory, fill_by_family
from experiments.runtime.parts import Parts


def job_env_fn(config: Any, parts: Parts):
    """The env factory of a job with an ``env`` section: the user's env, else
    ``--env-id``'s; made in the launching process and shipped to every rank."""
    return env_factory(config.env.env_id, parts.env)


def family_defaults(learn: Any, env: Any = None, *, run: Any = None) -> Callable[[Any, Parts], None]:
    """A job's ``env_defaults`` hook: the ``learn`` fields left unset from the table
    ``learn`` and, with ``env`` (``run``), the ``env`` (``run``) section's from that one,
    by the observation family of the job's env
    (:func:`experiments.runtime.envs.fill_by_family`; a default of ``RUN_BUDGET``
    becomes the run's ``--max-env-steps``)."""
    return functools.partial(_fill_by_family, learn, env, run)


def _fill_by_family(learn: Any, env: Any, run: Any, config: Any, parts: Parts) -> None:
    fill_family(config, job_env_fn(config, parts), learn=learn, env=env, run=run)


def fill_family(config: Any, factory: Callable[[], Any], *, learn: Any, env: Any = None, run: Any = None) -> None:
    """:func:`family_defaults`' fill from an env ``factory`` (one env, built once:
    ``env_spaces`` caches it per factory)."""
    fill_by_family(config.learn, learn, factory, run_budget=config.run.max_env_steps)
    for section, table in ((config.env, env), (config.run, run)):
        if table is not None:
            fill_by_family(section, table, factory)


def fill_unset(section: Any, values: Mapping[str, Any]) -> Any:
    """The fields of the config ``section`` left None set to ``values``'; returns ``section``."""
    for name, value in values.items():
        if getattr(section, name) is None:
            setattr(section, name, value)
    return section


def check_job(config: Any, parts: Parts, *, job: str, algorithm: type, actor: type | None = None,
              learner: type | None = None, discrete_only: bool = False) -> None:
    """A gymnasium job's ``check`` hook: the user's parts subclass the job's
    ``algorithm`` (``actor``, ``learner``) and its env's actions are Discrete or, unless
    ``discrete_only``, a Box."""
    from gymnasium import spaces

    parts.check(algorithm=algorithm, actor=actor, learner=learner)
    actions = (spaces.Discrete,) if discrete_only else (spaces.Discrete, spaces.Box)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=actions, job=job)


def unset_by_family(config_cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """The factory of a job's ``learn`` section: an algorithm's ``config_cls`` with the
    fields ``names`` None, which the job fills by the env's observation family."""
    def section(**values: Any) -> Any:
        return config_cls(**{**dict.fromkeys(names), **values})

    section.__name__ = section.__qualname__ = "LearnConfig"
    return section


def default_actors() -> int:
    """An actor-learner job's actors: one per core this process may use, at least 2 (the
    learner shares a core; actors throttle to its pace)."""
    from experiments.runtime.config import usable_cores

    return max(2, usable_cores())


def actors_field(default: int = 0) -> Any:
    """An actor-learner job's ``--num-actors``."""
    return field(default, help=(
        "actors of a local run (0: one per CPU core this process may use, at least 2); under "
        "torchrun the world size decides"))


def validate_actors(config: Any) -> None:
    """An actor-learner job config's ``--num-actors`` and ``--learners`` checks."""
    from experiments.roles.actor_learner.program import validate_learners

    if config.num_actors < 0:
        raise ValueError(f"{flag('num_actors')} must be >= 0, got {config.num_actors}")
    validate_learners(config)


class WorkersAreActors:
    """A job config whose ``--num-workers`` counts the actor-learner program's actors:
    ``num_actors``, the program's name for it."""

    num_workers: int

    @property
    def num_actors(self) -> int:
        return self.num_workers

    @num_actors.setter
    def num_actors(self, value: int) -> None:
        self.num_workers = value


def resolve_actors(config: Any, world_size: int | None, *, extra: int = 0, own_data: bool = True) -> int:
    """An actor-learner job's ``resolve`` hook: fill ``--num-actors 0`` (a local run) or
    take the actors the world leaves beside ``config.learners`` learners and ``extra``
    other ranks (under torchrun); the number of ranks. ``own_data``: each learner learns
    from its own actors' data (see :func:`experiments.roles.actor_learner.program.check_learners`)."""
    from experiments.roles.actor_learner.program import check_learners

    learners = config.learners
    if world_size is None:
        config.num_actors = config.num_actors or default_actors()
        check_learners(learners, config.num_actors, own_data=own_data)
        return learners + extra + config.num_actors
    actors = world_size - learners - extra
    if actors < 1:
        raise ValueError(f"a world of {world_size} ranks leaves no actor with --learners {learners}"
                         + (f" and {extra} replay ranks" if extra else ""))
    check_learners(learners, actors, own_data=own_data)
    config.num_actors = actors
    return world_size


def resolve_with_replay(config: Any, world_size: int | None) -> int:
    """The ``resolve`` hook of a job with a ``replay`` section: :func:`resolve_actors`
    beside its replay ranks; each learner learns from its own actors' data with
    ``--replay-placement learner``."""
    return resolve_actors(config, world_size, extra=config.replay.extra_ranks(),
                          own_data=config.replay.replay_placement == "learner")


def replay_ranks(config: Any) -> int:
    """The ``extra_ranks`` hook of a job with a ``replay`` section: its replay ranks."""
    return config.replay.extra_ranks()


def no_extra_ranks(config: Any) -> int:
    """The ``extra_ranks`` hook of a job with no ranks besides its learners and actors."""
    return 0


def play_with_builder(program: Any, ctx: Any, policy: Any, *, episodes: int, seed: int) -> list[float]:
    """An actor-learner job's ``play`` hook (``functools.partial(play_with_builder,
    PROGRAM)``): the returns of ``episodes`` greedy episodes of a loaded policy
    (``experiments.evaluate``) on the builder's own vector env, where gymnasium's cannot."""
    from experiments.roles.actor_learner.program import Setup
    from experiments.runtime.envs import learning_rewards

    setup = Setup.of(program, ctx)
    envs = learning_rewards(setup.builder.make_vector_env(setup.env_fn, num_envs=episodes, num_workers=0),
                            setup.env)
    try:
        return [float(r) for r in setup.builder.play(policy, envs, episodes=episodes, seed=seed)]
    finally:
        envs.close()


def describe_members(summary: dict[str, Any]) -> list[str]:
    """A synchronous data-parallel job's summary lines (its learner group's members)."""
    from experiments.roles.sync.lead import describe_members as lines

    return lines(summary)


def describe_actor_learner(summary: dict[str, Any], *, batch: str, waits_for: str) -> list[str]:
    """An actor-learner job's summary lines: actors, the learner's waiting and CPU, its learners."""
    from experiments.roles.actor_learner.program import describe_learners

    return [
        f"actors             {summary['num_actors']} ({batch})",
        f"learner waiting    {100 * summary['wait_fraction']:.1f}% of its time (for {waits_for})",
        f"learner CPU        {summary['learner_cpu_ms_per_update']:.2f} ms per update "
        f"(its thread had the CPU {100 * summary['learner_cpu_share']:.0f}% of the time)",
        *describe_learners(summary),
    ]


class JobEntry:
    """``roles``: the module whose ``make_job(program, describe=, env_fn=, **hooks)``
    makes the runtime's Job, or with no ``program`` whose ``JOB`` it is (imported on
    first use: the roles import torch). ``retired``: flags ``main`` refuses, each with
    what replaced it; ``forward``: a flag ``main`` answers by running another job's
    ``main`` with the other flags, as ``{flag: (module, what that job is)}``."""

    def __init__(self, *, title: str | Callable[[dict[str, Any]], str], config_cls: type, program: Any = None,
                 roles: str, describe: Callable, env_fn: Callable = job_env_fn,
                 hooks: dict[str, Callable] | None = None, retired: Mapping[str, str] | None = None,
                 forward: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.title, self.config_cls, self.program, self.roles = title, config_cls, program, roles
        self.describe, self.env_fn, self.hooks = describe, env_fn, hooks or {}
        self.retired, self.forward = dict(retired or {}), dict(forward or {})
        self._job = None

    def job(self):
        """The runtime's Job (built on first use)."""
        if self._job is None:
            roles = importlib.import_module(self.roles)
            self._job = roles.JOB if self.program is None else roles.make_job(
                self.program, describe=self.describe, env_fn=self.env_fn, **self.hooks)
        return self._job

    def run(self, config: Any, *, parts: Parts | None = None, quiet: bool = False,
            started: float | None = None) -> dict[str, Any]:
        """Run the job (serial, a local world, or this rank under torchrun); returns the
        lead's summary (``{}`` on other ranks under torchrun)."""
        from experiments.runtime.job import run_job

        return run_job(self.job(), config, parts=parts, quiet=quiet, started=started)

    def format_summary(self, summary: dict[str, Any]) -> str:
        from experiments.runtime.summary import format_summary as box

        title = self.title if isinstance(self.title, str) else self.title(summary)
        return box(summary, self.describe(summary), title=title)

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``python -m experiments.<job>``: exit status 2 for a retired flag (naming what
        replaced it), another job's ``main`` for a forwarded one."""
        from experiments.runtime.job import main_for

        args = list(sys.argv[1:] if argv is None else argv)
        for arg in args:
            name = arg.split("=")[0]
            if name in self.retired:
                prog = os.path.basename(sys.argv[0])
                print(f"{prog}: error: {name} is retired: {self.retired[name]}", file=sys.stderr)
                return 2
        for name, (module, what) in self.forward.items():
            if name in args:
                print(f"{name}: running python -m {module} ({what})", file=sys.stderr)
                return importlib.import_module(module).main([a for a in args if a != name])
        return main_for(self.job, self.config_cls, self.format_summary, args)


def sync_job(*, title: str, config_cls: type, program: Any, check: Callable,
             env_defaults: Callable | None) -> JobEntry:
    """A synchronous data-parallel job's entry (``experiments.roles.sync``); its summary
    lines are its learner group's members."""
    return JobEntry(title=title, config_cls=config_cls, program=program, roles="experiments.roles.sync",
                    describe=describe_members, hooks={"check": check, "env_defaults": env_defaults})


def actor_learner_job(*, title: str | Callable[[dict[str, Any]], str], config_cls: type, program: Any,
                      describe: Callable, check: Callable, env_defaults: Callable | None,
                      resolve: Callable = resolve_actors, extra_ranks: Callable[[Any], int] = no_extra_ranks,
                      env_fn: Callable = job_env_fn, play: Callable | None = None,
                      retired: Mapping[str, str] | None = None,
                      forward: Mapping[str, tuple[str, str]] | None = None) -> JobEntry:
    """An actor-learner job's entry (``experiments.roles.actor_learner``). By default
    its ranks are its learners and actors (:func:`resolve_actors`), none besides."""
    hooks = {"resolve": resolve, "check": check, "env_defaults": env_defaults, "extra_ranks": extra_ranks,
             "play": play}
    return JobEntry(title=title, config_cls=config_cls, program=program, roles="experiments.roles.actor_learner",
                    describe=describe, env_fn=env_fn, hooks=hooks, retired=retired, forward=forward)


def define_job(**kwargs: Any) -> JobEntry:
    """A :class:`JobEntry`; its module binds ``job, run, format_summary, main`` from it."""
    return JobEntry(**kwargs)
