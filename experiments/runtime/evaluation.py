"""An in-run evaluation as Ape-X and A3C report it to their coordinator: the episodes'
returns and, measured on the same states, the policy network's dead ReLU units.
(MADDPG's actors act through ``ParallelModules``, by default over stacked parameters,
where module hooks never fire; it reports returns only.)"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from experiments.runtime.messages import EvalResult


def evaluation(network: Any, episodes: Callable[[], Iterable[float]], *, env_steps: int,
               version: int) -> EvalResult:
    """Runs ``episodes()`` (the evaluation, which acts with ``network``) while watching
    ``network``'s ReLUs, so the curves show a network losing its units as it happens
    (``network/dead_units/<layer>``), at no cost beyond the evaluation's own forwards."""
    from algorithms.diagnostics import DeadUnits

    with DeadUnits(network) as dead:
        returns = [float(r) for r in episodes()]
    return EvalResult(env_steps=env_steps, version=version, returns=returns, dead_units=dead.fractions())
