"""Entries for the rejoin tests: a world whose rank 2 dies once and rejoins."""

from __future__ import annotations

import os
import signal
import threading
import time

from rlpar.distributed import World


class _Counter:
    """Calls per (rank, restarts) of the callers, hosted by rank 0."""

    def __init__(self) -> None:
        self.calls: dict[tuple[int, int], int] = {}
        self.lock = threading.Lock()

    def __call__(self, rank: int, restarts: int) -> int:
        with self.lock:
            key = (rank, restarts)
            self.calls[key] = self.calls.get(key, 0) + 1
            return self.calls[key]


def rank2_dies_once(calls_each: int):
    """Rank 0 hosts a counter; ranks 1 and 2 call it ``calls_each`` times; rank 2's first
    process SIGKILLs itself half way, and its replacement rejoins and calls again."""
    with World.from_env(rpc_timeout=20.0) as world:
        group = world.create_rpc_group("g", world.names)
        if world.rank == 0:
            counter = _Counter()
            group.register("count", counter)
            group.register("done", lambda rank: world.store.set(f"done/{rank}", "1"))
            group.barrier()
            deadline = time.monotonic() + 40
            while not world.store.check(["done/1", "done/2"]) and time.monotonic() < deadline:
                time.sleep(0.01)
            out = dict(counter.calls)
        else:
            if not world.rejoined:
                group.barrier()
            for i in range(calls_each):
                if world.rank == 2 and not world.rejoined and i == calls_each // 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                group.call("count", world.rank, world.rank_restarts)
            group.call("done", world.rank)
            out = None
        return world.rank, world.rank_restarts, world.rejoined, world.rejoinable, out
