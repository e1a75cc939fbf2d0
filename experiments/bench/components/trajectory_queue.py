"""Trajectory-queue throughput: IMPALA unrolls through :class:`HostedQueue`.

Producer ranks put unrolls as fast as they can: 20 steps x 8 envs of MinAtar
observations (10x10x6 float32) with actions, rewards, terminations, behaviour
log-probs and the bootstrap observation, 396 KB each. Rank 0 takes batches of 8 and
does nothing with them, so the numbers are the transport's ceiling. Cases:

* ``roomy``: capacity 64, puts are enqueued on arrival;
* ``full``: capacity 8 = the batch: every get waits for a full queue, so most puts
  wait for room and are answered by the get that makes it (the deferred path).

Reports items/s and MB/s taken by the consumer, per number of producers. A shared
2-core machine is noisy: compare cases measured in the same run.

Run: ``python -m experiments.bench.components.trajectory_queue [--quick]``; one JSON line per result.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from experiments.bench.tools.emit import emit
from rlpar.buffers import HostedQueue, TrajectoryQueue
from rlpar.distributed import World, launch

STEPS, ENVS, OBS = 20, 8, (10, 10, 6)
BATCH = 8
CASES = {"roomy": 64, "full": BATCH}


def unroll(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.random((STEPS, ENVS, *OBS), dtype=np.float32),
        "actions": rng.integers(0, 6, (STEPS, ENVS)),
        "rewards": rng.random((STEPS, ENVS), dtype=np.float32),
        "terminations": rng.random((STEPS, ENVS)) < 0.01,
        "behaviour_log_probs": rng.random((STEPS, ENVS), dtype=np.float32),
        "bootstrap_obs": rng.random((ENVS, *OBS), dtype=np.float32),
    }


def item_bytes() -> int:
    return sum(a.nbytes for a in unroll(0).values())


def bench_entry(per_producer: int, rounds: int) -> list[dict] | None:
    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=120) as world:
        group = world.create_rpc_group("bench", world.names)
        producers = world.world_size - 1
        rows = []
        for case, capacity in CASES.items():
            for r in range(rounds):
                name = f"{case}{r}"
                if world.rank == 0:
                    hosted = HostedQueue.host(group, name, TrajectoryQueue(capacity=capacity))
                group.barrier(timeout=120)
                if world.rank == 0:
                    rows.append(_consume(hosted, case, capacity, producers, per_producer))
                else:
                    _produce(group, name, per_producer, world.rank)
                group.barrier(timeout=120)
        if world.rank != 0:
            return None
        best = {}
        for row in rows:  # the best round per case: noise only ever slows a round
            if row["case"] not in best or row["items_per_s"] > best[row["case"]]["items_per_s"]:
                best[row["case"]] = row
        return list(best.values())


def _produce(group, name: str, count: int, rank: int) -> None:
    items = [unroll(rank * 10 + i) for i in range(4)]  # never changed: safe to resend
    remote = HostedQueue.connect(group, name, max_in_flight=4)
    for i in range(count):
        remote.put(items[i % len(items)])
    remote.wait()


def _consume(hosted: HostedQueue, case: str, capacity: int, producers: int, per: int) -> dict:
    total = producers * per
    taken = len(hosted.get(BATCH, timeout=120))  # the clock starts once items flow
    begin = time.perf_counter()
    while taken < total:
        n = min(BATCH, total - taken)
        taken += len(hosted.get(n, timeout=120))
    seconds = time.perf_counter() - begin
    rate = (total - BATCH) / seconds
    stats = hosted.stats()
    return dict(case=case, capacity=capacity, producers=producers, batch=BATCH,
                item_kb=round(item_bytes() / 1024, 1), items=total,
                items_per_s=round(rate, 1), mb_per_s=round(rate * item_bytes() / 2**20, 1),
                max_depth=stats.max_depth)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--producers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    per, rounds = (40, 1) if args.quick else (400, 3)
    # By module name, not __main__: ranks resolve bench_entry by reference.
    from experiments.bench.components.trajectory_queue import bench_entry as entry

    for producers in args.producers:
        rows = launch(entry, nprocs=producers + 1, args=(per, rounds), timeout=900)[0]
        for row in rows:
            emit({"bench": "trajectory_queue", "quick": args.quick, **row})


if __name__ == "__main__":
    main()
