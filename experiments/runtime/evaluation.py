"""An in-run evaluation as a job reports it to its coordinator: the episodes' returns,
the evaluated network's parameters (what the run keeps as ``policy-best.pt``), the
seed that replays the episodes and, measured on the same states, the policy
network's dead ReLU units. (MADDPG's actors act through ``ParallelModules``, by
default over stacked parameters, where module hooks never fire; it builds its
:class:`EvalResult` with :func:`frozen` and no dead units.)"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from experiments.runtime.messages import EvalResult


def frozen(state: Mapping[str, Any]) -> dict[str, Any]:
    """A CPU copy of a network's state: ``state_dict()`` tensors are the live
    parameters (and MADDPG's are views of its stacked leaves), which the next update
    or pull overwrites in place, while the copy must stay what was evaluated."""
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def evaluation(network: Any, episodes: Callable[[], Iterable[float]], *, env_steps: int,
               version: int, policy: Mapping[str, Any], seed: int) -> EvalResult:
    """Runs ``episodes()`` (the evaluation, which acts with ``network``, whose state is
    ``policy``, on envs seeded ``seed + j``) while watching ``network``'s ReLUs, so the
    curves show a network losing its units as it happens (``network/dead_units/<layer>``),
    at no cost beyond the evaluation's own forwards."""
    from algorithms.diagnostics import DeadUnits

    evaluated = frozen(policy)  # before the episodes: nothing may change it after this
    with DeadUnits(network) as dead:
        played = episodes()  # the returns, or (returns, measures)
    returns, measures = played if isinstance(played, tuple) else (played, {})
    return EvalResult(env_steps=env_steps, version=version, returns=[float(r) for r in returns], seed=seed,
                      policy=evaluated, dead_units=dead.fractions(),
                      measures={name: float(value) for name, value in measures.items()})
