"""Start a job's world: join torchrun's if launched by it, else spawn one locally.

The entry (one function per experiment) is the same in both cases: it calls
``World.from_env()`` and picks its role from its rank.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def under_launcher() -> bool:
    """True when a launcher (torchrun) has set this process's rank and world size."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_world(entry: Callable[..., Any], *, nprocs: int, args: tuple = (), timeout: float | None = None) -> list:
    """Run ``entry(*args)`` in every rank: in this process under torchrun, or in
    ``nprocs`` local processes otherwise. Returns the per-rank results (only this
    rank's under torchrun)."""
    if under_launcher():
        return [entry(*args)]
    from rlpar.distributed import launch

    return launch(entry, nprocs=nprocs, args=args, timeout=timeout)
