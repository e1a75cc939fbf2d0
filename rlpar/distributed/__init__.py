"""Many processes: World, RpcGroup, LearnerGroup, CollectiveGroup and a local launcher.

See :mod:`rlpar.distributed.world` for how a process joins, :mod:`.rpc_group` for
services and paired values (:mod:`.remote` for results fetched later),
:mod:`.learner_group` for collectives among chosen ranks that actors never touch,
:mod:`.collective` for collectives on the default process group and :mod:`.launch`
for running N ranks locally (the same entry runs under torchrun).

Names are resolved lazily so that a launched rank (and ``launch`` itself) does not pay
for importing torch before its entry needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlpar.distributed.collective import CollectiveGroup
    from rlpar.distributed.launch import launch
    from rlpar.distributed.learner_group import LearnerGroup
    from rlpar.distributed.remote import Handle
    from rlpar.distributed.rpc_group import RpcGroup
    from rlpar.distributed.world import World, current_world, free_port

_WHERE = {
    "CollectiveGroup": "rlpar.distributed.collective",
    "Handle": "rlpar.distributed.remote",
    "LearnerGroup": "rlpar.distributed.learner_group",
    "RpcGroup": "rlpar.distributed.rpc_group",
    "World": "rlpar.distributed.world",
    "current_world": "rlpar.distributed.world",
    "free_port": "rlpar.distributed.ports",
    "launch": "rlpar.distributed.launch",
}

__all__ = ["CollectiveGroup", "Handle", "LearnerGroup", "RpcGroup", "World", "current_world",
           "free_port", "launch"]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rlpar.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
