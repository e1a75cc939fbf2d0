"""A job's entry points, written once: ``experiments/<job>.py`` names its program,
config, hooks and summary lines, and :func:`define_job` gives it ``job()``, ``run``,
``format_summary`` and ``main`` (``python -m experiments.<job>``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from experiments.runtime.envs import env_factory
from experiments.runtime.parts import Parts


def job_env_fn(config: Any, parts: Parts):
    """The env factory of a job with an ``env`` section: the user's env, else
    ``--env-id``'s; made in the launching process and shipped to every rank."""
    return env_factory(config.env.env_id, parts.env)


class JobEntry:
    """``roles``: the module whose ``make_job(program, describe=, env_fn=, **hooks)``
    makes the runtime's Job (imported on first use: the roles import torch)."""

    def __init__(self, *, title: str, config_cls: type, program: Any, roles: str, describe: Callable,
                 env_fn: Callable = job_env_fn, hooks: dict[str, Callable]) -> None:
        self.title, self.config_cls, self.program, self.roles = title, config_cls, program, roles
        self.describe, self.env_fn, self.hooks = describe, env_fn, hooks
        self._job = None

    def job(self):
        """The runtime's Job (built on first use)."""
        if self._job is None:
            make_job = importlib.import_module(self.roles).make_job
            self._job = make_job(self.program, describe=self.describe, env_fn=self.env_fn, **self.hooks)
        return self._job

    def run(self, config: Any, *, parts: Parts | None = None, quiet: bool = False,
            started: float | None = None) -> dict[str, Any]:
        """Run the job (serial, a local world, or this rank under torchrun); returns the
        lead's summary (``{}`` on other ranks under torchrun)."""
        from experiments.runtime.job import run_job

        return run_job(self.job(), config, parts=parts, quiet=quiet, started=started)

    def format_summary(self, summary: dict[str, Any]) -> str:
        from experiments.runtime.summary import format_summary as box

        return box(summary, self.describe(summary), title=self.title)

    def main(self, argv: Sequence[str] | None = None) -> int:
        from experiments.runtime.job import main_for

        return main_for(self.job, self.config_cls, self.format_summary, list(argv) if argv is not None else None)


def define_job(**kwargs: Any) -> JobEntry:
    """A :class:`JobEntry`; its module binds ``job, run, format_summary, main`` from it."""
    return JobEntry(**kwargs)
