"""The typed messages between a job's roles and its coordinator.

Every RPC between roles carries one of these dataclasses, never positional
arguments or loose dicts, so both ends name the same fields and a missing or
misspelled one fails where it is written.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Episode:
    """A finished episode: its return (per agent for multi-agent jobs) and length."""

    ret: float
    length: int
    agent_returns: tuple[float, ...] = ()


@dataclasses.dataclass
class Report:
    """An actor's (worker's) progress since its previous report."""

    source: int  # actor or worker index
    env_steps: int  # new env steps
    transitions: int = 0  # new items added to the data path (transitions, unroll steps, sequences)
    episodes: list[Episode] = dataclasses.field(default_factory=list)
    version: int = -1  # parameter version the source acts with
    metric_sums: dict[str, float] = dataclasses.field(default_factory=dict)
    metric_count: int = 0
    final: bool = False
    env_worker_restarts: int = 0  # env worker processes replaced since the previous report
    dropped_episodes: int = 0  # episodes those replacements cut (not reported), since the previous report
    # Env steps taken (and reported) whose data the source still holds, not yet added,
    # now: what its death would lose. Not env_steps - transitions where an item holds
    # several steps (an R2D2 sequence).
    held_steps: int = 0


@dataclasses.dataclass
class Rejoin:
    """A source restarted after it died, back before its first report: it keeps its
    index; ``restarts`` counts its process's restarts."""

    source: int
    restarts: int


@dataclasses.dataclass
class Directive:
    """The coordinator's answer to a report."""

    stop: bool
    env_steps: int  # all sources together
    updates: int  # learner updates so far (pacing)
    evaluate: bool = False  # this source should evaluate now
    # Several learners, each learning from its own data: those whose data lacks what
    # they need to learn. Their actors (i mod K) step past pacing until it holds it.
    filling: tuple[int, ...] = ()


@dataclasses.dataclass
class EvalResult:
    """One greedy evaluation: ``returns`` of its episodes (episode ``j`` on an env
    seeded ``seed + j``), made at ``env_steps`` with parameters ``version``, and
    ``policy``: those very parameters (the acting network's state, CPU tensors).

    The policy rides along because the evaluated network is the one worth keeping:
    an actor evaluates the version it last pulled, and by the time its result
    reaches the lead the learner has moved on by hundreds of updates, so the lead's
    own parameters are not what scored ``returns``. Evaluations are rare; the copy
    is cheap. ``dead_units``: per ReLU of the policy's network, the share of its
    units that were zero on every state of the evaluation
    (:class:`algorithms.diagnostics.DeadUnits`); ``measures``: the builder's own figures
    of the same episodes (:meth:`algorithms.builder.Builder.evaluation_episodes`)."""

    env_steps: int
    version: int
    returns: list[float]
    seed: int
    policy: dict[str, Any]
    dead_units: dict[str, float] = dataclasses.field(default_factory=dict)
    # An algorithm's own measures of the same episodes (MADDPG's on MPE: landmark
    # distance, collisions, tags), logged as eval/<name>.
    measures: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # Required, not defaulted: a job (or one added later) that forgets to send the
        # evaluated network fails here, not by saving another network under its score.
        if not self.policy:
            raise ValueError("EvalResult.policy is empty: send the state of the network evaluated")
        if not self.returns:
            raise ValueError("EvalResult.returns is empty: an evaluation has at least one episode")

    @property
    def episodes(self) -> int:
        return len(self.returns)
