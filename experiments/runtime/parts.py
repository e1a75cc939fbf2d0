"""The user's own pieces of a job: env factory, network factory, algorithm and role
classes. They are shipped (cloudpickled) to every rank, so a subclass or factory
defined in the user's module runs in every process of the job."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parts:
    """``env``: zero-argument env factory (replaces ``--env-id``). ``network``:
    ``network(observation_space, action_space) -> torch.nn.Module`` (the Q network of
    DQN, the actor-critic model of A2C). ``algorithm``: a subclass of the job's
    algorithm class (DQN, A2C, MADDPG). ``actor`` / ``learner``: subclasses of the
    job's role classes (Ape-X: ApexActor, ApexLearner). ``builder``: for a job on the
    actor-learner program (Ape-X, IMPALA), ``builder(config, parts, spec) ->
    algorithms.builder.Builder``, the user's algorithm in place of the job's own (it
    gets the job's config, these parts and the env's spaces; see the README)."""

    env: Callable[[], Any] | None = None
    network: Callable[[Any, Any], Any] | None = None
    algorithm: type | None = None
    actor: type | None = None
    learner: type | None = None
    builder: Callable[[Any, Any, Any], Any] | None = None

    def check(self, *, algorithm: type, actor: type | None = None, learner: type | None = None,
              why: str = "") -> None:
        """TypeError naming the part that does not fit the job (``why``: why the job
        wants these classes, added in parentheses)."""
        for name, value in (("env", self.env), ("network", self.network), ("builder", self.builder)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be a callable factory, got {value!r}")
        for name, given, base in (("algorithm", self.algorithm, algorithm), ("actor", self.actor, actor),
                                  ("learner", self.learner, learner)):
            if given is None:
                continue
            if base is None:
                raise TypeError(f"this job has no {name} class to replace (got {given!r})")
            if not (isinstance(given, type) and issubclass(given, base)):
                raise TypeError(f"{name} must be a subclass of {base.__module__}.{base.__qualname__}, "
                                f"got {given!r}" + (f" ({why})" if why else ""))
