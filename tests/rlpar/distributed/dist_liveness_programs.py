"""Ranks for the liveness tests: a rank lost mid-run, one that never comes."""

from __future__ import annotations

import os
import signal
import time

import torch

from rlpar.distributed import World
from rlpar.errors import PeerUnavailable


def lose_a_rank(lost: int, timeout: float):
    """Rank ``lost`` SIGKILLs itself after a barrier; the others try another barrier,
    then shut down: neither may wait for the dead rank much beyond liveness.LOST_S."""
    torch.set_num_threads(1)
    world = World.from_env(rpc_timeout=timeout)
    group = world.create_rpc_group("g", world.names)
    group.barrier()
    if world.rank == lost:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        group.barrier()
        barrier = "passed"
    except PeerUnavailable as exc:
        barrier = str(exc)
    barrier_s = time.monotonic() - t0
    t0 = time.monotonic()
    world.shutdown()
    return barrier, barrier_s, time.monotonic() - t0, world.lost_ranks


def join_short(timeout: float):
    """Join a world one of whose ranks never starts."""
    torch.set_num_threads(1)
    t0 = time.monotonic()
    try:
        World.from_env(rpc_timeout=timeout)
    except PeerUnavailable as exc:
        return str(exc), time.monotonic() - t0
    return "joined", time.monotonic() - t0
