"""Where the flat layout's modules went (issue 47): an old path names its new place.

``algorithms/`` was one flat folder and the builders lived in ``experiments/builders/``;
each agent now has its own folder, ``algorithms/<agent>/`` (learning code, config,
builder). An old path that is now a package (``algorithms.dqn``, ``algorithms.impala``,
...) still imports, with the names it had. Importing any other old path raises a
``ModuleNotFoundError`` naming the new one: :data:`MOVED` lists them, and
:class:`MovedFinder`, first on ``sys.meta_path`` (``algorithms`` and ``experiments``
put it there on import), answers only those names, so no other finder (an editable
install of an older checkout, say) hands out a stale copy. A name that left a module
that stayed is in :data:`MOVED_NAMES`, raised by that module's ``__getattr__``.
"""

from __future__ import annotations

import sys
from typing import Any

MOVED: dict[str, str] = {
    "algorithms.a2c_config": "algorithms.a2c.config",
    "algorithms.a3c": "algorithms.a2c.a3c",
    "algorithms.apex": "algorithms.dqn.apex",
    "algorithms.ddpg": "algorithms.td3.ddpg",
    "algorithms.continuous": "algorithms.td3.continuous",
    "algorithms.impala_config": "algorithms.impala.config",
    "algorithms.impala_checks": "algorithms.impala.checks",
    "algorithms.unroll": "algorithms.impala.unroll",
    "algorithms.maddpg_spec": "algorithms.maddpg.spec",
    "algorithms.maddpg_stacked": "algorithms.maddpg.stacked",
    "algorithms.gumbel": "algorithms.maddpg.gumbel",
    "algorithms.ppo_config": "algorithms.ppo.config",
    "algorithms.pqn_config": "algorithms.pqn.config",
    "algorithms.pqn_runner": "algorithms.pqn.runner",
    "experiments.builders.dqn": "algorithms.dqn.builder",
    "experiments.builders.td3": "algorithms.td3.builder",
    "experiments.builders.impala": "algorithms.impala.builder",
    "experiments.builders.ppo": "algorithms.ppo.builder",
    "experiments.builders.pqn": "algorithms.pqn.builder",
    # A3C's own roles, folded into the actor-learner program (its gradients data path).
    "experiments.roles.a3c": "experiments.roles.actor_learner",
    "experiments.roles.a3c_parts": "experiments.a3c",
    # MADDPG runs on the actor-learner program (its builder: algorithms.maddpg.builder)
    "experiments.roles.maddpg": "experiments.roles.actor_learner",
    "experiments.roles.maddpg_parts": "experiments.runtime.multiagent",
    # roles/ holds one package per program: the actor-learner program's modules ...
    **{f"experiments.roles.{name}": f"experiments.roles.actor_learner.{name}"
       for name in ("program", "actor", "learner", "learners", "learner_shards", "paths", "data")},
    # ... and the synchronous program's.
    "experiments.roles.sync_lead": "experiments.roles.sync.lead",
    "experiments.roles.sync_member": "experiments.roles.sync.member",
}
# Why each group moved, by the old path's prefix (the first that matches).
WHY: tuple[tuple[str, str], ...] = (
    ("experiments.roles.a3c", "A3C is the actor-learner program's gradients data path, "
                              "algorithms.a2c.builder.A3CBuilder"),
    ("experiments.roles.maddpg", "MADDPG is an actor-learner builder, algorithms.maddpg.builder.MADDPGBuilder"),
    ("experiments.roles.", "experiments/roles/ holds one package per program: actor_learner/ and sync/"),
    ("", "each agent's code now lives in algorithms/<agent>/"),
)
MOVED_NAMES: dict[tuple[str, str], str] = {
    ("algorithms.adders", "UnrollItems"): "algorithms.impala.unroll",
}


class MovedFinder:
    """A meta path finder that knows only the old paths, and fails each with its new one."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        new = MOVED.get(name)
        if new is not None:
            why = next(reason for prefix, reason in WHY if name.startswith(prefix))
            raise ModuleNotFoundError(f"{name} has moved to {new} ({why}; docs/layout.md)", name=name)


def install() -> None:
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())


def moved_name(module: str, name: str) -> AttributeError | ImportError:
    """What a module's ``__getattr__(name)`` raises: an ImportError naming the new place
    of a name that left it, else the usual AttributeError."""
    new = MOVED_NAMES.get((module, name))
    if new is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return ImportError(f"{module}.{name} has moved to {new}.{name}", name=module)
