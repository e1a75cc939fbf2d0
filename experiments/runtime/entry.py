"""A job's entry points, written once: ``experiments/<job>.py`` names its program,
config, hooks and summary lines, and :func:`define_job` gives it ``job()``, ``run``,
``format_summary`` and ``main`` (``python -m experiments.<job>``)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from experiments.runtime.envs import env_factory, fill_by_family
from experiments.runtime.parts import Parts


def job_env_fn(config: Any, parts: Parts):
    """The env factory of a job with an ``env`` section: the user's env, else
    ``--env-id``'s; made in the launching process and shipped to every rank."""
    return env_factory(config.env.env_id, parts.env)


def family_defaults(learn: Any, env: Any = None) -> Callable[[Any, Parts], None]:
    """A job's ``env_defaults`` hook: the ``learn`` fields left unset from the table
    ``learn`` and, with ``env``, the ``env`` section's from that one, by the
    observation family of the job's env (:func:`experiments.runtime.envs.fill_by_family`;
    a default of ``RUN_BUDGET`` becomes the run's ``--max-env-steps``)."""
    return functools.partial(_fill_by_family, learn, env)


def _fill_by_family(learn: Any, env: Any, config: Any, parts: Parts) -> None:
    factory = job_env_fn(config, parts)  # one env, built once: env_spaces caches it
    fill_by_family(config.learn, learn, factory, run_budget=config.run.max_env_steps)
    if env is not None:
        fill_by_family(config.env, env, factory)


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
    first use: the roles import torch)."""

    def __init__(self, *, title: str | Callable[[dict[str, Any]], str], config_cls: type, program: Any = None,
                 roles: str, describe: Callable, env_fn: Callable = job_env_fn,
                 hooks: dict[str, Callable] | None = None) -> None:
        self.title, self.config_cls, self.program, self.roles = title, config_cls, program, roles
        self.describe, self.env_fn, self.hooks = describe, env_fn, hooks or {}
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
        from experiments.runtime.job import main_for

        return main_for(self.job, self.config_cls, self.format_summary, list(argv) if argv is not None else None)


def define_job(**kwargs: Any) -> JobEntry:
    """A :class:`JobEntry`; its module binds ``job, run, format_summary, main`` from it."""
    return JobEntry(**kwargs)
