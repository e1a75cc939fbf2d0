"""The World this process has joined (at most one at a time).

Kept apart from :mod:`rlpar.distributed.world` so that the RPC groups, which World
creates, can find their World without importing the module that imports them.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_world: Any = None


def get() -> Any:
    """The joined World, or None."""
    return _world


def join(world: Any) -> None:
    global _world
    with _lock:
        if _world is not None:
            raise RuntimeError(f"this process already joined a World as {_world.name!r}; shut it down first")
        _world = world


def leave(world: Any) -> None:
    global _world
    with _lock:
        if _world is world:
            _world = None


def current_world() -> Any:
    """The World this process has joined; raises RuntimeError if there is none."""
    world = _world
    if world is None:
        raise RuntimeError("no rlpar World in this process: create World(...) or World.from_env()")
    return world
